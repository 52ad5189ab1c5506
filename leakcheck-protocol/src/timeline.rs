//! When each periodic heap dump was taken: the runtime appends one line to
//! `<prefix>` + [`crate::files::TIMELINE`] as soon as a dump is complete, and the tool reads
//! a bench's or a service's snapshots on that time axis (file times are not it: a file's
//! modification time says when its last write ended, at the file system's resolution).
//!
//! ```text
//! t 3 81234567
//! f 81734012
//! ```
//!
//! `t <seq> <µs>`: the periodic dump of sequence number `seq` (the number in its name,
//! `<prefix>.<pid>.<seq>.t.heap`); `f <µs>`: the moment the exit dump (`.f.heap`) starts to
//! be written. Times are microseconds on the monotonic clock, so only their differences
//! mean anything.
//!
//! `l <seq> <index> <reading>`: the length of collection `index` of the program's table
//! (see [`crate::collections`]) when the periodic dump `seq` was taken, written after the
//! dump's own line when it differs from the reading before (the first time: from `ABSENT`).

use crate::words::{put_num, Sink};

/// Which dump a line is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dump {
    /// The periodic dump with this sequence number.
    Periodic(u64),
    /// The exit dump.
    Final,
}

/// One line of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub dump: Dump,
    /// Microseconds on the monotonic clock.
    pub micros: u64,
}

impl Mark {
    /// Writes the line, without its newline.
    pub fn encode(&self, out: &mut impl Sink) {
        match self.dump {
            Dump::Periodic(seq) => {
                out.put("t");
                put_num(out, seq as i64);
            }
            Dump::Final => out.put("f"),
        }
        put_num(out, self.micros as i64);
    }

    /// Reads one line; `None` for anything else (a line cut short by a kill).
    pub fn parse(line: &str) -> Option<Mark> {
        let mut words = line.split(' ');
        let dump = match words.next()? {
            "t" => Dump::Periodic(words.next()?.parse().ok()?),
            "f" => Dump::Final,
            _ => return None,
        };
        let micros = words.next()?.parse().ok()?;
        words.next().is_none().then_some(Mark { dump, micros })
    }
}

crate::words::display_by_encode!(Mark);

/// A collection's length at a periodic dump (the `l` line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthAt {
    /// The periodic dump's sequence number.
    pub seq: u64,
    /// The collection's index in the program's table.
    pub index: u32,
    /// The length, or why there is none (see [`crate::collections`]).
    pub reading: i64,
}

impl LengthAt {
    /// Writes the line, without its newline.
    pub fn encode(&self, out: &mut impl Sink) {
        out.put("l");
        put_num(out, self.seq as i64);
        put_num(out, i64::from(self.index));
        put_num(out, self.reading);
    }

    /// Reads one line; `None` for anything else.
    pub fn parse(line: &str) -> Option<LengthAt> {
        let mut words = line.split(' ');
        (words.next()? == "l").then_some(())?;
        let seq = words.next()?.parse().ok()?;
        let index = words.next()?.parse().ok()?;
        let reading = words.next()?.parse().ok()?;
        words.next().is_none().then_some(LengthAt {
            seq,
            index,
            reading,
        })
    }
}

crate::words::display_by_encode!(LengthAt);

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn marks_round_trip_and_a_cut_line_is_refused() {
        for mark in [
            Mark {
                dump: Dump::Periodic(17),
                micros: 81_234_567,
            },
            Mark {
                dump: Dump::Final,
                micros: u32::MAX as u64 * 3,
            },
        ] {
            assert_eq!(Mark::parse(&mark.to_string()), Some(mark));
        }
        assert_eq!(Mark::parse("t 17"), None);
        assert_eq!(Mark::parse("t 17 12 9"), None);
        assert_eq!(Mark::parse("x 1 2"), None);
        assert_eq!(Mark::parse(""), None);
    }

    #[test]
    fn lengths_round_trip_and_are_not_marks() {
        let l = LengthAt {
            seq: 17,
            index: 3,
            reading: -2,
        };
        assert_eq!(l.to_string(), "l 17 3 -2");
        assert_eq!(LengthAt::parse("l 17 3 -2"), Some(l));
        assert_eq!(Mark::parse("l 17 3 -2"), None);
        assert_eq!(LengthAt::parse("t 17 3"), None);
        assert_eq!(LengthAt::parse("l 17 3"), None);
    }
}
