//! `pthread_create`, interposed to mark the allocations glibc makes for a new thread.
//!
//! glibc gives every new thread a thread block (its dynamic thread vector, allocated with
//! `calloc` inside `pthread_create`) and keeps it, with the thread's stack, in a cache after
//! the thread ends, to reuse for a later thread. Which cached block a thread gets, and when
//! the cache lets one go, depends on stack sizes and timing, not on the test. Counted as
//! what an extra run left behind, such blocks would keep a thread-heavy test from ever being
//! settled; so, while a thread is being created, its creator's allocations go where they
//! would outside runs.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;

/// libc's own `pthread_create` (0: not looked up yet).
static REAL: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static CREATING: Cell<bool> = const { Cell::new(false) };
}

/// Looks up libc's `pthread_create`; called by the constructor, while the process has one
/// thread, and again lazily if a thread was created before it ran.
pub fn resolve() -> usize {
    let known = REAL.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next definition after
    // this library, libc's.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
    REAL.store(found, Ordering::Release);
    found
}

/// Whether the calling thread is inside `pthread_create`.
#[inline]
pub fn creating() -> bool {
    CREATING.with(Cell::get)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    let real = resolve();
    if real == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: `real` is libc's pthread_create, whose signature this is.
    let real: PthreadCreate = unsafe { std::mem::transmute::<usize, PthreadCreate>(real) };
    let was = CREATING.with(|c| c.replace(true));
    // SAFETY: the caller's arguments, passed on unchanged.
    let r = unsafe { real(thread, attr, start, arg) };
    CREATING.with(|c| c.set(was));
    r
}
