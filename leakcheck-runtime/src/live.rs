//! Which words of the frames of a test thread that ended the process are still roots.
//!
//! A thread that calls `exit` never returns to any of its frames. A word there matters only
//! if it is a variable still in scope (`let local = vec![…]; exit(0)` keeps `local`); the
//! slot of a value moved away (`mem::forget(vec![…])`) still holds a stale copy of its
//! pointer, which would make the forgotten buffer look reachable. cargo-leakcheck passes a
//! table, from the executable's debug information, of where each unoptimised function keeps
//! its variables and saves callee-saved registers (`LEAKCHECK_LIVE_SLOTS`, the format in
//! `leakcheck_protocol::slots`). Here the exiting thread's frames are found by
//! unwinding it as the exit handler starts (before any other thread is stopped: the
//! unwinder takes the loader's lock), the table is mapped, and for each frame of a function
//! the table describes only its live slots are roots; every other frame stays whole, as
//! without a table.

use crate::sys;
use leakcheck_protocol::slots::Slot;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most frames of the exiting thread recorded.
const MAX_FRAMES: usize = 256;

/// The exiting thread's frames, innermost first: return address (or pc) and CFA.
static FRAMES: [[AtomicUsize; 2]; MAX_FRAMES] =
    [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; MAX_FRAMES];
static N_FRAMES: AtomicUsize = AtomicUsize::new(0);
/// The mapped table and its length (0: none).
static TABLE: AtomicUsize = AtomicUsize::new(0);
static TABLE_LEN: AtomicUsize = AtomicUsize::new(0);

/// Records the calling thread's frames and maps the table named by `LEAKCHECK_LIVE_SLOTS`,
/// when there is one. Called by the exit handler on a test thread that called `exit`.
pub fn prepare() {
    let Some(path) = sys::var(leakcheck_protocol::env::LIVE_SLOTS) else {
        return;
    };
    if let Some(table) = sys::map_file(path) {
        TABLE.store(table.as_ptr() as usize, Ordering::Relaxed);
        TABLE_LEN.store(table.len(), Ordering::Relaxed);
    }
    if TABLE_LEN.load(Ordering::Relaxed) > 0 {
        sys::record_frames(&FRAMES, &N_FRAMES);
    }
}

fn table() -> Option<&'static [u8]> {
    let (p, len) = (
        TABLE.load(Ordering::Relaxed),
        TABLE_LEN.load(Ordering::Relaxed),
    );
    // SAFETY: prepare mapped `len` readable bytes at `p`, never unmapped.
    (len > 0).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// The root ranges of the exiting thread's stack from `from` (the exit handler's frame) to
/// `to` (its top), passed to `push` one by one: without a table, recorded frames or a
/// described function among them, the whole range; with them, each frame of a described
/// function reduced to its live slots, and the frames below the innermost one left out.
/// `bias` is the main program's load bias (table addresses are link-time ones).
pub fn stack_ranges(from: usize, to: usize, bias: usize, mut push: impl FnMut(usize, usize)) {
    let n = N_FRAMES.load(Ordering::Relaxed).min(MAX_FRAMES);
    let Some(table) = table().filter(|_| n > 0) else {
        push(from, to);
        return;
    };
    // A stack deeper than the record: the last frame recorded does not reach the top, so
    // it is scanned with everything above it, whole.
    let examined = if n == MAX_FRAMES { n - 1 } else { n };
    // The unwinder gives each return address with the CFA of the frame it returns from:
    // the stack pointer of the frame it returns into, at its call. So frame j (the code
    // at `ip_j`) spans from `cfa_j` to the next entry's `cfa`.
    let frame = |j: usize| {
        let ip = FRAMES[j][0].load(Ordering::Relaxed);
        let sp = FRAMES[j][1].load(Ordering::Relaxed);
        let top = if j + 1 < n {
            FRAMES[j + 1][1].load(Ordering::Relaxed)
        } else {
            to
        };
        // The return address points after the call; the call is the byte before.
        let pc = ip.wrapping_sub(1).wrapping_sub(bias) as u64;
        (pc, sp, top.min(to))
    };
    // Below the innermost frame the table describes are the frames of the call of `exit`
    // itself (std's `process::exit`, the C library's exit path, this handler), which hold
    // nothing of the test's, only stale words of calls made earlier: they are left out.
    let Some(first) = (0..examined).find(|&j| {
        let (pc, sp, top) = frame(j);
        sp >= from && sp < top && function_at(table, pc).is_some()
    }) else {
        push(from, to);
        return;
    };
    let mut low = frame(first).1;
    for j in first..examined {
        let (pc, sp, top) = frame(j);
        if sp < low || sp >= top {
            continue;
        }
        let Some(body) = function_at(table, pc) else {
            continue;
        };
        push(low, sp);
        each_slot(body, pc, |slot| {
            let (at, len) = match slot {
                Slot::Saved { offset } => (top.wrapping_add_signed(offset as isize), 8),
                Slot::Var { offset, size, .. } => {
                    (sp.wrapping_add_signed(offset as isize), size as usize)
                }
                Slot::Function { .. } => return,
            };
            push(at.max(sp), at.saturating_add(len).min(top));
        });
        low = top;
    }
    push(low, to);
}

/// The lines after the `f` line whose range holds `pc`, up to the next `f` line.
fn function_at(table: &[u8], pc: u64) -> Option<&[u8]> {
    let mut at = 0;
    for line in table.split(|&b| b == b'\n') {
        at += line.len() + 1;
        let Some(Slot::Function { lo, hi }) = Slot::decode(line) else {
            continue;
        };
        if lo <= pc && pc < hi {
            let rest = &table[at.min(table.len())..];
            let mut len = 0;
            for line in rest.split(|&b| b == b'\n') {
                if matches!(Slot::decode(line), Some(Slot::Function { .. })) {
                    break;
                }
                len += line.len() + 1;
            }
            return Some(&rest[..len.min(rest.len())]);
        }
    }
    None
}

/// Calls `f` with each save slot and each variable live at `pc` of a function's lines.
fn each_slot(body: &[u8], pc: u64, mut f: impl FnMut(Slot)) {
    for line in body.split(|&b| b == b'\n') {
        match Slot::decode(line) {
            Some(slot @ Slot::Saved { .. }) => f(slot),
            Some(slot @ Slot::Var { lo, hi, size, .. }) if lo <= pc && pc < hi && size > 0 => {
                f(slot)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_described_frame_keeps_its_slots_and_the_exit_calls_frames_are_left_out() {
        static TEXT: &[u8] = b"f 100 200\ns -16\nv 100 200 8 16\n";
        TABLE.store(TEXT.as_ptr() as usize, Ordering::Relaxed);
        TABLE_LEN.store(TEXT.len(), Ordering::Relaxed);
        // Innermost first: the exit call's frame (not described), the test's frame (pc
        // 150), its caller (not described).
        for (j, (ip, sp)) in [(9001usize, 1000usize), (151, 2000), (501, 2100)]
            .into_iter()
            .enumerate()
        {
            FRAMES[j][0].store(ip, Ordering::Relaxed);
            FRAMES[j][1].store(sp, Ordering::Relaxed);
        }
        N_FRAMES.store(3, Ordering::Relaxed);
        let mut pushed = Vec::new();
        stack_ranges(900, 3000, 0, |lo, hi| {
            if lo < hi {
                pushed.push((lo, hi))
            }
        });
        // The variable at sp+8 (16 bytes), the register saved at the frame's top less 16,
        // then everything above the described frame, whole.
        assert_eq!(pushed, [(2084, 2092), (2008, 2024), (2100, 3000)]);
        // No described frame: the whole range, as without a table.
        FRAMES[1][0].store(701, Ordering::Relaxed);
        let mut pushed = Vec::new();
        stack_ranges(900, 3000, 0, |lo, hi| pushed.push((lo, hi)));
        assert_eq!(pushed, [(900, 3000)]);
        N_FRAMES.store(0, Ordering::Relaxed);
        TABLE_LEN.store(0, Ordering::Relaxed);
    }

    #[test]
    fn a_function_record_is_found_by_its_range_and_read_slot_by_slot() {
        let table = b"f 100 200\ns -16\nv 100 200 8 24\nv 150 160 40 8\nf 200 300\nv 200 300 0 8\n";
        let body = function_at(table, 155).unwrap();
        let mut seen = Vec::new();
        each_slot(body, 155, |s| {
            seen.push(match s {
                Slot::Saved { offset } => (offset, 0),
                Slot::Var { offset, size, .. } => (offset, size as i64),
                Slot::Function { .. } => unreachable!("each_slot passes no function lines"),
            })
        });
        assert_eq!(seen, [(-16, 0), (8, 24), (40, 8)]);
        let mut seen = 0;
        each_slot(function_at(table, 120).unwrap(), 120, |_| seen += 1);
        assert_eq!(seen, 2, "the inner block's variable is out of scope at 120");
        assert_eq!(function_at(table, 250).map(<[u8]>::len), Some(14));
        assert!(function_at(table, 300).is_none());
    }
}
