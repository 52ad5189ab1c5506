//! Draining what the program already scheduled to free, before a run is measured.
//!
//! crossbeam-epoch (behind rayon, crossbeam-deque, crossbeam-skiplist, moka, …) does not free
//! an object when the program lets go of it: the object's destructor is deferred into a bag,
//! a thread's bag is sealed into its collector's global queue when it fills, on `flush` or
//! when the thread exits, and a sealed bag is freed only once the global epoch has moved two
//! steps past it, which happens only when some thread pins and collects. So what a test's run
//! let go of is often still allocated when the run ends, and is freed by a later run's pins:
//! counted as retained, it made the test run again, sometimes several times, only to see it
//! go.
//!
//! valgrind calls glibc's `__libc_freeres` at exit for the same reason. Here, after a run and
//! before it is measured, the runtime pins the default collector of every crossbeam-epoch
//! version linked in, from fresh threads of its own, until the live counts stop falling: each
//! thread pins [`PINS_PER_THREAD`] times (one collect every 128 pins, each advancing the epoch
//! when no other thread is pinned in an older one and freeing up to 8 expired bags), then
//! exits, which seals its own bag into the queue for the next thread to free.
//!
//! Draining only runs destructors the program had already scheduled: it can never free what
//! a test leaked, only show it sooner (memory a deferred function keeps instead of freeing
//! stays in the arena of the run that allocated it, and counts). What the drains allocate
//! themselves (their threads' registrations, the queue's nodes for their bags) goes to an
//! arena of their own in counting mode and is left untracked in stacks mode, so it is never
//! charged to a run; what that arena holds after each drain is recorded. The one thing it
//! hides is new memory a deferred function allocates while a drain runs it: that lands in
//! the drains' arena too. Garbage in the bags of threads that stay alive (a pool's workers)
//! cannot be reached from here: the extra runs still free that, as before.
//!
//! A drain thread runs whatever destructors were deferred: one that has not ended within
//! [`THREAD_BUDGET_MS`] (waiting for a lock a stuck thread holds) is left running, and the
//! process drains nothing more.
//!
//! The functions are the test binary's own, found by cargo-leakcheck in its symbol table
//! (`crossbeam_epoch::default::pin` and `<Guard as Drop>::drop` of the same version) and
//! checked to be code of this very build before they are called.

use crate::arenas::{self, Live};
use crate::image;
use leakcheck_protocol::drain::{Collector, MAX_COLLECTORS};
use std::ffi::c_void;

/// Pins each drain thread makes per collector: 16 collects.
const PINS_PER_THREAD: u32 = 16 * 128;

/// The most drain threads one drain starts.
const MAX_THREADS: u32 = 64;

/// A drain ends once this many threads in a row freed nothing.
const QUIET_THREADS: u32 = 2;

/// The collectors, as the constructor read them (image addresses).
static mut COLLECTORS: [Collector; MAX_COLLECTORS] =
    [Collector { pin: 0, unpin: 0 }; MAX_COLLECTORS];
static mut COUNT: usize = 0;

/// Takes the list from the environment's text.
///
/// # Safety
/// Only while the process has a single thread (the constructor).
pub unsafe fn configure(text: &str) {
    let mut list = [Collector::default(); MAX_COLLECTORS];
    if let Some(n) = leakcheck_protocol::drain::decode(text, &mut list) {
        // SAFETY: the caller guarantees no other thread reads them yet.
        unsafe {
            COLLECTORS = list;
            COUNT = n;
        }
    }
}

fn collectors() -> &'static [Collector] {
    // SAFETY: written only by the constructor, single-threaded; read-only afterwards.
    let (list, n) = unsafe { (&*std::ptr::addr_of!(COLLECTORS), *std::ptr::addr_of!(COUNT)) };
    &list[..n]
}

/// Whether there is anything to drain (nothing once a drain did not end in time).
pub fn configured() -> bool {
    !collectors().is_empty() && !ABANDONED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A drain thread did not end within [`THREAD_BUDGET_MS`] (a deferred destructor waiting
/// for a lock a stuck thread holds): it is left running, and nothing is drained again.
static ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How long one drain thread may take; a few milliseconds is usual.
const THREAD_BUDGET_MS: u64 = 2_000;

/// Counting mode, before the program's own code runs: makes each collector's one-time
/// initialisation (the process-wide `Global`, created on the first pin, kept for the life of
/// the process) now, on the main thread, whose arena no count includes. Otherwise the first
/// test thread to pin would allocate it and the test would have to run again only to show
/// that it does not grow. A fixed object, made once: it cannot hide what grows.
pub fn initialise(build_id: &str) {
    for c in collectors() {
        if let Some(callable) = callable(c, build_id) {
            pin_and_unpin(callable, 1);
        }
    }
}

/// A collector's functions, checked to be code of this build.
fn callable(c: &Collector, build_id: &str) -> Option<Callable> {
    Some(Callable {
        pin: image::resolve(c.pin as usize, build_id).ok()?,
        unpin: image::resolve(c.unpin as usize, build_id).ok()?,
    })
}

/// What one drain did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Live objects (and bytes, in counting mode) the drain freed.
    pub freed: Live,
    /// What the drains' own arena holds afterwards (counting mode).
    pub kept: Live,
}

/// The functions of one collector, callable.
#[derive(Clone, Copy)]
struct Callable {
    /// `fn() -> Guard`; a `Guard` is one pointer (to the thread's `Local`).
    pin: usize,
    /// `fn(&mut Guard)`.
    unpin: usize,
}

struct Job {
    callables: [Option<Callable>; MAX_COLLECTORS],
    /// Counting mode: the arena the thread allocates from.
    arena: Option<u32>,
}

/// The job the drain threads read: static, so that a thread left running past its budget
/// never reads freed memory.
static mut JOB: Job = Job {
    callables: [None; MAX_COLLECTORS],
    arena: None,
};

/// Drains every configured collector; `live` measures what is live (in counting mode, the
/// counted arenas; in stacks mode, the tracked objects). None when nothing could be drained
/// (no collector, a function that is not code of this build, no thread, a drain thread
/// left running before) or, counting, nothing counted was live to begin with.
pub fn drain(build_id: &str, counting: bool, live: impl Fn() -> Live) -> Option<Drained> {
    let mut job = Job {
        callables: [None; MAX_COLLECTORS],
        arena: None,
    };
    let mut any = false;
    for (slot, c) in job.callables.iter_mut().zip(collectors()) {
        *slot = callable(c, build_id);
        any |= slot.is_some();
    }
    if !any || !configured() {
        return None;
    }
    let threads_before = crate::sys::thread_count();
    let before = live();
    if counting && before == Live::default() {
        // Nothing counted is live, so nothing counted can be garbage.
        return None;
    }
    if counting {
        job.arena = Some(arenas::drain_arena()?);
    }
    // SAFETY: only the exit handler drains, on one thread, and never again once a drain
    // thread was left running (`ABANDONED`): no drain thread reads the job while it is
    // written here.
    let job: &'static Job = unsafe {
        *std::ptr::addr_of_mut!(JOB) = job;
        &*std::ptr::addr_of!(JOB)
    };
    let mut last = before;
    let mut quiet = 0;
    for _ in 0..MAX_THREADS {
        if !run_thread(job) {
            break;
        }
        // The thread is joined, but the kernel may still count it for a moment: the counts
        // the extra runs compare must not include it.
        crate::sys::settle_threads(threads_before, 100);
        let now = live();
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if quiet >= QUIET_THREADS {
            break;
        }
    }
    Some(Drained {
        freed: Live {
            objects: before.objects - last.objects,
            bytes: before.bytes - last.bytes,
        },
        kept: if counting {
            arenas::live_in_drain_arena()
        } else {
            Live::default()
        },
    })
}

/// Starts one drain thread and waits for it to end (its exit seals its own bag); false when
/// it could not start or did not end in time (then it is left running and nothing is
/// drained again).
fn run_thread(job: &'static Job) -> bool {
    // SAFETY: plain pthread calls on values we own; `job` is static, so a thread left
    // running past its budget still reads valid memory.
    unsafe {
        let mut thread: libc::pthread_t = 0;
        let arg = (job as *const Job).cast_mut().cast::<c_void>();
        if libc::pthread_create(&mut thread, std::ptr::null(), drain_thread, arg) != 0 {
            return false;
        }
        let mut until = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut until);
        until.tv_sec += (THREAD_BUDGET_MS / 1000) as libc::time_t;
        if libc::pthread_timedjoin_np(thread, std::ptr::null_mut(), &until) != 0 {
            ABANDONED.store(true, std::sync::atomic::Ordering::Relaxed);
            libc::pthread_detach(thread);
            return false;
        }
        true
    }
}

/// `crossbeam_epoch::Guard`: a pointer to the pinning thread's `Local`.
#[repr(transparent)]
struct Guard(*const c_void);

extern "C" fn drain_thread(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the Job `run_thread` borrows until this thread has been joined.
    let job = unsafe { &*arg.cast::<Job>() };
    match job.arena {
        // SAFETY: "thread.arena" is an unsigned arena index, set for the calling thread.
        Some(a) => unsafe {
            let _ = tikv_jemalloc_ctl::raw::write(b"thread.arena\0", a);
        },
        None => crate::tracker::untrack_this_thread(),
    }
    for c in job.callables.iter().flatten() {
        pin_and_unpin(*c, PINS_PER_THREAD);
    }
    std::ptr::null_mut()
}

/// Pins the collector and lets go again, `times` times, on the calling thread.
fn pin_and_unpin(c: Callable, times: u32) {
    // SAFETY: cargo-leakcheck found these two functions of one crossbeam-epoch version in
    // this build's symbol table, and `callable` checked they are code of this very build:
    // `pin` returns the Guard by value in a register (a struct of one pointer), and `drop`
    // takes it by reference, as the Rust ABI passes them.
    let (pin, unpin) = unsafe {
        (
            std::mem::transmute::<usize, fn() -> Guard>(c.pin),
            std::mem::transmute::<usize, fn(&mut Guard)>(c.unpin),
        )
    };
    for _ in 0..times {
        let mut guard = pin();
        unpin(&mut guard);
    }
}
