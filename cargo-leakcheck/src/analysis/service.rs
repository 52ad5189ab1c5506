//! The verdict on a service run by `cargo leakcheck run`: how far the run got decides first
//! (a service that never got ready, or whose load failed, was not checked; one that died
//! before it was stopped crashed or failed), then its snapshots taken between ready and the
//! end of the load are judged by the growth rule of benchmarks ([`crate::analysis::growth`]).

use crate::analysis::ending::Ending;
use crate::analysis::growth::{self, BenchIdentity};
use crate::analysis::symbols::FromFiles;
use crate::evidence::{stderr_tail, ProcessEnd, ProcessResult, ServiceStage};
use crate::model::{BenchArtifacts, BenchReport, Verdict};
use std::path::PathBuf;

/// What a run that was not checked lacked, for the user: the service could not be started,
/// never got ready, or the load failed.
pub fn not_checked(stage: &ServiceStage, ready: &str, stderr: &std::path::Path) -> Option<String> {
    match stage {
        ServiceStage::NotStarted(why) => Some(format!("could not start the service: {why}")),
        ServiceStage::NeverReady => Some(format!(
            "the service never got ready: {ready}{}",
            stderr_tail(stderr)
        )),
        ServiceStage::LoadFailed(Some(status)) => Some(format!(
            "the load command failed ({status}); the service's growth under a load that did not run proves nothing"
        )),
        ServiceStage::LoadFailed(None) => Some(
            "the load command did not finish within --load-timeout; it was stopped, and so was the service".into(),
        ),
        // A run cut short is not judged on what it had so far (a clean verdict from half a
        // load would be a guess).
        ServiceStage::Interrupted => Some(
            "interrupted: the service and its load were stopped, and nothing was judged".into(),
        ),
        _ => None,
    }
}

/// A service's heap snapshots, as judged.
pub struct Snapshots<'a> {
    /// Taken while it was ready and under load, oldest first.
    pub under_load: &'a [Vec<PathBuf>],
    /// The first taken after the load and the settle pause, with the scan's retention
    /// paths when it was scanned.
    pub after: Option<growth::After<'a>>,
}

/// What the service's run and its snapshots say; `output` is its captured stdout and
/// stderr.
pub fn judge(
    id: &BenchIdentity,
    stage: &ServiceStage,
    snapshots: Snapshots,
    output: (PathBuf, PathBuf),
    symbols: &mut FromFiles,
    threshold: u64,
    period: u64,
) -> BenchReport {
    let (stdout, stderr) = output;
    let (dumps, after) = (snapshots.under_load, snapshots.after.as_ref());
    let early = |end: &ProcessEnd, when: &str| {
        let ending = Ending::of(end, "service");
        let verdict = match ending {
            // An exit of its own, before it was asked to stop: a service that fails.
            Ending::Exited(_) => Verdict::Failed,
            other => other.verdict().unwrap_or(Verdict::Error),
        };
        BenchReport {
            package: id.package.to_string(),
            binary: id.binary.to_string(),
            name: id.name.to_string(),
            verdict,
            exit: end.describe(),
            message: Some(format!(
                "the service ended {when}, before it was stopped ({}){}",
                end.describe(),
                stderr_tail(&stderr)
            )),
            sample_period: period,
            growth_threshold: threshold,
            growth_threshold_source: String::new(),
            snapshots: dumps.len(),
            duration_seconds: 0.0,
            stacks: Vec::new(),
            heap: Vec::new(),
            rss: Vec::new(),
            artifacts: BenchArtifacts::default(),
        }
    };
    match stage {
        ServiceStage::EndedBeforeReady(end) => early(end, "before it was ready"),
        ServiceStage::EndedUnderLoad(end) => early(end, "under load"),
        _ => {
            // Stopped by the tool after its load: judged on its growth alone.
            let result = ProcessResult::ended(ProcessEnd::Exited(0), stdout, stderr);
            let mut report =
                growth::judge_bench(id, &result, dumps, after, symbols, threshold, period);
            if let ServiceStage::Completed(end) = stage {
                report.exit = format!("stopped ({})", end.describe());
            }
            report
        }
    }
}
