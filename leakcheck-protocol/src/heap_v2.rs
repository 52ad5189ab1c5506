//! jemalloc's `heap_v2` heap profile, line by line: what the runtime's tracker writes and what
//! the tool reads (jemalloc's own dumps included). The whole-file reader, with its errors
//! for cut-short and foreign files, is the tool's; the grammar of each line is here.
//!
//! ```text
//! heap_v2/<sample period>
//!   t*: <objects>: <bytes> [<objects>: <bytes>]      totals (live, then accumulated)
//! @ 0x<pc> 0x<pc> …                                  a stack, innermost first
//!   t*: <objects>: <bytes> [<objects>: <bytes>]      its counts
//!   t<N>: <objects>: <bytes> [<objects>: <bytes>]    one thread's share (jemalloc only)
//!
//! MAPPED_LIBRARIES:
//! <the process's /proc/self/maps>
//! ```

use crate::words::{format_hex, format_u64, Sink};

/// The function the runtime's tracker puts as the innermost frame of the stack of a mapping
/// the program made itself (anonymous memory), so that a dump tells it from heap objects.
pub const MAPPED_MEMORY_FRAME: &str = "leakcheck_mapped_memory";
/// The same, for a mapping of a file.
pub const MAPPED_FILE_FRAME: &str = "leakcheck_mapped_file";

/// The first line's start; the sample period follows.
pub const HEADER: &str = "heap_v2/";
/// The line before the process's mappings.
pub const MAPPED_LIBRARIES: &str = "MAPPED_LIBRARIES:";

/// Objects and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub objects: u64,
    pub bytes: u64,
}

/// Whose counts a counts line holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// `t*:`, the sum over all threads.
    Total,
    /// `t<N>:`, one thread's share.
    Thread,
}

/// A counts line that is one but is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadCounts;

/// A stack line whose addresses are malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadAddress;

/// Writes the first line, `heap_v2/<period>`.
pub fn encode_header(period: u64, out: &mut impl Sink) {
    out.put(HEADER);
    put_dec(out, period);
}

/// Writes a totals line, `  t*: <live> [<accumulated>]`.
pub fn encode_total(live: Counts, accumulated: Counts, out: &mut impl Sink) {
    out.put("  t*: ");
    put_dec(out, live.objects);
    out.put(": ");
    put_dec(out, live.bytes);
    out.put(" [");
    put_dec(out, accumulated.objects);
    out.put(": ");
    put_dec(out, accumulated.bytes);
    out.put("]");
}

/// Writes a stack line, `@ 0x<pc> …`.
pub fn encode_stack(pcs: impl IntoIterator<Item = u64>, out: &mut impl Sink) {
    out.put("@");
    for pc in pcs {
        let mut digits = [0u8; 16];
        let at = format_hex(pc, &mut digits);
        out.put(" 0x");
        out.put(core::str::from_utf8(&digits[at..]).unwrap_or("0"));
    }
}

/// The sample period of a first line; `None` when it is not `heap_v2/<period>` with a
/// period of at least 1.
pub fn parse_header(line: &str) -> Option<u64> {
    parse_decimal(line.strip_prefix(HEADER)?).filter(|&p| p > 0)
}

/// Reads `t*: <objects>: <bytes> [<objects>: <bytes>]`, or the same with a thread number
/// (and then, jemalloc's, optionally the thread's name): the label, the live and the
/// accumulated counts (zero when absent). `Ok(None)` when the line is not a counts line.
pub fn parse_counts(line: &str) -> Result<Option<(Label, Counts, Counts)>, BadCounts> {
    let line = line.trim_start();
    let Some((label, rest)) = line.split_once(':') else {
        return Ok(None);
    };
    let label = match label.strip_prefix('t') {
        Some("*") => Label::Total,
        Some(thread) if parse_decimal(thread).is_some() => Label::Thread,
        _ => return Ok(None),
    };
    let (objects, rest) = rest.split_once(':').ok_or(BadCounts)?;
    let objects = parse_decimal(objects.trim_start()).ok_or(BadCounts)?;
    let rest = rest.trim_start();
    let bytes_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let bytes = parse_decimal(&rest[..bytes_end]).ok_or(BadCounts)?;
    let mut rest = rest[bytes_end..].trim_start();
    let mut accumulated = Counts::default();
    if let Some(inside) = rest.strip_prefix('[') {
        let (inside, after) = inside.split_once(']').ok_or(BadCounts)?;
        let (a, b) = inside.split_once(':').ok_or(BadCounts)?;
        accumulated = Counts {
            objects: parse_decimal(a.trim()).ok_or(BadCounts)?,
            bytes: parse_decimal(b.trim()).ok_or(BadCounts)?,
        };
        rest = after;
    }
    // Only thread lines may carry more text (the thread's name).
    if label == Label::Total && !rest.trim().is_empty() {
        return Err(BadCounts);
    }
    Ok(Some((label, Counts { objects, bytes }, accumulated)))
}

/// The addresses of a stack line (`@ 0x<pc> …`), each `None` when malformed; `None` when the
/// line is not a stack line. C's `%#x` writes a zero as plain `0`, so `0x` is optional.
pub fn parse_stack(line: &str) -> Option<impl Iterator<Item = Result<u64, BadAddress>> + '_> {
    let rest = line.strip_prefix('@')?;
    // `@0x1` would mean the separator is missing; jemalloc always writes `@ 0x1`.
    let joined = !rest.is_empty() && !rest.starts_with(char::is_whitespace);
    let words = rest.split_whitespace().map(move |word| {
        let digits = word
            .strip_prefix("0x")
            .or_else(|| word.strip_prefix("0X"))
            .unwrap_or(word);
        parse_hex(digits).filter(|_| !joined).ok_or(BadAddress)
    });
    Some(
        core::iter::once(joined)
            .filter(|&j| j)
            .map(|_| Err(BadAddress))
            .chain(words),
    )
}

fn put_dec(out: &mut impl Sink, v: u64) {
    let mut digits = [0u8; 20];
    let at = format_u64(v, &mut digits);
    out.put(core::str::from_utf8(&digits[at..]).unwrap_or("0"));
}

/// Unlike `str::parse`, refuses a sign and an empty string.
pub fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Unlike `u64::from_str_radix`, refuses a sign and an empty string.
pub fn parse_hex(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    #[test]
    fn every_line_round_trips() {
        let mut s = String::new();
        encode_header(4096, &mut s);
        assert_eq!(s, "heap_v2/4096");
        assert_eq!(parse_header(&s), Some(4096));

        let (live, accumulated) = (
            Counts {
                objects: 3,
                bytes: 320,
            },
            Counts {
                objects: u64::MAX,
                bytes: 0,
            },
        );
        let mut s = String::new();
        encode_total(live, accumulated, &mut s);
        assert_eq!(s, "  t*: 3: 320 [18446744073709551615: 0]");
        assert_eq!(
            parse_counts(&s),
            Ok(Some((Label::Total, live, accumulated)))
        );

        let pcs = [0x55d0_1234_u64, 0, u64::MAX];
        let mut s = String::new();
        encode_stack(pcs, &mut s);
        assert_eq!(s, "@ 0x55d01234 0x0 0xffffffffffffffff");
        let read: Vec<_> = parse_stack(&s).unwrap().collect();
        assert_eq!(read, pcs.map(Ok));
    }

    #[test]
    fn jemallocs_own_lines_are_read_and_malformed_ones_refused() {
        assert_eq!(
            parse_counts("  t3: 1: 8 [0: 0] worker").unwrap().unwrap().0,
            Label::Thread
        );
        assert_eq!(parse_counts("  t*: 1: 8 [0: 0] extra"), Err(BadCounts));
        assert_eq!(parse_counts("  t*: x: 8"), Err(BadCounts));
        assert_eq!(parse_counts("garbage"), Ok(None));
        let zero: Vec<_> = parse_stack("@ 0 0x10").unwrap().collect();
        assert_eq!(zero, [Ok(0), Ok(16)]);
        assert!(parse_stack("@0x1").unwrap().any(|a| a.is_err()));
        assert!(parse_stack("@ 0xzz").unwrap().any(|a| a.is_err()));
        assert!(parse_stack("t*: 1: 2").is_none());
        assert_eq!(parse_header("heap_v2/0"), None);
        assert_eq!(parse_header("heap_v3/1"), None);
    }
}
