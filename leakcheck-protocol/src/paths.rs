//! Retention paths, written by the runtime's reachability scan beside a dump as
//! `<dump>.paths` and read by the tool: for each allocation stack with reached objects, how
//! the first of them was reached.
//!
//! ```text
//! leakcheck-paths/1
//! path                                  one per stack with reached objects
//! root static <vaddr> <object>          a writable segment of a loaded object (`-`: the program)
//! root tls <offset> <object>            a thread's static thread-local storage of that object
//! root stack <address>                  a thread's stack: the return address (or interrupted
//!                                       pc) of the frame holding the pointer, 0 if none found
//! root register <name>                  a register of a stopped (or the exiting) thread
//! root unknown
//! thread <tid> <name>                   whose, for the last three
//! state <hex>                           after `thread`: what the thread was doing before
//!                                       the scan stopped it (see [`ThreadState`])
//! spawned                               after `thread`: the next stack line is the stack
//!                                       of the `pthread_create` call that started it
//! @ <pc> <pc> …                         each object on the way, root-most first, by its
//! skip <n>                              allocation stack (a `heap_v2` stack line); the last
//!                                       `@` is the stack's own; `skip`: n objects left out
//! words <hex> …                         after an `@`: the object's first words (at most
//!                                       [`WORDS`]), what it is when its stack was not
//!                                       sampled (a task's header points at its vtable)
//! ```
//!
//! followed by the process's mappings, as in a dump ([`crate::heap_v2::MAPPED_LIBRARIES`]).

use crate::heap_v2::{parse_decimal, parse_hex};
use crate::words::{format_hex, format_u64, Sink};

/// The first line.
pub const HEADER: &str = "leakcheck-paths/3";
/// The first line of the earlier format, read as well: the same lines without `state` and
/// `spawned`.
pub const HEADER_V2: &str = "leakcheck-paths/2";
/// The first line of the format before, read as well: without `words` either.
pub const HEADER_V1: &str = "leakcheck-paths/1";
/// How many of an object's first words a `words` line gives.
pub const WORDS: usize = 4;
/// The object name of the program itself.
pub const PROGRAM: &str = "-";

/// Where a path starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root<'a> {
    /// A word at `vaddr` in a writable segment of `object`.
    Static {
        vaddr: u64,
        object: &'a str,
    },
    /// A word at `offset` in `object`'s static thread-local block.
    Tls {
        offset: u64,
        object: &'a str,
    },
    /// A word on a stack, in the frame of the function this return address is in (0: none
    /// found).
    Stack {
        frame: u64,
    },
    /// A register, by name.
    Register(&'a str),
    Unknown,
}

/// What a thread was doing, packed in a word: `/proc`'s state letter (bits 0-7: `R`
/// running, `S` sleeping, `D` in uninterruptible sleep, …), the system call it is blocked
/// in plus one (bits 8-23, 0: none), milliseconds until it wakes by itself plus one (bits
/// 24-62, 0: not by itself, or not known), and whether it has named itself (bit 63: its
/// name is no longer the one it inherited from the thread that started it). 0: not read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState(pub u64);

impl ThreadState {
    const MS_MASK: u64 = (1 << 39) - 1;

    pub fn new(letter: u8, syscall: Option<u64>, wake_ms: Option<u64>, named: bool) -> Self {
        let nr = syscall.map_or(0, |n| (n + 1).min(0xffff));
        let ms = wake_ms.map_or(0, |m| (m + 1).min(Self::MS_MASK));
        ThreadState(u64::from(letter) | nr << 8 | ms << 24 | u64::from(named) << 63)
    }

    pub fn letter(self) -> u8 {
        self.0 as u8
    }

    pub fn syscall(self) -> Option<u64> {
        ((self.0 >> 8) & 0xffff).checked_sub(1)
    }

    pub fn wake_ms(self) -> Option<u64> {
        ((self.0 >> 24) & Self::MS_MASK).checked_sub(1)
    }

    pub fn named(self) -> bool {
        self.0 >> 63 != 0
    }
}

/// One line of a paths file, other than a stack line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Header,
    Path,
    Root(Root<'a>),
    /// Whose stack, registers or thread-local storage the root is in.
    Thread {
        tid: u64,
        name: &'a str,
    },
    /// What that thread was doing.
    State(ThreadState),
    /// The next stack line is the stack that started that thread.
    Spawned,
    /// Objects left out of a long chain.
    Skip(u64),
    /// The first words of the object whose stack line came before (`n` of them).
    Words {
        words: [u64; WORDS],
        n: usize,
    },
}

impl Line<'_> {
    /// Writes the line, without its newline.
    pub fn encode(&self, out: &mut impl Sink) {
        match *self {
            Line::Header => out.put(HEADER),
            Line::Path => out.put("path"),
            Line::Root(Root::Static { vaddr, object }) => {
                out.put("root static ");
                put_hex(out, vaddr);
                out.put(" ");
                out.put(object);
            }
            Line::Root(Root::Tls { offset, object }) => {
                out.put("root tls ");
                put_hex(out, offset);
                out.put(" ");
                out.put(object);
            }
            Line::Root(Root::Stack { frame }) => {
                out.put("root stack ");
                put_hex(out, frame);
            }
            Line::Root(Root::Register(name)) => {
                out.put("root register ");
                out.put(name);
            }
            Line::Root(Root::Unknown) => out.put("root unknown"),
            Line::Thread { tid, name } => {
                out.put("thread ");
                put_dec(out, tid);
                out.put(" ");
                out.put(name);
            }
            Line::State(state) => {
                out.put("state ");
                put_hex(out, state.0);
            }
            Line::Spawned => out.put("spawned"),
            Line::Skip(n) => {
                out.put("skip ");
                put_dec(out, n);
            }
            Line::Words { words, n } => {
                out.put("words");
                for w in &words[..n.min(WORDS)] {
                    out.put(" ");
                    put_hex(out, *w);
                }
            }
        }
    }

    /// Reads one line; `None` for anything else (a stack line is read as `heap_v2`'s).
    pub fn parse(line: &str) -> Option<Line<'_>> {
        if line == HEADER || line == HEADER_V2 || line == HEADER_V1 {
            return Some(Line::Header);
        }
        if line == "path" {
            return Some(Line::Path);
        }
        if line == "spawned" {
            return Some(Line::Spawned);
        }
        if line == "words" {
            return Some(Line::Words {
                words: [0; WORDS],
                n: 0,
            });
        }
        let (word, rest) = line.split_once(' ')?;
        match word {
            "root" => {
                let (kind, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                let root = match kind {
                    "static" => {
                        let (at, object) = rest.split_once(' ')?;
                        Root::Static {
                            vaddr: hex(at)?,
                            object,
                        }
                    }
                    "tls" => {
                        let (at, object) = rest.split_once(' ')?;
                        Root::Tls {
                            offset: hex(at)?,
                            object,
                        }
                    }
                    "stack" => Root::Stack { frame: hex(rest)? },
                    "register" if !rest.is_empty() => Root::Register(rest),
                    "unknown" => Root::Unknown,
                    _ => return None,
                };
                Some(Line::Root(root))
            }
            "thread" => {
                let (tid, name) = rest.split_once(' ')?;
                Some(Line::Thread {
                    tid: parse_decimal(tid)?,
                    name,
                })
            }
            "skip" => Some(Line::Skip(parse_decimal(rest)?)),
            "state" => Some(Line::State(ThreadState(hex(rest)?))),
            "words" => {
                let mut words = [0u64; WORDS];
                let mut n = 0;
                for w in rest.split(' ') {
                    *words.get_mut(n)? = hex(w)?;
                    n += 1;
                }
                Some(Line::Words { words, n })
            }
            _ => None,
        }
    }
}

crate::words::display_by_encode!(Line<'_>);

pub(crate) fn hex(text: &str) -> Option<u64> {
    parse_hex(text.strip_prefix("0x").unwrap_or(text))
}

pub(crate) fn put_hex(out: &mut impl Sink, v: u64) {
    let mut digits = [0u8; 16];
    let at = format_hex(v, &mut digits);
    out.put("0x");
    out.put(core::str::from_utf8(&digits[at..]).unwrap_or("0"));
}

pub(crate) fn put_dec(out: &mut impl Sink, v: u64) {
    let mut digits = [0u8; 20];
    let at = format_u64(v, &mut digits);
    out.put(core::str::from_utf8(&digits[at..]).unwrap_or("0"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn every_line_round_trips_in_the_documented_format() {
        for (line, text) in [
            (Line::Header, "leakcheck-paths/3"),
            (Line::Spawned, "spawned"),
            (
                Line::State(ThreadState(0x8000_0000_0100_e253)),
                "state 0x800000000100e253",
            ),
            (Line::Path, "path"),
            (
                Line::Root(Root::Static {
                    vaddr: 0x4a3f10,
                    object: PROGRAM,
                }),
                "root static 0x4a3f10 -",
            ),
            (
                Line::Root(Root::Tls {
                    offset: 0x28,
                    object: "/usr/lib/x86_64-linux-gnu/libc.so.6",
                }),
                "root tls 0x28 /usr/lib/x86_64-linux-gnu/libc.so.6",
            ),
            (Line::Root(Root::Stack { frame: 0 }), "root stack 0x0"),
            (Line::Root(Root::Register("r12")), "root register r12"),
            (Line::Root(Root::Unknown), "root unknown"),
            (
                Line::Thread {
                    tid: 4242,
                    name: "tokio-rt worker",
                },
                "thread 4242 tokio-rt worker",
            ),
            (Line::Skip(17), "skip 17"),
            (
                Line::Words {
                    words: [0x5555_0000_1f00, 0, 0x7f00_0000_0010, 0],
                    n: 3,
                },
                "words 0x555500001f00 0x0 0x7f0000000010",
            ),
            (
                Line::Words {
                    words: [0; WORDS],
                    n: 0,
                },
                "words",
            ),
        ] {
            assert_eq!(line.to_string(), text);
            assert_eq!(Line::parse(text), Some(line), "{text}");
        }
        assert_eq!(Line::parse("leakcheck-paths/1"), Some(Line::Header));
        assert_eq!(Line::parse("root static 0x10"), None);
        assert_eq!(Line::parse("skip x"), None);
        assert_eq!(
            Line::parse("words 0x1 0x2 0x3 0x4 0x5"),
            None,
            "at most WORDS"
        );
        assert_eq!(Line::parse("words 0x1 zz"), None);
        assert_eq!(Line::parse("@ 0x1"), None);
    }
}
