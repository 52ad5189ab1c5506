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

/// A process's record while it is written: under a name of its own until the process is
/// ready (its scan served, when it is checked), then renamed to its record's name, so that
/// whoever finds the record may ask for its scan.
pub struct Starting {
    fd: i32,
    /// It is the build's: it is tracked and scanned.
    pub checked: bool,
}

impl Starting {
    /// Ends the record (with `checked` when it is) and gives it its name.
    pub fn finish(self, prefix: &FixedPath) {
        // SAFETY: written by the constructor, where the only other thread is a checked
        // process's scan thread, which reads PREFIX only once asked for a scan, after the
        // record has its name below.
        unsafe { (*std::ptr::addr_of_mut!(PREFIX)).push(dir_bytes(prefix)) };
        if self.checked {
            put(self.fd, Line::Checked);
        }
        // SAFETY: a descriptor `new_record` opened.
        unsafe { libc::close(self.fd) };
        let (mut from, mut to) = (FixedPath::new(), FixedPath::new());
        if from.push(dir_bytes(prefix))
            && from.push(STARTING)
            && to.push(dir_bytes(prefix))
            && to.push(contract::RECORD.as_bytes())
        {
            // SAFETY: NUL-terminated paths.
            unsafe { libc::rename(from.as_ptr(), to.as_ptr()) };
        }
    }
}

/// The end of a record's name while it is written.
const STARTING: &[u8] = b".starting";

/// In a process the test started, from the constructor: starts its record (its executable,
/// the run under way) and says whether it is the build's, with its prefix
/// (`<dir>/<pid>.<n>`) in `prefix`; `None` when it cannot say.
pub fn start_as_child(prefix: &mut FixedPath) -> Option<Starting> {
    // Whatever the test's process profiled with, this one does not sample.
    // SAFETY: "prof.active" is a bool.
    let _ = unsafe { crate::ctl::raw::write(b"prof.active\0", false) };
    let dir = sys::var(env::CHILDREN)?;
    let mut exe = [0u8; 4096];
    // SAFETY: a NUL-terminated path and a buffer of the length given.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            exe.as_mut_ptr().cast(),
            exe.len() - 1,
        )
    };
    let exe = &exe[..usize::try_from(n).ok()?];
    let checked = sys::var(env::BUILT).is_some_and(|b| contract::is_built(exe, b.as_bytes()));
    let fd = new_record(dir, prefix)?;
    put(fd, Line::Exe(std::str::from_utf8(exe).unwrap_or("?")));
    put(fd, Line::Run(run_under_way(dir)));
    // jemalloc's own exit dump, when the test's process profiled with it, goes beside the
    // record, where nothing reads it.
    let mut unused = FixedPath::new();
    if unused.push(dir_bytes(prefix)) && unused.push(b".jemalloc") {
        // SAFETY: "prof.prefix" is a `const char *`, NUL-terminated; jemalloc copies it.
        let _ = unsafe { crate::ctl::raw::write(b"prof.prefix\0", unused.as_ptr()) };
    }
    Some(Starting { fd, checked })
}

fn put(fd: i32, line: Line<'_>) {
    let mut out = sys::Line::empty();
    line.encode(&mut out);
    out.write_to(fd);
}

/// Creates this process's record as it starts, `<dir>/<pid>.<n>.starting` for the first `n`
/// free (no record of that name, finished or not), and leaves `<dir>/<pid>.<n>` in
/// `prefix`; the record's descriptor.
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
        let (mut done, mut starting) = (FixedPath::new(), FixedPath::new());
        if !(done.push(dir_bytes(prefix))
            && done.push(contract::RECORD.as_bytes())
            && starting.push(dir_bytes(prefix))
            && starting.push(STARTING))
        {
            return None;
        }
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::access(done.as_ptr(), libc::F_OK) } == 0 {
            continue;
        }
        // SAFETY: a NUL-terminated path; open allocates nothing.
        let fd = unsafe {
            libc::open(
                starting.as_ptr(),
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
    std::str::from_utf8(read_start(&path, &mut buf))
        .ok()
        .and_then(|t| sys::parse_u64(t.trim()))
        .map_or(0, |k| k as u32)
}

/// The signal that asks a checked process for its scan before it is stopped.
pub fn scan_signal() -> libc::c_int {
    libc::SIGRTMAX() - contract::SCAN_SIGNAL_BELOW_MAX
}

/// The exit dump's name of a checked process whose prefix is `prefix`
/// (`<prefix>.<pid>.0.f.heap`, as jemalloc names one), into `path`.
pub fn exit_dump_name(path: &mut FixedPath, prefix: &FixedPath) -> bool {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    path.truncate(0);
    path.push(dir_bytes(prefix))
        && path.push(b".")
        && path.push_u64(pid)
        && path.push(b".0")
        && path.push(leakcheck_protocol::files::FINAL.as_bytes())
        && path.push(leakcheck_protocol::files::HEAP.as_bytes())
}

/// What a checked process does when asked for its scan (see [`serve_scan_requests`]).
static SCAN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// In a checked process, from the constructor: blocks the scan signal on this thread (every
/// thread started from it inherits that) and starts a thread that waits for it, to call
/// `scan` (the exit dump and scan at that moment) each time, then say so.
pub fn serve_scan_requests(scan: fn()) {
    SCAN.store(scan as usize, std::sync::atomic::Ordering::Release);
    // SAFETY: plain signal-set and thread calls on values we own; the thread runs for the
    // life of the process and touches only what `requested_scan` does.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, scan_signal());
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        let mut thread: libc::pthread_t = 0;
        libc::pthread_create(
            &mut thread,
            std::ptr::null(),
            wait_for_requests,
            std::ptr::null_mut(),
        );
        libc::pthread_detach(thread);
    }
}

extern "C" fn wait_for_requests(_: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: as above; sigwaitinfo fills the info we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, scan_signal());
        loop {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            if libc::sigwaitinfo(&set, &mut info) == scan_signal() {
                requested_scan();
            }
        }
    }
}

/// Has the scan written, then writes the file that says it is.
fn requested_scan() {
    let scan = SCAN.load(std::sync::atomic::Ordering::Acquire);
    if scan == 0 {
        return;
    }
    // SAFETY: stored from a `fn()` by `serve_scan_requests`.
    let scan: fn() = unsafe { std::mem::transmute::<usize, fn()>(scan) };
    scan();
    // SAFETY: written by the constructor before the record was named, so before any scan
    // could be asked of this thread; read-only afterwards.
    let prefix = unsafe { &*std::ptr::addr_of!(PREFIX) };
    let mut done = FixedPath::new();
    if done.push(dir_bytes(prefix)) && done.push(contract::SCANNED.as_bytes()) {
        let fd = sys::create_file(&done);
        if fd >= 0 {
            // SAFETY: a descriptor create_file opened.
            unsafe { libc::close(fd) };
        }
    }
}

/// A checked process's prefix, `<dir>/<pid>.<n>`, kept for its scans.
static mut PREFIX: FixedPath = FixedPath::new();

/// Before `sig` is sent to process `pid` (from `kill`): when it would end a checked process
/// the test started, that process is asked for its scan first and waited for (a minute at
/// most, less when it ends meanwhile).
pub fn before_kill(pid: libc::pid_t, sig: libc::c_int) {
    if pid <= 0 || !matches!(sig, libc::SIGKILL | libc::SIGTERM | libc::SIGINT) {
        return;
    }
    let Some(dir) = sys::var(env::CHILDREN) else {
        return;
    };
    let mut prefix = FixedPath::new();
    if !last_checked_unscanned(dir, pid, &mut prefix) {
        return;
    }
    // SAFETY: a signal the process's runtime waits for; a pid the caller names.
    if unsafe { libc::syscall(libc::SYS_kill, pid, scan_signal()) } != 0 {
        return;
    }
    let mut done = FixedPath::new();
    if !(done.push(dir_bytes(&prefix)) && done.push(contract::SCANNED.as_bytes())) {
        return;
    }
    let started = sys::now_ms();
    // SAFETY: a NUL-terminated path.
    while unsafe { libc::access(done.as_ptr(), libc::F_OK) } != 0 {
        if !alive(pid) || sys::now_ms().saturating_sub(started) > SCAN_WAIT_MS {
            return;
        }
        sys::pause_briefly();
    }
}

/// How long a process being stopped is given for its scan.
const SCAN_WAIT_MS: u64 = 60_000;

/// Whether the latest record of `pid` in `dir` is a checked process's that has not written
/// its scan; its prefix into `prefix`.
fn last_checked_unscanned(dir: &str, pid: libc::pid_t, prefix: &mut FixedPath) -> bool {
    let mut latest: Option<u64> = None;
    for n in 0..64u64 {
        if !record_path(dir, pid, n, prefix) {
            return false;
        }
        let mut record = FixedPath::new();
        if !(record.push(dir_bytes(prefix)) && record.push(contract::RECORD.as_bytes())) {
            return false;
        }
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::access(record.as_ptr(), libc::F_OK) } != 0 {
            break;
        }
        latest = Some(n);
    }
    let Some(n) = latest else {
        return false;
    };
    if !record_path(dir, pid, n, prefix) {
        return false;
    }
    let mut record = FixedPath::new();
    let mut done = FixedPath::new();
    if !(record.push(dir_bytes(prefix))
        && record.push(contract::RECORD.as_bytes())
        && done.push(dir_bytes(prefix))
        && done.push(contract::SCANNED.as_bytes()))
    {
        return false;
    }
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(done.as_ptr(), libc::F_OK) } == 0 {
        return false;
    }
    is_checked(&record)
}

/// `<dir>/<pid>.<n>` into `prefix`.
fn record_path(dir: &str, pid: libc::pid_t, n: u64, prefix: &mut FixedPath) -> bool {
    prefix.truncate(0);
    prefix.push(dir.as_bytes())
        && prefix.push(b"/")
        && prefix.push_u64(pid as u64)
        && prefix.push(b".")
        && prefix.push_u64(n)
}

/// Whether the record at `path` says its process is checked.
fn is_checked(path: &FixedPath) -> bool {
    let mut buf = [0u8; 1024];
    std::str::from_utf8(read_start(path, &mut buf))
        .unwrap_or("")
        .lines()
        .any(|l| Line::parse(l) == Some(Line::Checked))
}

/// Whether process `pid` still runs (exists and is not a zombie).
fn alive(pid: libc::pid_t) -> bool {
    let mut path = FixedPath::new();
    if !(path.push(b"/proc/") && path.push_u64(pid as u64) && path.push(b"/stat")) {
        return false;
    }
    let mut buf = [0u8; 512];
    let text = read_start(&path, &mut buf);
    // `pid (comm) S …`: the state after the last `)`.
    match text.iter().rposition(|&b| b == b')') {
        Some(close) => text.get(close + 2).is_some_and(|&s| s != b'Z' && s != b'X'),
        None => false,
    }
}

/// The start of the file at `path`, as much as `buf` holds (nothing when it cannot be
/// read); allocates nothing.
fn read_start<'b>(path: &FixedPath, buf: &'b mut [u8]) -> &'b [u8] {
    // SAFETY: a NUL-terminated path; the buffer is ours and its length given.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return &[];
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    &buf[..usize::try_from(n).unwrap_or(0)]
}
