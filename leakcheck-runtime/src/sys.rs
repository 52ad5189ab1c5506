//! Small operating-system helpers that never allocate: they run inside exit handlers and
//! before `main`, where an allocation would be counted as the test's or could recurse into
//! the allocator being set up.

use std::ffi::{c_char, c_int, c_void, CStr};

/// A value of the environment, if set and valid UTF-8.
///
/// Mostly called from the constructor, while the process has a single thread, so the
/// environment cannot change underneath; the calls made later (from the exit handler,
/// `kill`, the scan, the periodic dumps' thread) rely on the program not changing its
/// environment at that moment.
pub fn env(name: &CStr) -> Option<&'static str> {
    // SAFETY: getenv with a NUL-terminated name, with the environment left alone meanwhile
    // (see above). glibc never frees a string of the environment (unsetenv drops the
    // pointer, setenv keeps the string it replaces), so the one returned lives for the rest
    // of the process, unless the program put it there with putenv and frees it.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    unsafe { CStr::from_ptr(value) }.to_str().ok()
}

/// A variable of the contract with cargo-leakcheck.
pub fn var(var: leakcheck_protocol::env::Var) -> Option<&'static str> {
    env(var.c_name())
}

/// A fixed-capacity byte string, NUL-terminated for passing to C.
pub struct FixedPath {
    bytes: [u8; 4096],
    len: usize,
}

impl FixedPath {
    /// An empty path.
    pub const fn new() -> Self {
        FixedPath {
            bytes: [0; 4096],
            len: 0,
        }
    }

    /// Appends `part`; false (and unchanged) when it would not fit with its NUL.
    pub fn push(&mut self, part: &[u8]) -> bool {
        if self.len + part.len() >= self.bytes.len() || part.contains(&0) {
            return false;
        }
        self.bytes[self.len..self.len + part.len()].copy_from_slice(part);
        self.len += part.len();
        self.bytes[self.len] = 0;
        true
    }

    /// Appends a decimal number.
    pub fn push_u64(&mut self, v: u64) -> bool {
        let mut digits = [0u8; 20];
        let start = format_u64(v, &mut digits);
        self.push(&digits[start..])
    }

    /// Whether nothing was set.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The NUL-terminated string.
    pub fn as_ptr(&self) -> *const c_char {
        self.bytes.as_ptr().cast()
    }

    /// Forgets what was appended after the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            self.bytes[len] = 0;
        }
    }

    /// Its length in bytes, without the NUL.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Its bytes, without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

pub use leakcheck_protocol::format_u64;

/// One line of the exit record, built on the stack and written with a single `write`, so
/// a process that dies right after still leaves whole lines behind.
pub struct Line {
    bytes: [u8; 512],
    len: usize,
}

impl leakcheck_protocol::Sink for Line {
    fn put(&mut self, text: &str) {
        self.text(text);
    }
}

impl Line {
    /// An empty line.
    pub fn empty() -> Self {
        Line {
            bytes: [0; 512],
            len: 0,
        }
    }

    /// The line of one entry of the exit record.
    pub fn entry(entry: &leakcheck_protocol::record::Entry<'_>) -> Self {
        let mut line = Line {
            bytes: [0; 512],
            len: 0,
        };
        entry.encode(&mut line);
        line
    }

    /// Appends text; whatever does not fit is cut (the newline always fits).
    pub fn text(&mut self, text: &str) -> &mut Self {
        for &b in text.as_bytes() {
            if self.len + 1 >= self.bytes.len() {
                break;
            }
            // One record per line: a message never breaks the format.
            self.bytes[self.len] = if b == b'\n' || b == b'\r' { b' ' } else { b };
            self.len += 1;
        }
        self
    }

    /// Writes the line and its newline to `fd`.
    pub fn write_to(&mut self, fd: c_int) {
        self.bytes[self.len] = b'\n';
        let total = self.len + 1;
        let mut done = 0;
        while done < total {
            // SAFETY: writes initialised bytes of our own buffer.
            let n =
                unsafe { libc::write(fd, self.bytes[done..total].as_ptr().cast(), total - done) };
            if n <= 0 {
                return;
            }
            done += n as usize;
        }
    }
}

/// Milliseconds on the monotonic clock.
pub fn now_ms() -> u64 {
    now_us() / 1000
}

/// Microseconds on the monotonic clock (the real one: never moved by [`crate::clock`]).
pub fn now_us() -> u64 {
    crate::clock::real_ns(libc::CLOCK_MONOTONIC) / 1000
}

/// Sleeps about one millisecond (used to poll, never to wait for a guessed duration).
pub fn pause_briefly() {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    // SAFETY: nanosleep with a valid request and no remainder.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// How many threads the process has (`num_threads` of `/proc/self/stat`), or None.
pub fn thread_count() -> Option<u64> {
    let mut buf = [0u8; 1024];
    // SAFETY: open/read/close on a NUL-terminated path into our own buffer.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return None;
    }
    let text = &buf[..n as usize];
    // The command name (field 2) may hold spaces and parentheses: fields are counted from
    // the last `)`. num_threads is field 20, the 18th after it.
    let close = text.iter().rposition(|&b| b == b')')?;
    let field = text[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(17)?;
    parse_u64(std::str::from_utf8(field).ok()?)
}

/// The thread's name from `/proc/self/task/<tid>/comm`, read into `buf` (`?` when it cannot
/// be read).
pub fn task_name(tid: u64, buf: &mut [u8; 64]) -> &str {
    let mut path = FixedPath::new();
    let mut n = 0;
    if path.push(b"/proc/self/task/") && path.push_u64(tid) && path.push(b"/comm") {
        // SAFETY: open/read/close on a NUL-terminated path into our own buffer.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len()).max(0) as usize;
                libc::close(fd);
            }
        }
    }
    let name = buf[..n].strip_suffix(b"\n").unwrap_or(&buf[..n]);
    match std::str::from_utf8(name) {
        Ok(name) if !name.is_empty() => name,
        _ => "?",
    }
}

/// The fields of `/proc/self/task/<tid>/stat` after the command name (which may hold
/// spaces and parentheses: fields are counted from the last `)`), read into `buf`: the state
/// letter first (the 3rd field).
fn task_stat(tid: u64, buf: &mut [u8; 512]) -> Option<&[u8]> {
    let mut path = FixedPath::new();
    if !(path.push(b"/proc/self/task/") && path.push_u64(tid) && path.push(b"/stat")) {
        return None;
    }
    // SAFETY: open/read/close on a NUL-terminated path into the caller's buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let text = &buf[..usize::try_from(n).ok()?];
    let close = text.iter().rposition(|&b| b == b')')?;
    Some(&text[close + 1..])
}

/// The state letter of thread `tid` (`R` running, `S` sleeping, `D` in uninterruptible
/// sleep, …); None when it cannot be read.
pub fn task_state(tid: u64) -> Option<u8> {
    let mut buf = [0u8; 512];
    let fields = task_stat(tid, &mut buf)?;
    fields.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// When thread `tid` started, in clock ticks since boot (the 22nd field); None when it
/// cannot be read.
pub fn task_start_ticks(tid: u64) -> Option<u64> {
    let mut buf = [0u8; 512];
    let fields = task_stat(tid, &mut buf)?;
    let field = fields
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    parse_u64(std::str::from_utf8(field).ok()?)
}

/// Waits until the process has no more threads than `before` (threads a run or a drain
/// started have exited, and freed what they held on the way out), or `limit_ms` passed;
/// whether they had.
pub fn settle_threads(before: Option<u64>, limit_ms: u64) -> bool {
    let Some(before) = before else {
        return false;
    };
    let give_up = now_ms().saturating_add(limit_ms);
    loop {
        match thread_count() {
            Some(n) if n <= before => return true,
            None => return false,
            Some(_) => {}
        }
        if now_ms() >= give_up {
            return false;
        }
        pause_briefly();
    }
}

/// Parses a decimal number.
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Parses a hexadecimal number, with or without `0x`.
pub fn parse_hex(text: &str) -> Option<u64> {
    let t = text.trim();
    u64::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// Whether the last failed system call was interrupted by a signal (EINTR).
pub fn interrupted() -> bool {
    // SAFETY: glibc's __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() == libc::EINTR }
}

/// Opens (creating or truncating) a file for the exit record; -1 on failure.
pub fn create_file(path: &FixedPath) -> c_int {
    // SAFETY: a NUL-terminated path; open allocates nothing.
    unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    }
}

// libgcc's unwinder (the one jemalloc uses), for the tracker's stacks and a stopped thread's
// frames.
extern "C" {
    pub fn _Unwind_Backtrace(
        trace: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    pub fn _Unwind_GetIP(context: *mut c_void) -> usize;
    pub fn _Unwind_GetCFA(context: *mut c_void) -> usize;
    pub fn _Unwind_GetRegionStart(context: *mut c_void) -> usize;
}

/// Records the calling thread's frames, innermost first, into `frames` (at most its length)
/// and their number into `n`: each frame's address (a return address, or where a signal
/// interrupted it) and the CFA libgcc reports beside it, which is that of the frame below
/// (the callee's: this frame's stack pointer at the call). Stores only into its arguments.
pub fn record_frames(
    frames: &[[std::sync::atomic::AtomicUsize; 2]],
    n: &std::sync::atomic::AtomicUsize,
) {
    use std::sync::atomic::Ordering;
    struct Out<'a> {
        frames: &'a [[std::sync::atomic::AtomicUsize; 2]],
        n: &'a std::sync::atomic::AtomicUsize,
    }
    extern "C" fn each(context: *mut c_void, arg: *mut c_void) -> c_int {
        const URC_NO_REASON: c_int = 0;
        const URC_NORMAL_STOP: c_int = 4;
        // SAFETY: `arg` is the `Out` passed below, alive for the whole backtrace; the
        // context is the unwinder's.
        let (out, ip, cfa) = unsafe {
            (
                &*arg.cast::<Out>(),
                _Unwind_GetIP(context),
                _Unwind_GetCFA(context),
            )
        };
        let k = out.n.load(Ordering::Relaxed);
        let Some(slot) = out.frames.get(k) else {
            return URC_NORMAL_STOP;
        };
        slot[0].store(ip, Ordering::Relaxed);
        slot[1].store(cfa, Ordering::Relaxed);
        out.n.store(k + 1, Ordering::Relaxed);
        URC_NO_REASON
    }
    n.store(0, Ordering::Relaxed);
    let out = Out { frames, n };
    // SAFETY: the callback only stores into `out`'s arrays, which outlive the call.
    unsafe { _Unwind_Backtrace(each, (&out as *const Out).cast_mut().cast()) };
}

/// What `/proc/self/task/<tid>/syscall` says of a thread.
pub enum TaskSyscall<'a> {
    /// The kernel's line: `nr arg1 … arg6 sp pc` for a thread blocked in a system call,
    /// `running`, or `-1 sp pc`.
    Text(&'a str),
    /// The thread has ended.
    Gone,
    /// The file could not be read.
    Unreadable,
}

/// Reads `/proc/self/task/<tid>/syscall` into `buf`.
pub fn task_syscall(tid: u64, buf: &mut [u8]) -> TaskSyscall<'_> {
    let mut path = FixedPath::new();
    if !(path.push(b"/proc/self/task/") && path.push_u64(tid) && path.push(b"/syscall")) {
        return TaskSyscall::Unreadable;
    }
    // SAFETY: open/read/close on a NUL-terminated path into the caller's buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return match *libc::__errno_location() {
                libc::ENOENT | libc::ESRCH => TaskSyscall::Gone,
                _ => TaskSyscall::Unreadable,
            };
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return TaskSyscall::Unreadable;
    }
    match std::str::from_utf8(&buf[..n as usize]) {
        Ok(text) => TaskSyscall::Text(text),
        Err(_) => TaskSyscall::Unreadable,
    }
}

/// Maps the file at `path` read-only for the rest of the process (never unmapped); None when
/// it cannot be opened, is empty or cannot be mapped.
pub fn map_file(path: &str) -> Option<&'static [u8]> {
    let mut name = FixedPath::new();
    if !name.push(path.as_bytes()) {
        return None;
    }
    // SAFETY: name is NUL-terminated; the descriptor is closed below and the mapping is
    // never unmapped, so the slice lives as long as the process.
    unsafe {
        let fd = libc::open(name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut st: libc::stat = std::mem::zeroed();
        let mut out = None;
        if libc::fstat(fd, &mut st) == 0 && st.st_size > 0 {
            let len = st.st_size as usize;
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                fd,
                0,
            );
            if p != libc::MAP_FAILED {
                out = Some(std::slice::from_raw_parts(p as *const u8, len));
            }
        }
        libc::close(fd);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(line: &Line) -> &str {
        std::str::from_utf8(&line.bytes[..line.len]).unwrap()
    }

    #[test]
    fn a_record_line_is_one_line_whatever_it_is_given() {
        use leakcheck_protocol::record::Entry;
        let line = Line::entry(&Entry::RunFailed {
            run: 3,
            message: "two\nlines\r",
        });
        assert_eq!(text(&line), "run 3 failed two lines ");
        // Too long a message is cut, and the newline still fits.
        let message = "x".repeat(2000);
        let long = Line::entry(&Entry::RunFailed {
            run: 3,
            message: &message,
        });
        assert_eq!(long.len, long.bytes.len() - 1);
    }

    #[test]
    fn paths_are_nul_terminated_and_refuse_what_does_not_fit() {
        let mut p = FixedPath::new();
        assert!(p.is_empty());
        assert!(p.push(b"/tmp/x") && p.push(b".r") && p.push_u64(12) && p.push(b".heap"));
        // SAFETY: as_ptr points at a NUL-terminated string of len() bytes.
        let s = unsafe { std::ffi::CStr::from_ptr(p.as_ptr()) };
        assert_eq!(s.to_str().unwrap(), "/tmp/x.r12.heap");
        assert!(!p.push(b"a\0b"), "an inner NUL would cut the path");
        assert!(!p.push(&[b'a'; 5000]));
        p.truncate(6);
        // SAFETY: as above.
        let s = unsafe { std::ffi::CStr::from_ptr(p.as_ptr()) };
        assert_eq!(s.to_str().unwrap(), "/tmp/x");
    }

    #[test]
    fn numbers_parse_as_the_tool_writes_them() {
        assert_eq!(parse_hex("3f490"), Some(0x3f490));
        assert_eq!(parse_hex("0x10"), Some(16));
        assert_eq!(parse_hex("zz"), None);
        assert_eq!(parse_u64(" 5 "), Some(5));
        let mut buf = [0u8; 20];
        let start = format_u64(u64::MAX, &mut buf);
        assert_eq!(&buf[start..], u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn the_thread_count_sees_a_running_thread() {
        let before = thread_count().unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let theirs = std::sync::Arc::clone(&barrier);
        let t = std::thread::spawn(move || {
            theirs.wait();
            theirs.wait();
        });
        barrier.wait();
        // Other tests of this binary may come and go, but this one is alive now.
        assert!(thread_count().unwrap() >= 2, "before: {before}");
        barrier.wait();
        t.join().unwrap();
    }
}
