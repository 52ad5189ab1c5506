//! Chooses how each test process is profiled, and runs the passes.
//!
//! Exact stack profiling costs tens of times a plain run, yet most tests leave nothing
//! behind. So every test first runs in counting mode (profiling off; the runtime counts
//! the objects allocated off the main thread that are still live at exit, exactly). libtest
//! runs the test body on its own thread and keeps the main thread for its bookkeeping, so
//! a count of zero objects proves the test retained nothing: it is clean, and needs no
//! second run. Only the tests that retained something, failed, or whose count is missing
//! are run again with exact stack profiling, together with their binary's baseline.
//! Binaries the counters cannot see into (no libtest harness, a custom global allocator)
//! go straight to stacks.
//!
//! Tests run with `RUST_BACKTRACE=0` unless they failed in the counting pass: in a test
//! that passes, a panic is expected, and a backtrace std symbolizes for it is seconds of
//! allocations and a cache of tens of MiB. A test that fails is re-run with the user's
//! environment, so its failure message keeps the backtrace the user asked for.

use crate::analyze::has_custom_global_allocator;
use crate::cargo::TestBinary;
use crate::errors::Error;
use crate::protocol::{Mode, ProfileSettings};
use crate::runner::{self, Job, ProcessEnd, ProcessResult, RunConfig, TestCase};

/// How a test's verdict was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The counting pass proved it retained nothing.
    Counters,
    /// Its stacks were profiled exactly.
    Stacks,
    /// Its counting run crashed or timed out: there is nothing more to learn.
    CountRunOnly,
}

impl Method {
    /// The name used in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Counters => "counters",
            Method::Stacks => "stacks",
            Method::CountRunOnly => "count-run",
        }
    }
}

/// Everything the passes produced.
pub struct Outcome {
    /// Every selected test.
    pub tests: Vec<TestCase>,
    /// Binaries whose tests could not be listed, with the reason.
    pub list_errors: Vec<(usize, String)>,
    /// Per binary: its harness-only baseline, when any of its tests was profiled.
    pub baselines: Vec<Option<ProcessResult>>,
    /// Per test: the process result the verdict is drawn from.
    pub results: Vec<ProcessResult>,
    /// Per test: how.
    pub methods: Vec<Method>,
    /// Per test: its counting run, when it had one.
    pub counted: Vec<Option<ProcessResult>>,
}

/// Whether a counting run leaves the test's verdict open.
pub fn needs_stacks(result: &ProcessResult) -> bool {
    match (&result.end, result.counts) {
        (ProcessEnd::Exited(0), Some(c)) => c.objects != 0 || c.bytes != 0,
        // A failing test is analysed for leaks too; a missing count proves nothing.
        (ProcessEnd::Exited(_), _) => true,
        // Killed or never started: a second run would end the same way.
        _ => false,
    }
}

/// Whether the counting pass can judge this binary's tests.
pub fn countable(binary: &TestBinary) -> bool {
    binary.harness && !has_custom_global_allocator(&binary.path)
}

/// Runs the counting pass (unless `stacks_for_all`), then exact stack profiling where
/// needed.
pub fn run(
    binaries: &[TestBinary],
    config: &RunConfig,
    stacks_for_all: bool,
) -> Result<Outcome, Error> {
    let (tests, list_errors) = runner::list_all(binaries, config);
    let count_mode = ProfileSettings {
        mode: Mode::Count,
        lg_sample: 0,
    };
    let exact = ProfileSettings::default();

    let counting: Vec<bool> = binaries
        .iter()
        .map(|b| !stacks_for_all && countable(b))
        .collect();
    let count_jobs: Vec<Job> = (0..tests.len())
        .filter(|&t| counting[tests[t].binary])
        .map(|t| Job {
            binary: tests[t].binary,
            test: Some(t),
            settings: count_mode,
            quiet_backtraces: true,
        })
        .collect();
    let mut counted: Vec<Option<ProcessResult>> = vec![None; tests.len()];
    if !count_jobs.is_empty() {
        let results = runner::run_jobs(binaries, &tests, &count_jobs, config, "Counting")?;
        for (job, r) in count_jobs.iter().zip(results) {
            counted[job.test.expect("count jobs are tests")] = Some(r);
        }
    }

    let profile: Vec<usize> = (0..tests.len())
        .filter(|&t| counted[t].as_ref().is_none_or(needs_stacks))
        .collect();
    let mut stack_jobs: Vec<Job> = Vec::new();
    for (b, binary) in binaries.iter().enumerate() {
        if binary.harness && profile.iter().any(|&t| tests[t].binary == b) {
            stack_jobs.push(Job {
                binary: b,
                test: None,
                settings: exact,
                quiet_backtraces: true,
            });
        }
    }
    stack_jobs.extend(profile.iter().map(|&t| {
        let failed = counted[t]
            .as_ref()
            .is_some_and(|c| c.end != ProcessEnd::Exited(0));
        Job {
            binary: tests[t].binary,
            test: Some(t),
            settings: exact,
            quiet_backtraces: !failed,
        }
    }));
    let mut baselines = vec![None; binaries.len()];
    let mut profiled: Vec<Option<ProcessResult>> = vec![None; tests.len()];
    if !stack_jobs.is_empty() {
        let results = runner::run_jobs(binaries, &tests, &stack_jobs, config, "Profiling")?;
        for (job, r) in stack_jobs.iter().zip(results) {
            match job.test {
                None => baselines[job.binary] = Some(r),
                Some(t) => profiled[t] = Some(r),
            }
        }
    }

    let mut results = Vec::with_capacity(tests.len());
    let mut methods = Vec::with_capacity(tests.len());
    for t in 0..tests.len() {
        match (profiled[t].take(), &counted[t]) {
            (Some(r), _) => {
                results.push(r);
                methods.push(Method::Stacks);
            }
            (None, Some(c)) => {
                results.push(c.clone());
                methods.push(if c.end == ProcessEnd::Exited(0) {
                    Method::Counters
                } else {
                    Method::CountRunOnly
                });
            }
            (None, None) => unreachable!("every test is counted or profiled"),
        }
    }
    Ok(Outcome {
        tests,
        list_errors,
        baselines,
        results,
        methods,
        counted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ExitCounts;
    use std::path::PathBuf;
    use std::time::Duration;

    fn result(end: ProcessEnd, counts: Option<(i64, i64)>) -> ProcessResult {
        ProcessResult {
            end,
            duration: Duration::ZERO,
            timeout: Duration::ZERO,
            peak_rss_kib: None,
            counts: counts.map(|(objects, bytes)| ExitCounts { objects, bytes }),
            preload_dumps: Vec::new(),
            app_dumps: Vec::new(),
            stdout: PathBuf::new(),
            stderr: PathBuf::new(),
        }
    }

    #[test]
    fn only_a_passing_test_with_nothing_retained_skips_stack_profiling() {
        assert!(!needs_stacks(&result(ProcessEnd::Exited(0), Some((0, 0)))));
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), Some((1, 8)))),
            "a 4-byte leak"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), Some((0, 16)))),
            "bytes alone"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), Some((-1, -8)))),
            "freed what it did not allocate"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), None)),
            "no counts: prove nothing"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(101), Some((0, 0)))),
            "failures are analysed"
        );
        assert!(!needs_stacks(&result(ProcessEnd::Signaled(11), None)));
        assert!(!needs_stacks(&result(ProcessEnd::TimedOut, None)));
    }
}
