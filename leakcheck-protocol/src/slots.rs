//! The table of live stack slots: for each unoptimised function of a test binary, where its
//! frame keeps its variables and where it saves callee-saved registers. cargo-leakcheck
//! writes it from the binary's DWARF; the runtime reads it (mapped, without allocating) when
//! a test thread calls `exit`, so that only those words of the thread's dead frames count as
//! roots. One entry per line, a function's entries after its `f` line:
//!
//! ```text
//! f <lo> <hi>                  a function's code, file-relative addresses [lo, hi)
//! s <offset>                   a register save slot, from the frame's CFA
//! v <lo> <hi> <offset> <size>  a variable live for pc in [lo, hi), at sp + offset
//! ```

use crate::words::{nums, put_num, words, Sink};

/// One line of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// A function's code; the lines up to the next `Function` are its own.
    Function { lo: u64, hi: u64 },
    /// A callee-saved register's save slot, relative to the canonical frame address.
    Saved { offset: i64 },
    /// A variable's bytes, relative to the stack pointer, while pc is in `[lo, hi)`.
    Var {
        lo: u64,
        hi: u64,
        offset: i64,
        size: u64,
    },
}

const FUNCTION: &str = "f";
const SAVED: &str = "s";
const VAR: &str = "v";

impl Slot {
    /// Writes the entry as one line, without the line break. Addresses are file-relative,
    /// far below 2^63, and written as signed numbers like the offsets.
    pub fn encode(&self, out: &mut impl Sink) {
        match *self {
            Slot::Function { lo, hi } => {
                out.put(FUNCTION);
                put_num(out, lo as i64);
                put_num(out, hi as i64);
            }
            Slot::Saved { offset } => {
                out.put(SAVED);
                put_num(out, offset);
            }
            Slot::Var {
                lo,
                hi,
                offset,
                size,
            } => {
                out.put(VAR);
                for n in [lo as i64, hi as i64, offset, size as i64] {
                    put_num(out, n);
                }
            }
        }
    }

    /// Reads one line; `None` for anything else.
    pub fn decode(line: &[u8]) -> Option<Slot> {
        let mut w = words(line);
        let key = w.next()?;
        Some(if key == FUNCTION.as_bytes() {
            let [lo, hi] = nums(&mut w)?;
            Slot::Function {
                lo: lo as u64,
                hi: hi as u64,
            }
        } else if key == SAVED.as_bytes() {
            let [offset] = nums(&mut w)?;
            Slot::Saved { offset }
        } else if key == VAR.as_bytes() {
            let [lo, hi, offset, size] = nums(&mut w)?;
            Slot::Var {
                lo: lo as u64,
                hi: hi as u64,
                offset,
                size: size as u64,
            }
        } else {
            return None;
        })
    }
}

crate::words::display_by_encode!(Slot);

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn every_entry_round_trips_in_the_documented_format() {
        for (slot, text) in [
            (
                Slot::Function {
                    lo: 0x3396f,
                    hi: 0x33a10,
                },
                "f 211311 211472",
            ),
            (Slot::Saved { offset: -16 }, "s -16"),
            (
                Slot::Var {
                    lo: 100,
                    hi: 200,
                    offset: 8,
                    size: 5000,
                },
                "v 100 200 8 5000",
            ),
        ] {
            assert_eq!(slot.to_string(), text);
            assert_eq!(Slot::decode(text.as_bytes()), Some(slot));
        }
    }

    #[test]
    fn incomplete_or_unknown_lines_are_skipped() {
        for line in ["", "f 1", "s", "v 1 2 3", "x 1 2", "f a b"] {
            assert_eq!(Slot::decode(line.as_bytes()), None, "{line:?}");
        }
    }
}
