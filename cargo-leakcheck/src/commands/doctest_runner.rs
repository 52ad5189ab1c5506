//! The runner rustdoc starts each doc-test executable through while `test` collects the
//! doc-tests (cargo's target runner, rustdoc's runtool): keeps the executable and runs it.

use crate::cli::DoctestRunnerArgs;
use crate::errors::ExitCode;
use crate::execution::doctests::keep;
use std::path::Path;

/// Keeps the doc-test executable and runs it as asked; returns the exit code it ended with.
pub fn run(args: &DoctestRunnerArgs) -> i32 {
    let Some((binary, rest)) = args.command.split_first() else {
        crate::say!("error: __doctest-runner needs the doc-test executable to run");
        return ExitCode::CouldNotRun as i32;
    };
    keep::keep_and_run(&args.dir, Path::new(binary), rest)
}
