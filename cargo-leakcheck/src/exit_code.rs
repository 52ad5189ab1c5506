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
