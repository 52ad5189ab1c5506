//! Exact allocation tracking for the stacks pass, in place of jemalloc's profiler.
//!
//! jemalloc's profiler samples every allocation when asked to be exact (`lg_prof_sample:0`),
//! and a sampled small object is promoted to a page-sized one of its own: a test holding a
//! million 8-byte boxes then needs 4 GB. Here each allocation costs one slot in an
//! open-addressing table (16 bytes, at most 3/4 full: under 43 bytes per live allocation)
//! plus a share of its stack's entry, which is stored once per distinct stack. Stacks are
//! taken with the same unwinder jemalloc uses (`_Unwind_Backtrace`), and the dumps ([`dump`])
//! are written in jemalloc's `heap_v2` format with a sample period of 1, so cargo-leakcheck
//! reads them exactly as it reads jemalloc's.
//!
//! Under `cargo leakcheck run` stacks may be sampled (`LEAKCHECK_TRACK_SAMPLE`): unwinding is
//! what costs, so only allocations that a Poisson process over allocated bytes picks (as
//! jemalloc's sampler does, an object of `S` bytes with probability `1 - exp(-S / mean)`) are
//! unwound. The others are still in the table, under the empty stack, so the reachability
//! scan sees the whole heap; the dumps leave the empty stack out and name the mean as their
//! sample period, so cargo-leakcheck unbiases them as it does jemalloc's.
//!
//! Everything is kept in memory mapped directly from the kernel ([`Region`], never from the
//! allocator being tracked), under one spin lock held only for table updates; stacks are
//! unwound before taking it. A thread-local flag ([`busy`]) makes an allocation made while
//! tracking another (there should be none) untracked rather than recursive.

pub(crate) mod busy;
pub(crate) mod dump;

use self::busy::Busy;
use crate::region::Region;
use crate::spin::SpinLock;
use crate::sys;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Deepest stack kept (jemalloc's own limit).
const MAX_DEPTH: usize = 128;

static ON: AtomicBool = AtomicBool::new(false);
/// Mean bytes between sampled stacks; 1: every allocation's stack.
static SAMPLE_MEAN: AtomicU64 = AtomicU64::new(1);
static LOCK: SpinLock = SpinLock::new();

thread_local! {
    /// This thread's allocations are not tracked (the runtime's own drain threads); its
    /// frees still are, since what it frees may be tracked.
    static UNTRACKED: Cell<bool> = const { Cell::new(false) };
    /// Bytes left before this thread's next sampled stack; negative: not drawn yet.
    static UNTIL_SAMPLE: Cell<i64> = const { Cell::new(-1) };
    /// This thread's random state (xorshift64*), 0 until seeded.
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// Whether allocations are being tracked.
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Starts tracking, with a stack for every allocation (`sample_mean` 1) or for allocations
/// sampled every `sample_mean` bytes on average. Called once by the constructor,
/// single-threaded.
pub fn enable(sample_mean: u64) {
    SAMPLE_MEAN.store(sample_mean.max(1), Ordering::SeqCst);
    crate::spin::hold_across_fork!(LOCK);
    ON.store(true, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------------------
// Stacks.

struct Frames {
    pcs: [usize; MAX_DEPTH],
    n: usize,
}

use crate::sys::{_Unwind_Backtrace, _Unwind_GetIP};

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

extern "C" fn step(context: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Frames` passed to `_Unwind_Backtrace` below.
    let frames = unsafe { &mut *arg.cast::<Frames>() };
    if frames.n >= MAX_DEPTH {
        return URC_END_OF_STACK;
    }
    // SAFETY: the unwinder passes a valid context for the frame being visited.
    let ip = unsafe { _Unwind_GetIP(context) };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    frames.pcs[frames.n] = ip;
    frames.n += 1;
    URC_NO_REASON
}

fn backtrace(frames: &mut Frames) {
    frames.n = 0;
    // SAFETY: `step` only writes into `frames`, which outlives the call.
    unsafe {
        _Unwind_Backtrace(step, (frames as *mut Frames).cast());
    }
}

fn hash_frames(pcs: &[usize]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &pc in pcs {
        h = (h ^ pc as u64).wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    h | 1
}

// Layout of a stack's entry in the stack arena, in 8-byte words.
const E_HASH: usize = 0;
const E_DEPTH: usize = 1;
const E_LIVE_OBJS: usize = 2;
const E_LIVE_BYTES: usize = 3;
const E_ACCUM_OBJS: usize = 4;
const E_ACCUM_BYTES: usize = 5;
const E_FRAMES: usize = 6;

/// Every distinct stack, appended to an arena; an entry's offset is its id.
pub(crate) struct Stacks {
    pub(crate) arena: Region,
    pub(crate) used: usize,
    /// Open addressing over ids + 1 (0: empty), two words per slot: hash, id + 1.
    index: Region,
    count: usize,
}

impl Stacks {
    /// The id of the stack with these frames, added when new.
    fn intern(&mut self, pcs: &[usize]) -> Option<u32> {
        let hash = hash_frames(pcs);
        if (self.count + 1) * 2 > self.index.len_words() / 2 && !self.grow_index() {
            return None;
        }
        let slots = self.index.len_words() / 2;
        let mask = slots - 1;
        let mut i = (hash as usize) & mask;
        loop {
            let idx = self.index.words();
            if idx[2 * i + 1] == 0 {
                break;
            }
            if idx[2 * i] == hash {
                let id = (idx[2 * i + 1] - 1) as usize;
                let arena = self.arena.words();
                let depth = arena[id + E_DEPTH] as usize;
                let same = depth == pcs.len()
                    && arena[id + E_FRAMES..id + E_FRAMES + depth]
                        .iter()
                        .zip(pcs)
                        .all(|(&a, &b)| a == b as u64);
                if same {
                    return u32::try_from(id).ok();
                }
            }
            i = (i + 1) & mask;
        }
        let need = E_FRAMES + pcs.len();
        if self.used + need > self.arena.len_words() {
            let words = (self.arena.len_words() * 2)
                .max(1 << 16)
                .max(self.used + need);
            if !self.arena.grow(words) {
                return None;
            }
        }
        let id = self.used;
        let id32 = u32::try_from(id).ok()?;
        let arena = self.arena.words();
        arena[id + E_HASH] = hash;
        arena[id + E_DEPTH] = pcs.len() as u64;
        for (slot, &pc) in arena[id + E_FRAMES..id + need].iter_mut().zip(pcs) {
            *slot = pc as u64;
        }
        self.used += need;
        let idx = self.index.words();
        idx[2 * i] = hash;
        idx[2 * i + 1] = id as u64 + 1;
        self.count += 1;
        Some(id32)
    }

    fn grow_index(&mut self) -> bool {
        let slots = (self.index.len_words() / 2 * 2).max(1 << 12);
        // Slot: stored hash, id + 1 (0: empty).
        rehash(
            &mut self.index,
            slots,
            |p| p[1] != 0,
            |p, mask| p[0] as usize & mask,
        )
    }

    fn add(&mut self, id: u32, bytes: u64) {
        let e = self.arena.words();
        let id = id as usize;
        e[id + E_LIVE_OBJS] += 1;
        e[id + E_LIVE_BYTES] += bytes;
        e[id + E_ACCUM_OBJS] += 1;
        e[id + E_ACCUM_BYTES] += bytes;
    }

    fn remove(&mut self, id: u32, bytes: u64) {
        let e = self.arena.words();
        let id = id as usize;
        e[id + E_LIVE_OBJS] = e[id + E_LIVE_OBJS].saturating_sub(1);
        e[id + E_LIVE_BYTES] = e[id + E_LIVE_BYTES].saturating_sub(bytes);
    }
}

// ---------------------------------------------------------------------------------------
// Live allocations: address -> (stack id, size), two words per slot.

pub(crate) const SIZE_UNKNOWN: u64 = u32::MAX as u64;

pub(crate) struct Live {
    pub(crate) table: Region,
    pub(crate) count: usize,
}

fn slot_of(ptr: usize, mask: usize) -> usize {
    ((ptr as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize & mask
}

impl Live {
    fn insert(&mut self, ptr: usize, id: u32, size: u64) -> bool {
        if (self.count + 1) * 4 > self.table.len_words() / 2 * 3 && !self.grow() {
            return false;
        }
        let mask = self.table.len_words() / 2 - 1;
        let t = self.table.words();
        let mut i = slot_of(ptr, mask);
        while t[2 * i] != 0 && t[2 * i] != ptr as u64 {
            i = (i + 1) & mask;
        }
        if t[2 * i] == 0 {
            self.count += 1;
        }
        t[2 * i] = ptr as u64;
        t[2 * i + 1] = (u64::from(id) << 32) | size.min(SIZE_UNKNOWN);
        true
    }

    /// The slot holding `ptr`, if tracked.
    fn slot(&mut self, ptr: usize) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        let mask = self.table.len_words() / 2 - 1;
        let t = self.table.words();
        let mut i = slot_of(ptr, mask);
        loop {
            if t[2 * i] == 0 {
                return None;
            }
            if t[2 * i] == ptr as u64 {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The stack id of `ptr`, if tracked.
    fn stack_of(&mut self, ptr: usize) -> Option<u32> {
        let i = self.slot(ptr)?;
        Some((self.table.words()[2 * i + 1] >> 32) as u32)
    }

    /// Removes `ptr`; its stack id and size (`SIZE_UNKNOWN` above 4 GiB), if tracked.
    fn remove(&mut self, ptr: usize) -> Option<(u32, u64)> {
        let i = self.slot(ptr)?;
        let mask = self.table.len_words() / 2 - 1;
        let t = self.table.words();
        let value = t[2 * i + 1];
        // Backward-shift deletion keeps every probe sequence unbroken without tombstones.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while t[2 * j] != 0 {
            let home = slot_of(t[2 * j] as usize, mask);
            let moves = if hole <= j {
                home <= hole || home > j
            } else {
                home <= hole && home > j
            };
            if moves {
                t[2 * hole] = t[2 * j];
                t[2 * hole + 1] = t[2 * j + 1];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        t[2 * hole] = 0;
        t[2 * hole + 1] = 0;
        self.count -= 1;
        Some(((value >> 32) as u32, value & SIZE_UNKNOWN))
    }

    fn grow(&mut self) -> bool {
        let slots = (self.table.len_words() / 2 * 2).max(1 << 16);
        // Slot: address (0: empty), stack id and size.
        rehash(
            &mut self.table,
            slots,
            |p| p[0] != 0,
            |p, mask| slot_of(p[0] as usize, mask),
        )
    }
}

/// Moves the used two-word slots of an open-addressing `table` into a new one of `slots`
/// slots (a power of two), each at its home slot or the next free one after it.
fn rehash(
    table: &mut Region,
    slots: usize,
    used: impl Fn(&[u64]) -> bool,
    home: impl Fn(&[u64], usize) -> usize,
) -> bool {
    let Some(mut new) = Region::map(slots * 2) else {
        return false;
    };
    let mask = slots - 1;
    {
        let words = new.words();
        for pair in table.words().chunks_exact(2) {
            if !used(pair) {
                continue;
            }
            let mut i = home(pair, mask);
            while used(&words[2 * i..2 * i + 2]) {
                i = (i + 1) & mask;
            }
            words[2 * i..2 * i + 2].copy_from_slice(pair);
        }
    }
    table.unmap();
    *table = new;
    true
}

pub(crate) struct State {
    pub(crate) stacks: Stacks,
    pub(crate) live: Live,
}

static mut STATE: State = State {
    stacks: Stacks {
        arena: Region::empty(),
        used: 0,
        index: Region::empty(),
        count: 0,
    },
    live: Live {
        table: Region::empty(),
        count: 0,
    },
};

/// Runs `f` on the state under the lock.
pub(crate) fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    LOCK.lock();
    // SAFETY: the lock gives exclusive access to STATE.
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(STATE) });
    LOCK.unlock();
    r
}

pub(crate) fn usable_size(ptr: *mut c_void) -> u64 {
    // SAFETY: ptr is a live allocation of the runtime's jemalloc.
    unsafe { tikv_jemalloc_sys::malloc_usable_size(ptr) as u64 }
}

/// The sample period the dumps are written with: 1 when every stack is taken.
pub(crate) fn sample_period() -> u64 {
    SAMPLE_MEAN.load(Ordering::Relaxed)
}

/// Whether stacks are sampled, so the empty stack (the unsampled allocations) is left out
/// of what is written.
pub(crate) fn sampling() -> bool {
    sample_period() > 1
}

/// Whether this allocation of `size` bytes is one whose stack is taken.
fn sampled(size: u64) -> bool {
    let mean = sample_period();
    if mean <= 1 {
        return true;
    }
    let Ok(left) = UNTIL_SAMPLE.try_with(Cell::get) else {
        return false;
    };
    let left = if left < 0 { draw(mean) } else { left };
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    if size < left {
        let _ = UNTIL_SAMPLE.try_with(|c| c.set(left - size));
        return false;
    }
    let _ = UNTIL_SAMPLE.try_with(|c| c.set(draw(mean)));
    true
}

/// Bytes until the next sample: exponentially distributed with mean `mean`.
fn draw(mean: u64) -> i64 {
    let x = RANDOM
        .try_with(|r| {
            let mut x = r.get();
            if x == 0 {
                // Seeded per thread from where its state lives and the clock.
                x = (r as *const Cell<u64> as u64) ^ sys::now_us().rotate_left(32) | 1;
            }
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            r.set(x);
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        })
        .unwrap_or(1 << 63);
    // A uniform in (0, 1] from the top 53 bits.
    let u = ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
    (-u.ln() * mean as f64) as i64 + 1
}

/// Leaves the calling thread's allocations out of the table from now on.
pub fn untrack_this_thread() {
    let _ = UNTRACKED.try_with(|u| u.set(true));
}

/// How many allocations are tracked now.
pub fn live_objects() -> u64 {
    if !enabled() {
        return 0;
    }
    with_state(|s| s.live.count as u64)
}

/// Records a new allocation, made by the caller's stack.
#[inline]
pub fn allocated(ptr: *mut c_void) {
    if !ptr.is_null() && enabled() {
        allocated_while_tracking(ptr);
    }
}

#[inline(never)]
fn allocated_while_tracking(ptr: *mut c_void) {
    if UNTRACKED.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    let Some(_busy) = Busy::enter() else { return };
    let mut frames = Frames {
        pcs: [0; MAX_DEPTH],
        n: 0,
    };
    let size = usable_size(ptr);
    if sampled(size) {
        backtrace(&mut frames);
    }
    with_state(|s| {
        if let Some(id) = s.stacks.intern(&frames.pcs[..frames.n]) {
            if s.live.insert(ptr as usize, id, size) {
                s.stacks.add(id, size);
            }
        }
    });
}

/// The tracker entered and an empty frame buffer, when the calling thread's stacks are
/// tracked.
fn enter_for_stack() -> Option<(Busy, Frames)> {
    if !enabled() || UNTRACKED.try_with(Cell::get).unwrap_or(false) {
        return None;
    }
    let frames = Frames {
        pcs: [0; MAX_DEPTH],
        n: 0,
    };
    Some((Busy::enter()?, frames))
}

/// The stack of a new mapping of `bytes` made by the caller's stack, with `marker` (a code
/// address that says what kind of mapping it is) as its innermost frame, its live counts
/// raised by the mapping; None when stacks are not tracked. Unsampled mappings go under
/// the empty stack, as unsampled allocations do.
pub fn mapping_stack(marker: usize, bytes: u64) -> Option<u32> {
    let (_busy, mut frames) = enter_for_stack()?;
    if sampled(bytes) {
        backtrace(&mut frames);
        // The unwinder's first frames are this library's own; the marker takes the first.
        let n = frames.n.max(1);
        frames.pcs[0] = marker;
        frames.n = n;
    }
    with_state(|s| {
        let id = s.stacks.intern(&frames.pcs[..frames.n])?;
        s.stacks.add(id, bytes);
        Some(id)
    })
}

/// The caller's stack, stored without counts, for naming what it starts (a thread by the
/// code that spawned it); None when stacks are not tracked.
pub fn spawn_stack() -> Option<u32> {
    let (_busy, mut frames) = enter_for_stack()?;
    backtrace(&mut frames);
    let pcs = &frames.pcs[..frames.n];
    with_state(|s| s.stacks.intern(pcs)).filter(|_| !pcs.is_empty())
}

/// Changes the live counts of a mapping's stack (a mapping unmapped, in part or whole).
pub fn mapping_adjust(id: u32, objects: i64, bytes: i64) {
    with_state(|s| {
        let e = s.stacks.arena.words();
        let id = id as usize;
        e[id + E_LIVE_OBJS] = e[id + E_LIVE_OBJS].saturating_add_signed(objects);
        e[id + E_LIVE_BYTES] = e[id + E_LIVE_BYTES].saturating_add_signed(bytes);
    });
}

/// What `forget` took out, for `restore`.
pub struct Forgotten(Option<(u32, u64)>);

/// Takes an allocation out before it is freed or reallocated: once the allocator has it
/// back, another thread may be handed the same address.
#[inline]
pub fn forget(ptr: *mut c_void) -> Forgotten {
    if ptr.is_null() || !enabled() {
        return Forgotten(None);
    }
    forget_tracked(ptr)
}

#[inline(never)]
fn forget_tracked(ptr: *mut c_void) -> Forgotten {
    let Some(_busy) = Busy::enter() else {
        return Forgotten(None);
    };
    Forgotten(with_state(|s| {
        let (id, size) = s.live.remove(ptr as usize)?;
        let bytes = if size == SIZE_UNKNOWN {
            usable_size(ptr)
        } else {
            size
        };
        s.stacks.remove(id, bytes);
        Some((id, bytes))
    }))
}

/// Puts back what `forget` took out (a `realloc` that failed left the object in place).
pub fn restore(ptr: *mut c_void, forgotten: Forgotten) {
    let Some((id, bytes)) = forgotten.0 else {
        return;
    };
    with_state(|s| {
        if s.live.insert(ptr as usize, id, bytes) {
            let e = s.stacks.arena.words();
            e[id as usize + E_LIVE_OBJS] += 1;
            e[id as usize + E_LIVE_BYTES] += bytes;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_table_finds_what_it_holds_across_growth_and_removals() {
        let mut live = Live {
            table: Region::empty(),
            count: 0,
        };
        // Addresses that collide a lot: 16-byte steps.
        let ptrs: Vec<usize> = (1..=200_000usize).map(|i| 0x10_0000 + i * 16).collect();
        for (i, &p) in ptrs.iter().enumerate() {
            assert!(live.insert(p, i as u32, 8));
        }
        assert_eq!(live.count, ptrs.len());
        // Remove every third, then check every one.
        for (i, &p) in ptrs.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
            assert_eq!(live.remove(p), Some((i as u32, 8)));
        }
        for (i, &p) in ptrs.iter().enumerate() {
            let expect = (i % 3 != 0).then_some((i as u32, 8));
            assert_eq!(live.remove(p), expect, "{i}");
        }
        assert_eq!(live.count, 0);
        assert_eq!(live.remove(0x999), None);
        live.table.unmap();
    }

    #[test]
    fn stacks_are_stored_once_and_counted_exactly() {
        let mut stacks = Stacks {
            arena: Region::empty(),
            used: 0,
            index: Region::empty(),
            count: 0,
        };
        let a = [1usize, 2, 3];
        let b = [1usize, 2, 4];
        let ia = stacks.intern(&a).unwrap();
        let ib = stacks.intern(&b).unwrap();
        assert_ne!(ia, ib);
        assert_eq!(stacks.intern(&a), Some(ia));
        for i in 0..10_000usize {
            stacks.intern(&[i, i + 1]).unwrap();
        }
        assert_eq!(stacks.intern(&b), Some(ib));
        stacks.add(ia, 16);
        stacks.add(ia, 32);
        stacks.remove(ia, 16);
        let e = stacks.arena.words();
        let ia = ia as usize;
        assert_eq!(
            &e[ia + E_LIVE_OBJS..=ia + E_ACCUM_BYTES],
            &[1, 32, 2, 48][..]
        );
        stacks.arena.unmap();
        stacks.index.unmap();
    }

    #[test]
    fn a_backtrace_has_this_function_s_callers() {
        let mut frames = Frames {
            pcs: [0; MAX_DEPTH],
            n: 0,
        };
        backtrace(&mut frames);
        assert!(frames.n >= 3, "{} frames", frames.n);
    }

    #[test]
    fn sampling_picks_objects_as_jemalloc_does() {
        // Draws: exponential with the mean asked for (100,000 draws: the mean's standard
        // error is 0.3%).
        let n = 100_000;
        let mean = (0..n).map(|_| draw(4096) as f64).sum::<f64>() / f64::from(n);
        assert!((mean / 4096.0 - 1.0).abs() < 0.03, "mean {mean}");
        // An object of S bytes is sampled with probability 1 - exp(-S / mean): 63% at S =
        // mean, 0.2% at 8 bytes; every one when the mean is 1.
        SAMPLE_MEAN.store(4096, Ordering::SeqCst);
        let rate = |size: u64| (0..n).filter(|_| sampled(size)).count() as f64 / f64::from(n);
        let big = rate(4096);
        let small = rate(8);
        SAMPLE_MEAN.store(1, Ordering::SeqCst);
        let all = rate(8);
        assert!((big - 0.632).abs() < 0.02, "{big}");
        assert!((small - 0.00195).abs() < 0.001, "{small}");
        assert_eq!(all, 1.0);
    }
}
