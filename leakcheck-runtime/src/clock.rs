//! The process's monotonic clock, which the runtime can move forward once the test is done
//! with, so that threads asleep until a deadline reach it without the wait in real time.
//!
//! After the test's last extra run, the grace waits for the threads the runs started; those
//! asleep until a deadline of their own are waited for until the latest of those deadlines
//! (see [`crate::sleepers`]). A pool dropped by the test whose workers first run a job due
//! 30 s later (r2d2's reaper, in a scheduled-thread-pool) costs 30 s of real time per
//! process that way. Instead, the runtime adds that much to the clock the program reads
//! ([`advance`]) and interrupts each sleeping thread with a signal ([`interrupt`]): to
//! the program, the time it would have waited has passed, and the thread goes on as it
//! would have at its deadline.
//!
//! To keep the program's view of time consistent, the clock is the program's everywhere it
//! meets the kernel's:
//! - `clock_gettime` adds the offset to `CLOCK_MONOTONIC`, `CLOCK_MONOTONIC_RAW`,
//!   `CLOCK_MONOTONIC_COARSE` and `CLOCK_BOOTTIME` (std's `Instant`, parking_lot's park
//!   loop, tokio's timers all read it). `CLOCK_REALTIME` is left alone: wall-clock time
//!   is not the process's to move, and code that waits on it is not helped.
//! - A futex wait with an absolute monotonic deadline (`FUTEX_WAIT_BITSET`, std's
//!   condvars and `park_timeout`) made through `syscall`, and `clock_nanosleep` with
//!   `TIMER_ABSTIME` on a monotonic clock, have the offset taken off their deadline: a
//!   deadline reckoned on the program's clock is met when that clock reaches it, whether
//!   reckoned before or after the clock moved.
//! - A relative `nanosleep` or `clock_nanosleep` interrupted after the clock moved counts
//!   the move as slept (std's `thread::sleep` goes on with the time it is told is left).
//!
//! A relative futex wait (parking_lot's) needs nothing: interrupted, its caller reads the
//! clock again and finds its deadline passed. `poll` and `epoll_wait` are not interrupted:
//! some callers (mio's) hand an interrupted wait to their own caller as an error, which a
//! wait that had merely timed out would not have been; threads in them are waited for in
//! real time as before, and so are threads in waits this does not translate (glibc's
//! `pthread_cond_timedwait` on a monotonic clock).
//!
//! Safety of the measurement: the offset is 0 through the test's own run and every extra
//! run; it is raised only in the grace after the last one, when only the threads the runs
//! left behind are waited for, and only when every one of them is asleep until a deadline
//! within the cap. The threads then do what they would have done after the real wait, which
//! stays the bound: a thread that did not end by then is treated as before. One limit: the
//! sleepers are woken together, not in the order of their deadlines, so a thread whose
//! deadline came later but acts first (a pool shut down from a thread due 150 ms after the
//! run, before its workers' job due 30 s later) can change what the others find. Time
//! never goes back. The runtime's own timing reads the real clock ([`real_ns`]).

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Nanoseconds added to the program's monotonic clocks.
static OFFSET_NS: AtomicU64 = AtomicU64::new(0);

const NS: u64 = 1_000_000_000;

/// Whether the program reads `clock` moved by the offset.
fn shifted(clock: libc::clockid_t) -> bool {
    matches!(
        clock,
        libc::CLOCK_MONOTONIC
            | libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_MONOTONIC_COARSE
            | libc::CLOCK_BOOTTIME
    )
}

/// Moves the program's monotonic clocks `ms` milliseconds forward.
pub fn advance(ms: u64) {
    OFFSET_NS.fetch_add(ms.saturating_mul(1_000_000), Ordering::Relaxed);
}

/// How far the program's clocks have been moved, in nanoseconds.
fn offset() -> u64 {
    OFFSET_NS.load(Ordering::Relaxed)
}

fn to_ns(ts: &libc::timespec) -> u64 {
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(NS)
        .saturating_add(ts.tv_nsec.clamp(0, NS as i64 - 1) as u64)
}

fn from_ns(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / NS).min(i64::MAX as u64) as libc::time_t,
        tv_nsec: (ns % NS) as libc::c_long,
    }
}

/// A timespec `by` nanoseconds earlier (not before 0), or later.
fn shift(ts: &libc::timespec, by: u64, later: bool) -> libc::timespec {
    let ns = to_ns(ts);
    from_ns(if later {
        ns.saturating_add(by)
    } else {
        ns.saturating_sub(by)
    })
}

// ---------------------------------------------------------------------------------------
// libc's definitions, looked up once by the constructor; until then the kernel is asked.

static REAL_GETTIME: AtomicUsize = AtomicUsize::new(0);
static REAL_NANOSLEEP: AtomicUsize = AtomicUsize::new(0);
static REAL_CLOCK_NANOSLEEP: AtomicUsize = AtomicUsize::new(0);

type Gettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> c_int;
type Nanosleep = unsafe extern "C" fn(*const libc::timespec, *mut libc::timespec) -> c_int;
type ClockNanosleep = unsafe extern "C" fn(
    libc::clockid_t,
    c_int,
    *const libc::timespec,
    *mut libc::timespec,
) -> c_int;

/// Looks libc's definitions up (from the constructor: `dlsym` is best kept out of the
/// allocator's first calls, which read the clock).
pub fn resolve() {
    for (slot, name) in [
        (&REAL_GETTIME, c"clock_gettime"),
        (&REAL_NANOSLEEP, c"nanosleep"),
        (&REAL_CLOCK_NANOSLEEP, c"clock_nanosleep"),
    ] {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next definition
        // after this library, libc's.
        let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        slot.store(found, Ordering::Release);
    }
}

/// The kernel's answer to system call `nr`: its return value, or minus the error.
///
/// # Safety
/// The arguments must be what the call expects.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(nr: i64, args: [i64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the caller passes a call and its arguments; the kernel clobbers rcx and r11.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw(nr: i64, args: [i64; 6]) -> i64 {
    // SAFETY: as above; libc's own `syscall` (not interposed on these targets).
    let r = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) };
    if r == -1 {
        // SAFETY: errno of this thread.
        -i64::from(unsafe { *libc::__errno_location() })
    } else {
        r
    }
}

/// C's convention for a failed call: errno set, -1 returned.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
extern "C" fn failed(ret: i64) -> i64 {
    // SAFETY: glibc's errno slot of this thread.
    unsafe { *libc::__errno_location() = (-ret) as c_int };
    -1
}

/// `-errno` as C returns it from `raw`.
fn c_result(ret: i64) -> c_int {
    if (-4095..0).contains(&ret) {
        failed(ret) as c_int
    } else {
        ret as c_int
    }
}

/// The real clock `clock`, as libc gives it (the program's minus the offset).
///
/// # Safety
/// `tp` must be writable.
unsafe fn real_gettime(clock: libc::clockid_t, tp: *mut libc::timespec) -> c_int {
    match REAL_GETTIME.load(Ordering::Relaxed) {
        // SAFETY: the caller's arguments, for the kernel's clock_gettime.
        0 => c_result(unsafe {
            raw(
                libc::SYS_clock_gettime,
                [clock as i64, tp as i64, 0, 0, 0, 0],
            )
        }),
        // SAFETY: libc's clock_gettime, whose signature this is.
        f => unsafe { std::mem::transmute::<usize, Gettime>(f)(clock, tp) },
    }
}

/// The real clock `clock` now, in nanoseconds (0 if it cannot be read): the runtime's own
/// timing never sees the offset.
pub fn real_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a timespec we own.
    if unsafe { real_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    to_ns(&ts)
}

#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: libc::clockid_t, tp: *mut libc::timespec) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real_gettime(clock, tp) };
    let by = offset();
    if by != 0 && r == 0 && shifted(clock) {
        // SAFETY: clock_gettime just wrote it.
        unsafe { *tp = shift(&*tp, by, true) };
    }
    r
}

/// The remaining time a relative sleep interrupted after the clock moved `moved`
/// nanoseconds has left, with the move counted as slept.
///
/// # Safety
/// `rem` must be null or the remainder the kernel just wrote.
unsafe fn count_move_as_slept(rem: *mut libc::timespec, moved: u64) {
    if moved != 0 && !rem.is_null() {
        // SAFETY: as the caller promises.
        unsafe { *rem = shift(&*rem, moved, false) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    let at_start = offset();
    let r = match REAL_NANOSLEEP.load(Ordering::Relaxed) {
        // SAFETY: the caller's arguments, for the kernel's nanosleep.
        0 => c_result(unsafe { raw(libc::SYS_nanosleep, [req as i64, rem as i64, 0, 0, 0, 0]) }),
        // SAFETY: libc's nanosleep, whose signature this is.
        f => unsafe { std::mem::transmute::<usize, Nanosleep>(f)(req, rem) },
    };
    // SAFETY: errno of this thread.
    if r == -1 && unsafe { *libc::__errno_location() } == libc::EINTR {
        // SAFETY: the kernel wrote the remainder on EINTR (or it is null).
        unsafe { count_move_as_slept(rem, offset() - at_start) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    let at_start = offset();
    let absolute = flags & libc::TIMER_ABSTIME != 0;
    let translated;
    let req = if absolute && at_start != 0 && shifted(clock) && !req.is_null() {
        // SAFETY: a deadline the caller passes to be read.
        translated = shift(unsafe { &*req }, at_start, false);
        &raw const translated
    } else {
        req
    };
    let r = match REAL_CLOCK_NANOSLEEP.load(Ordering::Relaxed) {
        // SAFETY: the caller's arguments, for the kernel's clock_nanosleep (which returns
        // the error, as libc's does).
        0 => {
            -(unsafe {
                raw(
                    libc::SYS_clock_nanosleep,
                    [clock as i64, flags as i64, req as i64, rem as i64, 0, 0],
                )
            }) as c_int
        }
        // SAFETY: libc's clock_nanosleep, whose signature this is.
        f => unsafe { std::mem::transmute::<usize, ClockNanosleep>(f)(clock, flags, req, rem) },
    };
    if r == libc::EINTR && !absolute && shifted(clock) {
        // SAFETY: the kernel wrote the remainder on EINTR (or it is null).
        unsafe { count_move_as_slept(rem, offset() - at_start) };
    }
    r
}

// ---------------------------------------------------------------------------------------
// `syscall`: std makes its futex waits through it. Every call but a futex one goes straight
// to the kernel, with no stack frame, as glibc's does (a `clone` or `vfork` through it must
// find its stack as it left it).

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn syscall(nr: i64, a1: i64, a2: i64, a3: i64, a4: i64, a5: i64) -> i64 {
    // The call's sixth argument is on the stack, above the return address.
    core::arch::naked_asm!(
        "cmp rdi, {futex}",
        "je {futex_call}",
        "mov rax, rdi",
        "mov rdi, rsi",
        "mov rsi, rdx",
        "mov rdx, rcx",
        "mov r10, r8",
        "mov r8, r9",
        "mov r9, qword ptr [rsp + 8]",
        "syscall",
        "cmp rax, -4095",
        "jae 2f",
        "ret",
        "2:",
        "mov rdi, rax",
        "jmp {failed}",
        futex = const libc::SYS_futex,
        futex_call = sym futex_call,
        failed = sym failed,
    )
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const FUTEX_CMD_MASK: i64 = !((libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME) as i64);

/// `syscall(SYS_futex, …)`: a wait until an absolute monotonic deadline has the offset taken
/// off it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
extern "C" fn futex_call(
    nr: i64,
    uaddr: i64,
    op: i64,
    val: i64,
    timeout: i64,
    uaddr2: i64,
    val3: i64,
) -> i64 {
    let by = offset();
    let translated;
    let timeout = if by != 0
        && timeout != 0
        && op & FUTEX_CMD_MASK == libc::FUTEX_WAIT_BITSET as i64
        && op & libc::FUTEX_CLOCK_REALTIME as i64 == 0
    {
        // SAFETY: the deadline the caller passes to the kernel to be read.
        translated = shift(unsafe { &*(timeout as *const libc::timespec) }, by, false);
        (&raw const translated) as i64
    } else {
        timeout
    };
    // SAFETY: the caller's futex call, with its deadline translated.
    let ret = unsafe { raw(nr, [uaddr, op, val, timeout, uaddr2, val3]) };
    if (-4095..0).contains(&ret) {
        failed(ret)
    } else {
        ret
    }
}

// ---------------------------------------------------------------------------------------
// Interrupting a sleeping thread.

/// The signal that interrupts a sleeping thread, once its handler is installed (0: none).
static SIGNAL: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_interrupt(_sig: c_int) {}

/// A real-time signal near the top of the range that the program leaves at its default
/// (below the one `stop` uses), with a handler that does nothing, restarting what can be
/// restarted: a timed wait returns EINTR, other calls go on. None when every candidate is
/// taken.
fn interrupt_signal() -> Option<c_int> {
    match SIGNAL.load(Ordering::Acquire) {
        0 => {}
        sig => return Some(sig as c_int),
    }
    let stop = crate::signals::stop();
    for sig in (stop - 6..stop).rev() {
        // SAFETY: zeroed sigactions are valid; the query writes `old` only.
        let installed = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigfillset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut()) == 0
        };
        if installed {
            SIGNAL.store(sig as usize, Ordering::Release);
            return Some(sig);
        }
    }
    None
}

/// Interrupts thread `tid`'s timed wait, so that it reads the clock again; whether the
/// signal was sent. The handler stays installed: a thread that blocks the signal takes it
/// later, harmlessly.
pub fn interrupt(tid: u32) -> bool {
    let Some(sig) = interrupt_signal() else {
        return false;
    };
    // SAFETY: tgkill to a thread of this process; one that ended meanwhile gives ESRCH.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            tid as libc::c_long,
            sig as libc::c_long,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_saturate_and_keep_nanoseconds_in_range() {
        let ts = libc::timespec {
            tv_sec: 3,
            tv_nsec: 900_000_000,
        };
        let later = shift(&ts, 200_000_000, true);
        assert_eq!((later.tv_sec, later.tv_nsec), (4, 100_000_000));
        let earlier = shift(&ts, 5 * NS, false);
        assert_eq!((earlier.tv_sec, earlier.tv_nsec), (0, 0));
        assert!(shifted(libc::CLOCK_MONOTONIC) && !shifted(libc::CLOCK_REALTIME));
    }
}
