//! What the tool tells the runtime about the deferred-reclamation runtimes linked into a
//! test binary, so that the runtime can drain what the program already scheduled to free
//! before it measures (see the runtime's `drain` module).
//!
//! The value of [`crate::env::DRAIN_EPOCH`] lists crossbeam-epoch's default collectors, one
//! per crossbeam-epoch version linked in: for each, the image addresses of its
//! `crossbeam_epoch::default::pin` and of `<Guard as Drop>::drop` of the same version,
//! hexadecimal, `pin:drop` pairs separated by commas:
//!
//! ```text
//! 4a3f10:4a3e90,51c200:51c180
//! ```

use crate::words::Sink;

/// The most collectors one process drains.
pub const MAX_COLLECTORS: usize = 4;

/// One collector's functions, as image addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Collector {
    /// `crossbeam_epoch::default::pin`: `fn() -> Guard`.
    pub pin: u64,
    /// `<crossbeam_epoch::Guard as Drop>::drop`: `fn(&mut Guard)`.
    pub unpin: u64,
}

/// Writes the list (at most [`MAX_COLLECTORS`]; the rest are left out).
pub fn encode(collectors: &[Collector], out: &mut impl Sink) {
    for (i, c) in collectors.iter().take(MAX_COLLECTORS).enumerate() {
        if i > 0 {
            out.put(",");
        }
        put_hex(out, c.pin);
        out.put(":");
        put_hex(out, c.unpin);
    }
}

/// Reads the list into `out`; returns how many were read, or `None` for a malformed text
/// (then nothing is drained).
pub fn decode(text: &str, out: &mut [Collector; MAX_COLLECTORS]) -> Option<usize> {
    let mut n = 0;
    for pair in text.split(',').filter(|p| !p.is_empty()) {
        if n == MAX_COLLECTORS {
            return None;
        }
        let (pin, unpin) = pair.split_once(':')?;
        out[n] = Collector {
            pin: parse_hex(pin)?,
            unpin: parse_hex(unpin)?,
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

    #[test]
    fn a_list_round_trips() {
        let list = [
            Collector {
                pin: 0x4a3f10,
                unpin: 0x4a3e90,
            },
            Collector {
                pin: 0xffff_ffff_ffff_ffff,
                unpin: 0,
            },
        ];
        let text = List(&list).to_string();
        assert_eq!(text, "4a3f10:4a3e90,ffffffffffffffff:0");
        let mut out = [Collector::default(); MAX_COLLECTORS];
        assert_eq!(decode(&text, &mut out), Some(2));
        assert_eq!(&out[..2], &list);
    }

    #[test]
    fn a_malformed_list_drains_nothing() {
        let mut out = [Collector::default(); MAX_COLLECTORS];
        for bad in ["4a3f10", "4a3f10:", "x:1", "1:2,3", "1:2,3:4,5:6,7:8,9:a"] {
            assert_eq!(decode(bad, &mut out), None, "{bad}");
        }
        assert_eq!(decode("", &mut out), Some(0));
    }
}
