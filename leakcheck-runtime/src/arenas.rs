//! Exact live counts from jemalloc's per-arena statistics (counting mode).
//!
//! libtest runs each test on a thread of its own and keeps the main thread for its
//! bookkeeping, whose allocations depend on timing (whether the main thread blocked before
//! the test finished). So the constructor binds the main thread to an arena of its own, and
//! the count sums every other arena. With `tcache:false` the statistics see every
//! allocation and free as it happens, and a free is charged to the arena that allocated,
//! whichever thread frees.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use tikv_jemalloc_sys as je;

/// The arena the main thread allocates from (u32::MAX: none).
static MAIN_ARENA: AtomicU32 = AtomicU32::new(u32::MAX);

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

/// Live objects and bytes in every arena but the main thread's.
pub fn live_outside_main_arena() -> Live {
    // Statistics are snapshots refreshed by writing the epoch.
    let mut epoch: u64 = 1;
    // SAFETY: "epoch" takes a u64 written by value.
    unsafe {
        je::mallctl(
            c"epoch".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut epoch).cast(),
            std::mem::size_of::<u64>(),
        );
    }
    let main = MAIN_ARENA.load(Relaxed);
    let narenas: u32 = stat(b"arenas.narenas\0").unwrap_or(0);
    let mut live = Live::default();
    let mut name = [0u8; 96];
    for i in (0..narenas).filter(|&i| i != main) {
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
    }
    live
}

/// Gives the calling (main) thread an arena of its own, so that counting can leave out
/// what the harness allocates there.
pub fn bind_main_thread_to_own_arena() {
    let mut arena: u32 = 0;
    let mut len = std::mem::size_of::<u32>();
    // SAFETY: "arenas.create" returns an unsigned arena index; "thread.arena" takes one
    // (jemalloc manual, MALLCTL NAMESPACE).
    unsafe {
        if je::mallctl(
            c"arenas.create".as_ptr(),
            (&raw mut arena).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        ) != 0
        {
            return;
        }
        if je::mallctl(
            c"thread.arena".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut arena).cast(),
            std::mem::size_of::<u32>(),
        ) == 0
        {
            MAIN_ARENA.store(arena, Relaxed);
        }
    }
}
