//! The documented process exit codes, at the bottom of the layers: the report's verdicts and
//! the errors above both map to them.

/// Documented process exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitCode {
    /// Every test passed and no stack exceeded its threshold.
    Success = 0,
    /// Could not run because of what it was given: bad arguments, not a cargo project, an
    /// unknown package or test target, an invalid configuration, reports that are not one run.
    CouldNotRun = 2,
    /// At least one test leaked beyond its threshold (and no test failed).
    LeaksFound = 3,
    /// At least one test failed, crashed or timed out, or a test binary could not be run.
    TestsFailed = 4,
    /// Nothing leaked and nothing failed, but some test could not be analysed (corrupt dump,
    /// custom global allocator): the run proves nothing about those tests.
    Incomplete = 5,
    /// The code under test did not build (cargo's or nextest's diagnostics say why).
    BuildFailed = 6,
    /// The tool's own environment failed it: the runtime could not be built, found or
    /// written, a file or process operation failed, cargo-nextest is missing or refused.
    Environment = 7,
}

impl ExitCode {
    /// What the code says of a run, in a few words (the page's headline).
    pub fn meaning(self) -> &'static str {
        match self {
            ExitCode::Success => "nothing leaked, nothing failed",
            ExitCode::CouldNotRun => "could not run with what it was given",
            ExitCode::LeaksFound => "leaks found",
            ExitCode::TestsFailed => "tests failed, crashed or timed out",
            ExitCode::Incomplete => "some results could not be judged",
            ExitCode::BuildFailed => "the code under test did not build",
            ExitCode::Environment => "the tool's environment failed it",
        }
    }

    /// The code of a run of several findings: a failed test outweighs a leak, a leak an
    /// unjudged test, and any of them success.
    pub fn worst(self, other: ExitCode) -> ExitCode {
        let weight = |c: ExitCode| match c {
            ExitCode::Success => 0,
            ExitCode::Incomplete => 1,
            ExitCode::LeaksFound => 2,
            ExitCode::TestsFailed => 3,
            ExitCode::CouldNotRun | ExitCode::BuildFailed | ExitCode::Environment => 4,
        };
        if weight(other) > weight(self) {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_outweighs_a_leak_which_outweighs_an_unjudged_test() {
        use ExitCode::*;
        assert_eq!(Success.worst(Incomplete), Incomplete);
        assert_eq!(Incomplete.worst(LeaksFound), LeaksFound);
        assert_eq!(LeaksFound.worst(TestsFailed), TestsFailed);
        assert_eq!(TestsFailed.worst(LeaksFound), TestsFailed);
        assert_eq!(LeaksFound.worst(Success), LeaksFound);
    }
}
