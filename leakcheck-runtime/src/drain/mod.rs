//! Draining what the program already scheduled to free, before a run is measured.
//!
//! A deferred-reclamation runtime (crossbeam-epoch, behind rayon, crossbeam-deque, moka, …)
//! does not free an object when the program lets go of it: it defers the destructor and
//! runs it only once no thread can still be reading the object, which happens only when
//! some thread enters and leaves its collector again. So what a test's run let go of is
//! often still allocated when the run ends, and is freed by a later run: counted as
//! retained, it made the test run again, sometimes several times, only to see it go.
//!
//! valgrind calls glibc's `__libc_freeres` at exit for the same reason. Here, after a run and
//! before it is measured, the runtime drains each kind of reclaimer in turn (see
//! [`Reclaimer`]; one module per kind says what a drain thread does with one of its
//! collectors, [`drainer`] is the table), from fresh threads of its own, until the live
//! counts stop falling.
//!
//! Draining only runs destructors the program had already scheduled: it can never free what
//! a test leaked, only show it sooner (memory a deferred function keeps instead of freeing
//! stays in the arena of the run that allocated it, and counts). What the drains allocate
//! themselves (their threads' registrations, the queue's nodes for their bags) goes to an
//! arena of their own in counting mode and is left untracked in stacks mode, so it is never
//! charged to a run; what that arena holds after each drain is recorded. The one thing it
//! hides is new memory a deferred function allocates while a drain runs it: that lands in
//! the drains' arena too. Garbage that only the program's own threads can reach (a pool's
//! workers' local bags) cannot be reached from here: the extra runs still free that, as
//! before.
//!
//! A drain thread runs whatever destructors were deferred: one that has not ended within
//! [`THREAD_BUDGET_MS`] (waiting for a lock a stuck thread holds) is left running, and the
//! process drains nothing more.
//!
//! The functions are the test binary's own, found by cargo-leakcheck in its symbol table
//! and checked to be code of this very build before they are called.

mod crossbeam_epoch;

use crate::arenas::{self, Live};
use crate::image;
use leakcheck_protocol::drain::{Collector, Reclaimer, MAX_COLLECTORS};
use std::ffi::c_void;

/// What draining one kind of reclaimer is: the row a new kind adds.
struct Drainer {
    /// Counting mode, once per collector before the program's own code runs: the kind's
    /// one-time initialisation.
    initialise: fn(Callable),
    /// What one drain thread does with one collector (its exit follows).
    drain: fn(Callable),
}

/// The drain of each kind.
fn drainer(kind: Reclaimer) -> &'static Drainer {
    match kind {
        Reclaimer::CrossbeamEpoch => &crossbeam_epoch::DRAINER,
    }
}

/// The most drain threads one drain starts.
const MAX_THREADS: u32 = 64;

/// A drain ends once this many threads in a row freed nothing.
const QUIET_THREADS: u32 = 2;

/// The collectors, as the constructor read them (image addresses).
static mut COLLECTORS: [Collector; MAX_COLLECTORS] = [Collector::NONE; MAX_COLLECTORS];
static mut COUNT: usize = 0;

/// Takes the list from the environment's text.
///
/// # Safety
/// Only while the process has a single thread (the constructor).
pub unsafe fn configure(text: &str) {
    let mut list = [Collector::NONE; MAX_COLLECTORS];
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

/// The kinds with a collector to drain, in the order they are drained.
pub fn kinds() -> impl Iterator<Item = Reclaimer> {
    Reclaimer::ALL
        .into_iter()
        .filter(|&k| collectors().iter().any(|c| c.kind == k))
}

/// A drain thread did not end within [`THREAD_BUDGET_MS`] (a deferred destructor waiting
/// for a lock a stuck thread holds): it is left running, and nothing is drained again.
static ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How long one drain thread may take; a few milliseconds is usual.
const THREAD_BUDGET_MS: u64 = 2_000;

/// Counting mode, before the program's own code runs: makes each collector's one-time
/// initialisation (crossbeam-epoch's process-wide `Global`, created on the first pin, kept
/// for the life of the process) now, on the main thread, whose arena no count includes.
/// Otherwise the first test thread to enter would allocate it and the test would have to
/// run again only to show that it does not grow. A fixed object, made once: it cannot hide
/// what grows.
pub fn initialise(build_id: &str) {
    for c in collectors() {
        if let Some(callable) = callable(c, build_id) {
            (drainer(c.kind).initialise)(callable);
        }
    }
}

/// A collector's functions, checked to be code of this build.
fn callable(c: &Collector, build_id: &str) -> Option<Callable> {
    Some(Callable {
        enter: image::resolve(c.enter as usize, build_id).ok()?,
        leave: image::resolve(c.leave as usize, build_id).ok()?,
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

/// The functions of one collector (what they are is its kind's), callable.
#[derive(Clone, Copy)]
struct Callable {
    /// The function that enters the collector.
    enter: usize,
    /// The function that leaves it again.
    leave: usize,
}

struct Job {
    /// What a drain thread does with each collector: its kind's.
    drain: fn(Callable),
    callables: [Option<Callable>; MAX_COLLECTORS],
    /// Counting mode: the arena the thread allocates from.
    arena: Option<u32>,
}

/// The job the drain threads read: static, so that a thread left running past its budget
/// never reads freed memory.
static mut JOB: Job = Job {
    drain: |_| {},
    callables: [None; MAX_COLLECTORS],
    arena: None,
};

/// Drains every configured collector of `kind`; `live` measures what is live (in counting
/// mode, the counted arenas; in stacks mode, the tracked objects). None when nothing could
/// be drained (no collector of the kind, a function that is not code of this build, no
/// thread, a drain thread left running before) or, counting, nothing counted was live to
/// begin with.
pub fn drain(
    kind: Reclaimer,
    build_id: &str,
    counting: bool,
    live: impl Fn() -> Live,
) -> Option<Drained> {
    let mut job = Job {
        drain: drainer(kind).drain,
        callables: [None; MAX_COLLECTORS],
        arena: None,
    };
    let mut any = false;
    let of_kind = collectors().iter().filter(|c| c.kind == kind);
    for (slot, c) in job.callables.iter_mut().zip(of_kind) {
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

extern "C" fn drain_thread(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the static JOB (see `run_thread`), which is not written again while
    // a drain thread may read it: not before this one is joined, and never once one was
    // left running (`ABANDONED`).
    let job = unsafe { &*arg.cast::<Job>() };
    match job.arena {
        // SAFETY: "thread.arena" is an unsigned arena index, set for the calling thread.
        Some(a) => unsafe {
            let _ = tikv_jemalloc_ctl::raw::write(b"thread.arena\0", a);
        },
        None => crate::tracker::untrack_this_thread(),
    }
    for c in job.callables.iter().flatten() {
        (job.drain)(*c);
    }
    std::ptr::null_mut()
}
