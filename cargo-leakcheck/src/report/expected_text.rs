//! Rendered text checked against what is expected: compares with a file under `testdata/rendered/`,
//! or writes it when `LEAKCHECK_BLESS=1` (then review the diff), the switch that blesses
//! the golden cases' `expected.json` too.

use std::path::{Path, PathBuf};

/// Whether this run writes the expected texts (and the golden cases' reports) instead of
/// comparing with them: `LEAKCHECK_BLESS=1`.
pub fn blessing() -> bool {
    std::env::var_os("LEAKCHECK_BLESS").is_some_and(|v| v == "1")
}

/// The directory of every expected text.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/rendered")
}

/// Asserts that `text` is what `testdata/rendered/<name>.txt` holds.
pub fn assert_matches(name: &str, text: &str) {
    if let Err(e) = check(&format!("{name}.txt"), text) {
        panic!("{e}");
    }
}

/// Compares `text` with the expected text `testdata/rendered/<file>` (writing it instead when
/// blessing): what differs, where, when it does.
pub fn check(file: &str, text: &str) -> Result<(), String> {
    let path = dir().join(file);
    if blessing() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        return Ok(());
    }
    let expected = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "no expected text {} ({e}); LEAKCHECK_BLESS=1 writes it",
            path.display()
        )
    })?;
    if expected == text {
        return Ok(());
    }
    let (want, got): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), text.lines().collect());
    let first = want
        .iter()
        .zip(&got)
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| want.len().min(got.len()));
    let column = match (want.get(first), got.get(first)) {
        (Some(a), Some(b)) => a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count(),
        _ => 0,
    };
    Err(format!(
        "{} differs from line {}, column {} on ({} lines expected, {} written; LEAKCHECK_BLESS=1 rewrites it, then review the diff):\n--- expected\n{}--- actual\n{}",
        path.display(),
        first + 1,
        column + 1,
        want.len(),
        got.len(),
        around(&want, first, column),
        around(&got, first, column)
    ))
}

/// Lines around the `at`th (counted from 0), numbered from 1, the `at`th marked; each cut
/// to [`SHOWN`] characters around `column`, where the first difference is.
fn around(lines: &[&str], at: usize, column: usize) -> String {
    let shown = at.saturating_sub(3)..(at + 4).min(lines.len());
    let mut s = String::new();
    for i in shown {
        let mark = if i == at { '>' } else { ' ' };
        s.push_str(&format!("{mark}{:>5} | {}\n", i + 1, cut(lines[i], column)));
    }
    if at >= lines.len() {
        s.push_str(&format!(">{:>5} | (ends)\n", lines.len() + 1));
    }
    s
}

/// Characters of a line shown at most, around the column that differs.
const SHOWN: usize = 160;

/// `line`, cut to [`SHOWN`] characters starting a little before `column`, `…` where cut.
fn cut(line: &str, column: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SHOWN {
        return line.to_string();
    }
    let start = column.saturating_sub(SHOWN / 4).min(chars.len() - SHOWN);
    let end = start + SHOWN;
    format!(
        "{}{}{}",
        if start > 0 { "…" } else { "" },
        chars[start..end].iter().collect::<String>(),
        if end < chars.len() { "…" } else { "" }
    )
}
