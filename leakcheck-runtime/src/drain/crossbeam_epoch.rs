//! Draining crossbeam-epoch (behind rayon, crossbeam-deque, crossbeam-skiplist, moka, …).
//!
//! crossbeam-epoch does not free an object when the program lets go of it: the object's
//! destructor is deferred into a bag, a thread's bag is sealed into its collector's global
//! queue when it fills, on `flush` or when the thread exits, and a sealed bag is freed only
//! once the global epoch has moved two steps past it, which happens only when some thread
//! pins and collects. So what a test's run let go of is often still allocated when the run
//! ends, and is freed by a later run's pins: counted as retained, it made the test run
//! again, sometimes several times, only to see it go.
//!
//! The runtime pins the default collector of every crossbeam-epoch version linked in: each
//! drain thread pins [`PINS_PER_THREAD`] times (one collect every 128 pins, each advancing
//! the epoch when no other thread is pinned in an older one and freeing up to 8 expired
//! bags), then exits, which seals its own bag into the queue for the next thread to free.
//!
//! The two functions are the test binary's own, found by cargo-leakcheck in its symbol table
//! (`crossbeam_epoch::default::pin`, the collector's enter, and `<Guard as Drop>::drop` of
//! the same version, its leave).

use super::{Callable, Drainer};
use std::ffi::c_void;

/// The drain of crossbeam-epoch's collectors.
pub(super) const DRAINER: Drainer = Drainer {
    // The first pin makes the process-wide `Global`, kept for the life of the process.
    initialise: |c| pin_and_unpin(c, 1),
    drain: |c| pin_and_unpin(c, PINS_PER_THREAD),
};

/// Pins each drain thread makes per collector: 16 collects.
const PINS_PER_THREAD: u32 = 16 * 128;

/// `crossbeam_epoch::Guard`: a pointer to the pinning thread's `Local`.
#[repr(transparent)]
struct Guard(*const c_void);

/// Pins the collector and lets go again, `times` times, on the calling thread.
fn pin_and_unpin(c: Callable, times: u32) {
    // SAFETY: cargo-leakcheck found these two functions of one crossbeam-epoch version in
    // this build's symbol table (`enter` is `crossbeam_epoch::default::pin`, `leave`
    // `<Guard as Drop>::drop`), and `callable` checked they are code of this very build:
    // `pin` returns the Guard by value in a register (a struct of one pointer), and `drop`
    // takes it by reference, as the Rust ABI passes them.
    let (pin, unpin) = unsafe {
        (
            std::mem::transmute::<usize, fn() -> Guard>(c.enter),
            std::mem::transmute::<usize, fn(&mut Guard)>(c.leave),
        )
    };
    for _ in 0..times {
        let mut guard = pin();
        unpin(&mut guard);
    }
}
