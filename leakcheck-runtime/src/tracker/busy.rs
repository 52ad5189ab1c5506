//! The tracker's re-entrancy guard: a thread-local flag set while the thread is inside the
//! tracker, so that an allocation made while tracking another (there should be none) goes
//! untracked instead of recursing.

use std::cell::Cell;

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread busy for the duration; `None` when it already is (an allocation made
/// while tracking another), or while the thread's storage is being torn down.
pub(crate) struct Busy;

impl Busy {
    pub(crate) fn enter() -> Option<Busy> {
        BUSY.try_with(|b| (!b.replace(true)).then_some(Busy))
            .ok()
            .flatten()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(false));
    }
}
