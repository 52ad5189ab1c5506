//! The gate: what every result does to the exit code, decided here only. The exit code of
//! every command, the summary, JUnit, SARIF, the annotations, the page and the nextest
//! runner (with the base run passed in) all ask it, so they cannot disagree.

use super::{Change, GrowthReport, Report, TestReport, Verdict};
use crate::exit_code::ExitCode;

impl Report {
    /// What one test makes of the run's exit code (`Success`: it does not fail the run).
    /// Its verdict, `unsettled-fails` and `--fail-on new` decide.
    pub fn gate(&self, t: &TestReport) -> ExitCode {
        match self.leak_is_tolerated(t) {
            true => ExitCode::Success,
            false => t.exit_code(),
        }
    }

    /// Whether one test fails the run (see [`Report::gate`]).
    pub fn fails(&self, t: &TestReport) -> bool {
        self.gate(t) != ExitCode::Success
    }

    /// Whether a leaking test is let through by `--fail-on new` (its leak is the base's).
    pub fn leak_is_tolerated(&self, t: &TestReport) -> bool {
        t.verdict == Verdict::Leak
            && self.baseline.as_ref().is_some_and(|b| b.fail_on_new)
            && self
                .change_of(t)
                .is_some_and(|c| c.change == Change::Unchanged)
    }

    /// The documented exit code for a finished run, from its tests and benches. A test
    /// binary that could not even list its tests ran none of them: as under `cargo test`,
    /// that fails the run. Selected tests that never ran leave it incomplete, unless
    /// something worse was found.
    pub fn exit_code(&self) -> ExitCode {
        let start = if !self.unlisted.is_empty() || self.runner_failed.is_some() {
            ExitCode::TestsFailed
        } else if self.not_run.is_some() {
            ExitCode::Incomplete
        } else {
            ExitCode::Success
        };
        let tests = self.tests.iter().map(|t| self.gate(t));
        let benches = self.benches.iter().map(GrowthReport::exit_code);
        tests.chain(benches).fold(start, ExitCode::worst)
    }
}

impl TestReport {
    /// Whether it could not be judged and `unsettled-fails` makes that fail the run.
    pub fn unsettled_fails_the_run(&self) -> bool {
        self.verdict == Verdict::Unsettled && self.unsettled_fails
    }

    /// What this test alone makes of the run's exit code, before any base run is asked
    /// (see [`Report::gate`]).
    fn exit_code(&self) -> ExitCode {
        if self.unsettled_fails_the_run() {
            ExitCode::Incomplete
        } else {
            verdict_exit_code(self.verdict)
        }
    }
}

impl GrowthReport {
    /// What this bench or service alone makes of the run's exit code.
    pub fn exit_code(&self) -> ExitCode {
        if self.not_checked {
            ExitCode::CouldNotRun
        } else if self.verdict == Verdict::Unsettled && self.unsettled_fails {
            ExitCode::Incomplete
        } else {
            verdict_exit_code(self.verdict)
        }
    }
}

/// What one verdict alone makes of a run's exit code: the one place verdicts map to exit
/// codes (the run takes the worst of its tests', [`ExitCode::worst`]).
pub fn verdict_exit_code(verdict: Verdict) -> ExitCode {
    match verdict {
        Verdict::Failed | Verdict::Crashed | Verdict::Timeout => ExitCode::TestsFailed,
        Verdict::Leak => ExitCode::LeaksFound,
        Verdict::Error | Verdict::Unanalysable => ExitCode::Incomplete,
        // Unless `unsettled-fails` says otherwise (see `TestReport::exit_code`).
        Verdict::Clean | Verdict::Unsettled => ExitCode::Success,
    }
}

/// What growth between two heap dumps makes of `diff`'s exit code: over `threshold`, when
/// there is one, it fails.
pub fn growth_exit_code(grown_bytes: u64, threshold: Option<u64>) -> ExitCode {
    match threshold {
        Some(limit) if grown_bytes > limit => ExitCode::LeaksFound,
        _ => ExitCode::Success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NotRun;

    #[test]
    fn the_exit_code_is_the_worst_of_tests_benches_and_unlisted_binaries() {
        let empty = Report::example();
        assert_eq!(empty.exit_code(), ExitCode::Success);
        let with = |verdict| Report {
            tests: vec![TestReport {
                verdict,
                ..TestReport::example()
            }],
            ..Report::example()
        };
        assert_eq!(with(Verdict::Clean).exit_code(), ExitCode::Success);
        assert_eq!(with(Verdict::Leak).exit_code(), ExitCode::LeaksFound);
        assert_eq!(with(Verdict::Timeout).exit_code(), ExitCode::TestsFailed);
        assert_eq!(
            with(Verdict::Unanalysable).exit_code(),
            ExitCode::Incomplete
        );
        let unlisted = Report {
            unlisted: vec!["p::broken".into()],
            ..with(Verdict::Leak)
        };
        assert_eq!(unlisted.exit_code(), ExitCode::TestsFailed);
        // Tests that never ran leave a clean run incomplete; a leak still says leak.
        let not_run = || NotRun::of(vec!["p t2".into()], "stopped early");
        let clean_rest = Report {
            not_run: not_run(),
            ..with(Verdict::Clean)
        };
        assert_eq!(clean_rest.exit_code(), ExitCode::Incomplete);
        let leak_rest = Report {
            not_run: not_run(),
            ..with(Verdict::Leak)
        };
        assert_eq!(leak_rest.exit_code(), ExitCode::LeaksFound);
        assert_eq!(NotRun::of(Vec::new(), "nothing"), None);
        // An unsettled test passes the run unless `unsettled-fails` was in force for it.
        assert_eq!(with(Verdict::Unsettled).exit_code(), ExitCode::Success);
        let mut strict = with(Verdict::Unsettled);
        strict.tests[0].unsettled_fails = true;
        assert_eq!(strict.exit_code(), ExitCode::Incomplete);
        strict.tests[0].verdict = Verdict::Clean;
        assert_eq!(
            strict.exit_code(),
            ExitCode::Success,
            "only an unsettled verdict"
        );
    }

    #[test]
    fn growth_fails_diff_only_over_its_threshold() {
        assert_eq!(growth_exit_code(10, None), ExitCode::Success);
        assert_eq!(growth_exit_code(10, Some(10)), ExitCode::Success);
        assert_eq!(growth_exit_code(11, Some(10)), ExitCode::LeaksFound);
    }
}
