//! Flame graphs of what a test retained: folded stacks (`outermost;…;allocation bytes`)
//! and an SVG drawn from them by inferno with its memory palette.

use crate::model::{StackKind, TestReport};
use std::io::Write;

/// Folded-stack lines of the test's leaked stacks, outermost frame first, weighted by
/// bytes (those the test's run retained, or, for a stack that grew only in extra runs, what
/// each run added). A stack through the test's own function starts there: what called it
/// (libtest, panic catching, thread start) is the same for every stack and would only
/// narrow the user's code (report.json keeps the whole stack). Sorted so the same results
/// give the same file.
pub fn folded_lines(test: &TestReport) -> Vec<String> {
    let mut lines: Vec<String> = graphed_stacks(test)
        .into_iter()
        .map(|g| folded_line(&g.frames, g.bytes))
        .collect();
    lines.sort();
    lines
}

/// One stack as the graphs show it.
pub struct Graphed<'a> {
    /// Frames innermost first, from the allocation up to the test's own function.
    pub frames: std::borrow::Cow<'a, [crate::model::FrameReport]>,
    /// Its weight: the bytes the test's run retained there, or, for a stack that grew only
    /// in extra runs, what each run added.
    pub bytes: u64,
    /// Objects retained there.
    pub objects: u64,
}

/// The leaked stacks the flame graph and the pprof profile show (see [`folded_lines`]); and
/// each failing collection, as the stack that allocated its buffer topped by a frame naming
/// it, weighted by what one run added to it (its entries times their size).
pub fn graphed_stacks(test: &TestReport) -> Vec<Graphed<'_>> {
    let weight =
        |s: &crate::model::StackReport| s.bytes.max(s.min_growth().unwrap_or(0).max(0) as u64);
    let stacks = test
        .stacks
        .iter()
        .filter(|s| s.kind == StackKind::Leak && weight(s) > 0 && s.suppression.is_none())
        .map(|s| {
            let shown = from_the_test(&s.frames, &test.name);
            // The program's own mappings are topped by a frame that says so, as collections are.
            let frames = match s.memory.label() {
                None => std::borrow::Cow::Borrowed(shown),
                Some(label) => {
                    let mut frames = vec![crate::model::FrameReport::named(&format!("[{label}]"))];
                    frames.extend(shown.iter().cloned());
                    std::borrow::Cow::Owned(frames)
                }
            };
            Graphed {
                frames,
                bytes: weight(s),
                objects: s.objects,
            }
        });
    let collections = test.collections.iter().filter(|c| c.fails).map(|c| {
        let per_run = c.min_growth().unwrap_or(0).max(1) as u64;
        let mut frames = vec![crate::model::FrameReport::named(&format!(
            "[collection {}: {}]",
            crate::report::text::collection_holder(&c.collection, std::path::Path::new("")),
            c.collection.type_name
        ))];
        frames.extend(from_the_test(&c.allocated_at, &test.name).iter().cloned());
        Graphed {
            frames: std::borrow::Cow::Owned(frames),
            bytes: c.collection.bytes_of(per_run as i64),
            objects: per_run,
        }
    });
    stacks.chain(collections).collect()
}

/// `frames` (innermost first) up to and including the outermost frame of the test function
/// `test` (a libtest name such as `tests::forget_vec`, whose frame is
/// `<crate>::tests::forget_vec`); all of them when none is.
fn from_the_test<'a>(
    frames: &'a [crate::model::FrameReport],
    test: &str,
) -> &'a [crate::model::FrameReport] {
    let is_test = |f: &crate::model::FrameReport| {
        f.function == test
            || f.function.strip_suffix(test).is_some_and(|krate| {
                krate.ends_with("::") && !krate[..krate.len() - 2].contains("::")
            })
    };
    match frames.iter().rposition(is_test) {
        Some(i) => &frames[..=i],
        None => frames,
    }
}

/// One folded-stack line: frames outermost first, then the weight.
pub fn folded_line(frames: &[crate::model::FrameReport], weight: u64) -> String {
    let path: Vec<String> = frames
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
    format!("{path} {weight}")
}

/// Draws the SVG for a test's folded lines.
pub fn svg(title: &str, lines: &[String], out: impl Write) -> std::io::Result<()> {
    svg_titled(
        title,
        "memory retained at the end of the test, by allocation stack",
        lines,
        out,
    )
}

/// Draws an SVG with a given subtitle.
pub fn svg_titled(
    title: &str,
    subtitle: &str,
    lines: &[String],
    out: impl Write,
) -> std::io::Result<()> {
    use inferno::flamegraph::color::{BasicPalette, Palette};
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.subtitle = Some(subtitle.into());
    options.count_name = "bytes".into();
    options.colors = Palette::Basic(BasicPalette::Mem);
    // Colour by name hash, not at random: the same results draw the same SVG.
    options.hash = true;
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// The longest stem [`file_stem`] returns, leaving room for an extension within the
/// 255-byte limit on a file name.
pub const MAX_STEM: usize = 200;

/// A file-name-safe form of a name, different for different names: `tests::foo` ->
/// `tests.foo`. ASCII letters, digits, `_` and `-` stay; `::` becomes `.`; every other byte
/// (a lone `:`, `.`, `%`, a space, the bytes of a non-ASCII character) becomes `%XX`. That
/// mapping can be undone, so two names never share a file. A stem longer than
/// [`MAX_STEM`] keeps its start and ends with `~` and a hash of the whole name (`~` is
/// otherwise always escaped, so a shortened stem never equals a whole one).
pub fn file_stem(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    let mut rest = name.as_bytes();
    while let Some(&b) = rest.first() {
        if rest.starts_with(b"::") {
            s.push('.');
            rest = &rest[2..];
            continue;
        }
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
        rest = &rest[1..];
    }
    if s.is_empty() {
        return "%".into();
    }
    if s.len() > MAX_STEM {
        // Stable across builds, so a test keeps its file name.
        let tail = format!(
            "~{:016x}",
            crate::fnv::Fnv::new().bytes(name.as_bytes()).finish()
        );
        s.truncate(MAX_STEM - tail.len());
        s.push_str(&tail);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FrameReport, StackReport, Verdict};

    fn frame(name: &str) -> FrameReport {
        FrameReport::named(name)
    }

    fn test_report() -> TestReport {
        let stack = |bytes, kind, names: &[&str]| StackReport {
            frames: names.iter().map(|n| frame(n)).collect(),
            ..StackReport::example(kind, bytes)
        };
        TestReport {
            verdict: Verdict::Leak,
            retained_bytes: 120,
            retained_objects: 2,
            stacks: vec![
                stack(
                    100,
                    StackKind::Leak,
                    &["alloc::vec::from_elem", "p::tests::t", "test::run"],
                ),
                stack(
                    20,
                    StackKind::Leak,
                    &["<[u8; 4] as p::Make>::make", "p::tests::t"],
                ),
                stack(
                    999,
                    StackKind::OneTime,
                    &["p::init", "std::sync::once_lock::OnceLock<T>::initialize"],
                ),
            ],
            extra_runs: crate::model::ExtraRuns {
                made: 0,
                in_all: 0,
                status: crate::model::ExtraRunsStatus::Off,
                detail: None,
            },
            ..TestReport::example()
        }
    }

    #[test]
    fn folded_lines_are_outermost_first_leaks_only_and_escape_semicolons() {
        assert_eq!(
            folded_lines(&test_report()),
            vec![
                "p::tests::t;<[u8, 4] as p::Make>::make 20".to_string(),
                "p::tests::t;alloc::vec::from_elem 100".to_string(),
            ]
        );
    }

    #[test]
    fn mapped_memory_is_topped_by_a_frame_that_says_so() {
        let mut test = test_report();
        test.stacks[1].memory = crate::model::Memory::Mapped;
        assert_eq!(
            folded_lines(&test),
            vec![
                "p::tests::t;<[u8, 4] as p::Make>::make;[mapped memory] 20".to_string(),
                "p::tests::t;alloc::vec::from_elem 100".to_string(),
            ]
        );
    }

    #[test]
    fn graphs_start_at_the_test_function() {
        let frames: Vec<FrameReport> = [
            "alloc::vec::from_elem",
            "p::tests::t",
            "p::tests::t::{{closure}}",
            "core::ops::function::FnOnce::call_once",
            "test::run_test",
        ]
        .iter()
        .map(|n| frame(n))
        .collect();
        assert_eq!(from_the_test(&frames, "tests::t").len(), 2);
        // Another function ending in the same name is not the test.
        let other: Vec<FrameReport> = ["p::more::tests::t", "test::run_test"]
            .iter()
            .map(|n| frame(n))
            .collect();
        assert_eq!(from_the_test(&other, "tests::t").len(), 2);
        // A stack of another thread keeps all its frames.
        assert_eq!(from_the_test(&frames[3..], "tests::t").len(), 2);
    }

    #[test]
    fn svg_is_titled_and_deterministic() {
        let lines = folded_lines(&test_report());
        let mut a = Vec::new();
        svg("p tests::t", &lines, &mut a).unwrap();
        let mut b = Vec::new();
        svg("p tests::t", &lines, &mut b).unwrap();
        let text = String::from_utf8(a.clone()).unwrap();
        assert!(text.contains("<svg") && text.contains("p tests::t"));
        assert!(text.contains("alloc::vec::from_elem"));
        assert_eq!(a, b, "same input, same SVG");
    }

    #[test]
    fn file_stems_are_safe_and_distinct() {
        assert_eq!(file_stem("tests::forget_vec"), "tests.forget_vec");
        assert_eq!(file_stem("a b/c<d>"), "a%20b%2Fc%3Cd%3E");
        assert_eq!(file_stem(""), "%");
        // Names that a lossy mapping would merge.
        let names = [
            "m::größe",
            "m::grüße",
            "a::b__c",
            "a__b::c",
            "a.b",
            "a::b",
            "a:b",
            "a%2Eb",
            "%",
        ];
        let stems: std::collections::BTreeSet<String> =
            names.iter().map(|n| file_stem(n)).collect();
        assert_eq!(stems.len(), names.len(), "{stems:?}");
        for stem in &stems {
            assert!(stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.%".contains(&b)));
        }
    }

    #[test]
    fn long_names_get_short_distinct_stems() {
        let long_a = format!("tests::{}", "a".repeat(300));
        let long_b = format!("tests::{}b", "a".repeat(299));
        let (a, b) = (file_stem(&long_a), file_stem(&long_b));
        assert!(a.len() <= MAX_STEM && b.len() <= MAX_STEM);
        assert_ne!(a, b);
        assert!(a.starts_with("tests.aaaa") && a.contains('~'));
        assert_eq!(a, file_stem(&long_a), "stable");
        // Non-ASCII names triple in length when escaped.
        assert!(file_stem(&"ü".repeat(100)).len() <= MAX_STEM);
    }
}
