//! cargo-leakcheck library.
#![warn(missing_docs)]

pub mod diff;
pub mod profile;
pub mod symbolize;

/// Entry point of the binary; returns the process exit code.
pub fn main_impl() -> i32 {
    0
}
