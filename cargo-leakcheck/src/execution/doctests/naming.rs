//! Which doc-test an executable rustdoc built holds, told from what rustdoc printed and from
//! the executable's own symbols; nothing is guessed.
//!
//! - rustdoc names a doc-test `path - item (line N)`, N being the line of its opening fence,
//!   and prints `test NAME[ - compile| - compile fail| - should panic] ... RESULT` for each.
//! - A doc-test compiled alone (edition 2021, or one rustdoc cannot merge) wraps the code in
//!   `fn main() { fn _doctest_main_<path>_<N>_<k>() { … } … }`, `<path>` being the path with
//!   every character that is not a letter or a digit made `_`: its symbol names the file and
//!   the line. A doc-test that has a `fn main` of its own has no such function; it is known
//!   only when it is the one left of its package.
//! - A merged executable (edition 2024) holds every mergeable doc-test of a crate, sorted by
//!   name, as `__doctest_<i>`, and runs doc-test `i` alone when `RUSTDOC_DOCTEST_RUN_NB_TEST`
//!   is `i`; the names it holds are its strings.

/// Which of `names` (each ending `(line N)`) are among an executable's bytes: every
/// `(line ` in it is looked at once, and only the names of that line compared with what
/// comes before it.
pub fn names_in<'n>(data: &[u8], names: &[&'n str]) -> std::collections::HashSet<&'n str> {
    const MARK: &[u8] = b"(line ";
    let mut by_line: std::collections::HashMap<&str, Vec<&'n str>> = Default::default();
    for n in names {
        if let Some(i) = n.rfind("(line ") {
            by_line.entry(&n[i..]).or_default().push(n);
        }
    }
    let mut found = std::collections::HashSet::new();
    let mut at = 0;
    while let Some(i) = data[at..].windows(MARK.len()).position(|w| w == MARK) {
        let start = at + i;
        at = start + MARK.len();
        let Some(close) = data[at..].iter().take(12).position(|&b| b == b')') else {
            continue;
        };
        let Ok(tail) = std::str::from_utf8(&data[start..at + close + 1]) else {
            continue;
        };
        for n in by_line.get(tail).into_iter().flatten() {
            let head = n.len() - tail.len();
            if start >= head && data[start - head..start] == n.as_bytes()[..head] {
                found.insert(*n);
            }
        }
    }
    found
}

/// How rustdoc ran a doc-test, as its result line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Run, and passes by returning.
    Run,
    /// Run, and passes by panicking (`should_panic`; a merged executable says so, one compiled
    /// alone does not).
    ShouldPanic,
    /// Only compiled (`no_run`, `compile_fail`): nothing of it runs.
    CompileOnly,
}

/// rustdoc's result for one doc-test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Its name, as rustdoc names it.
    pub name: String,
    pub mode: RunMode,
    /// `ok`, `FAILED` or `ignored`.
    pub result: String,
}

impl Outcome {
    /// Whether rustdoc ignored it (not run, as libtest's `#[ignore]`).
    pub fn ignored(&self) -> bool {
        self.result.starts_with("ignored")
    }
}

/// The doc-tests' result lines among what `cargo test --doc` printed.
pub fn outcomes(stdout: &str) -> Vec<Outcome> {
    let mut out: Vec<Outcome> = Vec::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        let Some((named, result)) = rest.rsplit_once(" ... ") else {
            continue;
        };
        if !(result == "ok" || result == "FAILED" || result.starts_with("ignored")) {
            continue;
        }
        let (name, mode) = if let Some(n) = named.strip_suffix(" - compile fail") {
            (n, RunMode::CompileOnly)
        } else if let Some(n) = named.strip_suffix(" - compile") {
            (n, RunMode::CompileOnly)
        } else if let Some(n) = named.strip_suffix(" - should panic") {
            (n, RunMode::ShouldPanic)
        } else {
            (named, RunMode::Run)
        };
        if place(name).is_none() || out.iter().any(|o| o.name == name) {
            continue;
        }
        out.push(Outcome {
            name: name.to_string(),
            mode,
            result: result.to_string(),
        });
    }
    out
}

/// The doc-tests that failed because they did not build, as the failures rustdoc printed
/// say (`---- NAME stdout ----` and, in what follows, `Couldn't compile the test.`): no
/// executable of theirs ran.
pub fn not_built(stdout: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<&str> = None;
    for line in stdout.lines() {
        let header = (line.strip_prefix("---- ")).and_then(|l| l.strip_suffix(" stdout ----"));
        if let Some(name) = header {
            current = Some(name);
        } else if line.trim() == "Couldn't compile the test." {
            if let Some(name) = current.take() {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// A doc-test's file and the line of its opening fence, from its name.
pub fn place(name: &str) -> Option<(&str, u32)> {
    let (path, _) = name.split_once(" - ")?;
    let line = name
        .strip_suffix(')')?
        .rsplit_once("(line ")?
        .1
        .parse()
        .ok()?;
    Some((path, line))
}

/// The part of a doc-test's wrapper function's name rustdoc derives from its file and line.
fn wrapper_key(path: &str, line: u32) -> String {
    let ident: String = path
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '_' })
        .collect();
    format!("_doctest_main_{ident}_{line}_")
}

/// The name, among `names`, of the doc-test whose wrapper is the function `function`
/// (demangled, `rust_out::main::_doctest_main_src_lib_rs_10_0`); `None` when the function
/// is no wrapper, or the key fits no name or more than one.
pub fn by_wrapper<'n>(function: &str, names: &[&'n str]) -> Option<&'n str> {
    let last = function.rsplit("::").next()?;
    let counter = last.rsplit_once('_')?.1;
    if !last.starts_with("_doctest_main_") || counter.parse::<u32>().is_err() {
        return None;
    }
    let key = &last[..last.len() - counter.len()];
    let mut fits = names
        .iter()
        .filter(|n| place(n).is_some_and(|(path, line)| wrapper_key(path, line) == key));
    let found = fits.next()?;
    fits.next().is_none().then_some(*found)
}

/// The index of a merged executable's doc-test whose `TEST` closure is `function`
/// (`doctest_runner_2024::__doctest_3::TEST::{closure#0}`), when it is one.
pub fn merged_index(function: &str) -> Option<usize> {
    let (_, rest) = function.split_once("::__doctest_")?;
    let (index, tail) = rest.split_once("::")?;
    let closure = tail == "TEST::{closure#0}" || tail == "TEST::{{closure}}";
    closure.then(|| index.parse().ok()).flatten()
}

/// The lines of the doc-test rustdoc names by line `line` (1-based) of `source`, as rustdoc
/// reads them: the comment marker (`///`, `//!`) and one space after it taken off, hidden
/// lines (`# `) shown; up to the closing fence. With them, the line of the opening fence:
/// `line` itself, or the one after it in a `/*! … */` comment (which rustdoc counts from the
/// comment's first line).
pub fn code_block(source: &str, line: u32) -> Option<(u32, Vec<String>)> {
    [line, line + 1]
        .into_iter()
        .find_map(|fence| block_at(source, fence).map(|block| (fence, block)))
}

/// The block whose opening fence is line `fence` of `source`.
fn block_at(source: &str, fence: u32) -> Option<Vec<String>> {
    let strip = |line: &str| -> String {
        let t = line.trim_start();
        let t = t
            .strip_prefix("///")
            .or_else(|| t.strip_prefix("//!"))
            .map_or(line, |rest| rest.strip_prefix(' ').unwrap_or(rest));
        t.to_string()
    };
    let mut lines = source.lines().skip((fence as usize).checked_sub(1)?);
    let opening = strip(lines.next()?);
    let marker = if opening.trim_start().starts_with("```") {
        "```"
    } else if opening.trim_start().starts_with("~~~") {
        "~~~"
    } else {
        return None;
    };
    let mut block = Vec::new();
    for line in lines {
        let text = strip(line);
        if text.trim_start().starts_with(marker) {
            return Some(block);
        }
        // As rustdoc shows a hidden line: what follows `# ` once the line is trimmed.
        let trimmed = text.trim();
        let shown = match trimmed.strip_prefix("# ") {
            Some(rest) => rest.to_string(),
            None if trimmed == "#" => String::new(),
            None => text,
        };
        block.push(shown);
    }
    None
}

/// Where a doc-test with a `fn main` of its own defines it: the 1-based line in its block,
/// and whether that `main` returns a value (then it cannot be called as `fn()`).
pub fn own_main(block: &[String]) -> Option<(u32, bool)> {
    block.iter().enumerate().find_map(|(i, line)| {
        let t = line.trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("async ").unwrap_or(t);
        t.starts_with("fn main(")
            .then(|| (i as u32 + 1, t.contains("->")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_give_each_doc_test_once_with_how_it_ran() {
        let stdout = "\nrunning 5 tests\n\
            test src/lib.rs - add (line 3) ... ok\n\
            test src/lib.rs - forget (line 19) - compile ... ok\n\
            test src/lib.rs - forget (line 15) - should panic ... ok\n\
            test src/lib.rs - bad (line 30) - compile fail ... ok\n\
            test src/lib.rs - skip (line 40) ... ignored\n\
            test src/lib.rs - add (line 3) ... ok\n\
            test result: ok. 4 passed; 0 failed\n\
            test src/lib.rs - x (line 9) ... FAILED\n\
            ---- src/lib.rs - x (line 9) stdout ----\n\
            test something printed by a doc-test\n";
        let found = outcomes(stdout);
        let got: Vec<(&str, RunMode, &str)> = found
            .iter()
            .map(|o| (o.name.as_str(), o.mode, o.result.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("src/lib.rs - add (line 3)", RunMode::Run, "ok"),
                ("src/lib.rs - forget (line 19)", RunMode::CompileOnly, "ok"),
                ("src/lib.rs - forget (line 15)", RunMode::ShouldPanic, "ok"),
                ("src/lib.rs - bad (line 30)", RunMode::CompileOnly, "ok"),
                ("src/lib.rs - skip (line 40)", RunMode::Run, "ignored"),
                ("src/lib.rs - x (line 9)", RunMode::Run, "FAILED"),
            ]
        );
        assert!(found[4].ignored() && !found[0].ignored());
    }

    #[test]
    fn a_wrapper_names_its_doc_test_by_file_and_line_and_nothing_else() {
        let names = [
            "src/lib.rs - add (line 3)",
            "src/lib.rs - forget (line 10)",
            "src/lib.rs - forget (line 1)",
            "src/a-b.rs - c (line 10)",
        ];
        assert_eq!(
            by_wrapper("rust_out::main::_doctest_main_src_lib_rs_10_0", &names),
            Some("src/lib.rs - forget (line 10)")
        );
        assert_eq!(
            by_wrapper("rust_out::main::_doctest_main_src_lib_rs_1_0", &names),
            Some("src/lib.rs - forget (line 1)")
        );
        assert_eq!(
            by_wrapper("rust_out::main::_doctest_main_src_a_b_rs_10_2", &names),
            Some("src/a-b.rs - c (line 10)")
        );
        assert_eq!(by_wrapper("rust_out::main", &names), None);
        assert_eq!(
            by_wrapper("rust_out::main::_doctest_main_src_lib_rs_99_0", &names),
            None
        );
        // Two names that make the same key (`src/a-b.rs`, `src/a_b.rs`) name neither.
        let twins = ["src/a-b.rs - c (line 10)", "src/a_b.rs - d (line 10)"];
        assert_eq!(
            by_wrapper("rust_out::main::_doctest_main_src_a_b_rs_10_0", &twins),
            None
        );
        assert_eq!(place("README.md - (line 7)"), Some(("README.md", 7)));
    }

    #[test]
    fn names_are_found_among_the_bytes_whole() {
        let data = b"\0\0src/lib.rs - add (line 3)src/lib.rs - forget (line 10)x(line 7)\xff";
        let names = [
            "src/lib.rs - add (line 3)",
            "src/lib.rs - forget (line 10)",
            "src/lib.rs - forget (line 1)",
            "lib.rs - add (line 3)",
            "src/lib.rs - other (line 7)",
        ];
        let mut found: Vec<&str> = names_in(data, &names).into_iter().collect();
        found.sort();
        // A name that is the tail of another one's bytes is there too: its bytes are.
        assert_eq!(
            found,
            [
                "lib.rs - add (line 3)",
                "src/lib.rs - add (line 3)",
                "src/lib.rs - forget (line 10)"
            ]
        );
    }

    #[test]
    fn a_merged_test_closure_gives_its_index() {
        assert_eq!(
            merged_index("doctest_runner_2024::__doctest_3::TEST::{closure#0}"),
            Some(3)
        );
        assert_eq!(
            merged_index("doctest_runner_2024::__doctest_12::TEST::{{closure}}"),
            Some(12)
        );
        assert_eq!(merged_index("doctest_bundle_2024::__doctest_3::main"), None);
        assert_eq!(
            merged_index("doctest_runner_2024::__doctest_mod::doctest_path"),
            None
        );
    }

    #[test]
    fn a_code_block_is_read_as_rustdoc_reads_it() {
        let source = "//! Crate.\n\
            /// Adds.\n\
            ///\n\
            /// ```\n\
            /// # use std::io;\n\
            /// #\n\
            /// async fn main() -> io::Result<()> {\n\
            ///     Ok(())\n\
            /// }\n\
            /// ```\n\
            pub fn add() {}\n";
        let (fence, block) = code_block(source, 4).unwrap();
        assert_eq!(fence, 4);
        assert_eq!(
            block,
            [
                "use std::io;",
                "",
                "async fn main() -> io::Result<()> {",
                "    Ok(())",
                "}"
            ]
        );
        assert_eq!(own_main(&block), Some((3, true)));
        assert_eq!(own_main(&["fn main() {".to_string()]), Some((1, false)));
        assert_eq!(own_main(&["let main = 1;".to_string()]), None);
        assert_eq!(code_block(source, 1), None);
        let markdown = "# Title\n\n```rust\nlet x = 1;\n```\n";
        assert_eq!(
            code_block(markdown, 3).unwrap(),
            (3, vec!["let x = 1;".to_string()])
        );
        // A `/*! … */` comment's doc-test is named by the line before its fence.
        assert_eq!(code_block(markdown, 2).unwrap().0, 3);
    }

    #[test]
    fn doc_tests_that_did_not_build_are_read_from_the_failures() {
        let stdout = "test src/a.rs - a (line 3) ... FAILED\n\
                      test src/b.rs - b (line 9) ... FAILED\n\
                      \nfailures:\n\n\
                      ---- src/a.rs - a (line 3) stdout ----\n\
                      error[E0599]: no method named `start_paused`\n\
                      Couldn't compile the test.\n\
                      ---- src/b.rs - b (line 9) stdout ----\n\
                      Test executable failed (exit status: 101).\n";
        assert_eq!(not_built(stdout), ["src/a.rs - a (line 3)"]);
    }
}
