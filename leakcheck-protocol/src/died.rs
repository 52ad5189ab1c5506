//! Where an extra run died: the runtime writes it as a fatal signal (a crash, an abort)
//! arrives while a test's extra runs go, to the record's name with [`SUFFIX`] appended; the
//! tool reads it to name the frame the run died in.
//!
//! ```text
//! leakcheck-died/1
//! signal <number> run <k>     the signal, and the extra run under way
//! @ <pc> <pc> …               the frames of the thread the signal stopped, innermost
//!                             first (a heap_v2 stack line): from where the signal
//!                             interrupted it, when the runtime found that among them;
//!                             else from the runtime's handler, through the kernel's
//!                             return to it
//! ```
//!
//! followed by the process's mappings, as in a dump ([`crate::heap_v2::MAPPED_LIBRARIES`]).

use crate::heap_v2::parse_decimal;
use crate::words::{display_by_encode, put_num, Sink};

/// Appended to the record's name.
pub const SUFFIX: &str = ".died";
/// The first line.
pub const HEADER: &str = "leakcheck-died/1";

const SIGNAL: &str = "signal";
const RUN: &str = "run";

/// The signal and the run it arrived in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Death {
    /// The signal's number.
    pub signal: i32,
    /// The extra run under way (from 1).
    pub run: u32,
}

impl Death {
    /// Writes the `signal` line, without its line break.
    pub fn encode(&self, out: &mut impl Sink) {
        out.put(SIGNAL);
        put_num(out, i64::from(self.signal));
        out.put(" ");
        out.put(RUN);
        put_num(out, i64::from(self.run));
    }

    /// Reads the `signal` line; `None` when it is not one.
    pub fn decode(line: &str) -> Option<Death> {
        let mut w = line.split_ascii_whitespace();
        if w.next()? != SIGNAL {
            return None;
        }
        let signal = i32::try_from(parse_decimal(w.next()?)?).ok()?;
        if w.next()? != RUN {
            return None;
        }
        let run = u32::try_from(parse_decimal(w.next()?)?).ok()?;
        w.next().is_none().then_some(Death { signal, run })
    }
}

display_by_encode!(Death);

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn the_signal_line_reads_back_as_written() {
        let death = Death { signal: 6, run: 2 };
        let line = death.to_string();
        assert_eq!(line, "signal 6 run 2");
        assert_eq!(Death::decode(&line), Some(death));
        assert_eq!(Death::decode("signal 6 run"), None);
        assert_eq!(Death::decode("signal 6 run 2 more"), None);
        assert_eq!(Death::decode("run 2 signal 6"), None);
        assert_eq!(Death::decode("signal -6 run 2"), None);
    }
}
