//! Settings that decide verdicts. (The `leakcheck.toml` file arrives with per-test
//! thresholds; for now the command line is the only source.)

/// Parses a human size: `0`, `512B`, `4KiB`, `1.5MiB`, `2GiB`; also `KB`/`MB`/`GB`
/// (decimal). Case-insensitive, optional space before the unit.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "invalid size `{text}`: expected a number and a unit such as `4KiB`"
        ));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size `{text}`: `{num}` is not a number"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "invalid size `{text}`: unknown unit `{other}` (use B, KiB, MiB, GiB, KB, MB or GB)"
            ))
        }
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("invalid size `{text}`: out of range"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!(
            "invalid size `{text}`: not a whole number of bytes"
        ));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("0B"), Ok(0));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4 kib"), Ok(4096));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3KB"), Ok(3000));
    }

    #[test]
    fn rejects_bad_sizes_naming_them() {
        let e = parse_size("4XB").unwrap_err();
        assert!(
            e.contains("`4XB`") && e.contains("unknown unit `xb`"),
            "{e}"
        );
        assert!(parse_size("KiB").unwrap_err().contains("expected a number"));
        assert!(parse_size("1.5B").unwrap_err().contains("whole number"));
        assert!(parse_size("-1B").is_err());
    }
}
