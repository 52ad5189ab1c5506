//! Sizes as people write them (`64KiB`, `1.5 MB`, `4096`), exactly, in bytes.

/// A size that could not be read, with the text as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid size `{text}`: {problem}")]
pub struct SizeError {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub problem: SizeProblem,
}

/// What is wrong with a size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeProblem {
    /// No digits before the unit.
    #[error("expected a number and a unit such as `4KiB`")]
    NoNumber,
    /// A unit that is not one of the known ones (lower-cased).
    #[error("unknown unit `{0}` (use B, KiB, MiB, GiB, KB, MB or GB)")]
    UnknownUnit(String),
    /// Digits and dots that do not make a number.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// More than `u64::MAX` bytes.
    #[error("out of range (at most 2^64 - 1 bytes)")]
    OutOfRange,
    /// A fraction of a byte.
    #[error("not a whole number of bytes")]
    NotWhole,
}

/// Parses a human size: `0`, `512B`, `4KiB`, `1.5MiB`, `2GiB`; also `KB`/`MB`/`GB`
/// (decimal). Case-insensitive, optional space before the unit.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let error = |problem| SizeError {
        text: text.to_string(),
        problem,
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(error(SizeProblem::NoNumber));
    }
    let mult: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(error(SizeProblem::UnknownUnit(other.to_string()))),
    };
    // Exact decimal arithmetic: a float would round 2^64 down to fit, or turn
    // `0.1KB` into 100.00000000000001 bytes.
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(error(SizeProblem::NotANumber(num.to_string())));
    }
    let out_of_range = || error(SizeProblem::OutOfRange);
    let digits = |d: &str| -> Result<u128, SizeError> {
        if d.is_empty() {
            Ok(0)
        } else {
            d.parse::<u128>().map_err(|_| out_of_range())
        }
    };
    let frac = frac.trim_end_matches('0');
    if frac.len() > 30 {
        return Err(error(SizeProblem::NotWhole));
    }
    let whole = digits(int)?.checked_mul(mult).ok_or_else(out_of_range)?;
    let scale = 10u128.pow(frac.len() as u32);
    let part = digits(frac)?.checked_mul(mult).ok_or_else(out_of_range)?;
    if part % scale != 0 {
        return Err(error(SizeProblem::NotWhole));
    }
    let bytes = whole.checked_add(part / scale).ok_or_else(out_of_range)?;
    u64::try_from(bytes).map_err(|_| out_of_range())
}
