//! What how a process ended decides before any dump is read: a test or bench that never
//! ran, and a test whose verdict was never written.

use crate::evidence::identity::TestIdentity;
use crate::evidence::ProcessEnd;
use crate::model::{Artifacts, ExtraRuns, ExtraRunsStatus, Method, TestReport, Verdict};

/// What how a test's or bench's process ended says, before any dump is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It ran to its end with this exit code (0: passed).
    Exited(i32),
    /// A signal killed it: `signal 11 (SIGSEGV)`.
    Crashed(String),
    /// It was killed at its time limit.
    TimedOut,
    /// It never ran, or was stopped by an interruption: why.
    NeverRan(String),
}

impl Ending {
    /// How the process of a test or bench (`what`) ended.
    pub fn of(end: &ProcessEnd, what: &str) -> Ending {
        match end {
            ProcessEnd::Exited(c) => Ending::Exited(*c),
            ProcessEnd::Signaled(_) => Ending::Crashed(end.describe()),
            ProcessEnd::TimedOut => Ending::TimedOut,
            ProcessEnd::SpawnFailed(_) | ProcessEnd::Interrupted => {
                Ending::NeverRan(never_ran(end, what).unwrap_or_default())
            }
        }
    }

    /// The verdict the ending decides by itself: none for a process that ran to its end
    /// (its dumps decide), `crashed`, `timeout`, or `error` for one that never ran.
    pub fn verdict(&self) -> Option<Verdict> {
        match self {
            Ending::Exited(_) => None,
            Ending::Crashed(_) => Some(Verdict::Crashed),
            Ending::TimedOut => Some(Verdict::Timeout),
            Ending::NeverRan(_) => Some(Verdict::Error),
        }
    }
}

/// Why a process that did not run proves nothing about the test or bench (`what`) it was
/// for; `None` for a process that ran. Interrupted ones are normally left out of the
/// report before analysis.
pub fn never_ran(end: &ProcessEnd, what: &str) -> Option<String> {
    match end {
        ProcessEnd::SpawnFailed(e) => Some(e.clone()),
        ProcessEnd::Interrupted => Some(format!(
            "the run was interrupted before this {what} finished"
        )),
        _ => None,
    }
}

/// A test run under nextest whose runner process ended before it wrote the test's verdict
/// (nextest's slow-timeout terminated it, or it was signalled): an error, never clean.
pub fn never_judged(id: &TestIdentity) -> TestReport {
    TestReport {
        package: id.package.to_string(),
        binary: id.binary.to_string(),
        kind: id.kind,
        name: id.name.to_string(),
        verdict: Verdict::Error,
        retained_bytes: 0,
        retained_objects: 0,
        stack_threshold: 0,
        test_threshold: None,
        exit: "killed".into(),
        method: Method::Stacks,
        message: Some(
            "the test's process ended before cargo-leakcheck could judge it (nextest's slow-timeout terminated it, or it was signalled); see nextest's output for the test"
                .into(),
        ),
        stacks: Vec::new(),
        artifacts: Artifacts::default(),
        extra_runs: ExtraRuns {
            made: 0,
            in_all: 0,
            status: ExtraRunsStatus::Unavailable("the process ended before its verdict".into()),
            detail: None,
        },
        first_run_retained: None,
        drained: None,
        passed_without_profiling: false,
        left_processes: Vec::new(),
        unsettled_fails: false,
        collections: Vec::new(),
        processes: Vec::new(),
    }
}
