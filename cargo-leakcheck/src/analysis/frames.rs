//! Frames as reports show them, and the rule every report uses to name a stack by one frame:
//! shared by the verdict rules, the retention paths and the renderers.

use crate::analysis::classify;
use crate::analysis::diff::FrameKey;
use crate::analysis::symbolize::{is_runtime_object, CodeSymbols, Frame};
use crate::model::FrameReport;
use std::path::Path;

/// A stack as reports show it: each return address symbolized (inlined frames included),
/// the allocator's own frames at the top cut off, and the runtime's thread trampoline (the
/// frame every thread starts in under the preload) left out wherever it is.
pub fn resolve_stack<S: CodeSymbols + ?Sized>(keys: &[FrameKey], symbols: &mut S) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    let innermost_runtime = keys
        .iter()
        .take_while(|k| is_runtime_object(&k.object))
        .count();
    for (i, key) in keys.iter().enumerate() {
        if i >= innermost_runtime && is_runtime_object(&key.object) {
            continue;
        }
        frames.extend(symbols.code(&key.object, key.file_offset).iter().cloned());
    }
    let allocator = classify::allocator_prefix_len(&frames);
    frames.drain(..allocator);
    frames
}

/// A symbolized frame as the report writes it.
pub fn frame_report(f: &Frame) -> FrameReport {
    FrameReport {
        function: f.display_name(),
        file: f.file.clone(),
        line: f.line,
        inlined: f.inlined,
    }
}

/// The frame that best names a leak: the first whose source is in the workspace, else
/// the first outside the standard library, else the innermost.
pub fn identifying_frame<'a>(frames: &'a [FrameReport], root: &Path) -> Option<&'a FrameReport> {
    let std_like = |f: &FrameReport| {
        let n = f.function.strip_prefix('<').unwrap_or(&f.function);
        ["std::", "core::", "alloc::", "hashbrown::"]
            .iter()
            .any(|p| n.starts_with(p))
    };
    frames
        .iter()
        .find(|f| {
            f.file
                .as_deref()
                .is_some_and(|p| Path::new(p).starts_with(root))
        })
        .or_else(|| frames.iter().find(|f| !std_like(f)))
        .or_else(|| frames.first())
}

/// The frames from the [`identifying_frame`] on (the allocator's and std's above it say
/// nothing about where the memory went): how every report shows a stack.
pub fn from_identifying_frame<'a>(frames: &'a [FrameReport], root: &Path) -> &'a [FrameReport] {
    let first = identifying_frame(frames, root)
        .and_then(|f| frames.iter().position(|g| std::ptr::eq(f, g)))
        .unwrap_or(0);
    &frames[first..]
}
