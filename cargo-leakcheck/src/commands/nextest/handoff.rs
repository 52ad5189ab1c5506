//! What `cargo leakcheck nextest` hands the runner processes nextest starts, and what they
//! hand back: the session, which test a verdict file is about, and the verdict.

use crate::config::SettingsLayer;
use crate::model::{TargetKind, TestReport};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The environment variable that hands the runner its session.
pub const SESSION_ENV: &str = "LEAKCHECK_NEXTEST_SESSION";

/// What the runner processes need from the command that started nextest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunnerSession {
    /// The profiling runtime.
    pub runtime: PathBuf,
    /// `<target>/leakcheck/nextest`: verdicts and the processes' dumps.
    pub dir: PathBuf,
    /// The workspace root (for the configuration's relative paths).
    pub root: PathBuf,
    /// The build's target directory: the processes a test starts from executables under it
    /// are checked.
    #[serde(default)]
    pub target_dir: PathBuf,
    /// The configuration file in force, if any.
    pub config: Option<PathBuf>,
    /// Settings from the command line.
    pub cli: SettingsLayer,
    /// Profile every test's stacks.
    pub stacks_for_all: bool,
    /// The user's own target runner, program first (empty: none).
    pub wrapper: Vec<String>,
    /// `--baseline`'s report.json and whether only new and grown leaks fail (`--fail-on
    /// new`): a runner asks the gate with it, so nextest shows a known leak passing.
    #[serde(default)]
    pub baseline: Option<(PathBuf, bool)>,
}

/// Which test a verdict file is about (also written before the test runs, so a process
/// that nextest killed is still accounted for).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TestId {
    pub package: String,
    pub kind: TargetKind,
    pub binary: String,
    pub name: String,
}

impl TestId {
    /// How the processes the test started are named among the run's (see
    /// [`crate::judging::suite`]).
    pub fn label(&self) -> String {
        format!(
            "{} {} {} {}",
            self.package,
            self.kind.as_str(),
            self.binary,
            self.name
        )
    }
}

/// What one runner process wrote about its test.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunnerVerdict {
    /// nextest's attempt number (retries count up from 1).
    pub attempt: u32,
    /// The verdict.
    pub report: TestReport,
    /// Run-wide remarks the runner made.
    pub notes: Vec<String>,
    /// The test's executable, when its verdict waits for the run's end: it leaked only in
    /// processes of programs it started, whose losses are compared with every process of
    /// those programs the run's tests started, which no single runner sees.
    #[serde(default)]
    pub deferred: Option<PathBuf>,
}

/// The session's directory of the processes each test started (see
/// [`crate::judging::suite`]).
pub fn processes_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("processes")
}

/// `package`, kind and target of a nextest binary id (`pkg`, `pkg::target`,
/// `pkg::bin/name`) and the executable's file name (`<target>-<hash>`).
pub fn identify(binary_id: &str, exe: &Path) -> (String, TargetKind, String) {
    let file = exe
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let from_file = file.rsplit_once('-').map_or(file.as_str(), |(t, _)| t);
    match binary_id.split_once("::") {
        None => (
            binary_id.to_string(),
            TargetKind::Lib,
            from_file.to_string(),
        ),
        Some((package, rest)) => match rest.split_once('/') {
            Some((_, name)) => (package.to_string(), TargetKind::Bin, name.to_string()),
            None => (package.to_string(), TargetKind::Test, rest.to_string()),
        },
    }
}

/// The entry of a test whose process ended before its verdict was written.
pub fn unjudged(id: &TestId) -> TestReport {
    crate::analysis::ending::never_judged(&crate::evidence::identity::TestIdentity {
        package: &id.package,
        binary: &id.binary,
        kind: id.kind,
        name: &id.name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_ids_name_package_kind_and_target() {
        let exe = Path::new("/t/debug/deps/my_lib-0123abcd");
        assert_eq!(
            identify("my-lib", exe),
            ("my-lib".into(), TargetKind::Lib, "my_lib".into())
        );
        assert_eq!(
            identify("my-lib::integration", Path::new("/t/integration-99")),
            ("my-lib".into(), TargetKind::Test, "integration".into())
        );
        assert_eq!(
            identify("my-lib::bin/tool", Path::new("/t/tool-99")),
            ("my-lib".into(), TargetKind::Bin, "tool".into())
        );
    }
}
