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

/// Pairs executables with candidate doc-tests, given the candidates (by index, with the
/// lines before their code) each executable's code fits: an executable whose only candidate
/// still unpaired is no other executable's only one is that one's; pairing one may leave
/// another with a single candidate, so it goes on until nothing changes. A last executable
/// left with a last candidate are a pair (each doc-test that ran has one executable), with
/// no count of lines before. Returns (executable, candidate, lines before).
pub fn pair(fits: &[Vec<(usize, u32)>], candidates: usize) -> Vec<(usize, usize, Option<u32>)> {
    let mut open: Vec<usize> = (0..fits.len()).collect();
    let mut unpaired: Vec<bool> = vec![true; candidates];
    let mut pairs = Vec::new();
    loop {
        // Each open executable's one candidate still unpaired, when it has one.
        let singles: Vec<Option<(usize, u32)>> = (open.iter())
            .map(|&e| {
                let mut left = fits[e].iter().filter(|(c, _)| unpaired[*c]);
                let one = left.next().copied();
                one.filter(|_| left.next().is_none())
            })
            .collect();
        // A candidate that is the only one of two executables is neither's: one of them
        // holds a block that could not be read, or blocks alike.
        let claimed = |c: usize| singles.iter().flatten().filter(|(d, _)| *d == c).count();
        let pick = (singles.iter().enumerate())
            .find_map(|(i, one)| one.filter(|(c, _)| claimed(*c) == 1).map(|one| (i, one)));
        let Some((i, (c, before))) = pick else { break };
        pairs.push((open.swap_remove(i), c, Some(before)));
        unpaired[c] = false;
    }
    let left: Vec<usize> = (0..candidates).filter(|&c| unpaired[c]).collect();
    if let ([e], [c]) = (open.as_slice(), left.as_slice()) {
        pairs.push((*e, *c, None));
    }
    pairs
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

    #[test]
    fn pairing_goes_on_while_one_pair_leaves_another_single() {
        // Executable 0 fits only candidate 1; executable 1 fits candidates 1 and 2; once 0
        // has 1, executable 1 has 2; executable 2 fits 0 and 3 alike, and 3 is left
        // with 0 and 3: ambiguous.
        let fits = vec![
            vec![(1, 2)],
            vec![(1, 2), (2, 2)],
            vec![(0, 2), (3, 2)],
            vec![(0, 2), (3, 2)],
        ];
        let mut pairs = pair(&fits, 4);
        pairs.sort_unstable();
        assert_eq!(pairs, [(0, 1, Some(2)), (1, 2, Some(2))]);
    }

    #[test]
    fn a_candidate_two_executables_fit_alone_is_neithers() {
        // Executable 1 holds a block that could not be read, whose code happens to fit 0.
        let pairs = pair(&[vec![(0, 1)], vec![(0, 1)]], 2);
        assert_eq!(pairs, []);
        // The last one left: by elimination, with no count of lines before.
        assert_eq!(pair(&[vec![]], 1), [(0, 0, None)]);
        assert_eq!(
            pair(&[vec![(0, 3)], vec![]], 2),
            [(0, 0, Some(3)), (1, 1, None)]
        );
    }
}
