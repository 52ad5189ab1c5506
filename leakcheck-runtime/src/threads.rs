//! `pthread_create`, `pthread_join` and `pthread_detach`, interposed to mark what glibc
//! allocates and frees for the threads it manages.
//!
//! glibc gives every new thread a thread block (its dynamic thread vector, allocated with
//! `calloc` inside `pthread_create`) and keeps it, with the thread's stack, in a cache after
//! the thread ends, to reuse for a later thread; when the cache is full, a join (or a
//! detach, or the next create) frees the blocks of the stacks it lets go. Which cached block
//! a thread gets, and when the cache lets one go, depends on stack sizes and timing, not on
//! the test: every test that starts threads would otherwise retain a block per cached stack
//! (320 bytes each in a typical test binary) and need a second run to show it does not grow.
//! So, inside those three calls:
//! - in counting mode, allocations go to the main thread's arena, which no count includes
//!   (not even the test's own run's: a test that only started threads retained nothing of its
//!   own), and, in either mode, never to a run's arena;
//! - frees bypass the calling thread's cache, so a block of the main thread's arena goes back
//!   to that arena instead of into the cache of a test's thread, where the test's next
//!   allocation of that size would reuse it unseen by the counts.
//!
//! Nothing of the test's runs there: glibc calls no user code on the calling thread, and what
//! std allocates for a thread (its handle, its closure) it allocates before calling
//! `pthread_create`, so it is counted. A block glibc reallocates later on the thread itself
//! (a module with thread-local storage loaded with `dlopen` after the thread started) is not
//! covered.

use crate::spin::SpinLock;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;

/// libc's own `pthread_create` (0: not looked up yet).
static REAL: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Looks up libc's `pthread_create`, `pthread_join` and `pthread_detach`; called by the
/// constructor, while the process has one thread (so that no lookup happens while a test
/// runs), and again lazily if a thread was created before it ran.
pub fn resolve() -> usize {
    next_definition(&REAL_JOIN, c"pthread_join");
    next_definition(&REAL_DETACH, c"pthread_detach");
    next_definition(&REAL, c"pthread_create")
}

/// Whether the calling thread is inside one of glibc's thread calls interposed here. Out of
/// line, and asked only once [`anyone_inside_thread_library`] said yes: the thread-local's
/// address costs a call into the loader, which every allocation would otherwise pay.
#[inline(never)]
pub fn inside_thread_library() -> bool {
    INSIDE.with(Cell::get)
}

/// How many threads are inside those calls now: allocations and frees need to ask
/// [`inside_thread_library`] only while this is not zero.
static INSIDE_NOW: AtomicUsize = AtomicUsize::new(0);

/// Whether some thread may be inside one of those calls (cheap: one relaxed load).
#[inline]
pub fn anyone_inside_thread_library() -> bool {
    INSIDE_NOW.load(Ordering::Relaxed) != 0
}

/// Marks the calling thread as inside glibc's thread calls until dropped.
struct Inside {
    was: bool,
}

impl Inside {
    fn enter() -> Inside {
        let was = INSIDE.with(|c| c.replace(true));
        INSIDE_NOW.fetch_add(1, Ordering::Relaxed);
        Inside { was }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE_NOW.fetch_sub(1, Ordering::Relaxed);
        INSIDE.with(|c| c.set(self.was));
    }
}

type PthreadJoin = unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void) -> c_int;
type PthreadDetach = unsafe extern "C" fn(libc::pthread_t) -> c_int;

static REAL_JOIN: AtomicUsize = AtomicUsize::new(0);
static REAL_DETACH: AtomicUsize = AtomicUsize::new(0);

/// libc's definition of `name`, looked up once.
fn next_definition(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let known = slot.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next definition after
    // this library, libc's.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    slot.store(found, Ordering::Release);
    found
}

#[no_mangle]
pub unsafe extern "C" fn pthread_join(thread: libc::pthread_t, ret: *mut *mut c_void) -> c_int {
    let real = next_definition(&REAL_JOIN, c"pthread_join");
    if real == 0 {
        return libc::ESRCH;
    }
    let inside = Inside::enter();
    // SAFETY: `real` is libc's pthread_join, whose signature this is; the caller's
    // arguments are passed on unchanged.
    let r = unsafe { std::mem::transmute::<usize, PthreadJoin>(real)(thread, ret) };
    drop(inside);
    // libtest joins the test's thread before it puts the default panic hook back.
    crate::panic_hook::note();
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_detach(thread: libc::pthread_t) -> c_int {
    let real = next_definition(&REAL_DETACH, c"pthread_detach");
    if real == 0 {
        return libc::ESRCH;
    }
    let _inside = Inside::enter();
    // SAFETY: `real` is libc's pthread_detach, whose signature this is; the caller's
    // argument is passed on unchanged.
    unsafe { std::mem::transmute::<usize, PthreadDetach>(real)(thread) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    let real = next_definition(&REAL, c"pthread_create");
    if real == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: `real` is libc's pthread_create, whose signature this is.
    let real: PthreadCreate = unsafe { std::mem::transmute::<usize, PthreadCreate>(real) };
    // Where it is started from names the thread in reports (taken before the thread
    // library is entered: the unwinder's allocations are the program's like any other).
    let spawn = crate::tracker::spawn_stack().map_or(0, |id| id as usize + 1);
    let inside = Inside::enter();
    // The new thread starts in the trampoline, which records it and then calls `start`;
    // when every start slot is taken it starts directly, unrecorded.
    let claimed = (KEY.load(Ordering::Acquire) != usize::MAX)
        .then(|| claim_start(start as usize, arg as usize, spawn))
        .flatten();
    // SAFETY: the caller's arguments, passed on unchanged, or the trampoline with the slot
    // holding them.
    let r = unsafe {
        match claimed {
            Some(i) => real(thread, attr, trampoline, i as *mut c_void),
            None => real(thread, attr, start, arg),
        }
    };
    if let Some(i) = claimed {
        // `pthread_create` returns only once the new thread is recorded: until then, what
        // it was handed (its closure, its handle) is reachable only through its own stack
        // and descriptor, which a scan must not miss.
        if r == 0 {
            while !STARTS[i].recorded.load(Ordering::Acquire) {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
        STARTS[i].used.store(false, Ordering::Release);
    }
    drop(inside);
    r
}

// ---------------------------------------------------------------------------------------
// Live threads and their stacks, for the reachability scan (see `crate::reach`).
//
// Every thread started through `pthread_create` runs a trampoline first that records its
// kernel id and the bounds of its stack block (which, in glibc, also holds its static
// thread-local storage); a thread-specific key's destructor takes the entry out as the
// thread ends, after its thread-local destructors ran and before its stack is released.
// The scanner holds `REGISTRY_LOCK` while it reads the stacks, so no registered thread can
// get past its destructor, and its stack stays mapped, meanwhile.

/// Most threads recorded at once; threads beyond are not scanned (their memory then only
/// looks unreachable, which is how every stack was treated before this scan existed).
pub const MAX_THREADS: usize = 2048;

/// One live thread: kernel id (0: free slot), its stack block `[lo, hi)` and its thread
/// pointer (where its static thread-local storage ends).
pub struct ThreadEntry {
    pub tid: AtomicUsize,
    pub lo: AtomicUsize,
    pub hi: AtomicUsize,
    pub tp: AtomicUsize,
    /// The tracker's stack id of the `pthread_create` call that started it, plus one (0:
    /// not known: stacks were not tracked).
    pub spawn: AtomicUsize,
    /// The name it started with, its creator's (`/proc`'s `comm`, NUL-padded): a thread
    /// still called that never named itself.
    pub inherited: [AtomicU64; 2],
    /// What it was doing before the last scan stopped it (a
    /// `leakcheck_protocol::paths::ThreadState`).
    pub state: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_ENTRY: ThreadEntry = ThreadEntry {
    tid: AtomicUsize::new(0),
    lo: AtomicUsize::new(0),
    hi: AtomicUsize::new(0),
    tp: AtomicUsize::new(0),
    spawn: AtomicUsize::new(0),
    inherited: [AtomicU64::new(0), AtomicU64::new(0)],
    state: AtomicU64::new(0),
};

pub static REGISTRY: [ThreadEntry; MAX_THREADS] = [FREE_ENTRY; MAX_THREADS];
static REGISTRY_LOCK: SpinLock = SpinLock::new();

/// The key whose destructor unregisters a thread (`usize::MAX`: none).
static KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

/// A start routine and its argument, handed from `pthread_create` to the trampoline, which
/// says when the new thread is recorded.
struct Start {
    used: AtomicBool,
    start: AtomicUsize,
    arg: AtomicUsize,
    spawn: AtomicUsize,
    recorded: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_START: Start = Start {
    used: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    arg: AtomicUsize::new(0),
    spawn: AtomicUsize::new(0),
    recorded: AtomicBool::new(false),
};

static STARTS: [Start; MAX_THREADS] = [FREE_START; MAX_THREADS];

/// Holds the registry still; taken by the scanner and by a thread leaving it.
pub struct RegistryGuard;

impl RegistryGuard {
    pub fn lock() -> RegistryGuard {
        REGISTRY_LOCK.lock();
        RegistryGuard
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        REGISTRY_LOCK.unlock();
    }
}

/// The main thread's kernel id and the top of its stack, recorded by the constructor (which
/// runs on it): the main thread is not started through `pthread_create`, so it is not in
/// the registry, and its stack's lower end is only where it has grown to.
static MAIN_TID: AtomicUsize = AtomicUsize::new(0);
static MAIN_STACK_TOP: AtomicUsize = AtomicUsize::new(0);
static MAIN_TP: AtomicUsize = AtomicUsize::new(0);

/// The main thread's kernel id and stack top, when the constructor recorded them.
pub fn main_thread() -> Option<(usize, usize)> {
    let tid = MAIN_TID.load(Ordering::Acquire);
    (tid != 0).then(|| (tid, MAIN_STACK_TOP.load(Ordering::Acquire)))
}

/// The main thread's thread pointer (0: unknown).
pub fn main_thread_pointer() -> usize {
    MAIN_TP.load(Ordering::Acquire)
}

/// The calling thread's thread pointer: on x86-64 glibc, the address of its thread
/// control block, whose first word points to itself; static thread-local storage lies
/// just below it. 0 where this is not known.
#[inline]
pub fn thread_pointer() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let tp: usize;
        // SAFETY: reads the TCB's self pointer through %fs, which glibc sets on every thread.
        unsafe {
            std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
        };
        tp
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Creates the key that unregisters threads and records the main thread; called by the
/// constructor, on the main thread.
pub fn start_registry() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: creates a key with a destructor that lives as long as the library.
    if unsafe { libc::pthread_key_create(&mut key, Some(unregister)) } == 0 {
        KEY.store(key as usize, Ordering::Release);
    }
    if let Some((_, hi)) = own_stack() {
        MAIN_STACK_TOP.store(hi, Ordering::Release);
        MAIN_TP.store(thread_pointer(), Ordering::Release);
        MAIN_TID.store(gettid(), Ordering::Release);
    }
    // A fork while another thread holds the registry lock would leave the child's copy
    // locked for good (that thread is not in the child), and its next thread, or its exit,
    // would wait forever. Registered after the tracker's handlers, so `fork` takes this
    // lock first, in the order the scan takes them.
    // SAFETY: registers handlers that only take or release the registry lock and store
    // this module's atomics.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
}

extern "C" fn fork_prepare() {
    REGISTRY_LOCK.lock();
}

extern "C" fn fork_parent() {
    REGISTRY_LOCK.unlock();
}

extern "C" fn fork_child() {
    // The child has only the thread that forked: no entry describes one of its threads,
    // and no start slot will be claimed by a thread that exists.
    for e in &REGISTRY {
        e.tid.store(0, Ordering::Relaxed);
    }
    for s in &STARTS {
        s.used.store(false, Ordering::Relaxed);
    }
    // Nor is the parent's main thread there (the child never scans: it writes nothing).
    MAIN_TID.store(0, Ordering::Release);
    REGISTRY_LOCK.unlock();
}

pub fn gettid() -> usize {
    // SAFETY: the gettid system call has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as usize }
}

/// Records the calling thread, started by the stack `spawn` (see [`ThreadEntry::spawn`]);
/// its slot index is kept in the key, for the destructor.
fn register(spawn: usize) {
    let key = KEY.load(Ordering::Acquire);
    if key == usize::MAX {
        return;
    }
    let Some((lo, hi)) = own_stack() else { return };
    let tid = gettid();
    let inherited = own_name();
    let _guard = RegistryGuard::lock();
    for (i, e) in REGISTRY.iter().enumerate() {
        if e.tid.load(Ordering::Relaxed) == 0 {
            e.lo.store(lo, Ordering::Relaxed);
            e.hi.store(hi, Ordering::Relaxed);
            e.tp.store(thread_pointer(), Ordering::Relaxed);
            e.spawn.store(spawn, Ordering::Relaxed);
            e.inherited[0].store(inherited[0], Ordering::Relaxed);
            e.inherited[1].store(inherited[1], Ordering::Relaxed);
            e.state.store(0, Ordering::Relaxed);
            e.tid.store(tid, Ordering::Release);
            // SAFETY: a key created by `start_registry`; the value is a small integer.
            unsafe {
                libc::pthread_setspecific(key as libc::pthread_key_t, (i + 1) as *mut c_void)
            };
            return;
        }
    }
}

extern "C" fn unregister(value: *mut c_void) {
    let i = value as usize;
    if i == 0 || i > MAX_THREADS {
        return;
    }
    let _guard = RegistryGuard::lock();
    REGISTRY[i - 1].tid.store(0, Ordering::Release);
}

/// The calling thread's name (`comm`, at most 15 bytes), NUL-padded into two words.
fn own_name() -> [u64; 2] {
    let mut buf = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated, into our buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
    let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
    [word(&buf[..8]), word(&buf[8..])]
}

/// The calling thread's stack block, from glibc's own record of it.
fn own_stack() -> Option<(usize, usize)> {
    // SAFETY: plain pthread calls on an attribute object we own and destroy.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if r != 0 || addr.is_null() || size == 0 {
            return None;
        }
        Some((addr as usize, addr as usize + size))
    }
}

extern "C" fn trampoline(arg: *mut c_void) -> *mut c_void {
    let slot = &STARTS[arg as usize];
    let start = slot.start.load(Ordering::Acquire);
    let real_arg = slot.arg.load(Ordering::Acquire);
    {
        // What glibc allocates for the registry's own questions (`pthread_getattr_np`'s
        // affinity mask, a thread-specific key's second-level block) is not the program's:
        // it stays out of the thread's arena and cache as the thread library's own work does.
        let _inside = Inside::enter();
        register(slot.spawn.load(Ordering::Acquire));
    }
    // From here the creator may reuse the slot.
    slot.recorded.store(true, Ordering::Release);
    // SAFETY: `start` is the routine the caller of `pthread_create` passed, with its own
    // argument.
    let f: extern "C" fn(*mut c_void) -> *mut c_void = unsafe { std::mem::transmute(start) };
    f(real_arg as *mut c_void)
}

/// A start slot for a new thread (its index), or None when all are in use.
fn claim_start(start: usize, arg: usize, spawn: usize) -> Option<usize> {
    for (i, s) in STARTS.iter().enumerate() {
        if s.used
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            s.start.store(start, Ordering::Release);
            s.arg.store(arg, Ordering::Release);
            s.spawn.store(spawn, Ordering::Release);
            s.recorded.store(false, Ordering::Release);
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_s_recorded_stack_holds_its_frames_and_its_thread_local_storage() {
        thread_local! {
            static MARK: Cell<u64> = const { Cell::new(7) };
        }
        std::thread::spawn(|| {
            let (lo, hi) = own_stack().expect("glibc knows a thread's stack");
            let local = 0u8;
            let on_stack = &raw const local as usize;
            let tls = MARK.with(|m| m as *const Cell<u64> as usize);
            // SAFETY: pthread_self has no preconditions.
            let descriptor = unsafe { libc::pthread_self() } as usize;
            for (what, at) in [
                ("a local", on_stack),
                ("a thread-local", tls),
                ("the descriptor", descriptor),
            ] {
                assert!(
                    (lo..hi).contains(&at),
                    "{what} at {at:#x} is outside {lo:#x}..{hi:#x}"
                );
            }
        })
        .join()
        .unwrap();
    }
}
