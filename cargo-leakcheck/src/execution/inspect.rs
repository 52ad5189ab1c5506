//! The binary-inspection step: each built executable is read once, and what it says is
//! stored with it ([`TestBinary::facts`]): whether it has its own global allocator, whether
//! it links criterion, for libtest binaries each listed test's entry point (see
//! [`crate::execution::entry`]), and the collections its statics and thread-locals hold
//! (see [`crate::execution::collections`], kept with the build). Executables can be hundreds
//! of megabytes; nothing else reads them whole. They are read side by side, one per core.

use crate::execution::cargo::{Harness, TestBinary};
use crate::execution::collections;
use crate::execution::entry::{self, Inspection, Layout};
pub use crate::execution::facts::{BinaryFacts, BinarySymbols};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// Reads one executable: its symbols, its collections (from the cache in `cache` when it
/// has them), and the entry points of `names` when it uses libtest and there are any.
pub fn read(binary: &TestBinary, names: &[&str], cache: Option<&Path>) -> BinaryFacts {
    let data = match std::fs::read(&binary.path) {
        Ok(data) => data,
        Err(e) => {
            let problem = format!("cannot read `{}`: {e}", binary.path.display());
            return BinaryFacts {
                tests: (binary.harness == Harness::Libtest && !names.is_empty()).then(|| {
                    Inspection {
                        problem: Some(problem),
                        ..Inspection::default()
                    }
                }),
                ..BinaryFacts::default()
            };
        }
    };
    let build_id = build_id(&data);
    let tests = match (&binary.doc, binary.harness) {
        (Some(doc), Harness::Doc) => Some(entry::inspect_doc(&data, doc)),
        (_, Harness::Libtest) if !names.is_empty() => Some(entry::inspect(
            &data,
            names,
            &binary.target.replace('-', "_"),
        )),
        _ => None,
    };
    BinaryFacts {
        symbols: BinarySymbols::of(&data),
        tests,
        collections: Arc::new(collections::cache::table(&data, &build_id, cache)),
        build_id,
    }
}

/// An executable's GNU build id, hexadecimal; empty without one.
pub fn build_id(data: &[u8]) -> String {
    use object::Object;
    object::File::parse(data)
        .ok()
        .and_then(|f| f.build_id().ok().flatten())
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
        .unwrap_or_default()
}

/// The step: reads every binary once, looking up the tests it has (`names`, by binary
/// index; empty for commands that need no entry points), then lets a layout of libtest's
/// table that one binary proved settle the binaries whose own tests left it open (a
/// single test): the layout belongs to the toolchain, so it is the same in every binary of
/// one build. `known` is a layout proven by a binary of the same build outside this set
/// (under nextest, each process sees one binary), used when none here proves one.
pub fn binaries(
    binaries: &mut [TestBinary],
    names: &[Vec<String>],
    known: Option<Layout>,
    cache: Option<&Path>,
) {
    let names_of = |b: usize| -> Vec<&str> {
        names
            .get(b)
            .map(|n| n.iter().map(String::as_str).collect())
            .unwrap_or_default()
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(binaries.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let facts: Vec<std::sync::Mutex<Option<BinaryFacts>>> =
        binaries.iter().map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(binary) = binaries.get(b) else { break };
                let read = read(binary, &names_of(b), cache);
                *facts[b].lock().unwrap_or_else(|e| e.into_inner()) = Some(read);
            });
        }
    });
    for (binary, f) in binaries.iter_mut().zip(facts) {
        binary.facts = f
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_default();
    }
    if let Some(dir) = cache {
        collections::cache::prune(dir);
    }
    let proven: BTreeSet<Layout> = binaries
        .iter()
        .filter_map(|b| b.facts.tests.as_ref()?.proven_layout)
        .collect();
    let known = match proven.iter().copied().collect::<Vec<_>>().as_slice() {
        [one] => Some(*one),
        [] => known,
        _ => None,
    };
    if let Some(known) = known {
        for (b, binary) in binaries.iter_mut().enumerate() {
            if let Some(inspection) = binary.facts.tests.as_mut() {
                inspection.settle(known, &names_of(b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_binary(harness: Harness) -> TestBinary {
        TestBinary {
            package: "cargo-leakcheck".into(),
            target: "cargo_leakcheck".into(),
            kind: crate::model::TargetKind::Lib,
            path: std::env::current_exe().unwrap(),
            harness,
            facts: BinaryFacts::default(),
            doc: None,
        }
    }

    #[test]
    fn symbols_of_an_ordinary_test_binary() {
        // Reads this whole test binary, its DWARF included.
        let _busy = crate::CORES.read().unwrap_or_else(|e| e.into_inner());
        // This unit-test binary uses std's default allocator and no criterion.
        let facts = read(&this_binary(Harness::Libtest), &[], None);
        assert_eq!(facts.symbols, BinarySymbols::default());
        assert!(facts.tests.is_none(), "no tests asked about");
        // Not an executable: nothing is claimed about it.
        assert_eq!(
            BinarySymbols::of(b"not an ELF file"),
            BinarySymbols::default()
        );
    }

    #[test]
    fn one_read_gives_symbols_and_entry_points() {
        // Reads this whole test binary, its DWARF included.
        let _busy = crate::CORES.read().unwrap_or_else(|e| e.into_inner());
        let here = module_path!().split_once("::").unwrap().1;
        let me = &format!("{here}::one_read_gives_symbols_and_entry_points");
        let mut bins = vec![this_binary(Harness::Libtest)];
        let tests = vec![vec![me.clone()]];
        binaries(&mut bins, &tests, None, None);
        let found = bins[0].facts.tests.as_ref().expect("a libtest binary");
        assert_eq!(found.problem, None);
        assert!(found.entries.contains_key(me));
        // Without libtest there is no table to read, whether the target lists trials of a
        // harness of its own or not.
        for harness in [Harness::Whole, Harness::Trials] {
            let mut plain = vec![this_binary(harness)];
            binaries(&mut plain, &tests, None, None);
            assert!(plain[0].facts.tests.is_none());
        }
    }

    #[test]
    fn an_unreadable_binary_says_why_its_tests_have_no_entry_point() {
        let mut bin = this_binary(Harness::Libtest);
        bin.path = "/nonexistent/test-binary".into();
        let facts = read(&bin, &["a"], None);
        let problem = facts.tests.unwrap().problem.unwrap();
        assert!(
            problem.contains("cannot read `/nonexistent/test-binary`"),
            "{problem}"
        );
    }
}
