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
//!
//! `a <seq> <allocated> <active> <resident> <mapped> <retained> <dirty> <muzzy> <program>
//! <rss> <anonymous> <shared> <lazy-free> <swap>`: the allocator's own figures and the
//! kernel's split of the resident set when the periodic dump `seq` was taken (see
//! [`MemoryAt`]), in bytes, after the dump's own line.

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

/// What the allocator says of its memory, and how much the program mapped itself, at a
/// periodic dump (the `a` line). The allocator's figures are jemalloc's (`stats.*`, read after
/// refreshing its `epoch`), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryAt {
    /// The periodic dump's sequence number.
    pub seq: u64,
    /// Bytes in live objects (`stats.allocated`).
    pub allocated: u64,
    /// Bytes in pages that hold live objects (`stats.active`): what is above `allocated` is
    /// fragmentation.
    pub active: u64,
    /// Bytes the allocator has resident (`stats.resident`): active pages, its metadata, and
    /// the dirty pages it has not returned yet.
    pub resident: u64,
    /// Bytes in the allocator's active extents (`stats.mapped`).
    pub mapped: u64,
    /// Bytes of address space the allocator kept after returning their pages
    /// (`stats.retained`): not resident.
    pub retained: u64,
    /// Bytes in pages freed but not yet returned to the kernel (`pdirty`, all arenas).
    pub dirty: u64,
    /// Bytes in pages returned lazily (`MADV_FREE`, `pmuzzy`), resident until the kernel
    /// needs them.
    pub muzzy: u64,
    /// Bytes the program mapped itself, outside the allocator, and still has mapped.
    pub program_mapped: u64,
    /// The kernel's split of the resident set at the same moment (`smaps_rollup`).
    pub kernel: ResidentSet,
}

/// A process's resident set as the kernel splits it (`/proc/<pid>/smaps_rollup`), bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResidentSet {
    /// All resident pages (`Rss`).
    pub rss: u64,
    /// Anonymous pages: heap, mappings of no file, thread stacks (`Anonymous`); the rest of
    /// `rss` is pages of files and shared memory.
    pub anonymous: u64,
    /// Pages shared with other processes (`Shared_Clean` + `Shared_Dirty`).
    pub shared: u64,
    /// Pages given back with `MADV_FREE` that the kernel has not taken yet, still counted in
    /// `rss` (`LazyFree`).
    pub lazy_free: u64,
    /// Pages swapped out, not in `rss` (`Swap`).
    pub swap: u64,
}

impl ResidentSet {
    /// Reads the text of `smaps_rollup` (sizes in kB); None without an `Rss` line.
    pub fn parse(text: &str) -> Option<ResidentSet> {
        let field = |name: &str| {
            text.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?;
                let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                Some(kib * 1024)
            })
        };
        Some(ResidentSet {
            rss: field("Rss")?,
            anonymous: field("Anonymous").unwrap_or(0),
            shared: field("Shared_Clean").unwrap_or(0) + field("Shared_Dirty").unwrap_or(0),
            lazy_free: field("LazyFree").unwrap_or(0),
            swap: field("Swap").unwrap_or(0),
        })
    }

    /// Pages of mapped files and shared memory: `rss` less `anonymous`.
    pub fn file(&self) -> u64 {
        self.rss.saturating_sub(self.anonymous)
    }
}

impl MemoryAt {
    /// Writes the line, without its newline.
    pub fn encode(&self, out: &mut impl Sink) {
        out.put("a");
        for v in [
            self.seq,
            self.allocated,
            self.active,
            self.resident,
            self.mapped,
            self.retained,
            self.dirty,
            self.muzzy,
            self.program_mapped,
            self.kernel.rss,
            self.kernel.anonymous,
            self.kernel.shared,
            self.kernel.lazy_free,
            self.kernel.swap,
        ] {
            put_num(out, v as i64);
        }
    }

    /// Reads one line; `None` for anything else.
    pub fn parse(line: &str) -> Option<MemoryAt> {
        let mut words = line.split(' ');
        (words.next()? == "a").then_some(())?;
        let mut v = [0u64; 14];
        for slot in &mut v {
            *slot = words.next()?.parse().ok()?;
        }
        words.next().is_none().then_some(MemoryAt {
            seq: v[0],
            allocated: v[1],
            active: v[2],
            resident: v[3],
            mapped: v[4],
            retained: v[5],
            dirty: v[6],
            muzzy: v[7],
            program_mapped: v[8],
            kernel: ResidentSet {
                rss: v[9],
                anonymous: v[10],
                shared: v[11],
                lazy_free: v[12],
                swap: v[13],
            },
        })
    }
}

crate::words::display_by_encode!(MemoryAt);

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
    fn memory_figures_round_trip_and_a_cut_line_is_refused() {
        let m = MemoryAt {
            seq: 4,
            allocated: 1 << 20,
            active: 3 << 20,
            resident: 9 << 20,
            mapped: 12 << 20,
            retained: 1 << 30,
            dirty: 5 << 20,
            muzzy: 0,
            program_mapped: 256 << 10,
            kernel: ResidentSet {
                rss: 40 << 20,
                anonymous: 30 << 20,
                shared: 2 << 20,
                lazy_free: 1 << 20,
                swap: 0,
            },
        };
        let text = m.to_string();
        assert_eq!(MemoryAt::parse(&text), Some(m));
        assert_eq!(MemoryAt::parse(text.rsplit_once(' ').unwrap().0), None);
        assert_eq!(Mark::parse(&text), None);
        assert_eq!(LengthAt::parse(&text), None);
    }

    #[test]
    fn the_kernels_split_of_the_resident_set_is_read() {
        let text = "55f7cfeae000-7fff040fa000 ---p 00000000 00:00 0    [rollup]\n\
            Rss:               21700 kB\nPss:                 344 kB\n\
            Shared_Clean:       1536 kB\nShared_Dirty:         64 kB\n\
            Private_Dirty:       112 kB\nAnonymous:         18112 kB\n\
            LazyFree:            512 kB\nAnonHugePages:         0 kB\nSwap:      8 kB\n\
            SwapPss:               0 kB\n";
        let r = ResidentSet::parse(text).unwrap();
        assert_eq!(
            r,
            ResidentSet {
                rss: 21700 << 10,
                anonymous: 18112 << 10,
                shared: 1600 << 10,
                lazy_free: 512 << 10,
                swap: 8 << 10,
            }
        );
        assert_eq!(r.file(), 3588 << 10);
        assert_eq!(ResidentSet::parse("Pss: 3 kB\n"), None);
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
