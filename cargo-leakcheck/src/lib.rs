//! cargo-leakcheck: per-test memory leak detection for Rust test suites.
//!
//! The pipeline, one module per stage: [`cargo`] builds the test executables;
//! [`runtime`] finds (or builds, once) the profiling runtime; [`runner`] runs every test
//! in its own process with the runtime preloaded and collects jemalloc's exit dumps;
//! [`profile`] parses a dump; [`diff`] subtracts the harness-only baseline per stack;
//! [`symbolize`] turns addresses into functions and lines; [`classify`] tells leaks from
//! one-time initialisation and harness memory; [`analyze`] puts a test's verdict
//! together under the thresholds and suppressions of [`config`]; [`report`] writes
//! `report.json`, flame graphs and the human summary. [`passes`] runs an exact counting
//! pass first and profiles stacks only where it is needed; a test that retained memory is
//! run again in its own process, through the function [`entry`] finds in libtest's table,
//! and [`rerun`] holds the rules that tell process-lifetime state from leaks. `cargo leakcheck bench` is
//! [`bench`](mod@bench), judging heap snapshots over time with the rule in [`growth`].
//! The analysis stages are pure, so they can be tested on captured dumps.
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
