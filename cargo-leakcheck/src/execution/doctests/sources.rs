//! Frames of a doc-test's code put back where the code is. rustdoc compiles a doc-test as a
//! crate of its own from source it generates around the code, so line tables count that
//! source's lines: a frame at generated line `L` of a function whose generated first line is
//! `W` (the anchor) is at line `line_at_start + (L - W)` of the doc-test's file.

use crate::analysis::symbols::Frame;
use std::path::PathBuf;

/// The frames of one doc-test's code, and where they are in the doc-test's file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceMap {
    /// The start of every function name of the doc-test's code (`rust_out::`,
    /// `doctest_bundle_2024::__doctest_3::`).
    pub prefix: String,
    /// The file offset of the function whose first line is the anchor.
    pub start: u64,
    /// The line of the doc-test's file that the anchor stands for.
    pub line_at_start: u32,
    /// The doc-test's file.
    pub file: PathBuf,
    /// The doc-test's name, which its frames' function names start with instead of the
    /// generated functions' (`main`, `_doctest_main_…`).
    pub name: String,
    /// The functions rustdoc calls the code through (after `prefix`: `main` around a
    /// wrapper; `__main_fn`, and the closure libtest keeps, in a merged executable), none of
    /// the doc-test's lines: their frames are named as rustdoc's and keep no place.
    pub outer: Vec<String>,
}

/// `frames` with those of a mapped doc-test's code at their lines in its file; `anchor`
/// gives a map's anchor line (the generated line at its `start`).
pub fn map_frames(
    frames: &[Frame],
    maps: &[SourceMap],
    mut anchor: impl FnMut(&SourceMap) -> Option<u32>,
) -> Vec<Frame> {
    frames
        .iter()
        .map(|f| {
            let mut f = f.clone();
            let Some(function) = f.function.clone() else {
                return f;
            };
            let Some(map) = maps.iter().find(|m| function.starts_with(&m.prefix)) else {
                return f;
            };
            let rest = &function[map.prefix.len()..];
            if map.outer.iter().any(|o| o == rest) {
                f.function = Some(format!("rustdoc's wrapper of `{}`", map.name));
                f.file = None;
                f.line = None;
                f.column = None;
                return f;
            }
            f.function = Some(doc_function(&map.name, rest));
            if let (Some(line), Some(w)) = (f.line, anchor(map)) {
                if line >= w {
                    f.line = Some(map.line_at_start + (line - w));
                    f.file = Some(map.file.display().to_string());
                    f.column = None;
                }
            }
            f
        })
        .collect()
}

/// A doc-test function's name: the doc-test's, then what is left of the generated name
/// once rustdoc's `main` and `_doctest_main_…` wrappers are taken off (a closure, a helper).
fn doc_function(name: &str, rest: &str) -> String {
    let kept: Vec<&str> = rest
        .split("::")
        .skip_while(|s| *s == "main" || s.starts_with("_doctest_main_"))
        .collect();
    if kept.is_empty() {
        name.to_string()
    } else {
        format!("{name}::{}", kept.join("::"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str, line: u32) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(line),
            column: Some(5),
            object: "/t/doctest".into(),
            offset: 0x100,
            inlined: false,
        }
    }

    #[test]
    fn a_doc_test_s_frames_move_to_its_lines_and_others_stay() {
        let maps = [SourceMap {
            prefix: "rust_out::".into(),
            start: 0x13bc0,
            line_at_start: 10,
            file: "/w/p/src/lib.rs".into(),
            name: "src/lib.rs - forget (line 10)".into(),
            outer: vec!["main".into()],
        }];
        let frames = [
            frame(
                "alloc::vec::from_elem",
                "/rustc/x/library/alloc/src/vec/mod.rs",
                3651,
            ),
            frame(
                "rust_out::main::_doctest_main_src_lib_rs_10_0",
                "/w/p/src/lib.rs",
                3,
            ),
            frame(
                "rust_out::main::_doctest_main_src_lib_rs_10_0::{{closure}}",
                "/w/p/src/lib.rs",
                5,
            ),
            frame("rust_out::main", "/w/p/src/lib.rs", 6),
            frame("p::add", "/w/p/src/lib.rs", 3),
        ];
        let mapped = map_frames(&frames, &maps, |m| (m.start == 0x13bc0).then_some(2));
        let got: Vec<(&str, u32)> = mapped
            .iter()
            .filter_map(|f| Some((f.function.as_deref()?, f.line?)))
            .collect();
        assert_eq!(
            got,
            [
                ("alloc::vec::from_elem", 3651),
                ("src/lib.rs - forget (line 10)", 11),
                ("src/lib.rs - forget (line 10)::{{closure}}", 13),
                ("p::add", 3),
            ]
        );
        // rustdoc's own `main` around the code stands for no line of the file.
        assert_eq!(
            mapped[3].function.as_deref(),
            Some("rustdoc's wrapper of `src/lib.rs - forget (line 10)`")
        );
        assert_eq!((mapped[3].file.as_deref(), mapped[3].line), (None, None));
        assert_eq!(mapped[1].column, None);
        // Without its anchor a frame keeps its line, named as the doc-test.
        let unanchored = map_frames(&frames[1..2], &maps, |_| None);
        assert_eq!(unanchored[0].line, Some(3));
        assert_eq!(
            unanchored[0].function.as_deref(),
            Some("src/lib.rs - forget (line 10)")
        );
    }

    #[test]
    fn a_merged_doc_test_is_told_by_its_index() {
        let maps = [
            SourceMap {
                prefix: "doctest_bundle_2024::__doctest_1::".into(),
                start: 0x10,
                line_at_start: 20,
                file: "/w/p/src/lib.rs".into(),
                name: "src/lib.rs - b (line 20)".into(),
                outer: vec!["__main_fn".into()],
            },
            SourceMap {
                prefix: "doctest_bundle_2024::__doctest_11::".into(),
                start: 0x20,
                line_at_start: 40,
                file: "/w/p/src/lib.rs".into(),
                name: "src/lib.rs - c (line 40)".into(),
                outer: vec!["__main_fn".into()],
            },
        ];
        let frames = [
            frame("doctest_bundle_2024::__doctest_11::main", "/tmp/r/b.rs", 31),
            frame(
                "doctest_bundle_2024::__doctest_1::helper",
                "/tmp/r/b.rs",
                16,
            ),
        ];
        let mapped = map_frames(&frames, &maps, |m| {
            Some(if m.start == 0x10 { 13 } else { 30 })
        });
        assert_eq!(mapped[0].line, Some(41));
        assert_eq!(
            mapped[0].function.as_deref(),
            Some("src/lib.rs - c (line 40)")
        );
        assert_eq!(mapped[1].line, Some(23));
        assert_eq!(
            mapped[1].function.as_deref(),
            Some("src/lib.rs - b (line 20)::helper")
        );
        assert_eq!(mapped[1].file.as_deref(), Some("/w/p/src/lib.rs"));
    }
}
