//! Messages on stderr. Writing them can fail (stderr piped into `head` that exited, a full
//! disk); that must never cost the run its report or its exit code, so failures to write are
//! ignored here rather than panicking as `eprintln!` does.

use std::io::Write;

/// Writes formatted text to stderr, ignoring failures.
pub fn write_fmt(args: std::fmt::Arguments) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args);
    let _ = err.flush();
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never panics.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {
        $crate::console::write_fmt(format_args!($($arg)*))
    };
}
