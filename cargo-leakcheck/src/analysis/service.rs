//! The verdict on a service run by `cargo leakcheck run`: how far the run got decides first
//! (a service that never got ready, or whose load failed, was not checked; one that died
//! before it was stopped crashed or failed), then its snapshots taken between ready and the
//! end of the load are judged by the growth rule of benchmarks ([`crate::analysis::growth`]).

use crate::analysis::ending::Ending;
use crate::analysis::growth::{self, BenchIdentity, GrowthEvidence};
use crate::analysis::symbols::Symbols;
use crate::evidence::{stderr_tail, ProcessEnd, ServiceStage};
use crate::model::{BenchReport, Verdict};

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

/// What the service's run and its snapshots say (`evidence`: the snapshots taken between
/// ready and the end of the load, the one after the settle pause, its stderr's tail).
pub fn judge(
    id: &BenchIdentity,
    stage: &ServiceStage,
    evidence: &GrowthEvidence,
    symbols: &mut dyn Symbols,
    threshold: u64,
    period: u64,
) -> BenchReport {
    let early = |end: &ProcessEnd, when: &str| {
        let ending = Ending::of(end, "service");
        let mut report = growth::blank_report(id, end.describe(), threshold, period);
        // An exit of its own, before it was asked to stop: a service that fails.
        report.verdict = match ending {
            Ending::Exited(_) => Verdict::Failed,
            other => other.verdict().unwrap_or(Verdict::Error),
        };
        report.message = Some(format!(
            "the service ended {when}, before it was stopped ({}){}",
            end.describe(),
            evidence.stderr_tail
        ));
        report.snapshots = evidence.snapshots.as_ref().map_or(0, |s| s.len());
        report
    };
    match stage {
        ServiceStage::EndedBeforeReady(end) => early(end, "before it was ready"),
        ServiceStage::EndedUnderLoad(end) => early(end, "under load"),
        _ => {
            // Stopped by the tool after its load: judged on its growth alone.
            let exit = match stage {
                ServiceStage::Completed(end) => format!("stopped ({})", end.describe()),
                _ => "stopped".into(),
            };
            let mut report = growth::blank_report(id, exit, threshold, period);
            growth::judge_growth(&mut report, id, evidence, symbols, period);
            report
        }
    }
}
