//! Canary cells as doc-tests with a `fn main` of their own that returns a value
//! (`tests/fixtures/canary_main`, edition 2021: each doc-test an executable of its own).
//!
//! Such a `main` is called again through std's `lang_start` closure, which reports what it
//! returns; and blocks laid out alike are told apart by running them again one at a time.
//! One object of every small size class, each with its clean twin: a cell that is not
//! `leak` shows what that way of running cannot see.

use super::doc::DocFixture;
use super::{cells_with, Cell, Mechanism, CLASSES, DOC_SHAPES};

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
    (cells_with(&MECHANISM, DOC_SHAPES + 1)
        .into_iter()
        .enumerate())
    .filter(|(j, _)| {
        let shape = j / 2;
        shape < CLASSES.len() * kinds && shape % kinds == (shape / kinds) % kinds
    })
    .map(|(_, cell)| cell)
    .collect()
}

/// The cells as doc-tests whose own `main` returns a value.
pub const OWN_MAIN: DocFixture = DocFixture {
    fixture: FIXTURE,
    package: PACKAGE,
    mechanism: &MECHANISM,
    cells,
    own_main: true,
};
