//! The main thread's arena, made so that its objects are known by their address.
//!
//! In counting mode the main thread (libtest's bookkeeping) allocates from an arena of its
//! own that no count includes (see [`crate::arenas`]). Its objects cross to the test's
//! threads all the time: the closure a thread is spawned with, the thread's name and handle,
//! the test's result. A thread that frees one of them puts it in its own thread cache, and
//! that thread's next allocation of the same size class takes it back out: if the test then
//! keeps that object for good, it is the main arena's, and no count sees it. (A forgotten
//! 20-byte `String` was counted as nothing in a test whose thread had just freed a 32-byte
//! block of the harness's.) So a thread other than the main one frees such an object
//! straight to its arena, past its cache, and for that every free must be able to tell
//! whether an object is the main arena's, cheaply.
//!
//! The arena is made with extent hooks that are jemalloc's own but for one thing: every range
//! of address space the arena obtains through them is written down here. jemalloc keeps the
//! address space it once obtained (`retain`, the default on 64-bit Linux) and grows it
//! geometrically, so a few ranges hold everything the arena ever hands out (its objects and
//! its own metadata), and the question is a few comparisons. A range is never struck off:
//! were jemalloc to give one back and another arena to get its addresses later, that arena's
//! objects would only be freed past the cache too, which costs time, never a count.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use tikv_jemalloc_sys as je;

/// Most ranges recorded; past that, no object can be ruled out as the main arena's.
const MAX_RANGES: usize = 64;

/// Recorded ranges `[start, end)`; a slot is valid once its end is not 0.
static STARTS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];
static ENDS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];
/// Slots claimed so far (may exceed [`MAX_RANGES`]: then the table is full).
static CLAIMED: AtomicUsize = AtomicUsize::new(0);
/// The lowest start and highest end of any range (only ever widened): most objects of other
/// arenas lie outside (the main arena is made first, and later mappings go below it), and
/// are told by two comparisons. Empty while there is no main arena, everything once its
/// ranges are not all known.
static LOWEST: AtomicUsize = AtomicUsize::new(usize::MAX);
static HIGHEST: AtomicUsize = AtomicUsize::new(0);

/// What is known of the main arena's memory.
static STATE: AtomicU8 = AtomicU8::new(NONE);
/// No main arena (stacks mode, or not made yet): no object is its.
const NONE: u8 = 0;
/// Every range it obtained is in the table.
const KNOWN: u8 = 1;
/// Its ranges are not all known (hooks refused, table full): any object may be its.
const UNKNOWN: u8 = 2;

/// jemalloc's default hooks and their `alloc`, to which the recording `alloc` defers.
static DEFAULT_HOOKS: AtomicUsize = AtomicUsize::new(0);
static DEFAULT_ALLOC: AtomicUsize = AtomicUsize::new(0);

/// The arena's hooks: a copy of jemalloc's defaults with the recording `alloc`. jemalloc
/// reads them for as long as the arena exists, so they live as long as the library.
static mut HOOKS: je::extent_hooks_t = je::extent_hooks_t {
    alloc: None,
    dalloc: None,
    destroy: None,
    commit: None,
    decommit: None,
    purge_lazy: None,
    purge_forced: None,
    split: None,
    merge: None,
};

type Alloc = unsafe extern "C" fn(
    *mut je::extent_hooks_t,
    *mut c_void,
    usize,
    usize,
    *mut bool,
    *mut bool,
    c_uint,
) -> *mut c_void;

/// The arena's `alloc` hook: jemalloc's own, and the range it returned written down.
unsafe extern "C" fn alloc_recorded(
    _hooks: *mut je::extent_hooks_t,
    new_addr: *mut c_void,
    size: usize,
    alignment: usize,
    zero: *mut bool,
    commit: *mut bool,
    arena: c_uint,
) -> *mut c_void {
    let default = DEFAULT_ALLOC.load(Ordering::Acquire);
    // SAFETY: `default` is jemalloc's default `alloc` hook (read by `create` before the
    // arena existed), whose signature this is; it is handed the default hooks and the
    // arguments jemalloc gave this hook, unchanged.
    let p = unsafe {
        let default: Alloc = std::mem::transmute::<usize, Alloc>(default);
        let hooks = DEFAULT_HOOKS.load(Ordering::Acquire) as *mut je::extent_hooks_t;
        default(hooks, new_addr, size, alignment, zero, commit, arena)
    };
    if !p.is_null() {
        record(p as usize, size);
    }
    p
}

/// Writes `[start, start + size)` down as the main arena's.
fn record(start: usize, size: usize) {
    let slot = CLAIMED.fetch_add(1, Ordering::AcqRel);
    if slot >= MAX_RANGES {
        unknown();
        return;
    }
    let end = start.saturating_add(size);
    STARTS[slot].store(start, Ordering::Relaxed);
    ENDS[slot].store(end, Ordering::Release);
    LOWEST.fetch_min(start, Ordering::AcqRel);
    HIGHEST.fetch_max(end, Ordering::AcqRel);
}

/// Makes the main thread's arena, its ranges recorded from its first one on; its index, or
/// None when jemalloc refuses. When the hooks cannot be installed, the arena is made
/// without them and every object counts as possibly its ([`may_own`]).
pub fn create() -> Option<u32> {
    // SAFETY: "arena.0.extent_hooks" reads an `extent_hooks_t *` (jemalloc manual, MALLCTL
    // NAMESPACE); arena 0 always exists and has the default hooks, as nothing here changes
    // them.
    let default = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"arena.0.extent_hooks\0") };
    let Some(alloc) = default
        .ok()
        .filter(|&d| d != 0)
        // SAFETY: a non-null pointer to jemalloc's default hooks, which live as long as it.
        .and_then(|d| unsafe { (*(d as *const je::extent_hooks_t)).alloc })
    else {
        // SAFETY: "arenas.create" returns an unsigned arena index (jemalloc manual, MALLCTL
        // NAMESPACE).
        let arena = unsafe { tikv_jemalloc_ctl::raw::read::<u32>(b"arenas.create\0") }.ok()?;
        unknown();
        return Some(arena);
    };
    let default = default.unwrap_or(0);
    DEFAULT_HOOKS.store(default, Ordering::Release);
    DEFAULT_ALLOC.store(alloc as usize, Ordering::Release);
    // SAFETY: the constructor calls this once, single-threaded, before any arena uses
    // HOOKS; afterwards jemalloc only reads it. The defaults are copied whole, so every
    // other hook is jemalloc's own.
    let hooks = unsafe {
        let hooks = &mut *std::ptr::addr_of_mut!(HOOKS);
        *hooks = *(default as *const je::extent_hooks_t);
        hooks.alloc = Some(alloc_recorded);
        hooks as *mut je::extent_hooks_t
    };
    STATE.store(KNOWN, Ordering::Release);
    let mut index: c_uint = 0;
    let mut len = std::mem::size_of::<c_uint>();
    let mut new_hooks = hooks;
    // SAFETY: "arenas.create" returns an unsigned arena index and takes an optional
    // `extent_hooks_t *` (jemalloc manual, MALLCTL NAMESPACE); the buffers are ours and
    // sized for both.
    let r = unsafe {
        je::mallctl(
            c"arenas.create".as_ptr(),
            (&raw mut index).cast(),
            &mut len,
            (&raw mut new_hooks).cast(),
            std::mem::size_of::<*mut je::extent_hooks_t>(),
        )
    };
    if r != 0 {
        STATE.store(NONE, Ordering::Release);
        return None;
    }
    Some(index)
}

/// Whether `ptr` may be an object of the main thread's arena: false only when it is
/// certainly not. Two loads and two comparisons for the objects of other arenas, which is
/// almost every object a free sees.
#[inline]
pub fn may_own(ptr: *mut c_void) -> bool {
    let p = ptr as usize;
    if p < LOWEST.load(Ordering::Relaxed) || p >= HIGHEST.load(Ordering::Relaxed) {
        return false;
    }
    match STATE.load(Ordering::Relaxed) {
        KNOWN => {
            let n = CLAIMED.load(Ordering::Acquire).min(MAX_RANGES);
            (0..n).any(|i| {
                let end = ENDS[i].load(Ordering::Acquire);
                end != 0 && STARTS[i].load(Ordering::Relaxed) <= p && p < end
            })
        }
        NONE => false,
        _ => true,
    }
}

/// Any object may be the main arena's from now on.
fn unknown() {
    STATE.store(UNKNOWN, Ordering::Release);
    LOWEST.store(0, Ordering::Release);
    HIGHEST.store(usize::MAX, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_arena_s_objects_are_told_from_every_other_arena_s() {
        let arena = create().expect("jemalloc makes an arena");
        assert_eq!(
            STATE.load(Ordering::Acquire),
            KNOWN,
            "the hooks are installed"
        );
        let flags = je::MALLOCX_ARENA(arena as usize) | je::MALLOCX_TCACHE_NONE;
        // Small and large objects, and one bigger than the first range jemalloc obtains.
        for size in [8, 4096, 40 << 10, 3 << 20] {
            // SAFETY: plain allocations of a non-zero size, freed below.
            let (mine, other) = unsafe { (je::mallocx(size, flags), je::mallocx(size, 0)) };
            assert!(!mine.is_null() && !other.is_null());
            assert!(may_own(mine), "{size} B from the main arena");
            assert!(!may_own(other), "{size} B from another arena");
            // SAFETY: both came from mallocx above.
            unsafe {
                je::dallocx(mine, je::MALLOCX_TCACHE_NONE);
                je::dallocx(other, 0);
            }
        }
    }
}
