//! The verdict on a service run by `cargo leakcheck run`: how far the run got decides first
//! (a service that never got ready, or whose load failed, was not checked; one that died
//! before it was stopped crashed or failed), then its snapshots taken between ready and the
//! end of the load are judged by the growth rule of benchmarks ([`crate::analysis::growth`]).

use crate::analysis::ending::Ending;
use crate::analysis::growth::{self, BenchIdentity};
use crate::evidence::growth_run::GrowthEvidence;
use crate::evidence::symbols::Symbols;
use crate::evidence::{ProcessEnd, ServiceStage};
use crate::model::{GrowthReport, Verdict};

/// What a run that was not checked lacked, for the user: the service could not be started,
/// never got ready (`ready`: what it was waiting for), or the load failed.
pub fn not_checked(stage: &ServiceStage, ready: &str, stderr_tail: &str) -> Option<String> {
    match stage {
        ServiceStage::NotStarted(why) => Some(format!("could not start the service: {why}")),
        ServiceStage::NeverReady => Some(format!(
            "the service never got ready: {ready}{stderr_tail}"
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
/// ready and the end of the load, the one after the settle pause, its stderr's tail;
/// `ready`: what readiness was waited for). A run that was not checked is a row of its own,
/// with the reason, that makes the run exit 2.
pub fn judge(
    id: &BenchIdentity,
    stage: &ServiceStage,
    ready: &str,
    evidence: &GrowthEvidence,
    symbols: &mut dyn Symbols,
    threshold: u64,
    period: u64,
) -> GrowthReport {
    if let Some(why) = not_checked(stage, ready, &evidence.stderr_tail) {
        let mut report = growth::blank_report(id, "not checked".into(), threshold, period);
        report.verdict = Verdict::Error;
        report.message = Some(why);
        report.not_checked = true;
        return report;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::growth::tests::{evidence, identity, symbols};

    fn judged(stage: ServiceStage, points: &[(f64, u64)]) -> GrowthReport {
        judge(
            &identity(true),
            &stage,
            "nothing accepted connections on 127.0.0.1:8080 within 5 s",
            &evidence(points),
            &mut symbols(),
            64 * 1024,
            4096,
        )
    }

    const MB: u64 = 1 << 20;

    fn growing() -> Vec<(f64, u64)> {
        (0..40)
            .map(|i| (i as f64 * 0.25, 4 * MB + i * MB / 2))
            .collect()
    }

    #[test]
    fn a_service_that_ran_its_load_is_judged_by_its_growth() {
        let r = judged(ServiceStage::Completed(ProcessEnd::Exited(0)), &growing());
        assert_eq!(r.verdict, Verdict::Leak, "{r:?}");
        assert_eq!(r.exit, "stopped (exit code 0)");
        assert_eq!(r.exit_code(), crate::errors::ExitCode::LeaksFound);
        let flat: Vec<(f64, u64)> = (0..40).map(|i| (i as f64 * 0.25, 4 * MB)).collect();
        let r = judged(ServiceStage::Completed(ProcessEnd::Exited(0)), &flat);
        assert_eq!(r.verdict, Verdict::Clean, "{r:?}");
    }

    #[test]
    fn a_service_not_checked_is_a_row_with_its_reason_that_exits_2() {
        let r = judged(ServiceStage::NeverReady, &[]);
        assert_eq!(r.verdict, Verdict::Error);
        assert!(r.not_checked);
        assert_eq!(
            r.message.as_deref(),
            Some("the service never got ready: nothing accepted connections on 127.0.0.1:8080 within 5 s")
        );
        assert_eq!(r.exit_code(), crate::errors::ExitCode::CouldNotRun);
        let r = judged(
            ServiceStage::LoadFailed(Some("exit status: 9".into())),
            &growing(),
        );
        assert!(
            r.not_checked && r.stacks.is_empty(),
            "a failed load proves nothing"
        );
    }

    #[test]
    fn a_service_that_ended_by_itself_failed_or_crashed_whatever_it_grew() {
        let r = judged(
            ServiceStage::EndedUnderLoad(ProcessEnd::Signaled(6)),
            &growing(),
        );
        assert_eq!(r.verdict, Verdict::Crashed, "{r:?}");
        assert!(r
            .message
            .unwrap()
            .starts_with("the service ended under load"));
        let r = judged(ServiceStage::EndedBeforeReady(ProcessEnd::Exited(7)), &[]);
        assert_eq!(r.verdict, Verdict::Failed, "{r:?}");
        assert_eq!(r.exit_code(), crate::errors::ExitCode::TestsFailed);
    }
}
