//! The analysis, pure so it can be tested on captured dumps: `profile` parses a dump,
//! `diff` subtracts the harness-only baseline per stack, `symbolize` turns addresses into
//! functions and lines, `classify` tells leaks from one-time initialisation and harness
//! memory, `stacks` judges each retained stack, `collections` the program's own collections
//! by their lengths, `verdict` puts a test's verdict together from its evidence (the one
//! place verdicts are made) and `growth` is the bench rule.

pub(crate) mod baseline;
pub(crate) mod children;
pub(crate) mod classify;
pub(crate) mod collections;
pub(crate) mod counting;
pub(crate) mod cycles;
pub(crate) mod delta;
pub(crate) mod died;
pub(crate) mod ending;
pub(crate) mod frames;
pub(crate) mod growth;
pub(crate) mod heap_growth;
pub(crate) mod lengths;
pub(crate) mod lost;
pub(crate) mod memory;
pub(crate) mod next;
pub(crate) mod retention;
pub(crate) mod service;
pub(crate) mod settling;
pub(crate) mod stacks;
pub(crate) mod tasks;
pub(crate) mod verdict;
