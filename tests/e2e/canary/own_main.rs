//! Canary cells as doc-tests with a `fn main` of their own that returns a value
//! (`tests/fixtures/canary_main`, edition 2021: each doc-test an executable of its own).
//!
//! Such a `main` is called again through std's `lang_start` closure, which reports what it
//! returns; and blocks laid out alike are told apart by running them again one at a time.
//! One object of every small size class, each with its clean twin: a cell that is not
//! `leak` shows what that way of running cannot see.

use super::{cells_with, Cell, Mechanism, CLASSES, MECHANISMS};
use crate::expected::Expected;
use crate::harness::repo_root;
use std::fmt::Write as _;

pub const FIXTURE: &str = "tests/fixtures/canary_main";
const PACKAGE: &str = "canary_main";

pub const MECHANISM: Mechanism = Mechanism {
    binary: PACKAGE,
    letter: 'f',
    what: "a doc-test whose own `fn main` returns a value (called again through std's `lang_start` closure)",
};

/// One cell per small size class, its kind taken in turn, each leaking and its twin.
pub fn cells() -> Vec<Cell> {
    let kinds = 3;
    (cells_with(&MECHANISM, MECHANISMS.len() + 1)
        .into_iter()
        .enumerate())
    .filter(|(j, _)| {
        let shape = j / 2;
        shape < CLASSES.len() * kinds && shape % kinds == (shape / kinds) % kinds
    })
    .map(|(_, cell)| cell)
    .collect()
}

/// A cell's marker: a doc-test's is named after its package and item.
fn site(cell: &Cell) -> String {
    format!("{PACKAGE}_{}", cell.name)
}

/// `src/lib.rs` as generated, and each cell's doc-test name as rustdoc gives it.
fn generate() -> (String, Vec<String>) {
    let mut out = format!(
        "//! Canary cells under {}.\n\
         //!\n\
         //! Generated from the matrix in tests/e2e/canary.rs (`LEAKCHECK_BLESS=1 cargo test\n\
         //! -p cargo-leakcheck --test e2e canary` rewrites it): edit the matrix, not this file.\n",
        MECHANISM.what
    );
    let mut names = Vec::new();
    for cell in cells() {
        let marker = if cell.leak {
            format!(" // leak-site: {}", site(&cell))
        } else {
            String::new()
        };
        out.push('\n');
        let fence = out.lines().count() + 1;
        write!(
            out,
            "/// ```\n\
             /// # use std::hint::black_box;\n\
             /// # use std::mem::forget;\n\
             /// # use std::thread;\n\
             /// # fn before(cell: impl FnOnce()) {{ cell() }}\n\
             /// # fn after(cell: impl FnOnce()) {{ cell() }}\n\
             /// fn main() -> Result<(), String> {{\n\
             ///     {}{marker}\n\
             ///     Ok(())\n\
             /// }}\n\
             /// ```\n\
             pub fn {}() {{}}\n",
            cell.statement, cell.name
        )
        .unwrap();
        names.push(format!("src/lib.rs - {} (line {fence})", cell.name));
    }
    (out, names)
}

/// The rows of the e2e table: every leaking cell `leak` at its line, every twin `clean`.
pub fn rows() -> Vec<Expected> {
    let (_, names) = generate();
    cells()
        .into_iter()
        .zip(names)
        .map(|(cell, name)| {
            let test: &'static str = Box::leak(name.into_boxed_str());
            let site = cell.leak.then(|| &*Box::leak(site(&cell).into_boxed_str()));
            Expected::generated_at(FIXTURE, PACKAGE, PACKAGE, test, site)
        })
        .collect()
}

/// The generated file.
pub fn source_path() -> std::path::PathBuf {
    repo_root().join(FIXTURE).join("src/lib.rs")
}

/// `src/lib.rs` as generated.
pub fn source() -> String {
    generate().0
}
