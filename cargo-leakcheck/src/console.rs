//! Messages on stderr. Writing them can fail (stderr piped into `head` that exited, a full
//! disk); that must never cost the run its report or its exit code, so failures to write are
//! ignored here rather than panicking as `eprintln!` does.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// How much the run says on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// `--quiet`: errors, warnings and the summary's totals.
    Quiet = 0,
    /// Progress, tests that did not pass as they end, and the summary.
    Normal = 1,
    /// `-v`: also every test as it ends, and the commands run.
    Verbose = 2,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Normal as u8);

/// Sets how much is said, once, from the command line.
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// How much is said.
pub fn level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        0 => Level::Quiet,
        1 => Level::Normal,
        _ => Level::Verbose,
    }
}

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

/// [`say!`], except under `--quiet`: progress and notes the run can do without.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => {
        if $crate::console::level() > $crate::console::Level::Quiet {
            $crate::say!($($arg)*)
        }
    };
}

/// `eprint!` that never panics.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {
        $crate::console::write_fmt(format_args!($($arg)*))
    };
}
