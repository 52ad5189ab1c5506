//! The table of the program's own collections: for each collection cargo-leakcheck found
//! reachable from a static or a thread-local in the test binary's DWARF, the steps that lead
//! from that root to the collection's length. The tool writes it once per binary; the runtime
//! maps it (`LEAKCHECK_COLLECTIONS`) and follows every entry after each run, without
//! allocating and without ever faulting (see the runtime's `lengths` module).
//!
//! A collection whose entries are plain values grows without allocating on most calls (a
//! `HashSet<u64>` reallocates only when it doubles), so no allocation count shows it; its
//! length does. One entry per collection, its steps on the lines after its `c` line:
//!
//! ```text
//! b <build-id>                   first: the executable's build id (hex), which the runtime
//!                                checks before it reads anything
//! c s <vaddr>                    a collection under the static at this address of the executable
//! c t <offset>                   under a thread-local of the executable (an offset in its
//!                                thread-local block): summed over every live thread
//! o <offset>                     move by this many bytes
//! p                              follow the pointer here (8 bytes, not null, mapped)
//! e <offset> <size> <value>      go on only if the integer of `size` bytes at `offset` is
//!                                `value` (an enum's variant, a thread-local's state)
//! n <offset> <size> <value>      go on only if it is not `value` (a `Once` not complete)
//! f <stride> <max>               a slice here (pointer, length): the rest for each element,
//!                                `stride` bytes apart, lengths summed (at most `max`)
//! r <stride> <count>             an array here: the rest for each of its `count` elements
//! l v <len> <cap> <ptr>          the length: a `Vec`'s (`len` ≤ `cap`; its buffer at `ptr`)
//! l h <items> <mask> <ctrl> <bucket> <align>
//!                                a hash table's (hashbrown: `items` ≤ `mask` + 1; its buffer
//!                                starts `mask + 1` buckets of `bucket` bytes, rounded up to
//!                                `align`, before `ctrl`)
//! l x <len>                      a count with nothing to check it against (`BTreeMap`)
//! l m <cap> <inline> <len> <ptr> a `SmallVec`'s: `cap` ≤ `inline` means inline, `cap` the
//!                                length; otherwise the heap's length and buffer
//! ```
//!
//! Offsets are signed decimal; addresses are file-relative virtual addresses.

use crate::words::{nums, parse_num, put_num, words, Sink};

/// A reading: the length, or why there is none.
pub type Reading = i64;
/// The collection does not exist now: its `OnceLock` is empty, its `Option` is `None`, its
/// thread-local is not alive on any thread.
pub const ABSENT: Reading = -1;
/// A pointer on the way does not lead into mapped memory.
pub const UNREADABLE: Reading = -2;
/// The length is above the capacity it must fit in (the memory is not what the types say,
/// or it is changing under the reader).
pub const INCONSISTENT: Reading = -3;

/// Whether a collection grew from one reading to the next: it is longer now, where before it
/// was shorter or did not exist yet. A reading that failed says nothing either way.
pub const fn rose(before: Reading, after: Reading) -> bool {
    let before = match before {
        ABSENT => 0,
        b if b < 0 => return false,
        b => b,
    };
    after >= 0 && after > before
}

/// Most collections the runtime follows in one program.
pub const MAX_COLLECTIONS: usize = 4096;
/// Most steps in one entry.
pub const MAX_STEPS: usize = 64;

/// How a length is read where the steps end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Length {
    /// `Vec`, `VecDeque`, `String`: the length, the capacity, the buffer pointer.
    Vec { len: i64, cap: i64, ptr: i64 },
    /// hashbrown's `RawTableInner` (`HashMap`, `HashSet`, `IndexMap`'s indices).
    Table {
        items: i64,
        mask: i64,
        ctrl: i64,
        bucket: u64,
        align: u64,
    },
    /// A count alone.
    Count { len: i64 },
    /// smallvec 1's `SmallVec`.
    Small {
        cap: i64,
        inline: u64,
        len: i64,
        ptr: i64,
    },
}

/// One line of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A new entry: its root, a static's address or a thread-local's offset.
    Root { thread_local: bool, address: u64 },
    /// Move by this many bytes.
    Add(i64),
    /// Follow the pointer here.
    Deref,
    /// Go on only if the integer of `size` bytes at `offset` is (`equal`) or is not `value`.
    Guard {
        offset: i64,
        size: u8,
        value: u64,
        equal: bool,
    },
    /// A slice (pointer, length) here: the rest for each element.
    Slice { stride: u64, max: u64 },
    /// An array of `count` elements here: the rest for each.
    Repeat { stride: u64, count: u64 },
    /// The length, where the entry ends.
    Length(Length),
}

impl Step {
    /// Writes the step as one line, without its line break.
    pub fn encode(&self, out: &mut impl Sink) {
        match *self {
            Step::Root {
                thread_local,
                address,
            } => {
                out.put(if thread_local { "c t" } else { "c s" });
                put_num(out, address as i64);
            }
            Step::Add(offset) => {
                out.put("o");
                put_num(out, offset);
            }
            Step::Deref => out.put("p"),
            Step::Guard {
                offset,
                size,
                value,
                equal,
            } => {
                out.put(if equal { "e" } else { "n" });
                put_num(out, offset);
                put_num(out, i64::from(size));
                put_num(out, value as i64);
            }
            Step::Slice { stride, max } => {
                out.put("f");
                put_num(out, stride as i64);
                put_num(out, max as i64);
            }
            Step::Repeat { stride, count } => {
                out.put("r");
                put_num(out, stride as i64);
                put_num(out, count as i64);
            }
            Step::Length(Length::Vec { len, cap, ptr }) => {
                out.put("l v");
                for n in [len, cap, ptr] {
                    put_num(out, n);
                }
            }
            Step::Length(Length::Table {
                items,
                mask,
                ctrl,
                bucket,
                align,
            }) => {
                out.put("l h");
                for n in [items, mask, ctrl, bucket as i64, align as i64] {
                    put_num(out, n);
                }
            }
            Step::Length(Length::Count { len }) => {
                out.put("l x");
                put_num(out, len);
            }
            Step::Length(Length::Small {
                cap,
                inline,
                len,
                ptr,
            }) => {
                out.put("l m");
                for n in [cap, inline as i64, len, ptr] {
                    put_num(out, n);
                }
            }
        }
    }

    /// Reads one line; `None` for anything else.
    pub fn decode(line: &[u8]) -> Option<Step> {
        let mut w = words(line);
        let key = w.next()?;
        let step = match key {
            b"c" => {
                let thread_local = match w.next()? {
                    b"s" => false,
                    b"t" => true,
                    _ => return None,
                };
                let [address] = nums(&mut w)?;
                Step::Root {
                    thread_local,
                    address: u64::try_from(address).ok()?,
                }
            }
            b"o" => Step::Add(nums::<1>(&mut w)?[0]),
            b"p" => Step::Deref,
            b"e" | b"n" => {
                let [offset, size, value] = nums(&mut w)?;
                if !matches!(size, 1 | 2 | 4 | 8) {
                    return None;
                }
                Step::Guard {
                    offset,
                    size: size as u8,
                    value: value as u64,
                    equal: key == b"e",
                }
            }
            b"f" => {
                let [stride, max] = nums(&mut w)?;
                Step::Slice {
                    stride: u64::try_from(stride).ok().filter(|&s| s > 0)?,
                    max: u64::try_from(max).ok()?,
                }
            }
            b"r" => {
                let [stride, count] = nums(&mut w)?;
                Step::Repeat {
                    stride: u64::try_from(stride).ok().filter(|&s| s > 0)?,
                    count: u64::try_from(count).ok()?,
                }
            }
            b"l" => {
                let kind = w.next()?;
                Step::Length(match kind {
                    b"v" => {
                        let [len, cap, ptr] = nums(&mut w)?;
                        Length::Vec { len, cap, ptr }
                    }
                    b"h" => {
                        let [items, mask, ctrl, bucket, align] = nums(&mut w)?;
                        Length::Table {
                            items,
                            mask,
                            ctrl,
                            bucket: u64::try_from(bucket).ok()?,
                            align: u64::try_from(align).ok().filter(|a| a.is_power_of_two())?,
                        }
                    }
                    b"x" => Length::Count {
                        len: nums::<1>(&mut w)?[0],
                    },
                    b"m" => {
                        let [cap, inline, len, ptr] = nums(&mut w)?;
                        Length::Small {
                            cap,
                            inline: u64::try_from(inline).ok()?,
                            len,
                            ptr,
                        }
                    }
                    _ => return None,
                })
            }
            _ => return None,
        };
        w.next().is_none().then_some(step)
    }
}

crate::words::display_by_encode!(Step);

/// The entries of a table, each as the lines from its `c` line to its `l` line; an entry
/// with a line that does not decode, too many steps, or no length is skipped whole: it is
/// not what the tool meant, so none of it is followed.
pub struct Entries<'a> {
    lines: core::slice::Split<'a, u8, fn(&u8) -> bool>,
}

impl<'a> Entries<'a> {
    /// The entries of `table`, in order.
    pub fn of(table: &'a [u8]) -> Entries<'a> {
        fn newline(b: &u8) -> bool {
            *b == b'\n'
        }
        Entries {
            lines: table.split(newline as fn(&u8) -> bool),
        }
    }
}

/// One entry: its root and its steps, the last of which is its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub thread_local: bool,
    pub address: u64,
    pub steps: [Step; MAX_STEPS],
    pub n: usize,
}

impl Entry {
    /// The steps after the root, its length last.
    pub fn steps(&self) -> &[Step] {
        &self.steps[..self.n]
    }
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let mut current: Option<Entry> = None;
        loop {
            let line = self.lines.next()?;
            match Step::decode(line) {
                Some(Step::Root {
                    thread_local,
                    address,
                }) => {
                    current = Some(Entry {
                        thread_local,
                        address,
                        steps: [Step::Deref; MAX_STEPS],
                        n: 0,
                    })
                }
                Some(step) => {
                    let Some(entry) = current.as_mut() else {
                        continue;
                    };
                    if entry.n == MAX_STEPS {
                        current = None;
                        continue;
                    }
                    entry.steps[entry.n] = step;
                    entry.n += 1;
                    if matches!(step, Step::Length(_)) {
                        return current;
                    }
                }
                None if line.is_empty() => {}
                None => current = None,
            }
        }
    }
}

/// The build id a table names on its first line (`b <hex>`), when it does.
pub fn build_id(table: &[u8]) -> Option<&str> {
    let first = table.split(|&b| b == b'\n').next()?;
    let hex = first.strip_prefix(b"b ")?;
    core::str::from_utf8(hex).ok()
}

/// Reads the memory of the process the table describes; false where it cannot (a pointer
/// that does not lead into mapped memory).
pub trait Memory {
    fn read(&mut self, address: u64, out: &mut [u8]) -> bool;
}

/// What following an entry came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub reading: Reading,
    /// The address of the collection's buffer (0: none, or several).
    pub buffer: u64,
}

impl Read {
    const fn only(reading: Reading) -> Read {
        Read { reading, buffer: 0 }
    }
}

/// Follows `steps` (an entry's, after its root) from `base`, the root's address.
pub fn evaluate(steps: &[Step], base: u64, memory: &mut impl Memory) -> Read {
    let mut at = base;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Root { .. } => return Read::only(UNREADABLE),
            Step::Add(offset) => at = at.wrapping_add_signed(offset),
            Step::Deref => match word(memory, at, 8) {
                Some(0) | None => return Read::only(UNREADABLE),
                Some(p) => at = p,
            },
            Step::Guard {
                offset,
                size,
                value,
                equal,
            } => match word(memory, at.wrapping_add_signed(offset), size) {
                None => return Read::only(UNREADABLE),
                Some(v) if (v == value) != equal => return Read::only(ABSENT),
                Some(_) => {}
            },
            Step::Slice { stride, max } => {
                let (Some(ptr), Some(len)) = (word(memory, at, 8), word(memory, at + 8, 8)) else {
                    return Read::only(UNREADABLE);
                };
                if len > max {
                    return Read::only(INCONSISTENT);
                }
                return sum(&steps[i + 1..], ptr, stride, len, memory);
            }
            Step::Repeat { stride, count } => {
                return sum(&steps[i + 1..], at, stride, count, memory);
            }
            Step::Length(length) => return self::length(length, at, memory),
        }
    }
    Read::only(UNREADABLE)
}

/// The rest of the steps for each of `count` elements from `at`, `stride` apart: their
/// lengths summed (absent when every one is).
fn sum(steps: &[Step], at: u64, stride: u64, count: u64, memory: &mut impl Memory) -> Read {
    let mut total: Reading = ABSENT;
    for k in 0..count {
        let r = evaluate(steps, at.wrapping_add(k.wrapping_mul(stride)), memory).reading;
        total = match (total, r) {
            (_, UNREADABLE) | (_, INCONSISTENT) => return Read::only(r),
            (t, ABSENT) => t,
            (ABSENT, r) => r,
            (t, r) => t.saturating_add(r),
        };
    }
    Read::only(total)
}

fn length(length: Length, at: u64, memory: &mut impl Memory) -> Read {
    let mut field = |offset: i64| word(memory, at.wrapping_add_signed(offset), 8);
    let fits = |n: u64| i64::try_from(n).ok().filter(|&n| n < 1 << 48);
    match length {
        Length::Vec { len, cap, ptr } => {
            let (Some(len), Some(cap), Some(ptr)) = (field(len), field(cap), field(ptr)) else {
                return Read::only(UNREADABLE);
            };
            match fits(len) {
                Some(n) if len <= cap => Read {
                    reading: n,
                    buffer: if cap > 0 { ptr } else { 0 },
                },
                _ => Read::only(INCONSISTENT),
            }
        }
        Length::Table {
            items,
            mask,
            ctrl,
            bucket,
            align,
        } => {
            let (Some(items), Some(mask), Some(ctrl)) = (field(items), field(mask), field(ctrl))
            else {
                return Read::only(UNREADABLE);
            };
            let buckets = mask.wrapping_add(1);
            if items > buckets || (mask == 0 && items > 0) || !buckets.is_power_of_two() {
                return Read::only(INCONSISTENT);
            }
            let data = buckets.saturating_mul(bucket).saturating_add(align - 1) & !(align - 1);
            Read {
                reading: fits(items).unwrap_or(INCONSISTENT),
                buffer: if mask > 0 { ctrl.wrapping_sub(data) } else { 0 },
            }
        }
        Length::Count { len } => match field(len) {
            Some(n) => Read::only(fits(n).unwrap_or(INCONSISTENT)),
            None => Read::only(UNREADABLE),
        },
        Length::Small {
            cap,
            inline,
            len,
            ptr,
        } => {
            let Some(cap) = field(cap) else {
                return Read::only(UNREADABLE);
            };
            if cap <= inline {
                return Read::only(cap as i64);
            }
            let (Some(len), Some(ptr)) = (field(len), field(ptr)) else {
                return Read::only(UNREADABLE);
            };
            match fits(len) {
                Some(n) if len <= cap => Read {
                    reading: n,
                    buffer: ptr,
                },
                _ => Read::only(INCONSISTENT),
            }
        }
    }
}

/// The little-endian integer of `size` bytes at `address`.
fn word(memory: &mut impl Memory, address: u64, size: u8) -> Option<u64> {
    let mut bytes = [0u8; 8];
    let n = usize::from(size).min(8);
    memory
        .read(address, &mut bytes[..n])
        .then(|| u64::from_le_bytes(bytes))
}

/// One line of a `<dump>.collections` file (see [`crate::files::COLLECTIONS`]), written in
/// stacks mode after the last run: where each collection's buffer is, so that the tool finds
/// the stack that allocated it (the call that made it grow last).
///
/// ```text
/// leakcheck-collections/1
/// site <index> <buffer>      the collection of table entry `index`, its buffer's address (hex)
/// @ <pc> <pc> …              the stack that allocated that buffer, when the tracker has it
/// ```
///
/// followed by the process's mappings, as in a dump.
pub const SITES_HEADER: &str = "leakcheck-collections/1";

/// A `site` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub index: u32,
    pub buffer: u64,
}

impl Site {
    /// Writes the line, without its line break.
    pub fn encode(&self, out: &mut impl Sink) {
        out.put("site");
        put_num(out, i64::from(self.index));
        out.put(" ");
        let mut hex = [0u8; 16];
        let at = crate::words::format_hex(self.buffer, &mut hex);
        out.put(core::str::from_utf8(&hex[at..]).unwrap_or("0"));
    }

    /// Reads a `site` line.
    pub fn decode(line: &str) -> Option<Site> {
        let mut w = line.split(' ');
        (w.next()? == "site").then_some(())?;
        let index = u32::try_from(parse_num(w.next()?.as_bytes())?).ok()?;
        let buffer = u64::from_str_radix(w.next()?, 16).ok()?;
        w.next().is_none().then_some(Site { index, buffer })
    }
}

crate::words::display_by_encode!(Site);

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::{String, ToString};
    use std::vec;
    use std::vec::Vec;

    fn every_step() -> [(Step, &'static str); 11] {
        [
            (
                Step::Root {
                    thread_local: false,
                    address: 0xec558,
                },
                "c s 968024",
            ),
            (
                Step::Root {
                    thread_local: true,
                    address: 40,
                },
                "c t 40",
            ),
            (Step::Add(-16), "o -16"),
            (Step::Deref, "p"),
            (
                Step::Guard {
                    offset: 56,
                    size: 1,
                    value: 1,
                    equal: true,
                },
                "e 56 1 1",
            ),
            (
                Step::Guard {
                    offset: 0,
                    size: 4,
                    value: 3,
                    equal: false,
                },
                "n 0 4 3",
            ),
            (
                Step::Slice {
                    stride: 128,
                    max: 1024,
                },
                "f 128 1024",
            ),
            (
                Step::Repeat {
                    stride: 48,
                    count: 16,
                },
                "r 48 16",
            ),
            (
                Step::Length(Length::Vec {
                    len: 16,
                    cap: 0,
                    ptr: 8,
                }),
                "l v 16 0 8",
            ),
            (
                Step::Length(Length::Table {
                    items: 24,
                    mask: 8,
                    ctrl: 0,
                    bucket: 16,
                    align: 16,
                }),
                "l h 24 8 0 16 16",
            ),
            (
                Step::Length(Length::Small {
                    cap: 0,
                    inline: 4,
                    len: 16,
                    ptr: 8,
                }),
                "l m 0 4 16 8",
            ),
        ]
    }

    #[test]
    fn every_step_round_trips_in_the_documented_format() {
        for (step, text) in every_step() {
            assert_eq!(step.to_string(), text);
            assert_eq!(Step::decode(text.as_bytes()), Some(step), "{text}");
        }
        assert_eq!(
            Step::decode(b"l x 24"),
            Some(Step::Length(Length::Count { len: 24 }))
        );
    }

    #[test]
    fn malformed_lines_are_refused() {
        for line in [
            "",
            "c",
            "c s",
            "c q 1",
            "c s -1",
            "o",
            "p 1",
            "e 1 3 0",
            "f 0 5",
            "l",
            "l v 1 2",
            "l h 1 2 3 4 3",
            "l z 1",
            "o 1 2",
            "x",
            "r 0 3",
        ] {
            assert_eq!(Step::decode(line.as_bytes()), None, "{line:?}");
        }
    }

    #[test]
    fn entries_run_from_a_root_to_a_length_and_broken_ones_are_skipped() {
        let table = "b ab01\nc s 100\no 8\nl v 16 0 8\n\
                     c t 40\nl x 3\n\
                     c s 200\no 8\n\
                     c s 300\nbogus\nl x 0\n\
                     c s 400\nn 0 4 3\no 8\np\nl h 24 0 8 8 16\n";
        let entries: Vec<Entry> = Entries::of(table.as_bytes()).collect();
        let roots: Vec<(bool, u64)> = entries
            .iter()
            .map(|e| (e.thread_local, e.address))
            .collect();
        assert_eq!(roots, [(false, 100), (true, 40), (false, 400)]);
        assert_eq!(build_id(table.as_bytes()), Some("ab01"));
        assert_eq!(build_id(b"c s 100"), None);
        assert_eq!(entries[0].steps(), &[Step::Add(8), every_step()[8].0]);
        assert_eq!(entries[2].steps().len(), 4);
    }

    #[test]
    fn a_collection_rose_only_between_two_readings_that_say_so() {
        assert!(rose(3, 4));
        assert!(rose(ABSENT, 1), "created and filled");
        assert!(!rose(ABSENT, 0));
        assert!(!rose(4, 4));
        assert!(!rose(5, 4));
        assert!(!rose(4, ABSENT), "gone");
        assert!(!rose(UNREADABLE, 9), "nothing to compare with");
        assert!(!rose(2, INCONSISTENT));
    }

    /// Memory as a list of (address, bytes) regions.
    struct Regions(Vec<(u64, Vec<u8>)>);

    impl Memory for Regions {
        fn read(&mut self, address: u64, out: &mut [u8]) -> bool {
            self.0.iter().any(|(start, bytes)| {
                let Some(at) = address.checked_sub(*start) else {
                    return false;
                };
                let Some(src) = bytes.get(at as usize..at as usize + out.len()) else {
                    return false;
                };
                out.copy_from_slice(src);
                true
            })
        }
    }

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn steps(text: &str) -> Vec<Step> {
        text.lines()
            .map(|l| Step::decode(l.as_bytes()).unwrap())
            .collect()
    }

    #[test]
    fn an_entry_is_followed_through_guards_and_pointers_to_its_length() {
        // A static: a once-state word (0: not yet), then a pointer to a box holding a Vec
        // (cap, ptr, len).
        let mut memory = Regions(vec![
            (0x1000, words(&[1, 0x2000])),
            (0x2000, words(&[8, 0x3000, 5])),
        ]);
        let entry = steps("n 0 4 0\no 8\np\nl v 16 0 8");
        let read = evaluate(&entry, 0x1000, &mut memory);
        assert_eq!(
            read,
            Read {
                reading: 5,
                buffer: 0x3000
            }
        );
        // Before the once completes, the collection does not exist.
        memory.0[0].1[..4].copy_from_slice(&[0, 0, 0, 0]);
        assert_eq!(evaluate(&entry, 0x1000, &mut memory).reading, ABSENT);
        // A pointer into nothing, a length above the capacity.
        memory.0[0].1[..4].copy_from_slice(&[1, 0, 0, 0]);
        memory.0[0].1[8..16].copy_from_slice(&0x9000u64.to_le_bytes());
        assert_eq!(evaluate(&entry, 0x1000, &mut memory).reading, UNREADABLE);
        memory.0[0].1[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
        memory.0[1].1[16..24].copy_from_slice(&9u64.to_le_bytes());
        assert_eq!(evaluate(&entry, 0x1000, &mut memory).reading, INCONSISTENT);
    }

    #[test]
    fn a_hash_table_gives_its_items_and_where_its_buffer_starts() {
        // bucket_mask 7 (8 buckets of 8 bytes: 64 bytes before the control bytes).
        let mut memory = Regions(vec![(0x1000, words(&[0x5040, 7, 4, 3]))]);
        let entry = steps("l h 24 8 0 8 16");
        assert_eq!(
            evaluate(&entry, 0x1000, &mut memory),
            Read {
                reading: 3,
                buffer: 0x5000
            }
        );
        // An empty table points at a static group and has no buffer.
        let mut empty = Regions(vec![(0x1000, words(&[0x7777, 0, 0, 0]))]);
        assert_eq!(
            evaluate(&entry, 0x1000, &mut empty),
            Read {
                reading: 0,
                buffer: 0
            }
        );
        let mut wrong = Regions(vec![(0x1000, words(&[0x5040, 7, 0, 9]))]);
        assert_eq!(evaluate(&entry, 0x1000, &mut wrong).reading, INCONSISTENT);
    }

    #[test]
    fn slices_and_arrays_sum_their_elements_lengths() {
        // Three shards of two words each (a guard word, then a count).
        let mut memory = Regions(vec![
            (0x1000, words(&[0x2000, 3])),
            (0x2000, words(&[1, 4, 0, 9, 1, 2])),
        ]);
        let shards = steps("f 16 64\ne 0 8 1\nl x 8");
        assert_eq!(evaluate(&shards, 0x1000, &mut memory).reading, 6);
        let array = steps("r 16 3\ne 0 8 1\nl x 8");
        assert_eq!(evaluate(&array, 0x2000, &mut memory).reading, 6);
        let none = steps("r 16 3\ne 0 8 5\nl x 8");
        assert_eq!(evaluate(&none, 0x2000, &mut memory).reading, ABSENT);
        let too_many = steps("f 16 2\nl x 8");
        assert_eq!(
            evaluate(&too_many, 0x1000, &mut memory).reading,
            INCONSISTENT
        );
    }

    #[test]
    fn a_small_vec_is_inline_until_it_spills() {
        let entry = steps("l m 0 4 16 8");
        let mut inline = Regions(vec![(0x1000, words(&[3, 0, 0]))]);
        assert_eq!(evaluate(&entry, 0x1000, &mut inline).reading, 3);
        let mut spilled = Regions(vec![(0x1000, words(&[16, 0x4000, 9]))]);
        assert_eq!(
            evaluate(&entry, 0x1000, &mut spilled),
            Read {
                reading: 9,
                buffer: 0x4000
            }
        );
    }

    #[test]
    fn site_lines_round_trip() {
        let site = Site {
            index: 7,
            buffer: 0x7f12_3456_7000,
        };
        let mut s = String::new();
        site.encode(&mut s);
        assert_eq!(s, "site 7 7f1234567000");
        assert_eq!(Site::decode(&s), Some(site));
        assert_eq!(Site::decode("site 7"), None);
        assert_eq!(Site::decode("site x 10"), None);
    }
}
