//! cargo-leakcheck: per-test memory leak detection for Rust test suites.
//!
//! Each command (`test` in `app`, `bench` in `bench`) is a short sequence
//! of named steps over shared stages. `session` sets a command up (workspace and
//! selection, the `config`, the output directory under a `lock`, the `runtime`) and
//! finishes it (report.json and the summary); `cargo` builds the executables.
//!
//! Running: `passes` runs an exact counting pass first and profiles stacks only where it
//! is needed; `runner` runs every test in its own process with the runtime preloaded (and
//! `interrupt` stops them all on Ctrl-C); a test that retained memory is run again in its
//! own process, through the function `entry` finds in libtest's table, and `rerun`
//! holds the rules that tell process-lifetime state from leaks.
//!
//! Analysis, pure so it can be tested on captured dumps: `profile` parses a dump; `diff`
//! subtracts the harness-only baseline per stack; `symbolize` turns addresses into
//! functions and lines; `classify` tells leaks from one-time initialisation and harness
//! memory; `analyze` puts a test's verdict together (one path from a raw stack to report
//! frames, used by both commands); `growth` is the bench rule. `model` holds the typed
//! report, `report` writes it: `report.json`, flame graphs, plots and the human summary.

pub(crate) mod analyze;
pub(crate) mod app;
pub(crate) mod bench;
pub(crate) mod cargo;
pub(crate) mod classify;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod console;
pub(crate) mod diff;
pub(crate) mod entry;
pub(crate) mod errors;
mod fnv;
#[cfg(test)]
mod fuzz;
pub(crate) mod growth;
pub(crate) mod inspect;
pub(crate) mod interrupt;
pub(crate) mod lock;
pub(crate) mod model;
pub(crate) mod passes;
pub(crate) mod profile;
pub(crate) mod protocol;
pub(crate) mod report;
pub(crate) mod rerun;
pub(crate) mod runner;
pub(crate) mod runtime;
pub(crate) mod session;
pub(crate) mod suppressions;
pub(crate) mod symbolize;

use errors::ExitCode;

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
    let result = match &cli.command {
        cli::Command::Test(args) => app::run_test_command(args),
        cli::Command::Bench(args) => bench::run_bench_command(args),
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
