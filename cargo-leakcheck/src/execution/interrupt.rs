//! Ctrl-C, SIGTERM and SIGHUP: stop the run without leaving anything running.
//!
//! Test processes run in process groups of their own (so a timeout kills what a test
//! spawned), which also means a terminal's Ctrl-C never reaches them: if this process just
//! died, they would run on, re-parented to init, with nobody enforcing `--timeout`. So the
//! signal handler only writes the signal to a pipe; a watcher thread reads it and kills every
//! registered process group. The run then stops starting processes, analyses what finished,
//! writes the report with a note naming what did not, and exits with 128 + the signal.
//! A second signal exits at once (after killing the groups again).

use std::os::fd::RawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

static SIGNAL: AtomicI32 = AtomicI32::new(0);
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// Live child process groups, with the signal that stops each.
static GROUPS: Mutex<Vec<(libc::pid_t, libc::c_int)>> = Mutex::new(Vec::new());

/// The signal that interrupted the run, if one did.
pub fn requested() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The exit code of a run ended by `signal`, as shells report it.
pub fn exit_code(signal: i32) -> i32 {
    128 + signal
}

/// Installs the handlers and starts the watcher thread. Called once, before any child
/// process is started.
pub fn install() -> std::io::Result<()> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 with a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    PIPE_WRITE.store(fds[1], Ordering::SeqCst);
    let read_fd = fds[0];
    std::thread::Builder::new()
        .name("leakcheck-signals".into())
        .spawn(move || watch(read_fd))?;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction is plain old data; all-zero is a valid starting value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: installing a handler that only does async-signal-safe work.
        unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: an atomic store and write(2).
    // SAFETY: errno is thread-local; saving and restoring it keeps the interrupted code's.
    let errno = unsafe { *libc::__errno_location() };
    let _ = SIGNAL.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    let fd = PIPE_WRITE.load(Ordering::SeqCst);
    let byte = sig as u8;
    // SAFETY: write(2) of one byte from a valid buffer.
    unsafe {
        libc::write(fd, (&byte as *const u8).cast(), 1);
        *libc::__errno_location() = errno;
    }
}

fn watch(read_fd: RawFd) {
    let mut seen = 0;
    loop {
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte into a valid buffer, from our own pipe.
        let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
        if n != 1 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let sig = i32::from(byte);
        seen += 1;
        if seen == 1 {
            crate::say!(
                "\n Interrupted by {}: stopping the tests in flight; the report will have what finished (again to quit at once)",
                crate::evidence::signal_name(sig)
            );
        }
        stop_all();
        if seen > 1 {
            crate::say!("  Quit by {}", crate::evidence::signal_name(sig));
            // SAFETY: _exit ends the process without running anything else.
            unsafe { libc::_exit(exit_code(sig)) };
        }
    }
}

fn stop_all() {
    let groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    for &(pgid, sig) in groups.iter() {
        // SAFETY: kill(2) on a process group we created and have not yet reaped the
        // leader of (registrations end before reaping).
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// A live child process group; removed from the registry when dropped, which must happen
/// before its leader is reaped (then its id cannot have been reused).
#[derive(Debug)]
pub struct Registration(libc::pid_t);

impl Drop for Registration {
    fn drop(&mut self) {
        let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
        groups.retain(|&(g, _)| g != self.0);
    }
}

/// Registers the process group `pgid` (a child started with `process_group(0)`) to be
/// sent `sig` on interruption. When the run is already interrupted, sends it now and
/// returns `None`.
pub fn register(pgid: libc::pid_t, sig: libc::c_int) -> Option<Registration> {
    let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    if requested().is_some() {
        // SAFETY: kill(2) on the group of a child we have not reaped.
        unsafe {
            libc::kill(-pgid, sig);
        }
        return None;
    }
    groups.push((pgid, sig));
    Some(Registration(pgid))
}

/// `Command::output` for a short-lived helper (cargo, a test binary's `--list`), in a
/// process group of its own that an interruption stops with SIGTERM. Unlike
/// `Command::output`, stdout and stderr are captured only when the caller piped them.
pub fn output(cmd: &mut Command) -> std::io::Result<Output> {
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let child = cmd.spawn()?;
    let registration = register(child.id() as libc::pid_t, libc::SIGTERM);
    // The pipes must be drained while waiting, so the registration ends just after the
    // reap rather than before it (see `Registration`): a signal in between could only
    // reach a group whose id the kernel handed out again within that instant.
    let out = child.wait_with_output();
    drop(registration);
    out
}

/// Waits until `pid` (a child) has ended, without reaping it.
pub fn wait_ended(pid: libc::pid_t) {
    loop {
        // SAFETY: siginfo_t is plain old data; waitid on our own child with WNOWAIT
        // leaves it to be reaped later.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}
