//! Exact live counts from jemalloc's per-arena statistics (counting mode), and the arenas
//! that tell apart what each extra run of a test left behind.
//!
//! libtest runs each test on a thread of its own and keeps the main thread for its
//! bookkeeping, whose allocations depend on timing (whether the main thread blocked before
//! the test finished). So the constructor binds the main thread to an arena of its own, and
//! the count sums every other arena. A free is charged to the arena that allocated,
//! whichever thread frees.
//!
//! Thread caches stay on while the test runs (without them every small allocation takes
//! its arena's bin lock: an allocation-heavy test ran twice as slow). An object sitting in a
//! thread cache counts as allocated in its arena's statistics, so a cache can only make the
//! count larger than what is really live, never smaller: a count of zero still proves that
//! nothing was retained. At the measuring points the caches are taken out of the count: the
//! test's thread has ended (which flushes its cache), the main thread flushes its own, and
//! from the exit handler on ([`exact_from_now`]) every allocation and free of the process
//! bypasses the caches, so that what each extra run leaves in its arena is exact. Only the
//! caches of threads still alive at exit (a pool's workers) stay, frozen, in the count of
//! the test's own run: such a test is run again rather than passed on its count.
use std::ffi::{c_int, c_void};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed,
};
use tikv_jemalloc_ctl as ctl;
use tikv_jemalloc_sys as je;

/// The arena the main thread allocates from (u32::MAX: none).
static MAIN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

/// The `mallocx` flags every allocation of the process carries: 0 while the test runs
/// (plain jemalloc, thread caches and all); from the exit handler on, no thread cache; during
/// an extra run (counting mode), also the run's own arena, so that arena's live count
/// afterwards is exactly what the run left behind, whichever thread allocated.
static FLAGS: AtomicI32 = AtomicI32::new(0);

/// The `mallocx` flags for an allocation now: None on the plain path. What glibc allocates
/// for the threads it manages stays out of every count in counting mode, and out of a run's
/// arena otherwise (see [`crate::threads`]).
#[inline]
pub fn run_flags() -> Option<c_int> {
    if MAIN_RUN.load(Relaxed) == MAIN_RUN_PENDING {
        before_main_thread_allocation();
    }
    let f = FLAGS.load(Relaxed);
    if f == 0 && !crate::threads::anyone_inside_thread_library() {
        return None;
    }
    if crate::threads::inside_thread_library() {
        return match main_arena() {
            Some(a) => Some(je::MALLOCX_ARENA(a as usize) | je::MALLOCX_TCACHE_NONE),
            None if f == 0 => None,
            None => Some(f & !ARENA_BITS),
        };
    }
    (f != 0).then_some(f)
}

/// The `dallocx` flags for freeing `ptr` now: None on the plain path. glibc's frees of its
/// thread blocks bypass the calling thread's cache (see [`crate::threads`]), and so does a
/// free of the main thread's arena's object by any other thread (see
/// [`crate::main_arena`]).
#[inline]
pub fn free_flags(ptr: *mut c_void) -> Option<c_int> {
    let f = FLAGS.load(Relaxed);
    if f != 0
        || (crate::threads::anyone_inside_thread_library()
            && crate::threads::inside_thread_library())
        || harness_object_elsewhere(ptr)
    {
        return Some(je::MALLOCX_TCACHE_NONE);
    }
    None
}

/// The `rallocx` flags for reallocating `ptr` now: those of an allocation, or, on the plain
/// path, past the calling thread's cache where freeing `ptr` must be.
#[inline]
pub fn realloc_flags(ptr: *mut c_void) -> Option<c_int> {
    run_flags().or_else(|| free_flags(ptr))
}

/// Whether `ptr` may be the main thread's arena's object and the calling thread is another:
/// then it must go back to its arena, not into the caller's cache, where the caller's next
/// allocation would take it out of every count.
#[inline]
fn harness_object_elsewhere(ptr: *mut c_void) -> bool {
    crate::main_arena::may_own(ptr) && crate::threads::thread_pointer() != MAIN_THREAD.load(Relaxed)
}

/// The main thread's thread pointer, once its arena is bound (0: never).
static MAIN_THREAD: AtomicUsize = AtomicUsize::new(0);

/// The bits of `MALLOCX_ARENA` in a flags word (jemalloc: arena index + 1, from bit 20).
const ARENA_BITS: c_int = !((1 << 20) - 1);

/// From now on every allocation and free bypasses the thread caches, so arena statistics
/// change exactly as objects are allocated and freed. Also flushes the calling thread's
/// cache.
pub fn exact_from_now() {
    EXACT.store(true, Relaxed);
    FLAGS.store(je::MALLOCX_TCACHE_NONE, Relaxed);
    flush_own_cache();
}

/// Returns what the calling thread's cache holds to the arenas it came from.
pub fn flush_own_cache() {
    // Raw: tikv-jemalloc-ctl always passes a value buffer, and this control takes none.
    // SAFETY: "thread.tcache.flush" takes and returns nothing (jemalloc manual, MALLCTL
    // NAMESPACE); it fails harmlessly when the thread has no cache.
    unsafe { crate::mallctl_do(c"thread.tcache.flush") };
}

/// Sends every allocation from now on to `arena`, with no thread cache; None: back to the
/// default arenas, with thread caches only if [`exact_from_now`] was never called (stacks
/// mode, where the tracker counts).
pub fn route_to(arena: Option<u32>) {
    let flags = match arena {
        Some(a) => je::MALLOCX_ARENA(a as usize) | je::MALLOCX_TCACHE_NONE,
        None if EXACT.load(Relaxed) => je::MALLOCX_TCACHE_NONE,
        None => 0,
    };
    FLAGS.store(flags, Relaxed);
}

/// Whether [`exact_from_now`] was called.
static EXACT: AtomicBool = AtomicBool::new(false);

/// A new arena, or None when jemalloc refuses.
pub fn create() -> Option<u32> {
    // SAFETY: "arenas.create" returns an unsigned arena index (jemalloc manual, MALLCTL
    // NAMESPACE).
    unsafe { ctl::raw::read::<u32>(b"arenas.create\0") }.ok()
}

/// Live objects and bytes, as the exit record carries them.
pub use leakcheck_protocol::record::Counts as Live;

/// The arena the drains allocate from (u32::MAX: not made yet; see [`crate::drain`]).
static DRAIN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

/// The drains' arena, made on first use; no count includes it.
pub fn drain_arena() -> Option<u32> {
    match DRAIN_ARENA.load(Relaxed) {
        u32::MAX => {
            let a = create()?;
            DRAIN_ARENA.store(a, Relaxed);
            Some(a)
        }
        a => Some(a),
    }
}

/// What the drains' arena holds now (nothing before the first drain).
pub fn live_in_drain_arena() -> Live {
    match DRAIN_ARENA.load(Relaxed) {
        u32::MAX => Live::default(),
        a => {
            refresh();
            live_in(a)
        }
    }
}

/// The main thread's own arena, when binding it worked.
pub fn main_arena() -> Option<u32> {
    match MAIN_ARENA.load(Relaxed) {
        u32::MAX => None,
        a => Some(a),
    }
}

/// One statistic of arena `i`, named as arena 0's (`stats.arenas.0.<rest>`, five
/// components), read into `T` (u64 or usize); None when jemalloc refuses (e.g. an arena index
/// that was never initialised).
fn arena_stat<T: Copy>(i: u32, name_for_arena_0: &[u8]) -> Option<T> {
    let mut mib = [0usize; 5];
    ctl::raw::name_to_mib(name_for_arena_0, &mut mib).ok()?;
    mib[2] = i as usize;
    // SAFETY: the statistic's documented type is T (jemalloc manual, MALLCTL NAMESPACE):
    // callers pass u64 for counters and usize for sizes.
    unsafe { ctl::raw::read_mib::<T>(&mib) }.ok()
}

/// Refreshes the statistics snapshot (they are read as of the last epoch).
fn refresh() {
    let _ = ctl::epoch::advance();
}

/// Live objects and bytes of one arena, as of the last refresh.
fn live_in(i: u32) -> Live {
    let count = |name: &[u8]| arena_stat::<u64>(i, name).unwrap_or(0) as i64;
    let size = |name: &[u8]| arena_stat::<usize>(i, name).unwrap_or(0) as i64;
    Live {
        objects: count(b"stats.arenas.0.small.nmalloc\0")
            - count(b"stats.arenas.0.small.ndalloc\0")
            + count(b"stats.arenas.0.large.nmalloc\0")
            - count(b"stats.arenas.0.large.ndalloc\0"),
        bytes: size(b"stats.arenas.0.small.allocated\0")
            + size(b"stats.arenas.0.large.allocated\0"),
    }
}

/// What was live outside the main thread's arena when the constructor had finished: jemalloc's
/// own bookkeeping, such as the main thread's cache, which it keeps in arena 0 (objects, bytes).
static BASELINE: [AtomicI64; 2] = [AtomicI64::new(0), AtomicI64::new(0)];

/// Live objects and bytes in every arena but the main thread's, less what was live there
/// before the test binary's own code started, and the program's own mappings (each one
/// object; see [`crate::maps`]).
pub fn live_outside_main_arena() -> Live {
    let raw = live_outside_main_arena_raw();
    let mapped = crate::maps::live();
    Live {
        objects: raw.objects - BASELINE[0].load(Relaxed) + mapped.objects,
        bytes: raw.bytes - BASELINE[1].load(Relaxed) + mapped.bytes,
    }
}

fn live_outside_main_arena_raw() -> Live {
    refresh();
    let main = MAIN_ARENA.load(Relaxed);
    let drains = DRAIN_ARENA.load(Relaxed);
    let narenas: u32 = ctl::arenas::narenas::read().unwrap_or(0);
    let mut live = Live::default();
    for i in (0..narenas).filter(|&i| i != main && i != drains) {
        let l = live_in(i);
        live.objects += l.objects;
        live.bytes += l.bytes;
    }
    live
}

/// Live objects and bytes of each of `arenas`, freshly read, into `out`.
pub fn live_in_each(arenas: &[u32], out: &mut [Live]) {
    refresh();
    for (a, o) in arenas.iter().zip(out.iter_mut()) {
        *o = live_in(*a);
    }
}

/// Gives the calling (main) thread an arena of its own, so that counting can leave out
/// what the harness allocates there.
pub fn bind_main_thread_to_own_arena() {
    let Some(arena) = crate::main_arena::create() else {
        return;
    };
    MAIN_THREAD.store(crate::threads::thread_pointer(), Relaxed);
    // What the main thread's cache holds was cached from the arena it used before: handed
    // out now, those objects would be counted objects of the harness's, and a test's thread
    // freeing one would take one off the count. Back to their arena first.
    if move_calling_thread_to(arena) {
        MAIN_ARENA.store(arena, Relaxed);
    }
    // The main thread's cache is made now, by an allocation, so that its bookkeeping is in
    // the baseline rather than in the test's count.
    // SAFETY: a plain allocation, freed at once.
    unsafe { je::free(je::malloc(1)) };
    let before = live_outside_main_arena_raw();
    BASELINE[0].store(before.objects, Relaxed);
    BASELINE[1].store(before.bytes, Relaxed);
    // SAFETY: registers a handler that only stores to an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
}

/// Makes the calling thread allocate from `arena` from now on, its cache emptied back to the
/// arenas its objects came from, so that none of them is handed out as the new arena's;
/// returns whether jemalloc took the arena.
fn move_calling_thread_to(arena: u32) -> bool {
    flush_own_cache();
    // SAFETY: "thread.arena" is an unsigned arena index.
    unsafe { ctl::raw::write(b"thread.arena\0", arena) }.is_ok()
}

/// Where the main thread stands when its program's `main` is the test (a doc-test; see
/// [`count_main_run`]).
static MAIN_RUN: AtomicU8 = AtomicU8::new(MAIN_RUN_OFF);
/// Not asked for: the main thread is never counted.
const MAIN_RUN_OFF: u8 = 0;
/// Waiting for the test's code: each allocation of the main thread asks first.
const MAIN_RUN_PENDING: u8 = 1;
/// Counted: the main thread allocates from [`MAIN_RUN_ARENA`].
const MAIN_RUN_COUNTED: u8 = 2;
/// Binding the main thread to its counted arena failed: its allocations are in no count.
const MAIN_RUN_FAILED: u8 = 3;
/// `main` returned before the test's code allocated on the main thread: nothing to count.
const MAIN_RUN_NOTHING: u8 = 4;
/// The arena the main thread is counted in once the test's code allocates.
static MAIN_RUN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

/// Counts the main thread's allocations from the first one the test's own code makes: the
/// first made while `entries` (the functions that run the test; see [`crate::main_run`]) are
/// on its stack. What std's runtime allocates before it calls `main` (its record of the main
/// thread) stays in the left-out arena, as it does in a libtest program. Called on the main
/// thread, right before the program's `main`; returns whether the main thread will be counted.
pub fn count_main_run(entries: [usize; 2]) -> bool {
    if main_arena().is_none() || MAIN_THREAD.load(Relaxed) != crate::threads::thread_pointer() {
        return false;
    }
    let Some(arena) = create() else {
        return false;
    };
    crate::main_run::watch_for(entries);
    MAIN_RUN_ARENA.store(arena, Relaxed);
    MAIN_RUN.store(MAIN_RUN_PENDING, Relaxed);
    true
}

/// Whether every allocation the test's code made on the main thread is counted, once
/// [`main_run_over`]: it made none, or its thread was bound to its counted arena.
pub fn main_run_counted() -> bool {
    matches!(MAIN_RUN.load(Relaxed), MAIN_RUN_COUNTED | MAIN_RUN_NOTHING)
}

/// The program's `main` returned (on the main thread): no allocation asks any more, and the
/// main thread, counted while the test ran, allocates in its left-out arena again, as a
/// libtest program's does while the runtime measures and runs the test again.
pub fn main_run_over() {
    let _ = MAIN_RUN.compare_exchange(MAIN_RUN_PENDING, MAIN_RUN_NOTHING, Relaxed, Relaxed);
    if MAIN_RUN.load(Relaxed) != MAIN_RUN_COUNTED {
        return;
    }
    let Some(main) = main_arena() else {
        return;
    };
    if move_calling_thread_to(main) {
        MAIN_THREAD.store(crate::threads::thread_pointer(), Relaxed);
    }
}

/// Before an allocation while the main thread waits to be counted: binds it to its counted
/// arena if this is the main thread and the test's code is running.
#[cold]
fn before_main_thread_allocation() {
    if crate::threads::thread_pointer() != MAIN_THREAD.load(Relaxed)
        || !crate::main_run::inside_entry()
    {
        return;
    }
    // What the cache holds came from the left-out arena: handed out to the test, a kept one
    // would be counted nowhere; moving empties it.
    let bound = move_calling_thread_to(MAIN_RUN_ARENA.load(Relaxed));
    // Counted from now on, the main thread frees the left-out arena's objects past its
    // cache as every other thread does (see [`harness_object_elsewhere`]); no thread
    // pointer is 0.
    MAIN_THREAD.store(0, Relaxed);
    let state = if bound {
        MAIN_RUN_COUNTED
    } else {
        MAIN_RUN_FAILED
    };
    MAIN_RUN.store(state, Relaxed);
}

/// A child the test forks is not measured: it allocates as a plain process does, not in
/// the arena of a run that goes on in the parent (whose locks other threads of the parent
/// may have held when it forked).
extern "C" fn forked_child() {
    FLAGS.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jemalloc's small size classes, 8 B to 4 KiB.
    const CLASSES: [usize; 29] = [
        8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
        1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
    ];

    /// The counting window of a test, played out in a process of its own: this thread is
    /// libtest's main thread (its arena left out of the count), and a thread it starts is the
    /// test's, which frees an object of the harness's of every small size class, then keeps
    /// one of its own of each class (or none). The registry is on, as a table of thread-local
    /// collections turns it on. The count must be exactly what the test's thread kept.
    #[test]
    fn a_thread_that_starts_and_ends_inside_the_window_is_counted_exactly() {
        crate::testing::in_own_process(
            "arenas::tests::a_thread_that_starts_and_ends_inside_the_window_is_counted_exactly",
            || {
                crate::threads::start_registry();
                bind_main_thread_to_own_arena();
                assert!(main_arena().is_some(), "the main thread's arena is made");
                // libtest's own main thread allocates in a counted arena: measured once it
                // waits for the test's result.
                crate::testing::wait_until_main_thread_waits();
                for keep in [false, true, false, true] {
                    let handed: Vec<Vec<u8>> =
                        CLASSES.iter().map(|&c| Vec::with_capacity(c)).collect();
                    flush_own_cache();
                    let before = live_outside_main_arena();
                    std::thread::spawn(move || {
                        // A thread's first allocation gives it its cache (a first free goes
                        // straight to the arena).
                        let first = std::hint::black_box(Box::new(7u64));
                        drop(handed);
                        drop(first);
                        for &class in &CLASSES {
                            let own = std::hint::black_box(Vec::<u8>::with_capacity(class));
                            if keep {
                                std::mem::forget(own);
                            }
                        }
                    })
                    .join()
                    .unwrap();
                    flush_own_cache();
                    let after = live_outside_main_arena();
                    let kept = match keep {
                        true => Live {
                            objects: CLASSES.len() as i64,
                            bytes: CLASSES.iter().sum::<usize>() as i64,
                        },
                        false => Live::default(),
                    };
                    assert_eq!(
                        (after.objects - before.objects, after.bytes - before.bytes),
                        (kept.objects, kept.bytes),
                        "what the test's thread kept (keep: {keep})"
                    );
                }
            },
        );
    }
}
