//! Flame graphs of what a test retained: folded stacks (`outermost;…;allocation bytes`)
//! and an SVG drawn from them by inferno with its memory palette.

use crate::model::{StackKind, TestReport};
use std::io::Write;

/// Folded-stack lines of the test's leaked stacks, outermost frame first, weighted by
/// bytes. Sorted so the same results give the same file.
pub fn folded_lines(test: &TestReport) -> Vec<String> {
    let mut lines: Vec<String> = test
        .stacks
        .iter()
        .filter(|s| s.kind == StackKind::Leak && s.bytes > 0)
        .map(|s| {
            let path: Vec<String> = s
                .frames
                .iter()
                .rev()
                // `;` separates frames in the folded format; array types contain it.
                .map(|f| f.function.replace(';', ","))
                .collect();
            let path = if path.is_empty() {
                "[unknown]".to_string()
            } else {
                path.join(";")
            };
            format!("{path} {}", s.bytes)
        })
        .collect();
    lines.sort();
    lines
}

/// Draws the SVG for a test's folded lines.
pub fn svg(title: &str, lines: &[String], out: impl Write) -> Result<(), String> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.subtitle = Some("memory retained at the end of the test, by allocation stack".into());
    options.count_name = "bytes".into();
    options.colors = "mem"
        .parse()
        .map_err(|e| format!("inferno palette: {e:?}"))?;
    // Colour by name hash, not at random: the same results draw the same SVG.
    options.hash = true;
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(|e| e.to_string())
}

/// A file-name-safe form of a name: `tests::foo` -> `tests__foo`.
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .replace("::", "__")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "_".into()
    } else {
        s
    }
}
