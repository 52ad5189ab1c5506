//! The canary matrix as doc-tests: the same cells, each the body of a doc-test of
//! `tests/fixtures/canary_doc` (edition 2024, so rustdoc merges them into one executable).
//!
//! A doc-test's own run is on the process's main thread, which no count includes: it is
//! counted through its extra runs, each a call of its `main` by the runtime. A cell that is
//! not `leak` there shows what that way of counting cannot see.

use super::{cells_with, Cell, Mechanism, DOC_SHAPES};
use crate::expected::Expected;
use crate::harness::repo_root;
use std::fmt::Write as _;

pub const FIXTURE: &str = "tests/fixtures/canary_doc";
const PACKAGE: &str = "canary_doc";

pub const MECHANISM: Mechanism = Mechanism {
    binary: PACKAGE,
    letter: 'd',
    what: "a doc-test (its own run on the main thread, counted through its extra runs)",
};

/// The cells, shaped as those of a mechanism after the last of the test binaries'.
pub fn cells() -> Vec<Cell> {
    cells_with(&MECHANISM, DOC_SHAPES)
}

/// A fixture of canary cells as doc-tests, generated from the matrix.
pub struct DocFixture {
    pub fixture: &'static str,
    pub package: &'static str,
    pub mechanism: &'static Mechanism,
    pub cells: fn() -> Vec<Cell>,
    /// Each cell in a `fn main` of the doc-test's own that returns a `Result`.
    pub own_main: bool,
}

/// The cells as merged doc-tests.
pub const MERGED: DocFixture = DocFixture {
    fixture: FIXTURE,
    package: PACKAGE,
    mechanism: &MECHANISM,
    cells,
    own_main: false,
};

impl DocFixture {
    /// A cell's marker: a doc-test's is named after its package and item.
    fn site(&self, cell: &Cell) -> String {
        format!("{}_{}", self.package, cell.name)
    }

    /// `src/lib.rs` as generated, and each cell's doc-test name as rustdoc gives it (the
    /// line of its opening fence).
    fn generate(&self) -> (String, Vec<String>) {
        let mut out = format!(
            "//! Canary cells under {}.\n\
             //!\n\
             //! Generated from the matrix in tests/e2e/canary.rs (`LEAKCHECK_BLESS=1 cargo test\n\
             //! -p cargo-leakcheck --test e2e canary` rewrites it): edit the matrix, not this file.\n",
            self.mechanism.what
        );
        let mut names = Vec::new();
        for cell in (self.cells)() {
            let marker = if cell.leak {
                format!(" // leak-site: {}", self.site(&cell))
            } else {
                String::new()
            };
            out.push('\n');
            let fence = out.lines().count() + 1;
            // No mechanism around the cell: its `before` and `after` only call it.
            let body = if self.own_main {
                format!(
                    "/// fn main() -> Result<(), String> {{\n\
                     ///     {}{marker}\n\
                     ///     Ok(())\n\
                     /// }}\n",
                    cell.statement
                )
            } else {
                format!("/// {}{marker}\n", cell.statement)
            };
            write!(
                out,
                "/// ```\n\
                 /// # use std::hint::black_box;\n\
                 /// # use std::mem::forget;\n\
                 /// # use std::thread;\n\
                 /// # fn before(cell: impl FnOnce()) {{ cell() }}\n\
                 /// # fn after(cell: impl FnOnce()) {{ cell() }}\n\
                 {body}\
                 /// ```\n\
                 pub fn {}() {{}}\n",
                cell.name
            )
            .unwrap();
            names.push(format!("src/lib.rs - {} (line {fence})", cell.name));
        }
        (out, names)
    }

    /// The rows of the e2e table: every leaking cell `leak` at its line, every twin `clean`.
    pub fn rows(&self) -> Vec<Expected> {
        let (_, names) = self.generate();
        ((self.cells)().into_iter().zip(names))
            .map(|(cell, name)| {
                let test: &'static str = Box::leak(name.into_boxed_str());
                let site = (cell.leak).then(|| &*Box::leak(self.site(&cell).into_boxed_str()));
                Expected::generated_at(self.fixture, self.package, self.package, test, site)
            })
            .collect()
    }

    /// The generated file.
    pub fn source_path(&self) -> std::path::PathBuf {
        repo_root().join(self.fixture).join("src/lib.rs")
    }

    /// `src/lib.rs` as generated.
    pub fn source(&self) -> String {
        self.generate().0
    }
}
