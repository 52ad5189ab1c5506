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
//! Stacks mode (`LEAKCHECK_TRACK=1`): jemalloc's sampler is switched off in this runtime and
//! every allocation is tracked exactly with its stack by the `tracker` module, which writes
//! dumps in jemalloc's format at a few tens of bytes per live allocation (jemalloc's exact
//! sampling costs a page per live object).
//!
//! Counting mode (`LEAKCHECK_COUNTING=1`): cargo-leakcheck's first pass runs every test with
//! profiling off and asks only how many objects and bytes are still live at exit that were
//! allocated by threads other than the main one (the `arenas` module).
//!
//! As `main` returns (the `start` module wraps it), or at exit for a program that calls
//! `exit` itself (the `rerun` module), the runtime writes a record of what the test's run left behind and,
//! when asked to, calls the test's entry point again a few times in the same process, so
//! that memory kept for the process lifetime (a pool, a logger, a lazily built table) can be
//! told from memory that grows on every run. While counting, everything an extra run
//! allocates goes to an arena of that run (the `arenas` module), except the thread blocks glibc
//! allocates inside `pthread_create`, which this library interposes for that (the `threads` module).
//!
//! Everything here must stay allocation-free where it can and must never panic: it runs
//! before `main`, and inside every allocation of the process.

#![allow(clippy::missing_safety_doc)]

mod arenas;
mod children;
mod clock;
mod cycles;
mod died;
mod drain;
mod image;
mod lengths;
mod live;
mod main_arena;
mod main_run;
mod maps;
mod panic_hook;
mod paths;
mod periodic;
mod probe;
mod reach;
mod region;
mod rerun;
mod scan;
mod signals;
mod sleepers;
mod spin;
mod start;
mod stop;
mod sys;
#[cfg(test)]
mod testing;
mod threads;
mod tracker;

use leakcheck_protocol::env;
use std::ffi::{c_char, c_int, c_void};
use sys::FixedPath;
use tikv_jemalloc_ctl as ctl;
use tikv_jemalloc_sys as je;

extern "C" {
    // Not re-exported by tikv-jemalloc-sys, but built into the prefixed jemalloc on Linux.
    #[link_name = "_rjem_memalign"]
    fn je_memalign(alignment: usize, size: usize) -> *mut c_void;
    #[link_name = "_rjem_valloc"]
    fn je_valloc(size: usize) -> *mut c_void;
}

// During an extra run every allocation carries `mallocx` flags naming the run's arena (see
// `arenas`); outside runs the plain jemalloc entry points are used. `mallocx` does not accept
// size 0 (a size-0 request gets the smallest object, as plain malloc gives) and does not set
// errno, so the routed paths do what the C functions promise themselves.

/// `mallocx`, with C's errno on failure.
unsafe fn routed(size: usize, flags: c_int) -> *mut c_void {
    // SAFETY: a non-zero size and flags built from jemalloc's macros.
    let p = unsafe { je::mallocx(size.max(1), flags) };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// Whether an alignment is one C's aligned allocators accept.
fn valid_alignment(align: usize, at_least: usize) -> bool {
    align.is_power_of_two() && align >= at_least
}

#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    let p = match arenas::run_flags() {
        // SAFETY: same contract as C malloc; jemalloc accepts any size.
        None => unsafe { je::malloc(size) },
        // SAFETY: as above.
        Some(f) => unsafe { routed(size, f) },
    };
    tracker::allocated(p);
    p
}

#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: same contract.
    let p = unsafe { calloc_untracked(n, size) };
    tracker::allocated(p);
    p
}

unsafe fn calloc_untracked(n: usize, size: usize) -> *mut c_void {
    match arenas::run_flags() {
        // SAFETY: jemalloc's calloc checks n * size for overflow itself.
        None => unsafe { je::calloc(n, size) },
        Some(f) => match n.checked_mul(size) {
            // SAFETY: as for malloc; MALLOCX_ZERO zeroes the memory as calloc must.
            Some(total) => unsafe { routed(total, f | je::MALLOCX_ZERO) },
            None => {
                set_errno(libc::ENOMEM);
                std::ptr::null_mut()
            }
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // Out of the table before the allocator has it back (see `tracker::forget`).
    let forgotten = tracker::forget(ptr);
    // SAFETY: same contract.
    let p = unsafe { realloc_untracked(ptr, size) };
    if p.is_null() && size != 0 && !ptr.is_null() {
        // Failed: the old object is still there, unchanged.
        tracker::restore(ptr, forgotten);
    } else {
        tracker::allocated(p);
    }
    p
}

unsafe fn realloc_untracked(ptr: *mut c_void, size: usize) -> *mut c_void {
    match arenas::realloc_flags(ptr) {
        Some(f) if ptr.is_null() => {
            // SAFETY: realloc(NULL, n) is malloc(n).
            unsafe { routed(size, f) }
        }
        Some(f) if size != 0 => {
            // SAFETY: ptr came from this allocator (see below); rallocx leaves it valid and
            // returns NULL when it cannot grow it, as realloc does.
            let p = unsafe { je::rallocx(ptr, size, f) };
            if p.is_null() {
                set_errno(libc::ENOMEM);
            }
            p
        }
        Some(f) => {
            // realloc(ptr, 0) frees ptr and returns NULL (glibc's and jemalloc's default),
            // here with the flags a free takes.
            // SAFETY: ptr is not NULL (the first arm) and came from this allocator.
            unsafe { je::dallocx(ptr, f & je::MALLOCX_TCACHE_NONE) };
            std::ptr::null_mut()
        }
        // SAFETY: every pointer the process frees or reallocates came from these exports,
        // because the preload is in place before the first allocation.
        _ => unsafe { je::realloc(ptr, size) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: as for realloc.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    let _ = tracker::forget(ptr);
    match arenas::free_flags(ptr) {
        // SAFETY: see realloc; free(NULL) is a no-op in jemalloc. An object goes back to the
        // arena it came from, whichever thread frees it.
        None => unsafe { je::free(ptr) },
        // SAFETY: as above; dallocx takes no NULL, and its flags only choose the cache.
        Some(f) if !ptr.is_null() => unsafe { je::dallocx(ptr, f) },
        Some(_) => {}
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: same contract.
    let r = unsafe { posix_memalign_untracked(out, align, size) };
    if r == 0 {
        // SAFETY: on success the out-pointer holds the new object.
        tracker::allocated(unsafe { *out });
    }
    r
}

unsafe fn posix_memalign_untracked(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    let Some(f) = arenas::run_flags() else {
        // SAFETY: same contract as the C function; jemalloc validates the alignment.
        return unsafe { je::posix_memalign(out, align, size) };
    };
    if !valid_alignment(align, std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    // SAFETY: a valid alignment and a non-zero size.
    let p = unsafe { je::mallocx(size.max(1), f | je::MALLOCX_ALIGN(align)) };
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid out-pointer, as posix_memalign requires.
    unsafe { *out = p };
    0
}

/// The aligned allocators, routed during a run, tracked when tracking.
unsafe fn aligned(align: usize, size: usize, plain: impl FnOnce() -> *mut c_void) -> *mut c_void {
    // SAFETY: same contract.
    let p = unsafe { aligned_untracked(align, size, plain) };
    tracker::allocated(p);
    p
}

unsafe fn aligned_untracked(
    align: usize,
    size: usize,
    plain: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    let Some(f) = arenas::run_flags() else {
        return plain();
    };
    if !valid_alignment(align, 1) {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: a valid alignment.
    unsafe { routed(size, f | je::MALLOCX_ALIGN(align)) }
}

#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: same contract as the C function.
    unsafe { aligned(align, size, || je::aligned_alloc(align, size)) }
}

#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: same contract as the C function.
    unsafe { aligned(align, size, || je_memalign(align, size)) }
}

const PAGE: usize = 4096;

#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: same contract as the C function.
    unsafe { aligned(PAGE, size, || je_valloc(size)) }
}

#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let rounded = size.checked_add(PAGE - 1).map(|s| s & !(PAGE - 1));
    match rounded {
        // SAFETY: same contract as valloc.
        Some(s) => unsafe { valloc(s.max(PAGE)) },
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

/// Calls this runtime's jemalloc control `name` with no value in or out; false when jemalloc
/// refuses. Raw because tikv-jemalloc-ctl always passes a value buffer, which these controls
/// do not take.
///
/// # Safety
/// `name` must be a control that takes and returns nothing (jemalloc manual, MALLCTL
/// NAMESPACE), or whose new value is optional.
pub(crate) unsafe fn mallctl_do(name: &std::ffi::CStr) -> bool {
    // SAFETY: no buffers are passed; the caller vouches for the control.
    unsafe {
        je::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        ) == 0
    }
}

/// Asks the program's own jemalloc (tikv-jemallocator's, built with `profiling`) for a heap
/// dump to `path`; false when it refused (no profiling, or the file could not be written).
///
/// # Safety
/// `mallctl` must be the address of that jemalloc's `_rjem_mallctl` in this process.
pub(crate) unsafe fn app_prof_dump(mallctl: usize, path: &FixedPath) -> bool {
    type Mallctl =
        unsafe extern "C" fn(*const c_char, *mut c_void, *mut usize, *mut c_void, usize) -> c_int;
    // SAFETY: the caller vouches that `mallctl` is `_rjem_mallctl`, whose C signature is
    // this; "prof.dump" takes a `const char *` file name, which outlives the call.
    unsafe {
        let f: Mallctl = std::mem::transmute(mallctl);
        let mut name: *const c_char = path.as_ptr();
        f(
            c"prof.dump".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut name).cast(),
            std::mem::size_of::<*const c_char>(),
        ) == 0
    }
}

/// `kill`: a checked process the test started is asked for its scan before a signal that
/// ends it (see [`children::before_kill`]).
#[no_mangle]
pub unsafe extern "C" fn kill(pid: libc::pid_t, sig: c_int) -> c_int {
    children::before_kill(pid, sig);
    // SAFETY: the system call `kill` stands for, with the caller's arguments.
    unsafe { libc::syscall(libc::SYS_kill, pid, sig) as c_int }
}

fn set_errno(value: c_int) {
    // SAFETY: glibc's __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() = value }
}

/// Reads the exit handler's settings from the environment (the names are the contract's,
/// `leakcheck_protocol::env`).
fn read_rerun_settings(s: &mut rerun::Settings, prefix: Option<&str>) {
    let Some(record) = sys::var(env::RECORD) else {
        return;
    };
    if !s.record.push(record.as_bytes()) {
        return;
    }
    s.started_ms = sys::now_ms();
    // SAFETY: getpid has no preconditions.
    s.pid = unsafe { libc::getpid() };
    if let Some(ms) = sys::var(env::RERUN_GRACE_MS).and_then(sys::parse_u64) {
        s.grace_ms = ms;
    }
    s.exit_guard = sys::var(env::RERUN_EXIT_GUARD).and_then(sys::parse_hex);
    s.alloc_probe = sys::var(env::ALLOC_PROBE).and_then(|v| {
        let (alloc, dealloc) = v.split_once(' ')?;
        Some((sys::parse_hex(alloc)?, sys::parse_hex(dealloc)?))
    });
    s.counting = sys::var(env::COUNTING) == Some(env::ON);
    s.entry = sys::var(env::RERUN_ENTRY).and_then(sys::parse_hex);
    s.entry_unit = sys::var(env::RERUN_ENTRY_UNIT) == Some(env::ON);
    s.entry_main = sys::var(env::RERUN_ENTRY_MAIN).and_then(sys::parse_hex);
    s.first_run_on_main = sys::var(env::FIRST_RUN_ON_MAIN) == Some(env::ON);
    s.build_id = sys::var(env::RERUN_BUILD_ID).unwrap_or("");
    if let Some(hook) = sys::var(env::PANIC_HOOK) {
        panic_hook::configure(hook, s.build_id);
    }
    s.extra_runs = sys::var(env::EXTRA_RUNS)
        .and_then(sys::parse_u64)
        .map_or(0, |n| {
            n.min(u64::from(leakcheck_protocol::MAX_EXTRA_RUNS)) as u32
        });
    if let Some(ms) = sys::var(env::RERUN_SETTLE_MS).and_then(sys::parse_u64) {
        s.settle_ms = ms;
    }
    // The same stack std gives a spawned thread, as libtest's test thread had.
    if let Some(size) = sys::env(c"RUST_MIN_STACK").and_then(sys::parse_u64) {
        s.stack_size = size as usize;
    }
    if let Some(prefix) = prefix {
        s.dump_prefix.push(prefix.as_bytes());
    }
    if let Some(list) = sys::var(env::DRAIN) {
        // SAFETY: the constructor runs single-threaded.
        unsafe { drain::configure(list) };
    }
    s.app_mallctl = sys::var(env::APP_MALLCTL).and_then(sys::parse_hex);
    if let Some(app) = sys::var(env::APP_PREFIX) {
        s.app_prefix.push(app.as_bytes());
    }
    if s.counting {
        arenas::bind_main_thread_to_own_arena();
        drain::initialise(s.build_id);
    }
    rerun::install();
}

/// Stacks mode (`LEAKCHECK_TRACK=1`): this runtime's allocations are tracked exactly by
/// `tracker` rather than sampled by jemalloc, whose profiler would give every live object a
/// page of its own. Sampling is switched off in this jemalloc (a test binary's own
/// tikv-jemallocator, reading the same `_RJEM_MALLOC_CONF`, keeps profiling), and its exit
/// dump is sent to a name cargo-leakcheck does not read.
fn start_tracking(prefix: Option<&str>) {
    // SAFETY: "prof.active" is a bool.
    let _ = unsafe { ctl::raw::write(b"prof.active\0", false) };
    let mut unused = FixedPath::new();
    if let Some(prefix) = prefix {
        if unused.push(prefix.as_bytes()) && unused.push(b".untracked-jemalloc") {
            // SAFETY: "prof.prefix" is a `const char *`, NUL-terminated; jemalloc copies it.
            let _ = unsafe { ctl::raw::write(b"prof.prefix\0", unused.as_ptr()) };
        }
    }
    let mean = sys::var(env::TRACK_SAMPLE)
        .and_then(sys::parse_u64)
        .unwrap_or(1);
    tracker::enable(mean);
}

/// In a process the test started: says what it is and, when it is the build's, tracks it
/// and has its exit handler write what it left and what of that nothing reaches.
fn start_child() {
    threads::resolve();
    // SAFETY: the constructor runs single-threaded, before the exit handler is installed,
    // until `serve_scan_requests` starts the scan thread; that thread reads the settings
    // only when asked for a scan, which no one does before `record.finish` names the
    // record, after the last write here.
    let s = unsafe { rerun::settings_mut() };
    let Some(record) = children::start_as_child(&mut s.dump_prefix) else {
        s.dump_prefix.truncate(0);
        return;
    };
    if record.checked {
        tracker::enable(1);
        threads::start_registry();
        reach::record_tls_layout();
        reach::scan_main_from_exit();
        children::serve_scan_requests(rerun::scan_now);
        s.started_ms = sys::now_ms();
        // SAFETY: getpid has no preconditions.
        s.pid = unsafe { libc::getpid() };
        rerun::install();
    }
    // Last: once the record has its name, the process may be asked for its scan.
    record.finish(&s.dump_prefix);
}

/// Runs from `.init_array`, before the test binary's `main`.
extern "C" fn leakcheck_init() {
    clock::resolve();
    if children::is_child() {
        start_child();
        return;
    }
    let prefix = sys::var(env::RUNTIME_PREFIX);
    let track = sys::var(env::TRACK) == Some(env::ON);
    if let Some(prefix) = prefix.filter(|_| !track) {
        // SAFETY: "prof.prefix" is a `const char *`: `sys::env` returned the environment's
        // own NUL-terminated string, and jemalloc copies it.
        let _ = unsafe { ctl::raw::write(b"prof.prefix\0", prefix.as_ptr().cast::<c_char>()) };
    }
    if track {
        start_tracking(prefix);
        threads::start_registry();
        reach::record_tls_layout();
    }
    threads::resolve();
    if track || sys::var(env::COUNTING) == Some(env::ON) {
        maps::start();
    }
    // SAFETY: the constructor runs before any other thread exists, so nothing else reads
    // the settings while they are written.
    read_rerun_settings(unsafe { rerun::settings_mut() }, prefix);
    lengths::configure(track);
    // The processes the test starts get the runtime too, and know they are not this one.
    children::hand_down();
    if let Some(ms) = sys::var(env::DUMP_INTERVAL_MS)
        .and_then(sys::parse_u64)
        .filter(|&ms| ms > 0)
    {
        periodic::start(ms, prefix, sys::var(env::SCAN_REQUEST));
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = leakcheck_init;
