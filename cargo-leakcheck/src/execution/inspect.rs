//! The binary-inspection step: each built executable is read once, and what it says is
//! stored with it ([`TestBinary::facts`]): whether it has its own global allocator, whether
//! it links criterion, and for libtest binaries each listed test's entry point (see
//! [`crate::execution::entry`]). Executables can be hundreds of megabytes; nothing else reads them
//! whole.

use crate::execution::cargo::TestBinary;
use crate::execution::entry::{self, Inspection, Layout};
use std::collections::BTreeSet;

/// What one read of an executable said.
#[derive(Clone, Debug, Default)]
pub struct BinaryFacts {
    /// What its symbol tables say.
    pub symbols: BinarySymbols,
    /// Its tests' entry points; `None` when it has no listed libtest tests (or was not
    /// asked about any).
    pub tests: Option<Inspection>,
}

/// What an executable's symbol tables say about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinarySymbols {
    /// It has its own `#[global_allocator]`. Rust's allocation shim forwards to std's
    /// default allocator, `__rdl_alloc`, only when there is none; with one (Rust 1.95 calls
    /// the impl straight from `__rust_alloc`), `__rdl_alloc` is not linked in. A binary
    /// linking std dynamically (a proc-macro crate's tests) defines no shim at all: it
    /// imports `__rust_alloc` from libstd-*.so, whose shim is the default one.
    pub custom_global_allocator: bool,
    /// It contains criterion's code (its mangled crate name).
    pub links_criterion: bool,
}

impl BinarySymbols {
    /// Reads them from an executable's bytes; all false when they are not an object file.
    pub fn of(data: &[u8]) -> BinarySymbols {
        use object::{Object, ObjectSymbol};
        let Ok(file) = object::File::parse(data) else {
            return BinarySymbols::default();
        };
        let (mut default_linked, mut links_criterion) = (false, false);
        for s in file.symbols().chain(file.dynamic_symbols()) {
            if let Ok(n) = s.name() {
                default_linked |= n.contains("__rdl_alloc") || n.contains("__rg_alloc");
                links_criterion |= n.contains("9criterion");
            }
        }
        let shim_imported = file
            .dynamic_symbols()
            .any(|s| s.is_undefined() && s.name().is_ok_and(|n| n.ends_with("__rust_alloc")));
        BinarySymbols {
            custom_global_allocator: !default_linked && !shim_imported,
            links_criterion,
        }
    }
}

/// Reads one executable: its symbols, and the entry points of `names` when it uses
/// libtest and there are any.
pub fn read(binary: &TestBinary, names: &[&str]) -> BinaryFacts {
    let data = match std::fs::read(&binary.path) {
        Ok(data) => data,
        Err(e) => {
            let problem = format!("cannot read `{}`: {e}", binary.path.display());
            return BinaryFacts {
                symbols: BinarySymbols::default(),
                tests: (binary.harness && !names.is_empty()).then(|| Inspection {
                    problem: Some(problem),
                    ..Inspection::default()
                }),
            };
        }
    };
    BinaryFacts {
        symbols: BinarySymbols::of(&data),
        tests: (binary.harness && !names.is_empty())
            .then(|| entry::inspect(&data, names, &binary.target.replace('-', "_"))),
    }
}

/// The step: reads every binary once, looking up the tests it has (`names`, by binary
/// index; empty for commands that need no entry points), then lets a layout of libtest's
/// table that one binary proved settle the binaries whose own tests left it open (a
/// single test): the layout belongs to the toolchain, so it is the same in every binary of
/// one build. `known` is a layout proven by a binary of the same build outside this set
/// (under nextest, each process sees one binary), used when none here proves one.
pub fn binaries(binaries: &mut [TestBinary], names: &[Vec<String>], known: Option<Layout>) {
    let names_of = |b: usize| -> Vec<&str> {
        names
            .get(b)
            .map(|n| n.iter().map(String::as_str).collect())
            .unwrap_or_default()
    };
    for (b, binary) in binaries.iter_mut().enumerate() {
        binary.facts = read(binary, &names_of(b));
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

    fn this_binary(harness: bool) -> TestBinary {
        TestBinary {
            package: "cargo-leakcheck".into(),
            target: "cargo_leakcheck".into(),
            kind: crate::model::TargetKind::Lib,
            path: std::env::current_exe().unwrap(),
            harness,
            facts: BinaryFacts::default(),
        }
    }

    #[test]
    fn symbols_of_an_ordinary_test_binary() {
        // This unit-test binary uses std's default allocator and no criterion.
        let facts = read(&this_binary(true), &[]);
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
        let here = module_path!().split_once("::").unwrap().1;
        let me = &format!("{here}::one_read_gives_symbols_and_entry_points");
        let mut bins = vec![this_binary(true)];
        let tests = vec![vec![me.clone()]];
        binaries(&mut bins, &tests, None);
        let found = bins[0].facts.tests.as_ref().expect("a libtest binary");
        assert_eq!(found.problem, None);
        assert!(found.entries.contains_key(me));
        // Without libtest there is no table to read.
        let mut plain = vec![this_binary(false)];
        binaries(&mut plain, &tests, None);
        assert!(plain[0].facts.tests.is_none());
    }

    #[test]
    fn an_unreadable_binary_says_why_its_tests_have_no_entry_point() {
        let mut bin = this_binary(true);
        bin.path = "/nonexistent/test-binary".into();
        let facts = read(&bin, &["a"]);
        let problem = facts.tests.unwrap().problem.unwrap();
        assert!(
            problem.contains("cannot read `/nonexistent/test-binary`"),
            "{problem}"
        );
    }
}
