//! Frames of a doc-test's code put back where the code is. rustdoc compiles a doc-test as a
//! crate of its own from source it generates around the code, so line tables count that
//! source's lines: a frame at generated line `L` of a function whose generated first line is
//! `W` (the anchor) is at line `line_at_start + (L - W)` of the doc-test's file.

use crate::evidence::symbols::Frame;
use std::path::PathBuf;

/// The frames of one doc-test's code, and where they are in the doc-test's file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceMap {
    /// The doc-test's code: the file offsets of its functions (`[start, end)`).
    pub code: Vec<(u64, u64)>,
    /// The functions rustdoc calls the code through (rustdoc's `main` around a wrapper;
    /// `__main_fn`, and the closure libtest keeps, in a merged executable), none of the
    /// doc-test's lines: their frames are named as rustdoc's and keep no place.
    pub outer: Vec<(u64, u64)>,
    /// The file offset of the function whose first line is the anchor.
    pub start: u64,
    /// The line of the doc-test's file that the anchor stands for.
    pub line_at_start: u32,
    /// The doc-test's file.
    pub file: PathBuf,
    /// The doc-test's name, which its frames are named by.
    pub name: String,
    /// When the lines rustdoc put before the code are known: the line of the file that
    /// generated line 0 stands for (generated line `L` is then line `lines_from + L`,
    /// whatever the anchor).
    pub lines_from: Option<i64>,
    /// The block is not at the line rustdoc gives (a doc comment a macro writes, or one
    /// included from another file): every line of its code is put at `line_at_start`, the
    /// line rustdoc names the doc-test by.
    pub one_line: bool,
}

/// Where a map's anchor is: the generated line and file of the code at its `start`.
pub struct Anchor {
    pub line: u32,
    pub file: String,
}

/// `frames` with those of a mapped doc-test's code at their lines in its file; `anchor`
/// gives a map's anchor.
pub fn map_frames(
    frames: &[Frame],
    maps: &[SourceMap],
    mut anchor: impl FnMut(&SourceMap) -> Option<Anchor>,
) -> Vec<Frame> {
    let within = |ranges: &[(u64, u64)], offset: u64| {
        let at = offset.saturating_sub(1);
        ranges.iter().any(|&(start, end)| at >= start && at < end)
    };
    frames
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if let Some(map) = maps.iter().find(|m| within(&m.outer, f.offset)) {
                if !f.inlined {
                    f.function = Some(format!("rustdoc's wrapper of `{}`", map.name));
                    f.file = None;
                    f.line = None;
                    f.column = None;
                }
                return f;
            }
            let Some(map) = maps.iter().find(|m| within(&m.code, f.offset)) else {
                return f;
            };
            let (Some(line), Some(at)) = (f.line, anchor(map)) else {
                return f;
            };
            // Code of other files inlined into the doc-test's stays where it is.
            if f.file.as_deref() != Some(at.file.as_str()) || line < at.line {
                return f;
            }
            f.line = Some(match map.lines_from {
                _ if map.one_line => map.line_at_start,
                Some(from) => u32::try_from(from + i64::from(line)).unwrap_or(line),
                None => map.line_at_start + (line - at.line),
            });
            f.file = Some(map.file.display().to_string());
            f.column = None;
            f.function = Some(doc_function(&map.name, f.function.as_deref()));
            f
        })
        .collect()
}

/// A doc-test function's name: the doc-test's, then what is left of the generated name
/// once rustdoc's crate, module, `main` and `_doctest_main_…` wrappers are taken off (a
/// closure, a helper).
fn doc_function(name: &str, function: Option<&str>) -> String {
    let function = function.unwrap_or_default();
    let function = match function.split_once("::__doctest_") {
        Some((_, rest)) => rest.split_once("::").map_or("", |(_, r)| r),
        None => function.strip_prefix("rust_out::").unwrap_or(function),
    };
    let kept: Vec<&str> = function
        .split("::")
        .skip_while(|s| *s == "main" || s.is_empty() || s.starts_with("_doctest_main_"))
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

    fn frame(function: &str, file: &str, line: u32, offset: u64) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(line),
            column: Some(5),
            object: "/t/doctest".into(),
            offset,
            inlined: false,
        }
    }

    const GENERATED: &str = "/w/p/src/lib.rs";

    fn map() -> SourceMap {
        SourceMap {
            code: vec![(0x100, 0x200), (0x300, 0x340)],
            outer: vec![(0x200, 0x220)],
            start: 0x100,
            line_at_start: 10,
            file: "/w/p/src/lib.rs".into(),
            name: "src/lib.rs - forget (line 10)".into(),
            lines_from: None,
            one_line: false,
        }
    }

    fn anchor(m: &SourceMap) -> Option<Anchor> {
        (m.start == 0x100).then(|| Anchor {
            line: 2,
            file: GENERATED.into(),
        })
    }

    #[test]
    fn a_doc_test_s_frames_move_to_its_lines_and_others_stay() {
        let frames = [
            frame(
                "alloc::vec::from_elem",
                "/rustc/x/alloc/src/vec/mod.rs",
                3651,
                0x50,
            ),
            frame("_doctest_main_src_lib_rs_10_0", GENERATED, 3, 0x120),
            frame("{closure#0}", GENERATED, 5, 0x310),
            // Inlined into the doc-test from another file: stays.
            frame(
                "alloc::boxed::Box::new",
                "/rustc/x/alloc/src/boxed.rs",
                286,
                0x130,
            ),
            frame("main", GENERATED, 6, 0x210),
            frame("p::add", "/w/p/src/lib.rs", 3, 0x400),
        ];
        let mapped = map_frames(&frames, &[map()], anchor);
        let got: Vec<(&str, Option<u32>)> = mapped
            .iter()
            .map(|f| (f.function.as_deref().unwrap(), f.line))
            .collect();
        assert_eq!(
            got,
            [
                ("alloc::vec::from_elem", Some(3651)),
                ("src/lib.rs - forget (line 10)", Some(11)),
                ("src/lib.rs - forget (line 10)::{closure#0}", Some(13)),
                ("alloc::boxed::Box::new", Some(286)),
                ("rustdoc's wrapper of `src/lib.rs - forget (line 10)`", None),
                ("p::add", Some(3)),
            ]
        );
        assert_eq!(mapped[1].column, None);
        assert_eq!(mapped[4].file, None);
        // Without its anchor a frame keeps its place.
        let unanchored = map_frames(&frames[1..2], &[map()], |_| None);
        assert_eq!(unanchored[0].line, Some(3));
    }

    #[test]
    fn a_block_not_in_its_file_puts_every_frame_at_the_named_line() {
        let one_line = SourceMap {
            one_line: true,
            ..map()
        };
        let frames = [
            frame("main", GENERATED, 3, 0x120),
            frame("{closure#0}", GENERATED, 5, 0x310),
            frame("alloc::vec::from_elem", "/rustc/x/vec.rs", 3651, 0x130),
        ];
        let mapped = map_frames(&frames, &[one_line], anchor);
        let lines: Vec<Option<u32>> = mapped.iter().map(|f| f.line).collect();
        assert_eq!(lines, [Some(10), Some(10), Some(3651)]);
        assert_eq!(mapped[0].file.as_deref(), Some("/w/p/src/lib.rs"));
    }

    #[test]
    fn names_lose_rustdoc_s_crate_module_and_wrappers() {
        let name = "src/lib.rs - b (line 20)";
        assert_eq!(doc_function(name, Some("main")), name);
        assert_eq!(
            doc_function(name, Some("rust_out::main::_doctest_main_src_lib_rs_20_0")),
            name
        );
        assert_eq!(
            doc_function(
                name,
                Some("doctest_bundle_2024::__doctest_11::main::{closure#0}")
            ),
            "src/lib.rs - b (line 20)::{closure#0}"
        );
        assert_eq!(
            doc_function(name, Some("rust_out::helper")),
            "src/lib.rs - b (line 20)::helper"
        );
    }
}
