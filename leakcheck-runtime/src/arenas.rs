//! Exact live counts from jemalloc's per-arena statistics (counting mode), and the arenas
//! that tell apart what each extra run of a test left behind.
//!
//! libtest runs each test on a thread of its own and keeps the main thread for its
//! bookkeeping, whose allocations depend on timing (whether the main thread blocked before
//! the test finished). So the constructor binds the main thread to an arena of its own, and
//! the count sums every other arena. With `tcache:false` the statistics see every
//! allocation and free as it happens, and a free is charged to the arena that allocated,
//! whichever thread frees.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use tikv_jemalloc_sys as je;

/// The arena the main thread allocates from (u32::MAX: none).
static MAIN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

/// During an extra run (counting mode), every allocation of the process, whichever thread
/// makes it, goes to the run's own arena, so that arena's live count afterwards is exactly
/// what the run left behind. u32::MAX: no run under way, allocations go where jemalloc puts
/// them.
static RUN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

/// The `mallocx` flags that send an allocation to the current run's arena, bypassing the
/// thread caches; None outside runs, and for what glibc allocates for a thread it is
/// creating (see [`crate::threads`]).
#[inline]
pub fn run_flags() -> Option<c_int> {
    match RUN_ARENA.load(Relaxed) {
        u32::MAX => None,
        _ if crate::threads::creating() => None,
        a => Some(je::MALLOCX_ARENA(a as usize) | je::MALLOCX_TCACHE_NONE),
    }
}

/// Sends every allocation from now on to `arena` (None: stop).
pub fn route_to(arena: Option<u32>) {
    RUN_ARENA.store(arena.unwrap_or(u32::MAX), Relaxed);
}

/// A new arena, or None when jemalloc refuses.
pub fn create() -> Option<u32> {
    let mut arena: u32 = 0;
    let mut len = std::mem::size_of::<u32>();
    // SAFETY: "arenas.create" returns an unsigned arena index (jemalloc manual, MALLCTL
    // NAMESPACE).
    let r = unsafe {
        je::mallctl(
            c"arenas.create".as_ptr(),
            (&raw mut arena).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (r == 0).then_some(arena)
}

/// Live objects and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    pub objects: i64,
    pub bytes: i64,
}

/// The main thread's own arena, when binding it worked.
pub fn main_arena() -> Option<u32> {
    match MAIN_ARENA.load(Relaxed) {
        u32::MAX => None,
        a => Some(a),
    }
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
    let mut digits = [0u8; 20];
    let start = crate::sys::format_u64(u64::from(i), &mut digits);
    let d = &digits[start..];
    buf[n..n + d.len()].copy_from_slice(d);
    n += d.len();
    buf[n..n + rest.len()].copy_from_slice(rest);
    n += rest.len();
    buf[n] = 0;
    n + 1
}

/// Refreshes the statistics snapshot (they are read as of the last epoch).
fn refresh() {
    // SAFETY: "epoch" is a u64.
    unsafe { crate::mallctl_write(c"epoch", 1u64) };
}

/// Live objects and bytes of one arena, as of the last refresh.
fn live_in(i: u32) -> Live {
    let mut name = [0u8; 96];
    let mut live = Live::default();
    let mut get_u64 = |rest: &[u8]| {
        let n = arena_stat_name(i, rest, &mut name);
        stat::<u64>(&name[..n]).unwrap_or(0) as i64
    };
    live.objects += get_u64(b".small.nmalloc") - get_u64(b".small.ndalloc");
    live.objects += get_u64(b".large.nmalloc") - get_u64(b".large.ndalloc");
    let mut get_usize = |rest: &[u8]| {
        let n = arena_stat_name(i, rest, &mut name);
        stat::<usize>(&name[..n]).unwrap_or(0) as i64
    };
    live.bytes += get_usize(b".small.allocated") + get_usize(b".large.allocated");
    live
}

/// Live objects and bytes in every arena but the main thread's.
pub fn live_outside_main_arena() -> Live {
    refresh();
    let main = MAIN_ARENA.load(Relaxed);
    let narenas: u32 = stat(b"arenas.narenas\0").unwrap_or(0);
    let mut live = Live::default();
    for i in (0..narenas).filter(|&i| i != main) {
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
    let Some(arena) = create() else {
        return;
    };
    // SAFETY: "thread.arena" is an unsigned arena index.
    if unsafe { crate::mallctl_write(c"thread.arena", arena) } {
        MAIN_ARENA.store(arena, Relaxed);
    }
}
