//! The processes a test starts. They inherit `LD_PRELOAD`, so this runtime is in every one
//! of them; each says what it is in the directory the tool named
//! (`leakcheck_protocol::children`), and one started from an executable of the build is
//! checked: it tracks its allocations exactly, and at its exit writes a dump of what it left
//! and which of those objects nothing reaches (the exit handler of `crate::rerun`, with no
//! record to write). A process of another executable (a shell, `git`, a compiler) is left
//! alone after saying what it is: its profiler is switched off.
//!
//! The test's own process marks the environment it hands down ([`PARENT`]), so that a
//! process started from it knows it is not the process the tool started, whatever other
//! variables of the tool it inherits; and before each of its runs it writes which run is
//! under way, for the processes that run starts.

use crate::sys::{self, FixedPath};
use leakcheck_protocol::children::{self as contract, Line};
use leakcheck_protocol::env;

/// The directory processes started by the test write to, as the test's process keeps it
/// (empty: none).
static mut DIR: FixedPath = FixedPath::new();

/// Whether this process was started by the test's process (or one of its descendants).
pub fn is_child() -> bool {
    sys::var(env::PARENT).is_some()
}

/// In the test's process, from the constructor while it is single-threaded: keeps the
/// directory for the processes it starts and marks their environment. Without a directory
/// (a bench, a service), they get no runtime: `LD_PRELOAD` is taken out.
pub fn hand_down() {
    let Some(dir) = sys::var(env::CHILDREN) else {
        // SAFETY: a NUL-terminated name; no other thread reads the environment yet.
        unsafe { libc::unsetenv(env::PRELOAD.c_name().as_ptr()) };
        return;
    };
    // SAFETY: single-threaded (the constructor), so nothing reads DIR meanwhile.
    let kept = unsafe { (*std::ptr::addr_of_mut!(DIR)).push(dir.as_bytes()) };
    if !kept {
        return;
    }
    let mut digits = [0u8; 21];
    // SAFETY: getpid has no preconditions.
    let pid = decimal(unsafe { libc::getpid() } as u64, &mut digits);
    // SAFETY: NUL-terminated name and value; single-threaded, so no other thread reads the
    // environment while it changes.
    unsafe { libc::setenv(env::PARENT.c_name().as_ptr(), pid.as_ptr().cast(), 1) };
}

/// `v` in decimal at the start of `buf`, NUL-terminated; the digits.
fn decimal(v: u64, buf: &mut [u8; 21]) -> &[u8] {
    let mut digits = [0u8; 20];
    let at = leakcheck_protocol::format_u64(v, &mut digits);
    let len = 20 - at;
    buf[..len].copy_from_slice(&digits[at..]);
    buf[len] = 0;
    &buf[..len]
}

/// In the test's process: says which run is under way to the processes it starts from now
/// (0 for the test's own run). Writes a file, and allocates nothing.
pub fn set_run(k: u32) {
    // SAFETY: written once by the constructor, read-only afterwards.
    let dir = unsafe { &*std::ptr::addr_of!(DIR) };
    if dir.is_empty() {
        return;
    }
    let mut path = FixedPath::new();
    if !(path.push(dir_bytes(dir)) && path.push(b"/") && path.push(contract::RUN_FILE.as_bytes())) {
        return;
    }
    let fd = sys::create_file(&path);
    if fd >= 0 {
        let mut digits = [0u8; 21];
        let text = decimal(u64::from(k), &mut digits);
        // SAFETY: a descriptor this function opened, and bytes we own.
        unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
        // SAFETY: a descriptor this function opened.
        unsafe { libc::close(fd) };
    }
}

fn dir_bytes(path: &FixedPath) -> &[u8] {
    // SAFETY: a FixedPath holds len() initialised bytes before its NUL.
    unsafe { std::slice::from_raw_parts(path.as_ptr().cast::<u8>(), path.len()) }
}

/// In a process the test started, from the constructor: says what it is and, when it is
/// the build's, starts tracking it, with its exit dump under a prefix of its own. Returns
/// that prefix for the exit handler; `None` for a process left alone.
pub fn start_as_child(prefix: &mut FixedPath) -> bool {
    // Whatever the test's process profiled with, this one does not sample.
    // SAFETY: "prof.active" is a bool.
    let _ = unsafe { crate::ctl::raw::write(b"prof.active\0", false) };
    let Some(dir) = sys::var(env::CHILDREN) else {
        return false;
    };
    let mut exe = [0u8; 4096];
    // SAFETY: a NUL-terminated path and a buffer of the length given.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            exe.as_mut_ptr().cast(),
            exe.len() - 1,
        )
    };
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    let exe = &exe[..n];
    let checked = sys::var(env::BUILT).is_some_and(|b| contract::is_built(exe, b.as_bytes()));
    let Some(fd) = new_record(dir, prefix) else {
        return false;
    };
    let exe_text = std::str::from_utf8(exe).unwrap_or("?");
    put(fd, Line::Exe(exe_text));
    put(fd, Line::Run(run_under_way(dir)));
    if checked {
        put(fd, Line::Checked);
    }
    // SAFETY: a descriptor new_record opened.
    unsafe { libc::close(fd) };
    // jemalloc's own exit dump, when the test's process profiled with it, goes beside the
    // record, where nothing reads it.
    let mut unused = FixedPath::new();
    if unused.push(dir_bytes(prefix)) && unused.push(b".jemalloc") {
        // SAFETY: "prof.prefix" is a `const char *`, NUL-terminated; jemalloc copies it.
        let _ = unsafe { crate::ctl::raw::write(b"prof.prefix\0", unused.as_ptr()) };
    }
    checked
}

fn put(fd: i32, line: Line<'_>) {
    let mut out = sys::Line::empty();
    line.encode(&mut out);
    out.write_to(fd);
}

/// Creates this process's record `<dir>/<pid>.<n>.child`, the first `n` free, and leaves
/// `<dir>/<pid>.<n>` in `prefix`; the record's descriptor.
fn new_record(dir: &str, prefix: &mut FixedPath) -> Option<i32> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    for n in 0..64u64 {
        prefix.truncate(0);
        if !(prefix.push(dir.as_bytes())
            && prefix.push(b"/")
            && prefix.push_u64(pid)
            && prefix.push(b".")
            && prefix.push_u64(n))
        {
            return None;
        }
        let mut record = FixedPath::new();
        if !(record.push(dir_bytes(prefix)) && record.push(contract::RECORD.as_bytes())) {
            return None;
        }
        // SAFETY: a NUL-terminated path; open allocates nothing.
        let fd = unsafe {
            libc::open(
                record.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd >= 0 {
            return Some(fd);
        }
        // SAFETY: errno is this thread's.
        if unsafe { *libc::__errno_location() } != libc::EEXIST {
            return None;
        }
    }
    None
}

/// The run the test's process wrote as under way (0 before any).
fn run_under_way(dir: &str) -> u32 {
    let mut path = FixedPath::new();
    if !(path.push(dir.as_bytes()) && path.push(b"/") && path.push(contract::RUN_FILE.as_bytes())) {
        return 0;
    }
    let mut buf = [0u8; 16];
    // SAFETY: a NUL-terminated path; the buffer is ours and its length given.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let n = usize::try_from(n).unwrap_or(0);
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|t| sys::parse_u64(t.trim()))
        .map_or(0, |k| k as u32)
}
