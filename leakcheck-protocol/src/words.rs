//! Space-separated words and decimal numbers: the grammar every line of the contract uses.

/// Where encoded text goes: the runtime's fixed line buffer, or a `String` in the tool.
pub trait Sink {
    /// Appends text as it is.
    fn put(&mut self, text: &str);
}

impl Sink for core::fmt::Formatter<'_> {
    fn put(&mut self, text: &str) {
        let _ = core::fmt::Write::write_str(self, text);
    }
}

/// `Display` through the type's own `encode(&self, &mut impl Sink)`: one spelling of each line,
/// for the tool's `to_string` and the runtime's fixed buffers alike.
macro_rules! display_by_encode {
    ($($t:ty),*) => {$(
        impl core::fmt::Display for $t {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                self.encode(f);
                Ok(())
            }
        }
    )*};
}
pub(crate) use display_by_encode;

/// Writes `v` in decimal at the end of `buf`; returns where the digits start.
pub fn format_u64(mut v: u64, buf: &mut [u8; 20]) -> usize {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return i;
        }
    }
}

/// Writes `v` in lowercase hexadecimal at the end of `buf`; returns where the digits start.
pub fn format_hex(mut v: u64, buf: &mut [u8; 16]) -> usize {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            return i;
        }
    }
}

/// Appends a space and a signed decimal number.
pub(crate) fn put_num(sink: &mut impl Sink, v: i64) {
    let mut digits = [0u8; 20];
    let at = format_u64(v.unsigned_abs(), &mut digits);
    sink.put(if v < 0 { " -" } else { " " });
    // ASCII digits only.
    sink.put(core::str::from_utf8(&digits[at..]).unwrap_or("?"));
}

/// Appends a space and free text, with line breaks turned into spaces: one entry per line,
/// whatever a message holds.
pub(crate) fn put_text(sink: &mut impl Sink, text: &str) {
    sink.put(" ");
    for (i, part) in text.split(['\n', '\r']).enumerate() {
        if i > 0 {
            sink.put(" ");
        }
        sink.put(part);
    }
}

/// A signed decimal number, a leading `-` for negative ones; `None` for anything else.
pub(crate) fn parse_num(word: &[u8]) -> Option<i64> {
    let (negative, digits) = match word.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, word),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulated with its sign, so i64::MIN parses too.
    let sign = if negative { -1 } else { 1 };
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(sign * i64::from(d - b'0'))?;
    }
    Some(v)
}

/// The words of a line, split at single spaces.
pub(crate) fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// Parses the next `N` words as numbers; `None` if any is missing or not a number.
pub(crate) fn nums<'a, const N: usize>(
    words: &mut impl Iterator<Item = &'a [u8]>,
) -> Option<[i64; N]> {
    let mut out = [0i64; N];
    for slot in &mut out {
        *slot = parse_num(words.next()?)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;

    impl Sink for String {
        fn put(&mut self, text: &str) {
            self.push_str(text);
        }
    }

    #[test]
    fn numbers_round_trip_at_the_edges() {
        for v in [0, 1, -1, 9, 10, 4096, i64::MAX, i64::MIN + 1, i64::MIN] {
            let mut s = String::new();
            put_num(&mut s, v);
            assert_eq!(parse_num(s.trim_start().as_bytes()), Some(v), "{s}");
        }
        assert_eq!(parse_num(b"-"), None);
        assert_eq!(parse_num(b""), None);
        assert_eq!(parse_num(b"12a"), None);
        assert_eq!(parse_num(b"99999999999999999999"), None);
    }

    #[test]
    fn free_text_stays_on_one_line() {
        let mut s = String::new();
        put_text(&mut s, "assertion failed\nleft: 1\r\nright: 2");
        assert_eq!(s, " assertion failed left: 1  right: 2");
    }
}
