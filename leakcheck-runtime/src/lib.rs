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
//! Counting mode (`LEAKCHECK_COUNTS_FILE` set): cargo-leakcheck's first pass runs every
//! test with profiling off and asks only how many objects and bytes are still live at exit
//! that were allocated by threads other than the main one. libtest runs each test on a
//! thread of its own and keeps the main thread for its bookkeeping, whose allocations
//! depend on timing (whether the main thread blocked before the test finished). So the
//! constructor binds the main thread to a jemalloc arena of its own, and the exit handler
//! sums jemalloc's exact per-arena statistics over every other arena (`tcache:false` in
//! that pass, so the statistics see every allocation and free as it happens; a free is
//! charged to the arena that allocated, whichever thread frees). A test whose count equals
//! that of a test proven clean needs no stack profiling at all.
//!
//! Everything here must stay allocation-free where it can and must never panic: it runs
//! before `main`, and inside every allocation of the process.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use tikv_jemalloc_sys as je;

/// Environment variable naming the `prof_prefix` for this runtime's own dumps.
/// Kept in sync with `cargo-leakcheck/src/protocol.rs`.
const PREFIX_ENV: &[u8] = b"LEAKCHECK_RUNTIME_PREFIX\0";

/// Environment variable: dump the heap every this many milliseconds (benchmarks).
const INTERVAL_ENV: &[u8] = b"LEAKCHECK_DUMP_INTERVAL_MS\0";

/// The arena the main thread allocates from in counting mode (u32::MAX: none).
static MAIN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

/// Environment variable naming the file the exit counters are written to.
const COUNTS_ENV: &[u8] = b"LEAKCHECK_COUNTS_FILE\0";

/// The counters' file name, copied out of the environment by the constructor so that the
/// exit handler needs neither the environment nor an allocation.
static mut COUNTS_PATH: [u8; 4096] = [0; 4096];

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

extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
    fn open(path: *const c_char, flags: c_int, mode: c_int) -> c_int;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn close(fd: c_int) -> c_int;
}

fn libc_strlen(s: *const c_char) -> usize {
    let mut n = 0;
    // SAFETY: callers pass a NUL-terminated string.
    while unsafe { *s.add(n) } != 0 {
        n += 1;
    }
    n
}

/// Formats a signed number into `buf` from the end; returns where it starts.
fn format_i64(mut v: i64, buf: &mut [u8; 24]) -> usize {
    let negative = v < 0;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10).unsigned_abs() as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if negative {
        i -= 1;
        buf[i] = b'-';
    }
    i
}

/// Reads one statistic through `mallctl` into `T` (u64 or usize); None when jemalloc
/// refuses (e.g. an arena index that was never initialised).
fn stat<T: Copy + Default>(name: &[u8]) -> Option<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    // SAFETY: name is NUL-terminated; value/len describe a buffer of exactly T's size, which
    // matches the statistic's documented type (jemalloc manual, MALLCTL NAMESPACE).
    let r = unsafe {
        je::mallctl(
            name.as_ptr().cast(),
            (&raw mut value).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (r == 0).then_some(value)
}

/// Builds `stats.arenas.<i>.<rest>\0` in `buf`; returns its length with the NUL.
fn arena_stat_name(i: u32, rest: &[u8], buf: &mut [u8; 96]) -> usize {
    let prefix = b"stats.arenas.";
    let mut n = prefix.len();
    buf[..n].copy_from_slice(prefix);
    let mut digits = [0u8; 24];
    let start = format_i64(i64::from(i), &mut digits);
    let d = &digits[start..];
    buf[n..n + d.len()].copy_from_slice(d);
    n += d.len();
    buf[n..n + rest.len()].copy_from_slice(rest);
    n += rest.len();
    buf[n] = 0;
    n + 1
}

/// Live objects and bytes in every arena but the main thread's.
fn live_outside_main_arena() -> (i64, i64) {
    // Statistics are snapshots refreshed by writing the epoch.
    let mut epoch: u64 = 1;
    // SAFETY: "epoch" takes a u64 written by value.
    unsafe {
        je::mallctl(
            c"epoch".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut epoch).cast(),
            std::mem::size_of::<u64>(),
        );
    }
    let main = MAIN_ARENA.load(Relaxed);
    let narenas: u32 = stat(b"arenas.narenas\0").unwrap_or(0);
    let (mut objects, mut bytes) = (0i64, 0i64);
    let mut name = [0u8; 96];
    for i in (0..narenas).filter(|&i| i != main) {
        let mut get_u64 = |rest: &[u8]| {
            let n = arena_stat_name(i, rest, &mut name);
            stat::<u64>(&name[..n]).unwrap_or(0) as i64
        };
        objects += get_u64(b".small.nmalloc") - get_u64(b".small.ndalloc");
        objects += get_u64(b".large.nmalloc") - get_u64(b".large.ndalloc");
        let mut get_usize = |rest: &[u8]| {
            let n = arena_stat_name(i, rest, &mut name);
            stat::<usize>(&name[..n]).unwrap_or(0) as i64
        };
        bytes += get_usize(b".small.allocated") + get_usize(b".large.allocated");
    }
    (objects, bytes)
}

/// Writes `<objects> <bytes> <main arena>\n` to the counters file, without allocating;
/// the main arena is -1 when binding failed, and then the counts prove nothing. Registered
/// after the Rust runtime has started, so it runs after the process's later `atexit`
/// handlers and after std has released stdout.
extern "C" fn write_counts() {
    const O_WRONLY: c_int = 0o1;
    const O_CREAT: c_int = 0o100;
    const O_TRUNC: c_int = 0o1000;
    let (objects, bytes) = live_outside_main_arena();
    let main = match MAIN_ARENA.load(Relaxed) {
        u32::MAX => -1,
        a => i64::from(a),
    };
    let mut line = [0u8; 96];
    let mut len = 0;
    for (i, v) in [objects, bytes, main].into_iter().enumerate() {
        let mut digits = [0u8; 24];
        let start = format_i64(v, &mut digits);
        let part = &digits[start..];
        line[len..len + part.len()].copy_from_slice(part);
        len += part.len();
        line[len] = if i < 2 { b' ' } else { b'\n' };
        len += 1;
    }
    // SAFETY: COUNTS_PATH holds a NUL-terminated path (set before this was registered);
    // open/write/close allocate nothing.
    unsafe {
        let fd = open(
            (&raw const COUNTS_PATH).cast(),
            O_WRONLY | O_CREAT | O_TRUNC,
            0o644,
        );
        if fd >= 0 {
            write(fd, line.as_ptr().cast(), len);
            close(fd);
        }
    }
}

/// Benchmarks: a thread that asks jemalloc for a heap dump every `ms` milliseconds. With
/// no file name, `prof.dump` names the dump itself under the configured prefix
/// (`<prefix>.<pid>.<seq>.m<n>.heap`), so nothing here allocates per dump; the dumps'
/// modification times are the time series.
fn start_periodic_dumps(ms: u64) {
    let spawned = std::thread::Builder::new()
        .name("leakcheck-dumps".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            // SAFETY: "prof.dump" with no new value dumps under the default name (jemalloc
            // manual, MALLCTL NAMESPACE).
            unsafe {
                je::mallctl(
                    c"prof.dump".as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                );
            }
        });
    // Without the thread there are only the start and exit dumps; nothing else to do.
    drop(spawned);
}

/// Gives the calling (main) thread an arena of its own, so that counting can leave out
/// what the harness allocates there.
fn bind_main_thread_to_own_arena() {
    let mut arena: u32 = 0;
    let mut len = std::mem::size_of::<u32>();
    // SAFETY: "arenas.create" returns an unsigned arena index; "thread.arena" takes one
    // (jemalloc manual, MALLCTL NAMESPACE).
    unsafe {
        if je::mallctl(
            c"arenas.create".as_ptr(),
            (&raw mut arena).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        ) != 0
        {
            return;
        }
        if je::mallctl(
            c"thread.arena".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut arena).cast(),
            std::mem::size_of::<u32>(),
        ) == 0
        {
            MAIN_ARENA.store(arena, Relaxed);
        }
    }
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
    // SAFETY: as above; the name is NUL-terminated.
    let counts = unsafe { getenv(COUNTS_ENV.as_ptr().cast()) };
    if !counts.is_null() {
        // SAFETY: getenv returned a NUL-terminated string; COUNTS_PATH is written only here,
        // before any other thread exists, and read only by the exit handler.
        unsafe {
            let len = libc_strlen(counts);
            let dst = &raw mut COUNTS_PATH;
            if len < (*dst).len() {
                std::ptr::copy_nonoverlapping(counts.cast::<u8>(), (*dst).as_mut_ptr(), len);
                bind_main_thread_to_own_arena();
                atexit(write_counts);
            }
        }
    }
    // SAFETY: as above.
    let interval = unsafe { getenv(INTERVAL_ENV.as_ptr().cast()) };
    if !interval.is_null() {
        // SAFETY: NUL-terminated, from the environment.
        let text = unsafe { std::ffi::CStr::from_ptr(interval) };
        if let Some(ms) = text
            .to_str()
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|&ms| ms > 0)
        {
            start_periodic_dumps(ms);
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
