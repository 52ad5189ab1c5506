//! Where a program whose `main` is the test (a doc-test) starts running the test's code.
//!
//! Before `main`, std's runtime sets the main thread up and keeps what it allocated for that
//! (its record of the thread's name and stack guard) for the life of the process. A count
//! of the main thread taken from the program's start would hold that in every test; a
//! libtest program keeps it in the main thread's left-out arena. So the main thread is
//! counted from its first allocation made while a function that runs the test's code is on
//! its stack: the function its extra runs call (the closure std's `lang_start` hands its
//! runtime, which calls the doc-test's `main`, or that `main` itself; in a merged
//! executable, the closure libtest keeps for the doc-test). std's set-up runs before any of
//! them is called, and the test's code only inside them.
//!
//! Asked on the main thread only, before each of its allocations until the answer is yes,
//! so the stack is walked a handful of times per process.

use crate::sys::{_Unwind_Backtrace, _Unwind_GetRegionStart};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// The functions, by their start address in memory (0: none), that run the test's code.
static ENTRIES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// A walk is under way: an allocation the unwinder makes is not asked about.
static WALKING: AtomicBool = AtomicBool::new(false);

/// Sets the functions whose frames mark the test's code (start addresses; 0 for none).
pub fn watch_for(entries: [usize; 2]) {
    for (slot, entry) in ENTRIES.iter().zip(entries) {
        slot.store(entry, Relaxed);
    }
}

/// Whether one of the watched functions is on the calling thread's stack.
pub fn inside_entry() -> bool {
    if WALKING.swap(true, Relaxed) {
        return false;
    }
    let mut found = false;
    // SAFETY: the callback only reads the unwinder's context and writes `found`, which
    // outlives the call.
    unsafe { _Unwind_Backtrace(each, (&raw mut found).cast()) };
    WALKING.store(false, Relaxed);
    found
}

extern "C" fn each(context: *mut c_void, arg: *mut c_void) -> c_int {
    const URC_NO_REASON: c_int = 0;
    const URC_NORMAL_STOP: c_int = 4;
    // SAFETY: the context is the unwinder's, for this frame.
    let start = unsafe { _Unwind_GetRegionStart(context) };
    if start != 0 && ENTRIES.iter().any(|e| e.load(Relaxed) == start) {
        // SAFETY: `arg` is the `bool` `inside_entry` passed, alive for the whole walk.
        unsafe { *arg.cast::<bool>() = true };
        return URC_NORMAL_STOP;
    }
    URC_NO_REASON
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn asks() -> bool {
        std::hint::black_box(inside_entry())
    }

    #[inline(never)]
    fn calls_asks() -> bool {
        std::hint::black_box(asks())
    }

    /// The answer is yes exactly while a watched function is on the stack, whether it asks
    /// itself or a function it calls does.
    #[test]
    fn a_watched_function_is_found_on_the_stack_and_only_there() {
        watch_for([calls_asks as *const () as usize, 0]);
        assert!(
            calls_asks(),
            "the watched function called the one that asks"
        );
        assert!(!asks(), "not called from the watched function");
        watch_for([asks as *const () as usize, 0]);
        assert!(asks(), "the watched function asks itself");
        watch_for([0, 0]);
        assert!(!calls_asks(), "nothing watched");
    }
}
