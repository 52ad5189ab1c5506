//! User-facing errors and the exit codes they map to.
//!
//! Leaks and failing tests are findings, not errors: they are decided in `analysis` (a
//! test's verdict in `analysis::verdict`) and mapped to exit codes in [`ExitCode`]. An [`Error`] is a reason the run could not happen;
//! it wraps the typed errors of the stages below (configuration, runtime, locks).

pub use crate::exit_code::ExitCode;
use crate::model::Verdict;
use std::path::PathBuf;

/// A reason cargo-leakcheck could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command-line usage that clap cannot catch.
    #[error("{0}")]
    Usage(String),
    /// `cargo metadata` failed: usually not a cargo project.
    #[error("{}", metadata_text(manifest.as_deref(), message))]
    Metadata {
        /// The manifest we looked for, if known.
        manifest: Option<PathBuf>,
        /// cargo's own message.
        message: String,
    },
    /// A `-p` package that is not in the workspace.
    #[error("package `{name}` is not in this workspace (members: {})", available.join(", "))]
    UnknownPackage {
        /// What the user asked for.
        name: String,
        /// The workspace members.
        available: Vec<String>,
    },
    /// A `--test` target that no selected package has.
    #[error("{}", unknown_target_text(name, available))]
    UnknownTestTarget {
        /// What the user asked for.
        name: String,
        /// The integration-test targets of the selected packages.
        available: Vec<String>,
    },
    /// `cargo test --no-run` failed; cargo has already printed its diagnostics.
    #[error("build failed ({status}); cargo's diagnostics are above. command: {command}")]
    Build {
        /// The command that failed.
        command: String,
        /// Its exit status.
        status: String,
    },
    /// Reports that cannot be merged (the message names the files and what differs).
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// `cargo nextest run` failed before any test ran (bad arguments, a build failure).
    #[error("`{command}` failed ({status}) before any test ran; its messages are above")]
    Nextest {
        /// The command.
        command: String,
        /// Its exit status.
        status: String,
        /// Its exit code, which says why (nextest documents them).
        code: Option<i32>,
    },
    /// A heap dump, or the binary it came from, cannot be used (`cargo leakcheck diff`).
    #[error("`{}`: {message}", path.display())]
    Dump {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A program the command needs is not installed.
    #[error("{0}")]
    MissingTool(String),
    /// The configuration file is unreadable or invalid (the message names file, key, line).
    #[error(transparent)]
    Config(#[from] crate::config::LoadError),
    /// The profiling runtime could not be built or found.
    #[error("the profiling runtime is unavailable: {0}")]
    Runtime(#[from] crate::execution::runtime::RuntimeError),
    /// A lock file could not be taken.
    #[error(transparent)]
    Lock(#[from] crate::execution::lock::LockError),
    /// A file or process operation failed.
    #[error("failed to {action}: {source}")]
    Io {
        /// What was being done, reading after "failed to".
        action: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Why reports cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A report could not be read.
    #[error("cannot read the report `{}`: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file that is not a cargo-leakcheck report.
    #[error("`{}` is not a cargo-leakcheck report.json: {reason}", path.display())]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A report of a schema this version cannot read, or of another version than the rest.
    #[error("`{}` has report schema version {found}, {expected}; reports of different schema versions cannot be merged", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u64,
        /// What was expected, in words.
        expected: String,
    },
    /// Reports made with different settings.
    #[error("`{}` was made with {what} {value}, but `{}` with {first_value}; reports of different settings cannot be merged", path.display(), first_path.display())]
    Settings {
        /// The file that differs.
        path: PathBuf,
        /// The setting.
        what: &'static str,
        /// Its value there.
        value: String,
        /// The first report.
        first_path: PathBuf,
        /// The value in the first report.
        first_value: String,
    },
    /// One test with two verdicts.
    #[error("test `{test}` is `{verdict}` in `{}` but `{first_verdict}` in `{}`; a test judged twice with different verdicts cannot be merged", path.display(), first_path.display())]
    Conflict {
        /// The test (`package binary name`).
        test: String,
        /// Where it has `verdict`.
        path: PathBuf,
        /// Its verdict there.
        verdict: Verdict,
        /// Where it was first seen.
        first_path: PathBuf,
        /// Its verdict there.
        first_verdict: Verdict,
    },
    /// The output directory is one of the inputs' directories.
    #[error("the output directory `{}` holds one of the reports being merged; choose another with --output-dir", .0.display())]
    OutputIsInput(PathBuf),
    /// The output directory has other files in it.
    #[error("the output directory `{}` is not empty and holds no earlier merge (no report.json); choose a new or empty one with --output-dir", .0.display())]
    OutputNotEmpty(PathBuf),
}

fn metadata_text(manifest: Option<&std::path::Path>, message: &str) -> String {
    let mut text = match manifest {
        Some(m) => format!("could not read cargo metadata for `{}`", m.display()),
        None => "could not read cargo metadata (is this a cargo project?)".to_string(),
    };
    let message = message.trim();
    if !message.is_empty() {
        text.push_str(": ");
        text.push_str(message);
    }
    text
}

fn unknown_target_text(name: &str, available: &[String]) -> String {
    if available.is_empty() {
        format!("no integration test target named `{name}`: the selected packages have none")
    } else {
        format!(
            "no integration test target named `{name}` (available: {})",
            available.join(", ")
        )
    }
}

impl Error {
    /// Wraps an I/O error with what was being attempted.
    pub fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            action: action.into(),
            source,
        }
    }

    /// The exit code this error ends the process with: what the user can fix in their input
    /// (2), in their code (6), or on their machine (7) are told apart, so a CI script can
    /// retry the last kind and not the others.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage(_)
            | Error::Metadata { .. }
            | Error::UnknownPackage { .. }
            | Error::UnknownTestTarget { .. }
            | Error::Merge(_)
            | Error::Dump { .. }
            | Error::Config(_) => ExitCode::CouldNotRun,
            Error::Build { .. } => ExitCode::BuildFailed,
            // nextest's own codes: 101 a build failure, 96 a setup error (its configuration),
            // 2 arguments its parser refused.
            Error::Nextest { code, .. } => match code {
                Some(101) => ExitCode::BuildFailed,
                Some(2 | 96) => ExitCode::CouldNotRun,
                _ => ExitCode::Environment,
            },
            Error::MissingTool(_) | Error::Runtime(_) | Error::Lock(_) | Error::Io { .. } => {
                ExitCode::Environment
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_code_and_machine_failures_have_codes_of_their_own() {
        let usage = Error::Usage("bad".into());
        let config = Error::Config(crate::config::LoadError::Read(
            "leakcheck.toml".into(),
            std::io::ErrorKind::PermissionDenied.into(),
        ));
        let build = Error::Build {
            command: "cargo test --no-run".into(),
            status: "exit status: 101".into(),
        };
        let nextest = |code| Error::Nextest {
            command: "cargo nextest run".into(),
            status: format!("exit status: {code}"),
            code: Some(code),
        };
        let missing = Error::MissingTool("cargo-nextest is not installed".into());
        let io = Error::io("write report.json", std::io::ErrorKind::StorageFull.into());
        assert_eq!(usage.exit_code(), ExitCode::CouldNotRun);
        assert_eq!(config.exit_code(), ExitCode::CouldNotRun);
        assert_eq!(build.exit_code(), ExitCode::BuildFailed);
        assert_eq!(nextest(101).exit_code(), ExitCode::BuildFailed);
        assert_eq!(nextest(2).exit_code(), ExitCode::CouldNotRun);
        assert_eq!(nextest(104).exit_code(), ExitCode::Environment);
        assert_eq!(missing.exit_code(), ExitCode::Environment);
        assert_eq!(io.exit_code(), ExitCode::Environment);
        let codes = [
            ExitCode::Success,
            ExitCode::CouldNotRun,
            ExitCode::LeaksFound,
            ExitCode::TestsFailed,
            ExitCode::Incomplete,
            ExitCode::BuildFailed,
            ExitCode::Environment,
        ];
        let mut numbers: Vec<i32> = codes.iter().map(|c| *c as i32).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), codes.len(), "every code is distinct");
    }
}
