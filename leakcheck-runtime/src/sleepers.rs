//! Threads the extra runs left behind that are asleep until a deadline they will reach on
//! their own: a job that sleeps five seconds on a pool the test has dropped, a worker that
//! exits after ten idle seconds. The grace after the last run waits a fixed time for the
//! runs' threads; a thread that sleeps a little longer than that would hold what it holds
//! past it and look like one that never ends, depending on the machine's speed. So, when
//! the grace ends with threads of the runs still there, each is asked what it waits in:
//! when every one is in a timed wait (a sleep, a futex wait with a timeout, a poll with a
//! timeout) that ends within [`CAP_MS`], the wait goes on until the latest of those
//! deadlines, once. A thread waiting with no deadline (for a message that may never come),
//! or running, cannot be told from one that never ends, and is not waited for; nor is a
//! thread that wakes and sleeps again (a timer's loop): it is given one deadline only.
//!
//! The wait need not be spent: the program's clock is moved past the latest deadline and
//! the sleepers in a futex wait or a sleep are interrupted (see [`crate::clock`]), so that
//! those that read the clock again (parking_lot's park loop, std's condvars, `thread::sleep`)
//! find their deadline passed and end at once. The wait in real time stays the bound, for
//! the sleepers that do not.

use crate::sys;

/// The longest wait for threads asleep until a deadline, beyond the grace.
pub const CAP_MS: u64 = 60_000;

/// Slack after the latest deadline, for the woken threads to end.
const SLACK_MS: u64 = 200;

/// The most threads remembered.
const MAX_TIDS: usize = 1024;

/// The process's thread ids at one moment (as many as fit).
pub struct Tids {
    ids: [u32; MAX_TIDS],
    len: usize,
}

impl Tids {
    /// The threads of the process now.
    pub fn now() -> Tids {
        let mut t = Tids {
            ids: [0; MAX_TIDS],
            len: 0,
        };
        t.len = list_tasks(&mut t.ids);
        t
    }

    fn contains(&self, tid: u32) -> bool {
        self.ids[..self.len].contains(&tid)
    }
}

/// When a blocked thread will wake on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    /// At most this many milliseconds from now.
    Within(u64),
    /// Not by itself: a wait with no deadline, or a system call whose deadline is not known.
    Never,
    /// It runs (or the kernel would not say what it waits in).
    Running,
    /// It has ended.
    Gone,
}

/// How often, while it waits, `wait_for_timed` says how much longer at most.
const HEARTBEAT_MS: u64 = 5_000;

/// Waits, beyond the grace, for threads that were not there in `before` and are all asleep
/// until deadlines within [`CAP_MS`]; how long it waited (0: it did not). `heartbeat` is
/// told, before the wait and every [`HEARTBEAT_MS`] of it, how much longer it may take
/// (cargo-leakcheck takes a process that writes nothing for long for one that hangs).
///
/// `early_ms` is how much sooner than its full length the grace ended (see
/// [`settle_or_still`]): an absolute deadline is reckoned from the full grace's end, as it
/// would have been, so the cap takes in the same threads.
pub fn wait_for_timed(
    before: &Tids,
    before_count: u64,
    early_ms: u64,
    heartbeat: impl Fn(u64),
) -> u64 {
    let now = Tids::now();
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    // None: no thread of the runs is asleep (all have ended since).
    let mut latest: Option<u64> = None;
    // The sleepers a signal sends back to the clock (see `crate::clock`).
    let mut interruptible = Tids {
        ids: [0; MAX_TIDS],
        len: 0,
    };
    for &tid in &now.ids[..now.len] {
        if tid == me || before.contains(tid) {
            continue;
        }
        match wait_of(tid) {
            (Wake::Within(ms), reads_clock, absolute) => {
                let ms = match absolute {
                    true => ms.saturating_sub(early_ms),
                    false => ms,
                };
                latest = Some(latest.unwrap_or(0).max(ms));
                if reads_clock {
                    interruptible.ids[interruptible.len] = tid;
                    interruptible.len += 1;
                }
            }
            (Wake::Gone, ..) => {}
            (Wake::Never | Wake::Running, ..) => return 0,
        }
    }
    // A deadline already past (the thread is about to wake) still gets the slack.
    let Some(latest) = latest.filter(|&ms| ms <= CAP_MS) else {
        return 0;
    };
    let started = sys::now_ms();
    let until = started + latest + SLACK_MS;
    // To the program, the whole wait passes at once; the sleepers that read the clock again
    // end now, the others at their deadline, in real time, as before.
    if interruptible.len > 0 {
        crate::clock::advance(latest + SLACK_MS);
        for &tid in &interruptible.ids[..interruptible.len] {
            crate::clock::interrupt(tid);
        }
    }
    loop {
        let now = sys::now_ms();
        if now >= until {
            break;
        }
        heartbeat(until - now);
        if sys::settle_threads(Some(before_count), (until - now).min(HEARTBEAT_MS)) {
            break;
        }
    }
    sys::now_ms().saturating_sub(started)
}

/// How often the grace asks whether anything in the process can still act.
const LOOK_EVERY_MS: u64 = 25;

/// A deadline must be this much later than the grace's end to count as after it (`/proc`'s
/// thread start times are in clock ticks).
const MARGIN_MS: u64 = 50;

/// Waits, as the grace does, up to `limit_ms` for the process to have no more threads than
/// `before_count`; whether it came to that. It stops early, returning what the whole wait
/// would have, once nothing in the process can act before the wait's end: every thread but
/// the caller asleep in a wait only this process can end (a private futex: a lock, a
/// channel, a condition variable) or in a sleep, and none of their deadlines before then.
/// Then no thread can end before the wait would have ended either, and the time is saved
/// whatever the machine's speed: the same threads are left, in the same waits.
///
/// Returns whether the threads settled, and how much sooner than `limit_ms` it stopped.
pub fn settle_or_still(before_count: u64, limit_ms: u64) -> (bool, u64) {
    let started = sys::now_ms();
    let give_up = started.saturating_add(limit_ms);
    let mut look_at = started + LOOK_EVERY_MS;
    loop {
        match sys::thread_count() {
            Some(n) if n <= before_count => return (true, 0),
            None => return (false, 0),
            Some(_) => {}
        }
        let now = sys::now_ms();
        if now >= give_up {
            return (false, 0);
        }
        if now >= look_at {
            if still_for(give_up - now) {
                return (false, give_up - now);
            }
            look_at = now + LOOK_EVERY_MS;
        }
        sys::pause_briefly();
    }
}

/// Whether no thread of the process but the caller can act within `ms` (see
/// [`settle_or_still`]).
fn still_for(ms: u64) -> bool {
    let all = Tids::now();
    if all.len == MAX_TIDS {
        return false; // some threads not listed
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    all.ids[..all.len].iter().filter(|&&t| t != me).all(|&tid| {
        if sys::task_state(u64::from(tid)) != Some(b'S') {
            return false;
        }
        let mut buf = [0u8; 256];
        let sys::TaskSyscall::Text(text) = sys::task_syscall(u64::from(tid), &mut buf) else {
            return false;
        };
        let Some(call) = parse_syscall(text) else {
            return false;
        };
        let age = || thread_age_ms(tid);
        match earliest_wake(&call, age, read_timespec, clock_ms) {
            Earliest::Never => true,
            Earliest::After(at_least) => at_least > ms + MARGIN_MS,
            Earliest::Unknown => false,
        }
    })
}

/// The soonest a blocked thread may act by itself, as far as its system call says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Earliest {
    /// Not before another thread of this process wakes it (a private futex wait without a
    /// deadline).
    Never,
    /// Not within this many milliseconds.
    After(u64),
    /// Any time: a wait something outside the process can end (a read, a poll, a shared
    /// futex), or one whose deadline cannot be read.
    Unknown,
}

/// When thread blocked in `call` may act by itself: a private futex wait or a sleep, by its
/// deadline (a relative one less the thread's age `age`, since its wait began after the
/// thread did); anything else may end any time.
fn earliest_wake(
    call: &Call,
    age: impl Fn() -> Option<u64>,
    read: impl Fn(u64) -> Option<u64>,
    clock: impl Fn(u64) -> Option<u64>,
) -> Earliest {
    let a = call.args;
    let relative = |ptr: u64| match (read(ptr), age()) {
        (Some(ms), Some(age)) => Earliest::After(ms.saturating_sub(age)),
        _ => Earliest::Unknown,
    };
    let absolute = |ptr: u64, clockid: u64| match (read(ptr), clock(clockid)) {
        (Some(at), Some(now)) => Earliest::After(at.saturating_sub(now)),
        _ => Earliest::Unknown,
    };
    const PRIVATE: u64 = 128;
    match call.nr {
        NANOSLEEP => relative(a[0]),
        CLOCK_NANOSLEEP if a[1] & TIMER_ABSTIME != 0 && a[0] == CLOCK_MONOTONIC => {
            absolute(a[2], a[0])
        }
        CLOCK_NANOSLEEP if a[1] & TIMER_ABSTIME == 0 => relative(a[2]),
        FUTEX if a[1] & PRIVATE == 0 => Earliest::Unknown,
        FUTEX => match (a[1] & FUTEX_CMD_MASK, a[3]) {
            (FUTEX_WAIT | FUTEX_WAIT_BITSET, 0) => Earliest::Never,
            (FUTEX_WAIT, ptr) => relative(ptr),
            (FUTEX_WAIT_BITSET, ptr) if a[1] & FUTEX_CLOCK_REALTIME == 0 => {
                absolute(ptr, CLOCK_MONOTONIC)
            }
            _ => Earliest::Unknown,
        },
        _ => Earliest::Unknown,
    }
}

/// How long ago thread `tid` started, in milliseconds (from `/proc/self/task/<tid>/stat`'s
/// start time, in clock ticks since boot).
fn thread_age_ms(tid: u32) -> Option<u64> {
    let ticks = sys::task_start_ticks(u64::from(tid))?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()?
        .max(1);
    let started_ms = ticks.saturating_mul(1000) / hz;
    // Rounded down to a tick: the age is under-counted, never over.
    let now_ms = clock_ms(libc::CLOCK_BOOTTIME as u64)?;
    Some(now_ms.saturating_sub(started_ms + 1000 / hz))
}

/// Reads what each recorded thread is doing now, before a scan stops them (a stopped
/// thread waits in the stop handler): its state letter, the call it is blocked in and when
/// that ends, and whether its name is still the one it inherited.
pub fn read_states(_held: &crate::threads::RegistryGuard) {
    for e in &crate::threads::REGISTRY {
        let tid = e.tid.load(std::sync::atomic::Ordering::Acquire);
        if tid == 0 {
            continue;
        }
        let Some(letter) = crate::sys::task_state(tid as u64) else {
            continue;
        };
        let (syscall, wake_ms) = blocked_in(tid as u32);
        let mut name = [0u8; 64];
        let now = crate::sys::task_name(tid as u64, &mut name);
        let mut inherited = [0u8; 16];
        inherited[..8].copy_from_slice(
            &e.inherited[0]
                .load(std::sync::atomic::Ordering::Relaxed)
                .to_ne_bytes(),
        );
        inherited[8..].copy_from_slice(
            &e.inherited[1]
                .load(std::sync::atomic::Ordering::Relaxed)
                .to_ne_bytes(),
        );
        let len = inherited.iter().position(|&b| b == 0).unwrap_or(16);
        let named = now.as_bytes() != &inherited[..len];
        let state = leakcheck_protocol::paths::ThreadState::new(letter, syscall, wake_ms, named);
        e.state.store(state.0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The system call thread `tid` is blocked in, and in how many milliseconds at most it
/// ends by itself (None: it does not, or that is not known); `(None, None)` for a thread
/// running or gone.
pub fn blocked_in(tid: u32) -> (Option<u64>, Option<u64>) {
    let mut buf = [0u8; 256];
    let sys::TaskSyscall::Text(text) = sys::task_syscall(u64::from(tid), &mut buf) else {
        return (None, None);
    };
    match parse_syscall(text) {
        Some(call) => match wake_of_call(&call, read_timespec, clock_ms) {
            Wake::Within(ms) => (Some(call.nr), Some(ms)),
            _ => (Some(call.nr), None),
        },
        None => (None, None),
    }
}

/// What thread `tid` waits in, from `/proc/self/task/<tid>/syscall`.
#[cfg(test)]
fn wake_of(tid: u32) -> Wake {
    wait_of(tid).0
}

/// What thread `tid` waits in, whether an interrupted wait of that kind reads the clock
/// again (see [`interrupted_reads_clock`]), and whether its deadline is absolute.
fn wait_of(tid: u32) -> (Wake, bool, bool) {
    let mut buf = [0u8; 256];
    match sys::task_syscall(u64::from(tid), &mut buf) {
        sys::TaskSyscall::Text(text) => match parse_syscall(text) {
            Some(call) => (
                wake_of_call(&call, read_timespec, clock_ms),
                interrupted_reads_clock(&call),
                is_absolute(&call),
            ),
            None => (Wake::Running, false, false),
        },
        sys::TaskSyscall::Gone => (Wake::Gone, false, false),
        sys::TaskSyscall::Unreadable => (Wake::Running, false, false),
    }
}

/// Whether `call` waits until a time on a clock, not for a length of time.
fn is_absolute(call: &Call) -> bool {
    match call.nr {
        CLOCK_NANOSLEEP => call.args[1] & TIMER_ABSTIME != 0,
        FUTEX => call.args[1] & FUTEX_CMD_MASK == FUTEX_WAIT_BITSET,
        _ => false,
    }
}

/// Whether a thread interrupted in `call` (EINTR) goes on as it would once the program's
/// clock is past its deadline: a futex wait (parking_lot's park loop reads the clock again;
/// std's waits are made again with their absolute deadline, which `crate::clock` translates;
/// glibc's own, with a deadline on the real clock, go on until it) or a sleep (the clock
/// counts the move as slept). Not a poll or an epoll wait: mio hands EINTR to its caller as
/// an error, which a wait that timed out is not.
fn interrupted_reads_clock(call: &Call) -> bool {
    matches!(call.nr, FUTEX | NANOSLEEP | CLOCK_NANOSLEEP)
}

/// A blocked thread's system call: its number and six arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    nr: u64,
    args: [u64; 6],
}

/// `nr arg1 … arg6 sp pc` (a thread in a system call); None for `running` or `-1 sp pc`.
fn parse_syscall(text: &str) -> Option<Call> {
    let mut fields = text.split_ascii_whitespace();
    let nr = fields.next()?.parse::<u64>().ok()?;
    let mut args = [0u64; 6];
    for a in &mut args {
        *a = sys::parse_hex(fields.next()?.trim_start_matches("0x"))?;
    }
    Some(Call { nr, args })
}

// x86-64 system call numbers and flags (the kernel's ABI, not glibc's).
const NANOSLEEP: u64 = 35;
const CLOCK_NANOSLEEP: u64 = 230;
const FUTEX: u64 = 202;
const POLL: u64 = 7;
const EPOLL_WAIT: u64 = 232;
const EPOLL_PWAIT: u64 = 281;
const TIMER_ABSTIME: u64 = 1;
const FUTEX_CMD_MASK: u64 = !(128 | 256);
const FUTEX_CLOCK_REALTIME: u64 = 256;
const FUTEX_WAIT: u64 = 0;
const FUTEX_WAIT_BITSET: u64 = 9;
const CLOCK_REALTIME: u64 = 0;
const CLOCK_MONOTONIC: u64 = 1;

/// When a thread blocked in `call` wakes by itself, reading a `timespec` the call points to
/// with `read` (in milliseconds; None when it cannot be read) and a clock with `clock`.
fn wake_of_call(
    call: &Call,
    read: impl Fn(u64) -> Option<u64>,
    clock: impl Fn(u64) -> Option<u64>,
) -> Wake {
    let a = call.args;
    // A relative timeout, counted from the call's start: at most that long from now.
    let relative = |ptr: u64| match read(ptr) {
        Some(ms) => Wake::Within(ms),
        None => Wake::Never,
    };
    let absolute = |ptr: u64, clockid: u64| match (read(ptr), clock(clockid)) {
        (Some(at), Some(now)) => Wake::Within(at.saturating_sub(now)),
        _ => Wake::Never,
    };
    // A timeout in milliseconds in an int argument: negative waits for ever.
    let millis = |arg: u64| match arg as u32 as i32 {
        t if t < 0 => Wake::Never,
        t => Wake::Within(t as u64),
    };
    match call.nr {
        NANOSLEEP => relative(a[0]),
        CLOCK_NANOSLEEP if a[1] & TIMER_ABSTIME != 0 => absolute(a[2], a[0]),
        CLOCK_NANOSLEEP => relative(a[2]),
        FUTEX if a[3] == 0 => Wake::Never,
        FUTEX => match a[1] & FUTEX_CMD_MASK {
            FUTEX_WAIT => relative(a[3]),
            FUTEX_WAIT_BITSET if a[1] & FUTEX_CLOCK_REALTIME != 0 => absolute(a[3], CLOCK_REALTIME),
            FUTEX_WAIT_BITSET => absolute(a[3], CLOCK_MONOTONIC),
            _ => Wake::Never,
        },
        POLL => millis(a[2]),
        EPOLL_WAIT | EPOLL_PWAIT => millis(a[3]),
        _ => Wake::Never,
    }
}

/// The `timespec` at `ptr` in this process, in milliseconds (rounded up); None when it
/// cannot be read (read through the kernel, so a bad pointer is an error, not a fault).
fn read_timespec(ptr: u64) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let size = std::mem::size_of::<libc::timespec>();
    let local = libc::iovec {
        iov_base: (&mut ts as *mut libc::timespec).cast(),
        iov_len: size,
    };
    let remote = libc::iovec {
        iov_base: ptr as *mut libc::c_void,
        iov_len: size,
    };
    // SAFETY: reads `size` bytes of this process into `ts`, which we own; the kernel checks
    // the remote range and fails with EFAULT instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n != size as isize || ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some((ts.tv_sec as u64).saturating_mul(1000) + (ts.tv_nsec as u64).div_ceil(1_000_000))
}

/// Clock `clockid` now, in milliseconds: the kernel's, which a wait's deadline is on (not
/// the program's, which `crate::clock` may have moved).
fn clock_ms(clockid: u64) -> Option<u64> {
    match crate::clock::real_ns(clockid as libc::clockid_t) {
        0 => None,
        ns => Some(ns / 1_000_000),
    }
}

/// The thread ids in `/proc/self/task`, into `out`; how many.
fn list_tasks(out: &mut [u32]) -> usize {
    // SAFETY: open on a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return 0;
    }
    let mut n = 0;
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: getdents64 into our own buffer, of its length.
        let got = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if got <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < got as usize {
            // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &buf[at + 19..(at + reclen).min(got as usize)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(tid) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                if n < out.len() {
                    out[n] = tid;
                    n += 1;
                }
            }
            at += reclen;
        }
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(nr: u64, args: [u64; 6]) -> Call {
        Call { nr, args }
    }

    /// Every pointer reads as 5 s; the clocks read 100 s.
    fn wake(c: &Call) -> Wake {
        wake_of_call(c, |_| Some(5_000), |_| Some(100_000))
    }

    #[test]
    fn the_kernels_line_for_a_blocked_thread_is_read_and_a_running_one_is_not() {
        assert_eq!(
            parse_syscall("230 0x0 0x0 0x7ffc10 0x7ffc20 0x0 0x0 0x7ffc00 0x7f0010\n"),
            Some(call(230, [0, 0, 0x7ffc10, 0x7ffc20, 0, 0]))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffc00 0x7f0010\n"), None);
    }

    #[test]
    fn sleeps_and_timed_waits_wake_by_their_deadline_and_untimed_waits_never() {
        // std's thread::sleep: relative, at most its length from now.
        assert_eq!(
            wake(&call(CLOCK_NANOSLEEP, [0, 0, 0x10, 0x20, 0, 0])),
            Wake::Within(5_000)
        );
        assert_eq!(
            wake(&call(NANOSLEEP, [0x10, 0x20, 0, 0, 0, 0])),
            Wake::Within(5_000)
        );
        // An absolute deadline already past: wakes now.
        assert_eq!(
            wake(&call(CLOCK_NANOSLEEP, [1, TIMER_ABSTIME, 0x10, 0, 0, 0])),
            Wake::Within(0)
        );
        let absolute = wake_of_call(
            &call(
                FUTEX,
                [0x100, FUTEX_WAIT_BITSET | 128, 0, 0x10, 0, u32::MAX as u64],
            ),
            |_| Some(103_000),
            |clock| (clock == CLOCK_MONOTONIC).then_some(100_000),
        );
        assert_eq!(absolute, Wake::Within(3_000), "a condvar's wait_timeout");
        assert_eq!(
            wake(&call(FUTEX, [0x100, FUTEX_WAIT | 128, 0, 0, 0, 0])),
            Wake::Never,
            "a channel's recv: no deadline"
        );
        assert_eq!(
            wake(&call(POLL, [0x10, 1, (-1i32) as u32 as u64, 0, 0, 0])),
            Wake::Never
        );
        assert_eq!(
            wake(&call(EPOLL_WAIT, [3, 0x10, 8, 250, 0, 0])),
            Wake::Within(250)
        );
        assert_eq!(wake(&call(0, [0; 6])), Wake::Never, "a read on a pipe");
        let unreadable = wake_of_call(&call(NANOSLEEP, [0x10, 0, 0, 0, 0, 0]), |_| None, |_| None);
        assert_eq!(unreadable, Wake::Never);
    }

    #[test]
    fn the_grace_ends_early_only_when_no_thread_can_act_before_its_end() {
        let earliest = |c: &Call| {
            // A thread 2 s old; every pointer reads as 30 s; the clocks read 100 s.
            earliest_wake(c, || Some(2_000), |_| Some(30_000), |_| Some(100_000))
        };
        const PRIVATE: u64 = 128;
        // A pool's worker in parking_lot's relative wait for a job due 30 s after it
        // started: at least 28 s more.
        assert_eq!(
            earliest(&call(FUTEX, [0x100, FUTEX_WAIT | PRIVATE, 0, 0x10, 0, 0])),
            Earliest::After(28_000)
        );
        // A lock or a channel with no deadline: only another thread ends it.
        assert_eq!(
            earliest(&call(FUTEX, [0x100, FUTEX_WAIT | PRIVATE, 0, 0, 0, 0])),
            Earliest::Never
        );
        // A futex another process may wake, a read, a poll: any time.
        assert_eq!(
            earliest(&call(FUTEX, [0x100, FUTEX_WAIT, 0, 0, 0, 0])),
            Earliest::Unknown
        );
        assert_eq!(earliest(&call(0, [3, 0x10, 8, 0, 0, 0])), Earliest::Unknown);
        assert_eq!(
            earliest(&call(EPOLL_WAIT, [3, 0x10, 8, 100_000, 0, 0])),
            Earliest::Unknown
        );
        // std's condvar, an absolute monotonic deadline 30 s on the clock: 30 s - 100 s
        // is past, so it may act now.
        assert_eq!(
            earliest(&call(
                FUTEX,
                [
                    0x100,
                    FUTEX_WAIT_BITSET | PRIVATE,
                    0,
                    0x10,
                    0,
                    u32::MAX as u64
                ]
            )),
            Earliest::After(0)
        );
        // Without the thread's age, a relative deadline says nothing.
        let ageless = earliest_wake(
            &call(NANOSLEEP, [0x10, 0, 0, 0, 0, 0]),
            || None,
            |_| Some(30_000),
            |_| Some(0),
        );
        assert_eq!(ageless, Earliest::Unknown);
    }

    #[test]
    fn a_thread_started_now_is_young() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as u32)
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
        });
        let tid = rx.recv().unwrap();
        let age = thread_age_ms(tid).expect("its start time is readable");
        assert!(age < 5_000, "{age} ms");
        t.join().unwrap();
    }

    #[test]
    fn a_sleeping_thread_is_seen_with_its_deadline() {
        let before = Tids::now();
        let sleeper =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(1500)));
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let tid = loop {
            let now = Tids::now();
            let new = now.ids[..now.len]
                .iter()
                .copied()
                .find(|t| !before.contains(*t));
            if let Some(tid) = new.filter(|&t| matches!(wake_of(t), Wake::Within(_))) {
                break tid;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "the sleeper is never seen asleep"
            );
            std::thread::yield_now();
        };
        assert!(matches!(wake_of(tid), Wake::Within(ms) if ms <= 1500));
        sleeper.join().unwrap();
        assert_eq!(wake_of(tid), Wake::Gone);
    }

    /// Moves the clock of the process it runs in: run alone, in a process of its own.
    #[test]
    fn sleepers_that_read_the_clock_end_once_it_is_moved_past_their_deadline() {
        crate::testing::in_own_process(
            "sleepers::tests::sleepers_that_read_the_clock_end_once_it_is_moved_past_their_deadline",
            sleepers_end_once_the_clock_is_moved,
        );
    }

    fn sleepers_end_once_the_clock_is_moved() {
        use std::sync::atomic::AtomicU32;
        use std::sync::{Arc, Condvar, Mutex};
        use std::time::{Duration, Instant};
        let before = Tids::now();
        let before_count = sys::thread_count().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let left = move || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
        };
        // parking_lot's park loop: a relative futex wait, the clock read again on waking.
        let word = Arc::new(AtomicU32::new(1));
        let parked = std::thread::spawn(move || {
            while let Some(d) = left() {
                let ts = libc::timespec {
                    tv_sec: d.as_secs() as libc::time_t,
                    tv_nsec: d.subsec_nanos() as libc::c_long,
                };
                // SAFETY: a futex wait on a word we own, with a timeout we own.
                unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        word.as_ptr(),
                        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                        1,
                        &ts,
                    )
                };
            }
        });
        // std's condvar until a deadline (an absolute futex wait), and std's sleep.
        let waiting = std::thread::spawn(move || {
            let pair = (Mutex::new(()), Condvar::new());
            let mut guard = pair.0.lock().unwrap();
            while let Some(d) = left() {
                guard = pair.1.wait_timeout(guard, d).unwrap().0;
            }
        });
        let sleeping = std::thread::spawn(|| std::thread::sleep(Duration::from_secs(20)));
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            let now = Tids::now();
            let asleep = now.ids[..now.len]
                .iter()
                .filter(|&&t| !before.contains(t) && matches!(wake_of(t), Wake::Within(_)))
                .count();
            if asleep == 3 {
                break;
            }
            assert!(
                Instant::now() < give_up,
                "the sleepers are never seen asleep"
            );
            std::thread::yield_now();
        }
        let waited = wait_for_timed(&before, before_count, 0, |_| {});
        assert!(
            waited < 10_000,
            "waited {waited} ms for sleepers due in 20 s"
        );
        for t in [parked, waiting, sleeping] {
            t.join().unwrap();
        }
        assert!(left().is_none(), "the program's clock is past the deadline");
    }
}
