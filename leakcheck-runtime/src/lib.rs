//! The part of cargo-leakcheck that lives inside the process under test.
//!
//! Built as a `cdylib` and put in front of libc with `LD_PRELOAD`, it exports the C
//! allocator entry points (`malloc`, `free`, …) and forwards them to a private, prefixed
//! jemalloc (`_rjem_*`, from tikv-jemalloc-sys) built with heap profiling. Rust's default
//! `System` allocator and every C library call `malloc`, so the whole process is profiled
//! without recompiling or touching the code under test.
//!
//! Configuration reaches jemalloc through `_RJEM_MALLOC_CONF`, which cargo-leakcheck sets
//! (`prof:true,prof_final:true,lg_prof_sample:N,prof_prefix:…`). jemalloc writes the exit
//! dump itself (`prof_final`) from an `atexit` handler it registers when it first
//! initialises: that is during the dynamic loader's first allocation, so the handler is
//! among the first registered and therefore among the last to run, after Rust's runtime has
//! flushed and released stdout.
//!
//! A test binary that installs tikv-jemallocator as its global allocator has a second
//! jemalloc of its own that reads the same `_RJEM_MALLOC_CONF` and would write its final
//! dump under the same prefix and pid. The constructor below therefore moves this
//! runtime's dumps to their own prefix (`LEAKCHECK_RUNTIME_PREFIX`) with the
//! `prof.prefix` mallctl, so the two never collide.
//!
//! Everything here must stay allocation-free where it can and must never panic: it runs
//! before `main`, and inside every allocation of the process.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void};
use tikv_jemalloc_sys as je;

/// Environment variable naming the `prof_prefix` for this runtime's own dumps.
/// Kept in sync with `cargo-leakcheck/src/protocol.rs`.
const PREFIX_ENV: &[u8] = b"LEAKCHECK_RUNTIME_PREFIX\0";

extern "C" {
    // Not re-exported by tikv-jemalloc-sys, but built into the prefixed jemalloc on Linux.
    #[link_name = "_rjem_memalign"]
    fn je_memalign(alignment: usize, size: usize) -> *mut c_void;
    #[link_name = "_rjem_valloc"]
    fn je_valloc(size: usize) -> *mut c_void;
}

#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: same contract as C malloc; jemalloc accepts any size.
    unsafe { je::malloc(size) }
}

#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: jemalloc's calloc checks n * size for overflow itself.
    unsafe { je::calloc(n, size) }
}

#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: every pointer the process frees or reallocates came from these exports,
    // because the preload is in place before the first allocation.
    unsafe { je::realloc(ptr, size) }
}

#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: as for realloc.
        Some(total) => unsafe { je::realloc(ptr, total) },
        None => {
            set_errno(libc_enomem());
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // SAFETY: see realloc; free(NULL) is a no-op in jemalloc.
    unsafe { je::free(ptr) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: same contract as the C function; jemalloc validates the alignment.
    unsafe { je::posix_memalign(out, align, size) }
}

#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: same contract as the C function.
    unsafe { je::aligned_alloc(align, size) }
}

#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: same contract as the C function.
    unsafe { je_memalign(align, size) }
}

#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: same contract as the C function.
    unsafe { je_valloc(size) }
}

#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    const PAGE: usize = 4096;
    let rounded = size.checked_add(PAGE - 1).map(|s| s & !(PAGE - 1));
    match rounded {
        // SAFETY: same contract as valloc.
        Some(s) => unsafe { je_valloc(s.max(PAGE)) },
        None => std::ptr::null_mut(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: ptr came from this allocator (see realloc).
    unsafe { je::malloc_usable_size(ptr) }
}

fn libc_enomem() -> c_int {
    12
}

fn set_errno(value: c_int) {
    extern "C" {
        fn __errno_location() -> *mut c_int;
    }
    // SAFETY: glibc's __errno_location always returns this thread's errno slot.
    unsafe { *__errno_location() = value }
}

/// Runs from `.init_array`, before the test binary's `main`.
extern "C" fn leakcheck_init() {
    extern "C" {
        fn getenv(name: *const c_char) -> *mut c_char;
        fn unsetenv(name: *const c_char) -> c_int;
    }
    // SAFETY: getenv with a NUL-terminated name; the environment is set up before
    // constructors of preloaded objects run and no other thread exists yet.
    let prefix = unsafe { getenv(PREFIX_ENV.as_ptr().cast()) };
    if !prefix.is_null() {
        // SAFETY: "prof.prefix" takes a `const char *` written by value (jemalloc manual,
        // MALLCTL NAMESPACE); jemalloc copies the string, so the environment may change later.
        let mut value: *const c_char = prefix;
        unsafe {
            je::mallctl(
                c"prof.prefix".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                (&raw mut value).cast(),
                std::mem::size_of::<*const c_char>(),
            );
        }
    }
    // Child processes the test spawns (compilers, helpers, other binaries) are not what is
    // being measured: stop the preload from spreading to them.
    // SAFETY: single-threaded at this point, NUL-terminated name.
    unsafe {
        unsetenv(c"LD_PRELOAD".as_ptr());
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = leakcheck_init;
