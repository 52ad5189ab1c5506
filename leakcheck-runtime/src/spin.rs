//! The runtime's one lock, for its tables and its thread registry: a spin lock that
//! allocates nothing and calls nothing of libc's but `sched_yield`, so it may be taken inside
//! `malloc` and `mmap`, where no blocking primitive of libc's may be used, and reset in a
//! forked child, which has only the thread that forked.

use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct SpinLock(AtomicBool);

impl SpinLock {
    pub(crate) const fn new() -> SpinLock {
        SpinLock(AtomicBool::new(false))
    }

    pub(crate) fn lock(&self) {
        let mut spins = 0u32;
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }

    pub(crate) fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Registers fork handlers for the static spin lock `$lock`: held across `fork`, so that the
/// child does not inherit the table half-written, and released in both processes after it
/// (the child has only the thread that forked, so nobody else holds it there).
macro_rules! hold_across_fork {
    ($lock:path) => {{
        extern "C" fn prepare() {
            $lock.lock();
        }
        extern "C" fn after() {
            $lock.unlock();
        }
        // SAFETY: registers handlers that only touch the lock word.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(after), Some(after));
        }
    }};
}
pub(crate) use hold_across_fork;
