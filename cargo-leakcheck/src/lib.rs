//! cargo-leakcheck: per-test memory leak detection for Rust test suites.
//!
//! The modules are grouped by where they sit in the pipeline, and imports point down
//! (`layers` checks it, and that no modules import each other round in a circle): `model`,
//! `evidence` and `exit_code` at the bottom, `config`, `analysis` over them, `execution`
//! that collects evidence (with `errors`, which wraps the typed errors below), `report`
//! renderers, then `commands`.
//!
//! - `commands`: `test`, `bench`, `run`, `diff`, each a short list of named steps over
//!   shared stages; `session` sets a command up (workspace and selection, the `config`, the
//!   output directory under a lock, the runtime, the golden-case recorder) and finishes it
//!   (every output, the exit code). `nextest` runs the suite on cargo-nextest with each test
//!   process checked by the step `test` uses; `merge` combines the reports of shards
//!   (`execution::partition`).
//! - `execution`: `cargo` builds the executables, `inspect` reads each once (custom
//!   allocator, criterion, each test's entry point in libtest's table: `entry`), `passes`
//!   runs an exact counting pass first and profiles stacks where `analysis::counting` says
//!   they are needed, `listing` lists the tests, `runner` runs every test in its own process
//!   (`process`) with the runtime preloaded (`slots` decides how many run at once, `history`
//!   which start first, `progress` reports, `interrupt` stops them all on Ctrl-C),
//!   `extra_runs` sets how long the runtime waits for a run's threads (the rules that read
//!   the runs are `analysis::settling`'s), `load` reads what a process left on disk into
//!   evidence, `symbolize` names the frames of a binary, and `service` runs a program under
//!   load for `run`.
//! - `evidence`: what a test process leaves (how it ended, the runtime's record, its
//!   output, its entry point), read by `analysis`, collected by `execution`.
//! - `analysis`, pure so it can be tested on captured dumps: `settling` reads the extra
//!   runs (why there were as many, whether counting settles a test, what they may cost),
//!   `profile` parses a dump, `diff` subtracts the harness-only baseline, `symbols` is what
//!   the rules ask of a binary's symbols, `classify` tells leaks from one-time
//!   initialisation and harness memory, `stacks`, `collections` and `retention` judge and
//!   explain a test's retained stacks, its collections and who holds them, `verdict` puts a
//!   test's verdict together (one path from a raw stack to report frames, used by both
//!   commands), `growth` is the bench rule and `service` the rule for `run`.
//! - `judging::verdicts` hands every test's loaded evidence to `analysis::verdict`.
//! - `model` is the typed report, with the gate (`model::gate`), the one place results map
//!   to exit codes; `report` writes it through the exporters of `report::export`
//!   (`report.json`, the page, JUnit, SARIF, GitHub's annotations, the summary), after the
//!   flame graphs, profiles and plots (`report::artifacts`). `errors` maps what stops a run
//!   to exit codes.

pub(crate) mod analysis;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod config;
pub(crate) mod console;
pub(crate) mod errors;
pub(crate) mod evidence;
pub(crate) mod execution;
pub(crate) mod exit_code;
mod fnv;
#[cfg(test)]
mod fuzz;
pub(crate) mod judging;
#[cfg(test)]
mod layers;
pub(crate) mod model;
pub(crate) mod report;

use execution::interrupt;

/// Tests that read this process's own use of the cores hold it for writing; tests that keep
/// a core busy for a second or more hold it for reading: the former never run beside the
/// latter, whose threads they would count.
#[cfg(test)]
pub(crate) static CORES: std::sync::RwLock<()> = std::sync::RwLock::new(());
use exit_code::ExitCode;

/// Entry point of the binary; returns the process exit code.
pub fn main_impl() -> i32 {
    let cli = match cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::CouldNotRun as i32
            } else {
                0
            };
        }
    };
    if let Err(e) = interrupt::install() {
        say!("warning: cannot handle Ctrl-C; an interrupted run may leave tests running: {e}");
    }
    let (quiet, verbose) = match &cli.command {
        cli::Command::Test(a) => (a.quiet, a.verbose),
        cli::Command::Bench(a) => (a.quiet, a.verbose),
        cli::Command::Run(a) => (a.quiet, a.verbose),
        _ => (false, false),
    };
    console::set_level(match (quiet, verbose) {
        (true, _) => console::Level::Quiet,
        (_, true) => console::Level::Verbose,
        _ => console::Level::Normal,
    });
    let result = match &cli.command {
        cli::Command::Test(args) => commands::test::run(args),
        cli::Command::Bench(args) => commands::bench::run(args),
        cli::Command::Run(args) => commands::run::run(args),
        cli::Command::Merge(args) => commands::merge::run(args),
        cli::Command::Diff(args) => commands::diff::run(args),
        cli::Command::Nextest(args) => commands::nextest::run(args),
        cli::Command::NextestRunner(args) => return commands::nextest::run_as_runner(args),
        cli::Command::DoctestRunner(args) => return commands::doctest_runner::run(args),
    };
    let code = match result {
        Ok(code) => code as i32,
        Err(e) => {
            say!("error: {e}");
            e.exit_code() as i32
        }
    };
    // What finished is reported either way; the exit code says the run was cut short.
    interrupt::requested().map_or(code, interrupt::exit_code)
}
