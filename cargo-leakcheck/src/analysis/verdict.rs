//! Where a test's verdict is made: one function from its evidence, read already (its
//! process's record, dumps, scan and paths, the tail of its stderr, how its extra runs
//! went) and its settings, to its [`TestReport`]. It reads no file and starts nothing, so
//! the golden tests judge captured evidence with it exactly as a run does.
//!
//! The counting pass's own decisions (which tests it settles) are in
//! [`crate::analysis::counting`]; the rules for a retained stack are in
//! [`crate::analysis::stacks`]; how a verdict maps to an exit code is in
//! [`crate::model::gate::verdict_exit_code`].

use crate::analysis::children;
use crate::analysis::collections;
use crate::analysis::cycles;
use crate::analysis::delta;
use crate::analysis::ending::Ending;
use crate::analysis::frames::{frame_report, resolve_stack};
use crate::analysis::settling;
pub use crate::analysis::stacks::Policy;
use crate::analysis::stacks::{judge_stacks, with_growth, with_reachability, RetainedStack};
pub use crate::evidence::identity::TestIdentity;
use crate::evidence::normalized::{FrameKey, NormalizedProfile};
use crate::evidence::profile::Counts;
use crate::evidence::symbols::{CodeSymbols, Symbols};
use crate::evidence::test_run::{Allocator, BinaryEvidence, DumpError, Dumps, TestEvidence};
use crate::evidence::{Entry, ProcessEnd, ProcessResult};
use crate::model::{
    Artifacts, ExtraRuns, FrameReport, Method, Retained as RetainedCounts, StackKind, StackReport,
    TestReport, Verdict,
};
use std::collections::HashMap;

/// The verdict on one test.
pub fn judge(
    id: &TestIdentity,
    evidence: &TestEvidence,
    binary: &BinaryEvidence,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) -> TestReport {
    if evidence.method == Method::Counters {
        // The counting pass proved it clean: it passed, and nothing it allocated off the
        // harness's main thread was live when its process ended, or extra runs of it in the
        // same process added nothing to what it left.
        let mut report = clean_report(
            id,
            evidence.result,
            policy,
            evidence.method,
            evidence.extra_runs,
        );
        report.extra_runs.in_all = runs_in_all(evidence.method, None, evidence.result);
        crate::analysis::died::name_the_frame(
            &mut report.extra_runs,
            evidence,
            &binary.exe,
            symbols,
        );
        add_children(&mut report, evidence, symbols, policy);
        return report;
    }
    let mut report = judge_profiled(id, evidence, binary, symbols, policy);
    crate::analysis::died::name_the_frame(&mut report.extra_runs, evidence, &binary.exe, symbols);
    add_children(&mut report, evidence, symbols, policy);
    report.extra_runs.in_all = runs_in_all(evidence.method, evidence.counting, evidence.result);
    let counting_run_passed = evidence
        .counting
        .is_some_and(|c| c.first_run_end() == ProcessEnd::Exited(0));
    mark_profiling_failure(&mut report, counting_run_passed);
    // Processes its counting run left running too (the profiled run's are in already).
    for left in evidence.counting.iter().flat_map(|c| &c.left_running) {
        if !report.left_processes.contains(left) {
            report.left_processes.push(left.clone());
        }
    }
    report
}

/// What the processes the test started lost in every run, into its report: a leak of the
/// test when one such stack fails it (a test that failed, crashed or could not be judged
/// keeps that verdict); and the executables they ran, checked or not.
fn add_children(
    report: &mut TestReport,
    evidence: &TestEvidence,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) {
    let found = children::judge(&evidence.children, evidence.suite, symbols, policy);
    report.processes = found.processes;
    for s in found.stacks.iter().filter(|s| s.kind == StackKind::Leak) {
        report.retained_bytes = report.retained_bytes.saturating_add(s.bytes);
        report.retained_objects = report.retained_objects.saturating_add(s.objects);
    }
    let fails = found.stacks.iter().any(|s| s.fails);
    report.stacks.extend(found.stacks);
    if fails && matches!(report.verdict, Verdict::Clean | Verdict::Unsettled) {
        report.verdict = Verdict::Leak;
        report.message = None;
    }
}

/// Every run of a test beyond its own, in all its processes (see
/// [`ExtraRuns::in_all`]): `counting` is its counting process when `result` is another.
pub fn runs_in_all(
    method: Method,
    counting: Option<&ProcessResult>,
    result: &ProcessResult,
) -> u32 {
    let runs_of = |r: &ProcessResult| r.record.as_ref().map_or(0, |rec| rec.runs.len() as u32);
    match (method, counting) {
        // The stacks process ran the test from scratch: that run is beyond its own too.
        (Method::Stacks, Some(c)) => runs_of(c) + 1 + runs_of(result),
        _ => runs_of(result),
    }
}

/// Whether a binary's Rust allocations reach malloc (or a profiled jemalloc of its own):
/// false for a custom `#[global_allocator]` whose baseline shows neither.
pub fn rust_allocations_visible(bin: &BinaryEvidence, symbols: &mut dyn Symbols) -> bool {
    match &bin.allocator {
        Allocator::Malloc => true,
        Allocator::Own {
            own_jemalloc,
            ever_allocated,
        } => *own_jemalloc || allocator_reaches_malloc(ever_allocated, symbols),
    }
}

/// Whether the process's accumulated allocations (`prof_accum`, passed as `ever`: each
/// stack's accumulated counts as its live ones) show the global allocator calling malloc:
/// then a custom allocator forwards to the system allocator and everything it hands out is
/// profiled.
pub fn allocator_reaches_malloc<S: CodeSymbols + ?Sized>(
    ever: &[NormalizedProfile],
    symbols: &mut S,
) -> bool {
    ever.iter()
        .flat_map(|p| p.stacks.keys())
        .flatten()
        .any(|frame_key| {
            symbols
                .code(&frame_key.object, frame_key.file_offset)
                .iter()
                .any(|f| {
                    f.function.as_deref().is_some_and(|n| {
                        n.starts_with("__rustc::__rust_alloc")
                            || n.starts_with("__rustc::__rust_realloc")
                            || (n.contains(" as core::alloc::global::GlobalAlloc>::")
                                && !n.starts_with("<std::alloc::System as"))
                    })
                })
        })
}

/// The report's view of how a test's extra runs went.
pub fn extra_runs_of(outcome: &crate::evidence::test_run::ExtraRunsOutcome) -> ExtraRuns {
    ExtraRuns {
        made: outcome.made,
        in_all: outcome.made,
        detail: settling::detail(&outcome.status, outcome.made),
        status: outcome.status.clone(),
    }
}

/// Whether a test judged clean on what was reachable at exit stays unsettled: it kept
/// memory for the process lifetime, and the tool, not the test, stopped the second run that
/// would have shown whether that grows (see [`second_run_stopped_by_the_tool`]).
pub fn unsettled_without_repetition(report: &TestReport, status: &settling::Status) -> bool {
    second_run_stopped_by_the_tool(status)
        && report.verdict == Verdict::Clean
        && report
            .stacks
            .iter()
            .any(|s| s.kind == StackKind::ProcessLifetime)
}

/// The one rule for a test judged without a second run, whatever it is (a test, a doc-test,
/// a trial): when the test itself stopped the second run (it panics every time, is one
/// program, ended the process, or its extra run panicked, crashed or failed) one run is all
/// it allows, and what it keeps reachable is kept; when the tool could not make the run (no
/// entry point to call, no runtime support, out of time) the test could have run again, and
/// `clean` would claim a check that was not made. Every status is named, so a new one must
/// be placed.
fn second_run_stopped_by_the_tool(status: &settling::Status) -> bool {
    use settling::Status as S;
    match status {
        S::NoEntryPoint(_) | S::Unavailable(_) | S::TimedOut => true,
        S::Completed
        | S::NotNeeded
        | S::Off
        | S::TestFailed
        | S::ExitedEarly
        | S::ShouldPanic
        | S::NoHarness
        | S::Panicked(_)
        | S::Crashed(_)
        | S::DrainFailed(_)
        | S::Failed(_) => false,
    }
}

/// A clean report with nothing retained, to be filled in.
fn clean_report(
    id: &TestIdentity,
    result: &ProcessResult,
    policy: &Policy,
    method: Method,
    extra_runs: &crate::evidence::test_run::ExtraRunsOutcome,
) -> TestReport {
    let first_run_retained =
        result
            .record
            .as_ref()
            .and_then(|r| r.counts())
            .map(|c| RetainedCounts {
                objects: c.objects.max(0) as u64,
                bytes: c.bytes.max(0) as u64,
            });
    TestReport {
        package: id.package.to_string(),
        binary: id.binary.to_string(),
        kind: id.kind,
        name: id.name.to_string(),
        verdict: Verdict::Clean,
        retained_bytes: 0,
        retained_objects: 0,
        stack_threshold: policy.effective.stack_threshold,
        test_threshold: policy.effective.test_threshold,
        exit: result.end.describe(),
        method,
        message: None,
        stacks: Vec::new(),
        artifacts: Artifacts::default(),
        extra_runs: extra_runs_of(extra_runs),
        first_run_retained,
        drained: result.record.as_ref().and_then(|r| r.drained_total()),
        passed_without_profiling: false,
        left_processes: result.left_running.clone(),
        unsettled_fails: policy.effective.unsettled_fails,
        collections: Vec::new(),
        processes: Vec::new(),
    }
}

/// A test that passed its counting run but failed, crashed or timed out when profiled is
/// said to be so: the profiler's slowness, not the code, may be what broke it.
fn mark_profiling_failure(report: &mut TestReport, counting_run_passed: bool) {
    let failed = matches!(
        report.verdict,
        Verdict::Failed | Verdict::Crashed | Verdict::Timeout
    );
    if counting_run_passed && failed {
        report.passed_without_profiling = true;
        report.message = Some(format!(
            "passed without profiling, failed when profiled: recording every allocation's stack slows the test, so a timing-sensitive assertion may not hold then. {}",
            report.message.as_deref().unwrap_or_default()
        ));
    }
}

/// How the process ended, when that decides the verdict before any dump is read.
fn verdict_of_end(evidence: &TestEvidence) -> Result<i32, (Verdict, Option<String>)> {
    let result = evidence.result;
    let ending = Ending::of(&result.end, "test");
    let message = match &ending {
        Ending::Exited(c) => return Ok(*c),
        Ending::TimedOut => format!(
            "killed after {:.1}s, its timeout; a killed process writes no heap dump, so its leaks cannot be analysed",
            result.timeout.as_secs_f64()
        ),
        Ending::Crashed(by) => format!(
            "killed by {by}; no exit dump, so its leaks cannot be analysed{}",
            evidence.stderr_tail
        ),
        Ending::NeverRan(why) => why.clone(),
    };
    let verdict = ending
        .verdict()
        .expect("only a process that ran has no verdict yet");
    Err((verdict, Some(message)))
}

fn judge_profiled(
    id: &TestIdentity,
    evidence: &TestEvidence,
    bin: &BinaryEvidence,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) -> TestReport {
    let result = evidence.result;
    let mut report = clean_report(id, result, policy, evidence.method, evidence.extra_runs);
    let code = match verdict_of_end(evidence) {
        Ok(code) => code,
        Err((verdict, message)) => {
            report.verdict = verdict;
            report.message = message;
            return report;
        }
    };
    let Some(dumps) = usable_dumps(evidence, code, &mut report) else {
        return report;
    };
    let mut counted = judge_retained(&mut report, dumps, code, evidence, bin, symbols, policy);
    counted = counted.saturating_add(judge_collections(
        &mut report,
        dumps,
        code,
        evidence,
        bin,
        symbols,
        policy,
    ));
    let visible = rust_allocations_visible(bin, symbols);
    report.verdict = verdict_of_stacks(&mut report, code, counted, evidence, visible, policy);
    if report.verdict == Verdict::Leak {
        if let Some(held) = held_by_threads(result, evidence.counting) {
            report.message = Some(match report.message.take() {
                Some(m) => format!("{m}; {held}"),
                None => held,
            });
        }
    }
    if unsettled_without_repetition(&report, &evidence.extra_runs.status) {
        let kept: u64 = report
            .stacks
            .iter()
            .filter(|s| s.kind == StackKind::ProcessLifetime)
            .map(|s| s.bytes)
            .sum();
        report.verdict = Verdict::Unsettled;
        // Only a run that did not finish in time was tried; the other reasons are why no
        // extra run could be made at all.
        let why_not_shown = match evidence.extra_runs.status {
            settling::Status::TimedOut => "its extra runs could not show whether that grows",
            _ => "it could not run again to show whether that grows",
        };
        report.message = Some(format!(
            "kept {} still reachable at exit, and {why_not_shown}: {}",
            crate::model::human_bytes(kept),
            report
                .extra_runs
                .detail
                .as_deref()
                .unwrap_or("not run again")
        ));
    }
    report
}

/// The dumps to judge, or `None` with the report's verdict set: a dump that could not be
/// read, or none at all, is an error (or the failure of a test that failed).
fn usable_dumps<'a>(
    evidence: &'a TestEvidence,
    code: i32,
    report: &mut TestReport,
) -> Option<&'a Dumps> {
    let problem = match &evidence.dumps {
        Some(Ok(d)) => return Some(d),
        Some(Err(e)) => e.to_string(),
        None => DumpError::NoExitDump.to_string(),
    };
    report.verdict = if code != 0 {
        Verdict::Failed
    } else {
        Verdict::Error
    };
    report.message = Some(format!("{problem}{}", evidence.stderr_tail));
    None
}

/// Each retained stack's kind (from its growth over the extra runs when they were made,
/// else from what the scan still reached) into the report, with the leaks' totals; returns
/// the bytes that count against the per-test threshold (leaks not suppressed, and one-time
/// state when it is configured to fail).
fn judge_retained(
    report: &mut TestReport,
    dumps: &Dumps,
    code: i32,
    evidence: &TestEvidence,
    bin: &BinaryEvidence,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) -> u64 {
    let empty = NormalizedProfile {
        stacks: HashMap::new(),
        sample_period: dumps.own.sample_period,
    };
    let before = bin.baseline.as_ref().unwrap_or(&empty);
    let deltas = delta::diff(&dumps.own, before);
    // Growth over the extra runs, when they were all made and measured.
    let series = match evidence.entry {
        Some(entry) if evidence.extra_runs.usable() && code == 0 => match &dumps.runs {
            Ok(runs) => Some(series_of(&dumps.own, runs, &bin.exe, entry)),
            Err(e) => {
                let unusable = crate::evidence::test_run::ExtraRunsOutcome {
                    made: evidence.extra_runs.made,
                    status: settling::Status::Unavailable(e.to_string()),
                };
                report.extra_runs = extra_runs_of(&unusable);
                None
            }
        },
        _ => None,
    };
    let retained = with_growth(deltas, series.as_ref(), &bin.exe, evidence.entry);
    // Without extra runs, reachability at exit tells what is kept from what is lost, for a
    // test that failed as well: what a static still holds is not lost because the test
    // failed.
    let lost = match &series {
        None => dumps.own_lost.as_ref(),
        Some(_) => None,
    };
    let retained = with_reachability(retained, lost, bin.baseline_unreached.as_ref());
    let held = held_by(dumps, series.is_some(), evidence.entry, &bin.exe);
    let lost_how = cycles_by(dumps, series.is_some(), evidence.entry, &bin.exe);
    report.stacks = judge_stacks(
        &retained,
        &bin.exe,
        symbols,
        policy,
        evidence.entry.map(|e| e.file_range),
        &held,
    );
    explain_lost(
        &mut report.stacks,
        &retained,
        &lost_how,
        &bin.exe,
        symbols,
        evidence.entry,
    );
    for s in report.stacks.iter().filter(|s| s.kind == StackKind::Leak) {
        report.retained_bytes = report.retained_bytes.saturating_add(s.bytes);
        report.retained_objects = report.retained_objects.saturating_add(s.objects);
    }
    report
        .stacks
        .iter()
        .filter(|s| s.suppression.is_none())
        .filter(|s| {
            s.kind == StackKind::Leak
                || (matches!(s.kind, StackKind::OneTime | StackKind::ProcessLifetime)
                    && policy.effective.one_time_fails)
        })
        .map(|s| s.bytes)
        .sum()
}

/// The program's own collections as the test's extra runs changed them, into the report,
/// when the runs were all made and measured; returns what the failing ones add per run, in
/// bytes, against the per-test threshold.
fn judge_collections(
    report: &mut TestReport,
    dumps: &Dumps,
    code: i32,
    evidence: &TestEvidence,
    bin: &BinaryEvidence,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) -> u64 {
    let Some(record) = evidence.result.record.as_ref() else {
        return 0;
    };
    if code != 0 || !evidence.extra_runs.usable() || bin.collections.collections.is_empty() {
        return 0;
    }
    report.collections = collections::judge(
        &bin.collections,
        &record.lengths,
        record.runs.len(),
        &dumps.sites,
        symbols,
        policy,
    );
    report
        .collections
        .iter()
        .filter(|c| c.kind == StackKind::Leak && c.suppression.is_none())
        .map(|c| c.growth_bytes())
        .sum()
}

/// The verdict its stacks give a test that ran to its end (`code`: how its own run exited;
/// `counted`: the bytes against the per-test threshold; `rust_visible`: its binary's Rust
/// allocations reach the profiled allocator), with the message that says why.
fn verdict_of_stacks(
    report: &mut TestReport,
    code: i32,
    counted: u64,
    evidence: &TestEvidence,
    rust_visible: bool,
    policy: &Policy,
) -> Verdict {
    let result = evidence.result;
    let over_total = policy.effective.test_threshold.filter(|&t| counted > t);
    // The counting process asked the program's own allocator for blocks of every size
    // class and some were not malloc's: whatever the stacks show, part of the heap is
    // out of sight.
    let probe_saw_own = evidence
        .counting
        .and_then(|c| c.record.as_ref())
        .is_some_and(|r| r.allocator_reaches_malloc == Some(false));
    let visible = (rust_visible && !probe_saw_own) || !result.app_dumps.is_empty();
    // A collection's length is read from the program's own data, whatever its allocator.
    let collection_grows = report.collections.iter().any(|c| c.fails);
    if code != 0 {
        report.message = Some(format!(
            "the test failed ({}){}",
            result.end.describe(),
            evidence.stderr_tail
        ));
        Verdict::Failed
    } else if !visible {
        let own = if probe_saw_own {
            "the test binary installs its own #[global_allocator], which serves some blocks itself rather than from malloc (asked for blocks of every size class at exit, it handed out some that were not malloc's); cargo-leakcheck sees malloc, and tikv-jemallocator when built with its `profiling` feature, not what this allocator keeps inside its own blocks"
        } else {
            "the test binary installs its own #[global_allocator], whose allocations never reach malloc; cargo-leakcheck sees malloc, and tikv-jemallocator when built with its `profiling` feature (turned on for each package that depends on tikv-jemallocator; for tikv-jemallocator's own tests, or a dependency that renames it, pass `--features` with it yourself), not this allocator"
        };
        if collection_grows {
            // A collection's length is read from the program's own data, whatever its
            // allocator: that much is judged.
            report.message = Some(format!(
                "{own}; its collections' lengths are read from its own data all the same, and one grew on every run"
            ));
            Verdict::Leak
        } else {
            report.message = Some(own.into());
            Verdict::Unanalysable
        }
    } else if report.stacks.iter().any(|s| s.fails) || report.collections.iter().any(|c| c.fails) {
        Verdict::Leak
    } else if let Some(limit) = over_total {
        report.message = Some(format!(
            "its leaked stacks retain {counted} bytes in all, over the test-threshold of {limit} bytes (set by {})",
            policy.effective.test_threshold_source
        ));
        Verdict::Leak
    } else {
        Verdict::Clean
    }
}

/// Live counts per stack after the test's own run and after each extra run, stacks cut at
/// the call of the entry point (see [`settling::cut_at_entry`]), so that what the first run
/// and the extra runs allocated at the same place add up.
pub fn series_of(
    own: &NormalizedProfile,
    runs: &[NormalizedProfile],
    exe: &str,
    entry: &Entry,
) -> HashMap<Vec<FrameKey>, Vec<Counts>> {
    let n = runs.len() + 1;
    let mut series: HashMap<Vec<FrameKey>, Vec<Counts>> = HashMap::new();
    for (k, p) in std::iter::once(own).chain(runs).enumerate() {
        for (frames, c) in &p.stacks {
            let cut = settling::cut_at_entry(frames, exe, entry.file_range).to_vec();
            let at = &mut series
                .entry(cut)
                .or_insert_with(|| vec![Counts::default(); n])[k];
            at.objects = at.objects.saturating_add(c.objects);
            at.bytes = at.bytes.saturating_add(c.bytes);
        }
    }
    series
}

/// The retention paths of the process's last scan, by held stack cut at the test's entry
/// point when it is known (the extra runs' stacks start elsewhere than the test's own run's):
/// after the last extra run when the growth over them is judged (`series`), else after the
/// test's own run. Empty when the runtime wrote none.
fn held_by(
    dumps: &Dumps,
    series: bool,
    entry: Option<&Entry>,
    exe: &str,
) -> HashMap<Vec<FrameKey>, crate::evidence::paths::HeldPath> {
    let paths = match series {
        true => &dumps.last_run_paths,
        false => &dumps.own_paths,
    };
    let Some(paths) = paths.clone() else {
        return HashMap::new();
    };
    match entry {
        Some(entry) => crate::evidence::paths::by_stack(paths, |f| {
            settling::cut_at_entry(f, exe, entry.file_range).to_vec()
        }),
        None => crate::evidence::paths::by_stack(paths, <[FrameKey]>::to_vec),
    }
}

/// The cycles among the lost objects of the same scan [`held_by`] reads, by stack keyed
/// the same way.
fn cycles_by(dumps: &Dumps, series: bool, entry: Option<&Entry>, exe: &str) -> cycles::ByStack {
    let found = match series {
        true => &dumps.last_run_cycles,
        false => &dumps.own_cycles,
    };
    let Some(found) = found.clone() else {
        return cycles::ByStack::default();
    };
    match entry {
        Some(entry) => cycles::ByStack::new(found, |f| {
            settling::cut_at_entry(f, exe, entry.file_range).to_vec()
        }),
        None => cycles::ByStack::new(found, <[FrameKey]>::to_vec),
    }
}

/// Says, for each leaked stack whose objects the scan found lost, how they are lost (see
/// [`cycles::ByStack::describe`]): the retained stacks behind each report's frames are
/// those that symbolize to them.
fn explain_lost(
    stacks: &mut [StackReport],
    retained: &[RetainedStack],
    lost_how: &cycles::ByStack,
    exe: &str,
    symbols: &mut dyn Symbols,
    entry: Option<&Entry>,
) {
    if lost_how.is_empty() {
        return;
    }
    for r in retained {
        let key = match entry {
            Some(entry) => settling::cut_at_entry(&r.frames, exe, entry.file_range).to_vec(),
            None => r.frames.clone(),
        };
        let Some(how) = lost_how.describe(&key, exe, symbols) else {
            continue;
        };
        let shown: Vec<FrameReport> = resolve_stack(&r.frames, symbols)
            .iter()
            .map(frame_report)
            .collect();
        for s in stacks.iter_mut() {
            if s.kind == StackKind::Leak && s.unreachable.is_none() && s.frames == shown {
                s.unreachable = Some(how.clone());
                // The same scan found a root for some of its objects (the last run's, held
                // by a thread that had not ended yet): what grew is what no root reaches,
                // and a holder beside it would be said of the same objects.
                s.retained_by = None;
            }
        }
    }
}

/// When threads the extra runs started were still running after the runtime's grace for
/// them, what they hold is counted: says so. The wait is the longer of the profiled
/// process's and the counting process's (the profiled one does not wait again for threads
/// the counting one saw stay).
fn held_by_threads(result: &ProcessResult, counting: Option<&ProcessResult>) -> Option<String> {
    let grace_of = |r: &ProcessResult| r.record.as_ref().and_then(|r| r.grace);
    let grace = grace_of(result)?;
    let waited_ms = counting
        .and_then(grace_of)
        .map_or(grace.waited_ms, |c| c.waited_ms.max(grace.waited_ms));
    (grace.threads_running > 0).then(|| {
        format!(
            "{} the extra runs started {} still running {:.1} s after the last run (threads that end are waited for; one that never ends keeps what it holds)",
            crate::model::count_of(grace.threads_running, "thread", "threads"),
            if grace.threads_running == 1 { "was" } else { "were" },
            waited_ms as f64 / 1000.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stacks::{LOST_REASON, REACHABLE_REASON};
    use crate::config::Effective;
    use crate::model::TargetKind;
    use crate::model::{AllowedBy, StackReport};
    use std::path::Path;
    use std::path::PathBuf;
    use std::time::Duration;

    /// A clean report that kept 4 KiB for the process lifetime.
    fn kept_4_kib() -> TestReport {
        TestReport {
            stacks: vec![StackReport::example(StackKind::ProcessLifetime, 4096)],
            ..TestReport::example()
        }
    }

    #[test]
    fn who_stopped_the_second_run_decides_between_kept_and_unsettled() {
        let report = kept_4_kib();
        // The same evidence, memory reachable after one run: kept when the test allows no
        // second run, unsettled when the tool could not make one (a trial of a custom
        // harness is the second kind, an extra run that panicked the first).
        let by_the_test = [
            settling::Status::ShouldPanic,
            settling::Status::NoHarness,
            settling::Status::ExitedEarly,
            settling::Status::Panicked("runs once per process".into()),
            settling::Status::Crashed("signal 6 (SIGABRT)".into()),
            settling::Status::Failed("an error".into()),
            settling::Status::DrainFailed("crossbeam-epoch".into()),
        ];
        for status in &by_the_test {
            assert!(!unsettled_without_repetition(&report, status), "{status:?}");
        }
        let by_the_tool = [
            settling::Status::NoEntryPoint("no libtest entry point".into()),
            settling::Status::Unavailable("jemalloc refused a new arena".into()),
            settling::Status::TimedOut,
        ];
        for status in &by_the_tool {
            assert!(unsettled_without_repetition(&report, status), "{status:?}");
        }
    }

    #[test]
    fn reachable_memory_of_a_test_whose_runs_were_cut_short_is_unsettled_not_clean() {
        let mut report = kept_4_kib();
        assert!(unsettled_without_repetition(
            &report,
            &settling::Status::TimedOut
        ));
        // Completed runs, or a test that cannot run again at all: reachability decides.
        assert!(unsettled_without_repetition(
            &report,
            &settling::Status::NoEntryPoint("none is certain".into())
        ));
        assert!(!unsettled_without_repetition(
            &report,
            &settling::Status::Completed
        ));
        assert!(!unsettled_without_repetition(
            &report,
            &settling::Status::ShouldPanic
        ));
        // Only kept memory is in doubt: one-time initialisation is not.
        report.stacks[0].kind = StackKind::OneTime;
        assert!(!unsettled_without_repetition(
            &report,
            &settling::Status::TimedOut
        ));
        // A leak stays a leak.
        report.stacks[0].kind = StackKind::ProcessLifetime;
        report.verdict = Verdict::Leak;
        assert!(!unsettled_without_repetition(
            &report,
            &settling::Status::TimedOut
        ));
    }

    #[test]
    fn a_profiled_failure_after_a_passing_counting_run_is_marked_as_such() {
        let failed = || TestReport {
            verdict: Verdict::Failed,
            message: Some("assertion failed: fast enough".into()),
            ..TestReport::example()
        };
        let mut r = failed();
        mark_profiling_failure(&mut r, true);
        assert!(r.passed_without_profiling);
        let message = r.message.unwrap();
        assert!(
            message.starts_with("passed without profiling, failed when profiled")
                && message.ends_with("assertion failed: fast enough"),
            "{message}"
        );
        // Failed both times: the test's own failure, nothing to add.
        let mut r = failed();
        mark_profiling_failure(&mut r, false);
        assert!(!r.passed_without_profiling);
        assert_eq!(r.message.as_deref(), Some("assertion failed: fast enough"));
        // Leaking is not failing.
        let mut r = TestReport {
            verdict: Verdict::Leak,
            ..TestReport::example()
        };
        mark_profiling_failure(&mut r, true);
        assert!(!r.passed_without_profiling && r.message.is_none());
    }

    /// A captured dump, copied to a scratch directory with its test binary renamed to a
    /// path that does not exist, so that its frames stay unresolved wherever this runs.
    fn testdata(name: &str) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/dumps")
            .join(name);
        let dir = std::env::temp_dir().join(format!("leakcheck-analyze-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = std::fs::read_to_string(src)
            .unwrap()
            .replace("/tmp/probe/t", MISSING_EXE);
        // Tests run in parallel: each copy gets a file of its own.
        static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dst = dir.join(format!("{n}-{name}"));
        std::fs::write(&dst, text).unwrap();
        dst
    }

    const MISSING_EXE: &str = "/nonexistent/probe/t";

    /// A binary whose frames nothing resolves, and its symbols.
    struct Probe {
        bin: BinaryEvidence,
        symbols: crate::evidence::symbols::Replay,
    }

    /// Analyses a test that had no extra runs, its evidence read as a run reads it.
    fn analyze_single(
        id: &TestIdentity,
        result: &ProcessResult,
        probe: &mut Probe,
        policy: &Policy,
    ) -> TestReport {
        let none = crate::evidence::test_run::ExtraRunsOutcome::none(settling::Status::Off);
        let evidence = TestEvidence {
            result,
            method: Method::Stacks,
            extra_runs: &none,
            entry: None,
            counting: None,
            stderr_tail: crate::evidence::stderr_tail(&result.stderr),
            dumps: Some(crate::evidence::load::dumps(result)),
            children: Vec::new(),
            suite: crate::evidence::test_run::SuiteProcesses::none(),
            died: None,
        };
        judge(id, &evidence, &probe.bin, &mut probe.symbols, policy)
    }

    fn eff(stack_threshold: u64) -> Effective {
        let mut e = crate::config::Config::default()
            .effective("t", &crate::config::SettingsLayer::default());
        e.stack_threshold = stack_threshold;
        e
    }

    fn exited(code: i32, dump: PathBuf) -> ProcessResult {
        ProcessResult {
            end: ProcessEnd::Exited(code),
            duration: Duration::from_millis(5),
            timeout: Duration::from_secs(300),
            peak_rss_kib: None,
            record: None,
            record_file: None,
            run_dumps: Vec::new(),
            left_running: Vec::new(),
            children: Vec::new(),
            preload_dumps: vec![dump],
            app_dumps: Vec::new(),
            stdout: PathBuf::from("/nonexistent/stdout"),
            stderr: PathBuf::from("/nonexistent/stderr"),
        }
    }

    /// The captured dumps' test binary is made to not exist: its frames stay unresolved,
    /// which must not make them disappear.
    fn probe_binary() -> Probe {
        let clean = crate::evidence::load::heap_profile(&testdata("clean.heap")).unwrap();
        Probe {
            bin: BinaryEvidence {
                exe: MISSING_EXE.into(),
                baseline: Some(crate::evidence::normalized::normalize(&clean.unbiased())),
                baseline_unreached: None,
                allocator: Allocator::Malloc,
                collections: Default::default(),
            },
            symbols: crate::evidence::symbols::Replay::new(Default::default()),
        }
    }

    #[test]
    fn without_extra_runs_reachability_at_exit_splits_kept_from_lost() {
        let dump = testdata("leaks.heap");
        let policy_eff = eff(0);
        let policy = Policy::threshold(&policy_eff);
        let judge = |dump: &PathBuf| {
            analyze_single(
                &id("tests::leaks"),
                &exited(0, dump.clone()),
                &mut probe_binary(),
                &policy,
            )
        };
        // No scan written: the frames decide, as before.
        let unknown = judge(&dump);
        assert_eq!(unknown.verdict, Verdict::Leak);
        let leaked: Vec<&StackReport> = unknown
            .stacks
            .iter()
            .filter(|s| s.kind == StackKind::Leak)
            .collect();
        assert!(!leaked.is_empty());
        // Every object reached: kept for the process lifetime, with the reason, and clean.
        let text = std::fs::read_to_string(&dump).unwrap();
        let maps = &text[text.find("\nMAPPED_LIBRARIES:").unwrap()..];
        std::fs::write(
            crate::evidence::unreached::unreached_path(&dump),
            format!("heap_v2/1\n  t*: 0: 0 [0: 0]{maps}"),
        )
        .unwrap();
        let reached = judge(&dump);
        assert_eq!(reached.verdict, Verdict::Clean, "{:?}", reached.stacks);
        for s in &leaked {
            let kept = reached
                .stacks
                .iter()
                .find(|r| r.frames == s.frames)
                .expect("the same stack, kept");
            assert_eq!(kept.kind, StackKind::ProcessLifetime);
            assert_eq!(kept.reason.as_deref(), Some(REACHABLE_REASON));
            assert_eq!((kept.bytes, kept.objects), (s.bytes, s.objects));
        }
        // Nothing reached: the same leaks, now with the proof that they are lost.
        std::fs::write(crate::evidence::unreached::unreached_path(&dump), &text).unwrap();
        let lost = judge(&dump);
        assert_eq!(lost.verdict, Verdict::Leak);
        let lost_leaks: Vec<&StackReport> = lost
            .stacks
            .iter()
            .filter(|s| s.kind == StackKind::Leak)
            .collect();
        assert_eq!(lost_leaks.len(), leaked.len());
        for s in lost_leaks {
            assert_eq!(s.reason.as_deref(), Some(LOST_REASON));
        }
        // A scan beside the dump of a binary with its own jemalloc (whose objects it did
        // not see) is not used.
        let mut with_app = exited(0, dump.clone());
        with_app.app_dumps = vec![dump.clone()];
        assert!(crate::evidence::load::own_lost(&with_app).is_none());
    }

    fn id(name: &str) -> TestIdentity<'_> {
        TestIdentity {
            package: "probe",
            binary: "t",
            kind: TargetKind::Lib,
            name,
        }
    }

    #[test]
    fn a_corrupt_dump_is_an_error_for_that_test_only() {
        let full = std::fs::read_to_string(testdata("leaks.heap")).unwrap();
        let truncated = testdata("leaks.heap").with_extension("truncated.heap");
        std::fs::write(&truncated, &full[..full.len() / 2]).unwrap();

        let mut bin = probe_binary();
        let broken = analyze_single(
            &id("tests::broken"),
            &exited(0, truncated.clone()),
            &mut bin,
            &Policy::threshold(&eff(0)),
        );
        assert_eq!(broken.verdict, Verdict::Error);
        let message = broken.message.unwrap();
        assert!(
            message.contains(&truncated.display().to_string()),
            "names the dump: {message}"
        );
        assert!(message.contains("truncated"), "{message}");

        // The same binary's next test is analysed as if nothing happened.
        let leaks = analyze_single(
            &id("tests::leaks"),
            &exited(0, testdata("leaks.heap")),
            &mut bin,
            &Policy::threshold(&eff(0)),
        );
        assert_eq!(leaks.verdict, Verdict::Leak);
        assert_eq!(
            leaks.retained_bytes, 112,
            "the 100-byte Vec, in its 112-byte size class"
        );
        let stack = leaks.failing_stacks().next().unwrap();
        assert!(
            stack.frames.iter().any(|f| f.function.starts_with("t+0x")),
            "unresolved frames show as object+0xOFFSET: {:?}",
            stack.frames
        );
    }

    #[test]
    fn missing_dump_and_signals_are_reported_not_lost() {
        let mut bin = probe_binary();
        let mut none = exited(0, PathBuf::new());
        none.preload_dumps.clear();
        let r = analyze_single(
            &id("tests::no_dump"),
            &none,
            &mut bin,
            &Policy::threshold(&eff(0)),
        );
        assert_eq!(r.verdict, Verdict::Error);
        assert!(r.message.unwrap().contains("wrote no heap dump"));

        let mut killed = none.clone();
        killed.end = ProcessEnd::Signaled(11);
        let r = analyze_single(
            &id("tests::segv"),
            &killed,
            &mut bin,
            &Policy::threshold(&eff(0)),
        );
        assert_eq!(r.verdict, Verdict::Crashed);
        assert!(r.message.unwrap().contains("SIGSEGV"));

        // A failing test's dump is still analysed.
        let r = analyze_single(
            &id("tests::fails"),
            &exited(101, testdata("leaks.heap")),
            &mut bin,
            &Policy::threshold(&eff(0)),
        );
        assert_eq!(r.verdict, Verdict::Failed);
        assert_eq!(r.retained_bytes, 112);
    }

    #[test]
    fn threshold_is_per_stack_and_strictly_greater() {
        let mut bin = probe_binary();
        let at = analyze_single(
            &id("tests::leaks"),
            &exited(0, testdata("leaks.heap")),
            &mut bin,
            &Policy::threshold(&eff(112)),
        );
        assert_eq!(
            at.verdict,
            Verdict::Clean,
            "112 bytes do not exceed a 112-byte threshold"
        );
        assert_eq!(at.retained_bytes, 112, "but they are still reported");
        let below = analyze_single(
            &id("tests::leaks"),
            &exited(0, testdata("leaks.heap")),
            &mut bin,
            &Policy::threshold(&eff(111)),
        );
        assert_eq!(below.verdict, Verdict::Leak);
    }

    #[test]
    fn allowed_stacks_say_what_allowed_them_and_test_threshold_adds_up() {
        let mut bin = probe_binary();
        let leaks = || exited(0, testdata("leaks.heap"));
        let at = analyze_single(
            &id("tests::leaks"),
            &leaks(),
            &mut bin,
            &Policy::threshold(&eff(112)),
        );
        let stack = at
            .stacks
            .iter()
            .find(|s| s.kind == StackKind::Leak)
            .unwrap();
        let allowed = stack.allowed.clone().unwrap();
        assert_eq!(allowed.by, AllowedBy::StackThreshold);
        assert!(
            allowed
                .rule
                .starts_with("<= 112 bytes (stack-threshold set by"),
            "{}",
            allowed.rule
        );

        // The stack is under its threshold, but the test's total is over the test threshold.
        let mut e = eff(1024);
        e.test_threshold = Some(100);
        e.test_threshold_source = "[defaults]".into();
        let total = analyze_single(
            &id("tests::leaks"),
            &leaks(),
            &mut bin,
            &Policy::threshold(&e),
        );
        assert_eq!(total.verdict, Verdict::Leak);
        let message = total.message.unwrap();
        assert!(
            message.contains("over the test-threshold of 100 bytes (set by [defaults])"),
            "{message}"
        );

        // A suppression matching any frame allows the stack, with its reason.
        let (config, _) = crate::config::parse(
            "[[suppress]]\nframe = \"t+0x*\"\nreason = \"the probe leaks on purpose\"\n",
            Path::new("leakcheck.toml"),
        )
        .unwrap();
        let e0 = eff(0);
        let policy = Policy {
            effective: &e0,
            suppressions: vec![(0, &config.suppress[0])],
        };
        let suppressed = analyze_single(&id("tests::leaks"), &leaks(), &mut bin, &policy);
        assert_eq!(suppressed.verdict, Verdict::Clean);
        assert_eq!(suppressed.retained_bytes, 112, "still reported");
        let stack = suppressed
            .stacks
            .iter()
            .find(|s| s.kind == StackKind::Leak)
            .unwrap();
        assert_eq!(stack.suppression, Some(0));
        let allowed = stack.allowed.clone().unwrap();
        assert_eq!(
            (allowed.by, allowed.reason.as_deref()),
            (AllowedBy::Suppression, Some("the probe leaks on purpose"))
        );
    }
}
