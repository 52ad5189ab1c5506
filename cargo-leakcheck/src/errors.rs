//! User-facing errors and the exit codes they map to.
//!
//! Leaks and failing tests are findings, not errors: they are decided in `analyze` and
//! mapped to exit codes in [`ExitCode`]. An [`Error`] is a reason the run could not happen.

use std::fmt;
use std::path::PathBuf;

/// Documented process exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitCode {
    /// Every test passed and no stack exceeded its threshold.
    Success = 0,
    /// Could not run: bad arguments, not a cargo project, build failure, runtime unavailable.
    CouldNotRun = 2,
    /// At least one test leaked beyond its threshold (and no test failed).
    LeaksFound = 3,
    /// At least one test failed, crashed or timed out, or a test binary could not be run.
    TestsFailed = 4,
    /// Nothing leaked and nothing failed, but some test could not be analysed (corrupt dump,
    /// custom global allocator): the run proves nothing about those tests.
    Incomplete = 5,
}

/// A reason cargo-leakcheck could not do its job.
#[derive(Debug)]
pub enum Error {
    /// Bad command-line usage that clap cannot catch.
    Usage(String),
    /// `cargo metadata` failed: usually not a cargo project.
    Metadata {
        /// The manifest we looked for, if known.
        manifest: Option<PathBuf>,
        /// cargo's own message.
        message: String,
    },
    /// A `-p` package that is not in the workspace.
    UnknownPackage {
        /// What the user asked for.
        name: String,
        /// The workspace members.
        available: Vec<String>,
    },
    /// A `--test` target that no selected package has.
    UnknownTestTarget {
        /// What the user asked for.
        name: String,
        /// The integration-test targets of the selected packages.
        available: Vec<String>,
    },
    /// `cargo test --no-run` failed; cargo has already printed its diagnostics.
    Build {
        /// The command that failed.
        command: String,
        /// Its exit status.
        status: String,
    },
    /// The configuration file is unreadable or invalid (the message names file, key, line).
    Config(String),
    /// The profiling runtime could not be built or found.
    Runtime(String),
    /// A file or process operation failed.
    Io {
        /// What was being done, reading after "failed to".
        action: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with what was being attempted.
    pub fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            action: action.into(),
            source,
        }
    }

    /// The exit code this error ends the process with.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::CouldNotRun
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(msg) => write!(f, "{msg}"),
            Error::Metadata { manifest, message } => {
                match manifest {
                    Some(m) => write!(f, "could not read cargo metadata for `{}`", m.display())?,
                    None => write!(
                        f,
                        "could not read cargo metadata (is this a cargo project?)"
                    )?,
                }
                let message = message.trim();
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            Error::UnknownPackage { name, available } => write!(
                f,
                "package `{name}` is not in this workspace (members: {})",
                available.join(", ")
            ),
            Error::UnknownTestTarget { name, available } => {
                if available.is_empty() {
                    write!(f, "no integration test target named `{name}`: the selected packages have none")
                } else {
                    write!(
                        f,
                        "no integration test target named `{name}` (available: {})",
                        available.join(", ")
                    )
                }
            }
            Error::Build { command, status } => {
                write!(
                    f,
                    "build failed ({status}); cargo's diagnostics are above. command: {command}"
                )
            }
            Error::Config(msg) => write!(f, "{msg}"),
            Error::Runtime(msg) => write!(f, "the profiling runtime is unavailable: {msg}"),
            Error::Io { action, source } => write!(f, "failed to {action}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
