//! What a kept doc-test executable holds and how it is run: what a test binary of doc-tests
//! carries (see [`crate::execution::doctests`]).

use crate::evidence::Entry;
use crate::execution::doctests::keep::Kept;
use crate::execution::doctests::sources::SourceMap;
use std::collections::HashMap;

/// The variable a merged doc-test executable runs one doc-test by (its index).
pub const RUN_ONE: &str = "RUSTDOC_DOCTEST_RUN_NB_TEST";

/// What a kept doc-test executable holds and how it is run.
#[derive(Clone, Debug, Default)]
pub struct DocTests {
    /// How rustdoc ran it: its directory, environment and exit status.
    pub kept: Kept,
    /// The doc-tests it holds.
    pub tests: Vec<DocTest>,
    /// Each doc-test's entry point, to run it again in its process.
    pub entries: HashMap<String, Entry>,
    /// The entry points are `fn()` (a doc-test's `main`), not libtest's
    /// `fn() -> Result<(), String>`.
    pub unit_entries: bool,
    /// The doc-tests whose entry point is std's `lang_start` closure (their own `main`
    /// returns a value, or may): the address of that `main`, which the closure calls.
    pub entry_mains: HashMap<String, u64>,
    /// Why a doc-test has no entry point, by name.
    pub no_entry: HashMap<String, String>,
    /// Where the frames of the doc-tests' code are in their files.
    pub sources: Vec<SourceMap>,
}

impl DocTests {
    /// The doc-test named so.
    pub fn test(&self, name: &str) -> Option<&DocTest> {
        self.tests.iter().find(|t| t.name == name)
    }
}

/// One doc-test of an executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocTest {
    /// Its name, as rustdoc names it.
    pub name: String,
    /// Its index in a merged executable ([`RUN_ONE`]).
    pub index: Option<usize>,
    /// It passes by panicking (`should_panic`).
    pub should_panic: bool,
    /// It runs (not ignored, not only compiled).
    pub runs: bool,
}
