//! Reference cycles among lost objects, written by the runtime's reachability scan beside a
//! dump as `<dump>.cycles` and read by the tool: the objects no root reaches, the pointers
//! among them, and the strongly connected groups those pointers make (an `Rc`/`Arc` cycle
//! keeps its counts above zero, so nothing ever frees it).
//!
//! ```text
//! leakcheck-cycles/1
//! cycle <count> <objects>               a group of cycles: how many strongly connected groups
//!                                       of lost objects have a representative cycle through
//!                                       the same allocation stacks in the same order, and
//!                                       their objects in all; then that cycle's members
//! member <size> <offset> <length>       one member of the cycle before (the first
//!                                       [`MAX_MEMBERS`] of a longer one): its size, where in it
//!                                       the word that points to the next member is (the last
//!                                       points back to the first); <length>: the cycle's
//!                                       members in all, the same on every member line
//! @ <pc> <pc> …                         after a `member`: its allocation stack (a `heap_v2`
//!                                       stack line)
//! words <hex> …                         after its stack: its first words (at most [`WORDS`]; an
//!                                       `Rc`/`Arc` allocation starts with its strong and weak
//!                                       counts)
//! unreached <cycle> <inside> <alone>    per stack with lost objects: how many are in a
//!                                       cycle, pointed to only by other lost objects (inside
//!                                       a lost structure), or pointed to by nothing at all;
//!                                       then the stack line
//! cost <objects> <pointers> <words> <µs> what the search took: the lost objects, the
//!                                       pointers among them, the words read, the time
//! limit <words>                         the search stopped after reading that many words:
//!                                       what it wrote covers the lost objects read by then
//! ```
//!
//! followed by the process's mappings, as in a dump ([`crate::heap_v2::MAPPED_LIBRARIES`]).

use crate::heap_v2::parse_decimal;
use crate::paths::{hex, put_dec, put_hex};
use crate::words::Sink;

/// The first line.
pub const HEADER: &str = "leakcheck-cycles/1";
/// How many of a member's first words a `words` line gives.
pub const WORDS: usize = 2;
/// The most members written of one cycle.
pub const MAX_MEMBERS: usize = 16;

/// One line of a cycles file, other than a stack line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    Header,
    /// A group of `count` cycles alike, `objects` lost objects in them in all.
    Cycle {
        count: u64,
        objects: u64,
    },
    /// One member of the group's representative cycle.
    Member {
        size: u64,
        offset: u64,
        length: u64,
    },
    /// The first words of the member whose stack line came before (`n` of them).
    Words {
        words: [u64; WORDS],
        n: usize,
    },
    /// A stack's lost objects by how they are lost; its stack line follows.
    Unreached {
        cycle: u64,
        inside: u64,
        alone: u64,
    },
    /// What the search took.
    Cost {
        objects: u64,
        pointers: u64,
        words: u64,
        micros: u64,
    },
    /// The search stopped after reading this many words.
    Limit(u64),
}

impl Line {
    /// Writes the line, without its newline.
    pub fn encode(&self, out: &mut impl Sink) {
        match *self {
            Line::Header => out.put(HEADER),
            Line::Cycle { count, objects } => numbers(out, "cycle", &[count, objects]),
            Line::Member {
                size,
                offset,
                length,
            } => numbers(out, "member", &[size, offset, length]),
            Line::Words { words, n } => {
                out.put("words");
                for w in &words[..n.min(WORDS)] {
                    out.put(" ");
                    put_hex(out, *w);
                }
            }
            Line::Unreached {
                cycle,
                inside,
                alone,
            } => numbers(out, "unreached", &[cycle, inside, alone]),
            Line::Cost {
                objects,
                pointers,
                words,
                micros,
            } => numbers(out, "cost", &[objects, pointers, words, micros]),
            Line::Limit(words) => numbers(out, "limit", &[words]),
        }
    }

    /// Reads one line; `None` for anything else (a stack line is read as `heap_v2`'s).
    pub fn parse(line: &str) -> Option<Line> {
        if line == HEADER {
            return Some(Line::Header);
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        if word == "words" {
            let mut words = [0u64; WORDS];
            let mut n = 0;
            for w in rest.split(' ').filter(|w| !w.is_empty()) {
                *words.get_mut(n)? = hex(w)?;
                n += 1;
            }
            return Some(Line::Words { words, n });
        }
        let mut vs = [0u64; 4];
        let mut n = 0;
        for v in rest.split(' ') {
            *vs.get_mut(n)? = parse_decimal(v)?;
            n += 1;
        }
        let [a, b, c, d] = vs;
        match (word, n) {
            ("cycle", 2) => Some(Line::Cycle {
                count: a,
                objects: b,
            }),
            ("member", 3) => Some(Line::Member {
                size: a,
                offset: b,
                length: c,
            }),
            ("unreached", 3) => Some(Line::Unreached {
                cycle: a,
                inside: b,
                alone: c,
            }),
            ("cost", 4) => Some(Line::Cost {
                objects: a,
                pointers: b,
                words: c,
                micros: d,
            }),
            ("limit", 1) => Some(Line::Limit(a)),
            _ => None,
        }
    }
}

crate::words::display_by_encode!(Line);

/// A word and its decimal numbers.
fn numbers(out: &mut impl Sink, word: &str, vs: &[u64]) {
    out.put(word);
    for &v in vs {
        out.put(" ");
        put_dec(out, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn every_line_round_trips_in_the_documented_format() {
        for (line, text) in [
            (Line::Header, "leakcheck-cycles/1"),
            (
                Line::Cycle {
                    count: 6,
                    objects: 18,
                },
                "cycle 6 18",
            ),
            (
                Line::Member {
                    size: 48,
                    offset: 16,
                    length: 3,
                },
                "member 48 16 3",
            ),
            (
                Line::Words {
                    words: [1, 0x2],
                    n: 2,
                },
                "words 0x1 0x2",
            ),
            (
                Line::Words {
                    words: [0; WORDS],
                    n: 0,
                },
                "words",
            ),
            (
                Line::Unreached {
                    cycle: 12,
                    inside: 0,
                    alone: 1,
                },
                "unreached 12 0 1",
            ),
            (
                Line::Cost {
                    objects: 40,
                    pointers: 52,
                    words: 900,
                    micros: 31,
                },
                "cost 40 52 900 31",
            ),
            (Line::Limit(1 << 24), "limit 16777216"),
        ] {
            assert_eq!(line.to_string(), text);
            assert_eq!(Line::parse(text), Some(line), "{text}");
        }
        assert_eq!(Line::parse("cycle 1"), None);
        assert_eq!(Line::parse("member 1 2 3 4"), None);
        assert_eq!(Line::parse("words 0x1 0x2 0x3"), None, "at most WORDS");
        assert_eq!(Line::parse("unreached a 0 0"), None);
        assert_eq!(Line::parse("@ 0x1"), None);
        assert_eq!(Line::parse("leakcheck-cycles/2"), None);
    }
}
