//! The real-time signals the runtime takes for itself, near the top of the range, where
//! programs and libraries rarely look: one to stop threads for a scan (`crate::stop`), and
//! below it those `crate::clock` may take to interrupt a sleeper.

use std::ffi::c_int;

/// The signal that stops a thread for a scan.
pub fn stop() -> c_int {
    libc::SIGRTMAX() - 3
}
