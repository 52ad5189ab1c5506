//! The commands: each is a short sequence of named steps over the shared stages.
//! `session` sets a command up (workspace and selection, configuration, the locked output
//! directory, the runtime) and finishes it (report.json, the summary); `test` and `bench`
//! are the steps in between. `nextest` lets cargo-nextest run the tests, each through the
//! step `test` uses (`test::check`), and `merge` combines the reports of several runs.

pub(crate) mod bench;
pub(crate) mod diff;
pub(crate) mod doctest_runner;
pub(crate) mod merge;
pub(crate) mod nextest;
pub(crate) mod run;
pub(crate) mod session;
pub(crate) mod test;
