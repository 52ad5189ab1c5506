//! Frames as reports show them, and the rule every report uses to name a stack by one frame:
//! shared by the verdict rules, the retention paths and the renderers.

use crate::analysis::classify;
use crate::evidence::normalized::FrameKey;
use crate::evidence::symbols::{is_runtime_object, CodeSymbols, Frame};
use crate::model::{FrameReport, Memory};
use leakcheck_protocol::heap_v2::{MAPPED_FILE_FRAME, MAPPED_MEMORY_FRAME};
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

/// What a stack's objects are: the runtime puts a marker frame of its own innermost on the
/// stack of a mapping the program made, which [`resolve_stack`] cuts off with the rest of
/// the allocator's frames.
pub fn memory_of<S: CodeSymbols + ?Sized>(keys: &[FrameKey], symbols: &mut S) -> Memory {
    let Some(first) = keys.first().filter(|k| is_runtime_object(&k.object)) else {
        return Memory::Heap;
    };
    let code = symbols.code(&first.object, first.file_offset);
    match code.first().and_then(|f| f.function.as_deref()) {
        Some(MAPPED_MEMORY_FRAME) => Memory::Mapped,
        Some(MAPPED_FILE_FRAME) => Memory::MappedFile,
        _ => Memory::Heap,
    }
}

/// Whether a stack is a mapping that a global allocator of the program's own made for its
/// heap (tikv-jemallocator, mimalloc: their extents come from `mmap`): the objects in it are
/// that allocator's heap, counted as such where it can be seen, not a mapping of the
/// program's.
pub fn is_allocator_mapping<S: CodeSymbols + ?Sized>(keys: &[FrameKey], symbols: &mut S) -> bool {
    if memory_of(keys, symbols).is_heap() {
        return false;
    }
    keys.iter()
        .filter(|k| !is_runtime_object(&k.object))
        .any(|k| {
            symbols.code(&k.object, k.file_offset).iter().any(|f| {
                classify::is_allocation_shim(f)
                    || f.function
                        .as_deref()
                        .is_some_and(|n| n.contains(" as core::alloc::global::GlobalAlloc>::"))
            })
        })
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

/// Where a stack starts in the repository's code (its [`identifying_frame`]), the file
/// relative to `root`: None when that frame has no line or is outside the repository.
pub fn repo_line(frames: &[FrameReport], root: &Path) -> Option<(String, u32)> {
    let frame = identifying_frame(frames, root)?;
    let (Some(file), Some(line)) = (&frame.file, frame.line) else {
        return None;
    };
    Some((in_repo(file, root)?, line))
}

/// `file` relative to `root`, when it is below it.
pub fn in_repo(file: &str, root: &Path) -> Option<String> {
    let relative = Path::new(file).strip_prefix(root).ok()?;
    Some(relative.display().to_string())
}

/// The frame that best names a leak: the first whose source is in the workspace, else
/// the first outside the standard library, else the innermost.
pub fn identifying_frame<'a>(frames: &'a [FrameReport], root: &Path) -> Option<&'a FrameReport> {
    frames
        .iter()
        .find(|f| {
            f.file
                .as_deref()
                .is_some_and(|p| Path::new(p).starts_with(root))
        })
        .or_else(|| frames.iter().find(|f| !is_std_function(&f.function)))
        .or_else(|| frames.first())
}

/// Whether a function is the standard library's: in its crates, or a trait method of one
/// of its types or of a primitive (`<usize as core::fmt::Display>::fmt`, where `format!`
/// allocates). A trait of std implemented for the program's own type is the program's.
fn is_std_function(name: &str) -> bool {
    const STD: [&str; 4] = ["std::", "core::", "alloc::", "hashbrown::"];
    const PRIMITIVES: [&str; 17] = [
        "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
        "f32", "f64", "bool", "char", "str",
    ];
    let in_std = |path: &str| STD.iter().any(|p| path.starts_with(p));
    match name.strip_prefix('<') {
        Some(rest) => match rest.split_once(" as ") {
            Some((self_type, _)) => {
                let bare = self_type.trim_start_matches(['&', '[', '*']);
                let bare = bare.strip_prefix("mut ").unwrap_or(bare);
                let bare = bare.strip_prefix("const ").unwrap_or(bare);
                in_std(bare)
                    || PRIMITIVES
                        .iter()
                        .any(|p| bare.split([';', ']']).next() == Some(p))
            }
            None => in_std(rest),
        },
        None => in_std(name),
    }
}

/// The frames from the [`identifying_frame`] on (the allocator's and std's above it say
/// nothing about where the memory went): how every report shows a stack.
pub fn from_identifying_frame<'a>(frames: &'a [FrameReport], root: &Path) -> &'a [FrameReport] {
    let first = identifying_frame(frames, root)
        .and_then(|f| frames.iter().position(|g| std::ptr::eq(f, g)))
        .unwrap_or(0);
    &frames[first..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_trait_methods_of_std_and_primitive_types_are_std_and_of_the_programs_types_are_not() {
        for std in [
            "alloc::raw_vec::finish_grow",
            "<usize as core::fmt::Display>::fmt",
            "<alloc::string::String as core::fmt::Write>::write_str",
            "<&str as alloc::string::ToString>::to_string",
            "<[u8] as alloc::borrow::ToOwned>::to_owned",
            "<std::collections::hash::map::HashMap<K,V,S>>::insert",
        ] {
            assert!(is_std_function(std), "{std}");
        }
        for own in [
            "interns::handle_request",
            "<interns::Record as core::fmt::Display>::fmt",
            "<&interns::Record as core::clone::Clone>::clone",
            "<u8x16 as core::ops::Add>::add",
        ] {
            assert!(!is_std_function(own), "{own}");
        }
    }

    #[test]
    fn a_leak_is_named_by_the_programs_frame_after_a_std_trait_method() {
        let at = |function: &str| FrameReport {
            function: function.into(),
            file: None,
            line: None,
            inlined: false,
        };
        let frames = [
            at("alloc::raw_vec::RawVec<T,A>::grow_one"),
            at("<usize as core::fmt::Display>::fmt"),
            at("core::fmt::write"),
            at("interns::handle_request"),
        ];
        let named = identifying_frame(&frames, Path::new("/ws")).unwrap();
        assert_eq!(named.function, "interns::handle_request");
    }
}
