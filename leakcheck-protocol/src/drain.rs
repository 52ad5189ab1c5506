//! What the tool tells the runtime about the deferred-reclamation runtimes linked into a
//! test binary, so that the runtime can drain what the program already scheduled to free
//! before it measures (see the runtime's `drain` module).
//!
//! [`Reclaimer`] is the one table of the kinds the tool finds and the runtime drains; each
//! side has one row per kind (the tool's finder of its functions, the runtime's module that
//! drains it), matched exhaustively, so a new kind is a variant here and a row on each side.
//!
//! The value of [`crate::env::DRAIN`] lists the collectors, one per version of a reclaimer
//! linked in: for each, its kind's name and the image addresses of its two functions, the
//! one that enters the collector and the one that leaves it again (what they are is the
//! kind's: see [`Reclaimer`]), hexadecimal, `kind:enter:leave` separated by commas:
//!
//! ```text
//! crossbeam-epoch:4a3f10:4a3e90,crossbeam-epoch:51c200:51c180
//! ```

use crate::words::Sink;

/// The most collectors one process drains, all kinds together.
pub const MAX_COLLECTORS: usize = 4;

/// A kind of deferred-reclamation runtime: the one table of kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reclaimer {
    /// crossbeam-epoch's default collector (behind rayon, crossbeam-deque, moka, …): enter is
    /// `crossbeam_epoch::default::pin` (`fn() -> Guard`), leave `<Guard as Drop>::drop`
    /// (`fn(&mut Guard)`) of the same version.
    CrossbeamEpoch,
}

impl Reclaimer {
    /// Every kind.
    pub const ALL: [Reclaimer; 1] = [Reclaimer::CrossbeamEpoch];

    /// The kind of a record line written before lines named their kind: the only one there
    /// was then.
    pub const UNNAMED: Reclaimer = Reclaimer::CrossbeamEpoch;

    /// Its name, in the list, the record and the report (no space, comma or colon).
    pub const fn name(self) -> &'static str {
        match self {
            Reclaimer::CrossbeamEpoch => "crossbeam-epoch",
        }
    }

    /// The kind of this name.
    pub fn from_name(name: &str) -> Option<Reclaimer> {
        Reclaimer::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl core::fmt::Display for Reclaimer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// One collector: its kind and its two functions, as image addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Collector {
    /// What it is, which says what its two functions are.
    pub kind: Reclaimer,
    /// The function that enters the collector.
    pub enter: u64,
    /// The function that leaves it again.
    pub leave: u64,
}

impl Collector {
    /// A placeholder, for fixed-size tables: never read past the count of a list.
    pub const NONE: Collector = Collector {
        kind: Reclaimer::ALL[0],
        enter: 0,
        leave: 0,
    };
}

/// Writes the list (at most [`MAX_COLLECTORS`]; the rest are left out).
pub fn encode(collectors: &[Collector], out: &mut impl Sink) {
    for (i, c) in collectors.iter().take(MAX_COLLECTORS).enumerate() {
        if i > 0 {
            out.put(",");
        }
        out.put(c.kind.name());
        out.put(":");
        put_hex(out, c.enter);
        out.put(":");
        put_hex(out, c.leave);
    }
}

/// Reads the list into `out`; returns how many were read, or `None` for a malformed text
/// or a kind this build does not know (then nothing is drained).
pub fn decode(text: &str, out: &mut [Collector; MAX_COLLECTORS]) -> Option<usize> {
    let mut n = 0;
    for one in text.split(',').filter(|p| !p.is_empty()) {
        if n == MAX_COLLECTORS {
            return None;
        }
        let (kind, functions) = one.split_once(':')?;
        let (enter, leave) = functions.split_once(':')?;
        out[n] = Collector {
            kind: Reclaimer::from_name(kind)?,
            enter: parse_hex(enter)?,
            leave: parse_hex(leave)?,
        };
        n += 1;
    }
    Some(n)
}

/// The list as text, for the tool to set.
pub struct List<'a>(pub &'a [Collector]);

impl core::fmt::Display for List<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        encode(self.0, f);
        Ok(())
    }
}

fn put_hex(out: &mut impl Sink, v: u64) {
    let mut digits = [0u8; 16];
    let at = crate::words::format_hex(v, &mut digits);
    out.put(core::str::from_utf8(&digits[at..]).unwrap_or("0"));
}

use crate::heap_v2::parse_hex;

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const EPOCH: Reclaimer = Reclaimer::CrossbeamEpoch;

    #[test]
    fn a_list_round_trips() {
        let list = [
            Collector {
                kind: EPOCH,
                enter: 0x4a3f10,
                leave: 0x4a3e90,
            },
            Collector {
                kind: EPOCH,
                enter: 0xffff_ffff_ffff_ffff,
                leave: 0,
            },
        ];
        let text = List(&list).to_string();
        assert_eq!(
            text,
            "crossbeam-epoch:4a3f10:4a3e90,crossbeam-epoch:ffffffffffffffff:0"
        );
        let mut out = [Collector::NONE; MAX_COLLECTORS];
        assert_eq!(decode(&text, &mut out), Some(2));
        assert_eq!(&out[..2], &list);
    }

    #[test]
    fn a_malformed_list_drains_nothing() {
        let mut out = [Collector::NONE; MAX_COLLECTORS];
        for bad in [
            "4a3f10:4a3e90",
            "crossbeam-epoch:4a3f10",
            "crossbeam-epoch:4a3f10:",
            "crossbeam-epoch:x:1",
            "unknown-kind:1:2",
            "crossbeam-epoch:1:2,3",
            "crossbeam-epoch:1:2,crossbeam-epoch:3:4,crossbeam-epoch:5:6,crossbeam-epoch:7:8,crossbeam-epoch:9:a",
        ] {
            assert_eq!(decode(bad, &mut out), None, "{bad}");
        }
        assert_eq!(decode("", &mut out), Some(0));
    }

    #[test]
    fn names_are_distinct_and_fit_the_list_and_the_record() {
        for (i, k) in Reclaimer::ALL.into_iter().enumerate() {
            assert_eq!(Reclaimer::from_name(k.name()), Some(k));
            assert!(!k.name().is_empty());
            assert!(k
                .name()
                .bytes()
                .all(|b| !b.is_ascii_whitespace() && b != b',' && b != b':'));
            assert!(Reclaimer::ALL[i + 1..].iter().all(|o| o.name() != k.name()));
        }
    }
}
