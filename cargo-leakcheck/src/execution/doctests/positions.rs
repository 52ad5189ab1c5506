//! Which doc-test an executable holds, told from where its code is. rustdoc compiles a
//! doc-test as a crate of its own from the doc-test's code and a few lines it puts before
//! it, and the line tables (rustdoc is given `-C debuginfo=line-tables-only`) hold the line
//! and column of every piece of that code. Those positions, less the lines before the code,
//! must all fall on code of the doc-test's block: a block of other code does not hold
//! code at every one of them.

use std::path::Path;

/// The most lines rustdoc puts before a doc-test's code (`#![allow(unused)]`, the crate's
/// `#![doc(test(attr(…)))]` attributes, `extern crate`).
const MAX_PREAMBLE: u32 = 32;

/// The `(line, column)` of every row of the line tables of the code at the address ranges
/// `functions` (`[start, end)`, addresses of the executable `exe`) that is in a file whose
/// path ends with `path`.
pub fn code_positions(exe: &Path, functions: &[(u64, u64)], path: &str) -> Vec<(u32, u32)> {
    let Ok(loader) = addr2line::Loader::new(exe) else {
        return Vec::new();
    };
    let mut positions = Vec::new();
    for &(start, end) in functions {
        let Ok(rows) = loader.find_location_range(start, end) else {
            continue;
        };
        for (_, _, location) in rows {
            let in_file = location.file.is_some_and(|f| f.ends_with(path));
            if let (true, Some(line)) = (in_file, location.line) {
                positions.push((line, location.column.unwrap_or(0)));
            }
        }
    }
    positions.sort_unstable();
    positions.dedup();
    positions
}

/// How many lines rustdoc put before the code of `block`, when every position falls on a
/// line of it with code, within the line (column 0: anywhere on it); `None` when no number
/// of lines does.
pub fn fits(block: &[String], positions: &[(u32, u32)]) -> Option<u32> {
    if positions.is_empty() {
        return None;
    }
    (0..=MAX_PREAMBLE).find(|&before| {
        positions.iter().all(|&(line, column)| {
            let Some(text) = line
                .checked_sub(before)
                .filter(|&l| l >= 1)
                .and_then(|l| block.get(l as usize - 1))
            else {
                return false;
            };
            // A line with code; the column on a character of code, or just past the
            // line's end (where a function's last row, after its closing brace, stands).
            let len = text.chars().count();
            !text.trim().is_empty()
                && match column as usize {
                    0 => true,
                    c if c == len + 1 => true,
                    c => text
                        .chars()
                        .nth(c - 1)
                        .is_some_and(|ch| !ch.is_whitespace()),
                }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn positions_fit_only_the_block_whose_code_is_at_them_and_say_the_lines_before() {
        let parse = block(&[
            "use std::str::FromStr;",
            "",
            "fn main() {",
            "    let n = u32::from_str(\"42\").unwrap();",
            "    assert_eq!(n, 42);",
            "}",
        ]);
        let count = block(&[
            "fn main() {",
            "    let words = \"a b\".split(' ').count();",
            "    println!(\"{words}\");",
            "}",
        ]);
        // Compiled with one line before the code: `main` at line 4, its statements at 5
        // and 6 (the columns of `let`, `unwrap` and `assert_eq`), its end at 7.
        let unwrap = parse[3].find("unwrap").unwrap() as u32 + 1;
        // The last row just past the closing brace.
        let positions = [(4, 1), (5, 5), (5, unwrap), (6, 5), (7, 2)];
        assert_eq!(fits(&parse, &positions), Some(1));
        // Blank, or indentation where code was: not that block's code.
        assert_eq!(fits(&count, &[(4, 1), (5, 5), (6, 5), (7, 9)]), None);
        // The fewest lines before the code that fit: line 2 is blank, line 1 is code.
        assert_eq!(fits(&parse, &[(1, 1)]), Some(0));
        assert_eq!(fits(&parse, &[(2, 2)]), Some(1));
        assert_eq!(fits(&count, &[(2, 5), (3, 5), (4, 1)]), Some(0));
        assert_eq!(fits(&count, &[]), None);
        // Column 0: any line with code.
        assert_eq!(fits(&count, &[(3, 0)]), Some(0));
    }
}
