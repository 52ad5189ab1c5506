//! cargo-leakcheck: per-test memory leak detection for Rust test suites.
//!
//! Each command (`test` in [`app`], `bench` in [`bench`](mod@bench)) is a short sequence
//! of named steps over shared stages. [`session`] sets a command up (workspace and
//! selection, the [`config`], the output directory under a [`lock`], the [`runtime`]) and
//! finishes it (report.json and the summary); [`cargo`] builds the executables.
//!
//! Running: [`passes`] runs an exact counting pass first and profiles stacks only where it
//! is needed; [`runner`] runs every test in its own process with the runtime preloaded (and
//! [`interrupt`] stops them all on Ctrl-C); a test that retained memory is run again in its
//! own process, through the function [`entry`] finds in libtest's table, and [`rerun`]
//! holds the rules that tell process-lifetime state from leaks.
//!
//! Analysis, pure so it can be tested on captured dumps: [`profile`] parses a dump; [`diff`]
//! subtracts the harness-only baseline per stack; [`symbolize`] turns addresses into
//! functions and lines; [`classify`] tells leaks from one-time initialisation and harness
//! memory; [`analyze`] puts a test's verdict together (one path from a raw stack to report
//! frames, used by both commands); [`growth`] is the bench rule. [`model`] holds the typed
//! report, [`report`] writes it: `report.json`, flame graphs, plots and the human summary.
#![warn(missing_docs)]

pub mod analyze;
pub mod app;
pub mod bench;
pub mod cargo;
pub mod classify;
pub mod cli;
pub mod config;
pub mod console;
pub mod diff;
pub mod entry;
pub mod errors;
pub mod growth;
pub mod interrupt;
pub mod lock;
pub mod model;
pub mod passes;
pub mod profile;
pub mod protocol;
pub mod report;
pub mod rerun;
pub mod runner;
pub mod runtime;
pub mod session;
pub mod suppressions;
pub mod symbolize;

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
