//! Turns one test's process result and dumps into its [`TestReport`]: read the dumps,
//! subtract the harness baseline per stack, symbolize, classify, judge.
//!
//! Pure apart from reading dump files, so it runs the same on captured dumps.

use crate::analysis::classify;
use crate::analysis::diff::{self, FrameKey, NormalizedProfile};
use crate::analysis::ending;
use crate::analysis::frames::{frame_report, resolve_stack};
pub use crate::analysis::identity::TestIdentity;
use crate::analysis::lost::{self, Lost};
use crate::analysis::profile::{self, Counts};
use crate::analysis::retention;
use crate::analysis::settling as rerun;
use crate::analysis::symbolize::Symbolizer;
use crate::config::{Effective, Suppression};
use crate::evidence::Entry;
use crate::evidence::{stderr_tail, ProcessEnd, ProcessResult};
use crate::model::{
    Allowance, AllowedBy, Artifacts, ExtraRuns, FrameReport, Method, Retained as RetainedCounts,
    RunGrowth, StackKind, StackReport, TestReport, Verdict,
};
use std::collections::HashMap;
use std::path::PathBuf;

/// What the analysis knows about one test binary, shared by all its tests.
pub struct BinaryAnalysis {
    /// The executable's path as it appears in /proc/pid/maps (canonical).
    pub exe: String,
    /// The harness-only baseline, when it could be taken.
    pub baseline: Option<NormalizedProfile>,
    /// The objects of the baseline nothing pointed to at its exit (see [`lost::load`]).
    pub baseline_unreached: Option<Lost>,
    /// Whether the binary's Rust allocations reach malloc (or a profiled jemalloc of its
    /// own): false for a custom `#[global_allocator]` with no evidence of that.
    pub rust_allocations_visible: bool,
    /// One symbolizer per binary: contexts and addresses are cached across its tests.
    pub symbolizer: Symbolizer,
    /// Data and thread-local symbols, to name the roots of retention paths.
    pub data_symbols: retention::DataSymbols,
}

impl BinaryAnalysis {
    /// Prepares the analysis of a binary (the executable `exe_path`, which installs its own
    /// `#[global_allocator]` when `custom_allocator`) from its baseline run.
    pub fn new(
        exe_path: &std::path::Path,
        custom_allocator: bool,
        baseline: Option<&ProcessResult>,
    ) -> (Self, Option<String>) {
        let baseline_result = baseline;
        let exe = exe_path
            .canonicalize()
            .unwrap_or_else(|_| exe_path.to_path_buf())
            .display()
            .to_string();
        let mut note = None;
        let baseline = match baseline {
            None => None,
            Some(r) => match load_dumps(r) {
                Ok(p) => Some(p),
                Err(e) => {
                    note = Some(format!(
                        "the harness baseline of `{exe}` is unusable ({e}); its tests are judged without it"
                    ));
                    None
                }
            },
        };
        let baseline_unreached = baseline_result.and_then(lost::load);
        let mut symbolizer = Symbolizer::new();
        let rust_allocations_visible = !custom_allocator
            || baseline_result.is_some_and(|r| {
                !r.app_dumps.is_empty() || global_allocator_reached_malloc(r, &mut symbolizer)
            });
        (
            BinaryAnalysis {
                exe,
                baseline,
                baseline_unreached,
                rust_allocations_visible,
                symbolizer,
                data_symbols: retention::DataSymbols::default(),
            },
            note,
        )
    }
}

/// Whether the process's accumulated allocations (`prof_accum`) show the global
/// allocator calling malloc: then a custom allocator forwards to the system allocator and
/// everything it hands out is profiled.
fn global_allocator_reached_malloc(result: &ProcessResult, symbolizer: &mut Symbolizer) -> bool {
    for path in &result.preload_dumps {
        let Ok(parsed) = profile::read_heap_profile(path) else {
            continue;
        };
        let mut ever = parsed.clone();
        for s in &mut ever.stacks {
            s.live = s.accum;
        }
        let norm = diff::normalize(&ever);
        for key in norm.stacks.keys() {
            for frame_key in key {
                let frames = symbolizer.symbolize(&frame_key.object, frame_key.file_offset);
                let hit = frames.iter().any(|f| {
                    f.function.as_deref().is_some_and(|n| {
                        n.starts_with("__rustc::__rust_alloc")
                            || n.starts_with("__rustc::__rust_realloc")
                            || (n.contains(" as core::alloc::global::GlobalAlloc>::")
                                && !n.starts_with("<std::alloc::System as"))
                    })
                });
                if hit {
                    return true;
                }
            }
        }
    }
    false
}

/// Why a process's heap dumps could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The process ended without writing its exit dump.
    #[error("the process wrote no heap dump")]
    NoExitDump,
    /// An extra run's dump is missing (1-based run number).
    #[error("the heap dump after extra run {0} is missing")]
    NoRunDump(usize),
    /// A dump could not be read or parsed (the error names the file and line).
    #[error(transparent)]
    Unreadable(#[from] profile::ProfileError),
}

/// Reads and merges a process's exit dumps (the runtime's, plus the test binary's own
/// jemalloc's when it has one).
pub fn load_dumps(result: &ProcessResult) -> Result<NormalizedProfile, DumpError> {
    if result.preload_dumps.is_empty() {
        return Err(DumpError::NoExitDump);
    }
    load_paths(&result.preload_dumps, &result.app_dumps)
}

/// Splits each retained stack into what is still reachable and what is lost, when the
/// test has no extra runs to judge it by and its dump says which objects were reached.
pub fn with_reachability(
    retained: Vec<Retained>,
    lost: Option<&Lost>,
    baseline_lost: Option<&Lost>,
) -> Vec<Retained> {
    let Some(lost) = lost else {
        return retained;
    };
    let mut out = Vec::with_capacity(retained.len());
    for r in retained {
        if r.growth.is_some() {
            out.push(r);
            continue;
        }
        let harness = baseline_lost.map_or(&[][..], |b| b.of(&r.frames));
        let test = lost::beyond(lost.of(&r.frames), harness);
        let gone = Counts {
            objects: test.objects.min(r.live.objects),
            bytes: test.bytes.min(r.live.bytes),
        };
        let kept = Counts {
            objects: r.live.objects - gone.objects,
            bytes: r.live.bytes - gone.bytes,
        };
        if gone.bytes > 0 {
            out.push(Retained {
                frames: r.frames.clone(),
                live: gone,
                growth: None,
                reach: Some(Reach::Lost),
            });
        }
        if kept.bytes > 0 {
            out.push(Retained {
                frames: r.frames,
                live: kept,
                growth: None,
                reach: Some(Reach::Reachable),
            });
        }
    }
    out
}

/// Reads the runtime's dump of one moment of one process and the binary's own (if any), and
/// merges them.
fn load_paths(preload: &[PathBuf], app: &[PathBuf]) -> Result<NormalizedProfile, DumpError> {
    let mut merged: Option<NormalizedProfile> = None;
    for path in preload.iter().chain(app) {
        let parsed = profile::read_heap_profile(path)?;
        let norm = diff::normalize(&parsed.unbiased());
        match &mut merged {
            None => merged = Some(norm),
            Some(m) => {
                for (k, v) in norm.stacks {
                    let e = m.stacks.entry(k).or_default();
                    e.objects = e.objects.saturating_add(v.objects);
                    e.bytes = e.bytes.saturating_add(v.bytes);
                }
            }
        }
    }
    merged.ok_or(DumpError::NoExitDump)
}

/// Live counts per stack after the test's own run and after each extra run, stacks cut at
/// the call of the entry point (see [`rerun::cut_at_entry`]), so that what the first run
/// and the extra runs allocated at the same place add up.
pub fn run_series(
    result: &ProcessResult,
    exe: &str,
    entry: &Entry,
) -> Result<HashMap<Vec<FrameKey>, Vec<Counts>>, DumpError> {
    let first = load_dumps(result)?;
    let kinds = 1 + usize::from(!result.app_dumps.is_empty());
    let mut profiles = vec![first];
    for (k, dumps) in result.run_dumps.iter().enumerate() {
        if dumps.len() != kinds {
            return Err(DumpError::NoRunDump(k + 1));
        }
        profiles.push(load_paths(dumps, &[])?);
    }
    let n = profiles.len();
    let mut series: HashMap<Vec<FrameKey>, Vec<Counts>> = HashMap::new();
    for (k, p) in profiles.iter().enumerate() {
        for (frames, c) in &p.stacks {
            let cut = rerun::cut_at_entry(frames, exe, entry.file_range).to_vec();
            let at = &mut series
                .entry(cut)
                .or_insert_with(|| vec![Counts::default(); n])[k];
            at.objects = at.objects.saturating_add(c.objects);
            at.bytes = at.bytes.saturating_add(c.bytes);
        }
    }
    Ok(series)
}

/// One retained stack to judge: its frames, what the first run retained beyond the
/// harness, and what each extra run added, when extra runs were made.
pub struct Retained {
    /// Frames, innermost first.
    pub frames: Vec<FrameKey>,
    /// Retained by the test's own run, beyond the baseline.
    pub live: Counts,
    /// Added by each extra run.
    pub growth: Option<Vec<RunGrowth>>,
    /// Whether these objects were still reachable at exit, when that decides (no extra runs).
    pub reach: Option<Reach>,
}

/// What the runtime's reachability scan found for a retained stack's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Some pointer in a global, a live thread's stack or thread-local storage, or in
    /// memory reachable from those, still led to them.
    Reachable,
    /// Nothing pointed to them any more: they can never be freed.
    Lost,
}

/// Pairs each retained stack with its growth over the extra runs; adds the stacks that
/// the first run did not retain but that grew over the extra runs (on every one, or in
/// some: [`judge_stacks`] keeps those only when their line grew on every run).
pub fn with_growth(
    deltas: Vec<diff::StackDelta>,
    series: Option<&HashMap<Vec<FrameKey>, Vec<Counts>>>,
    exe: &str,
    entry: Option<&Entry>,
) -> Vec<Retained> {
    let (Some(series), Some(entry)) = (series, entry) else {
        return deltas
            .into_iter()
            .map(|d| Retained {
                frames: d.frames,
                live: d.live,
                growth: None,
                reach: None,
            })
            .collect();
    };
    let growth_of = |s: &[Counts]| -> Vec<RunGrowth> {
        s.windows(2)
            .map(|w| RunGrowth {
                objects: w[1].objects as i64 - w[0].objects as i64,
                bytes: w[1].bytes as i64 - w[0].bytes as i64,
            })
            .collect()
    };
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<Retained> = deltas
        .into_iter()
        .map(|d| {
            let cut = rerun::cut_at_entry(&d.frames, exe, entry.file_range).to_vec();
            let growth = series.get(&cut).map(|s| growth_of(s));
            seen.insert(cut);
            Retained {
                frames: d.frames,
                live: d.live,
                growth,
                reach: None,
            }
        })
        .collect();
    let mut late: Vec<(&Vec<FrameKey>, &Vec<Counts>)> = series
        .iter()
        .filter(|(cut, s)| {
            let bytes: Vec<u64> = s.iter().map(|c| c.bytes).collect();
            !seen.contains(*cut) && (rerun::grows_every_run(&bytes) || bytes.last() > bytes.first())
        })
        .collect();
    late.sort_by(|a, b| a.0.cmp(b.0));
    out.extend(late.into_iter().map(|(cut, s)| Retained {
        frames: cut.clone(),
        live: Counts::default(),
        growth: Some(growth_of(s)),
        reach: None,
    }));
    out
}

/// The report's view of how a test's extra runs went.
pub fn extra_runs_of(outcome: &rerun::Outcome) -> ExtraRuns {
    ExtraRuns {
        made: outcome.made,
        detail: rerun::detail(&outcome.status, outcome.made),
        status: outcome.status.clone(),
    }
}

/// What decides a test's verdict: its effective settings and the suppressions that may
/// apply to it.
pub struct Policy<'a> {
    /// Thresholds and switches in force.
    pub effective: &'a Effective,
    /// `(index in the configuration, suppression)` for those whose test filter matches.
    pub suppressions: Vec<(usize, &'a Suppression)>,
}

#[cfg(test)]
impl Policy<'_> {
    /// A policy with only a stack threshold (the command line's `--threshold`).
    pub fn threshold(effective: &Effective) -> Policy<'_> {
        Policy {
            effective,
            suppressions: Vec::new(),
        }
    }
}

/// The report of a test the counting pass proved clean: it passed, and nothing it
/// allocated off the harness's main thread was live when its process ended, or extra runs
/// of it in the same process added nothing to what it left.
pub fn proven_clean(
    id: &TestIdentity,
    result: &ProcessResult,
    policy: &Policy,
    reruns: &rerun::Outcome,
    method: Method,
) -> TestReport {
    clean_report(id, result, policy, method, reruns)
}

/// Whether a test judged clean on what was reachable at exit stays unsettled: its extra
/// runs did not finish in time, or could not be made though the test could run again (its
/// entry point was not found, the runtime could not start them), so the growth a reachable
/// registry shows over runs was never looked for, and it kept memory for the process
/// lifetime. (A test that cannot run again by its nature, `#[should_panic]` or
/// `harness = false`, is judged on its own run, as documented.)
pub fn unsettled_without_repetition(report: &TestReport, status: &rerun::Status) -> bool {
    matches!(
        status,
        rerun::Status::TimedOut | rerun::Status::NoEntryPoint(_) | rerun::Status::Unavailable(_)
    ) && report.verdict == Verdict::Clean
        && report
            .stacks
            .iter()
            .any(|s| s.kind == StackKind::ProcessLifetime)
}

/// A clean report with nothing retained, to be filled in.
fn clean_report(
    id: &TestIdentity,
    result: &ProcessResult,
    policy: &Policy,
    method: Method,
    reruns: &rerun::Outcome,
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
        extra_runs: extra_runs_of(reruns),
        first_run_retained,
        passed_without_profiling: false,
        left_processes: result.left_running.clone(),
        unsettled_fails: policy.effective.unsettled_fails,
    }
}

/// What the test's other runs give the analysis: how its extra runs went, the entry point
/// their stacks pass through, and its counting-pass process if it had one.
pub struct Reruns<'a> {
    /// How the extra runs went.
    pub outcome: &'a rerun::Outcome,
    /// The test's entry point.
    pub entry: Option<&'a Entry>,
    /// The test's process in the counting pass.
    pub counting: Option<&'a ProcessResult>,
}

/// Analyses one profiled test.
pub fn analyze_test(
    id: &TestIdentity,
    result: &ProcessResult,
    bin: &mut BinaryAnalysis,
    policy: &Policy,
    reruns: &Reruns,
    method: Method,
) -> TestReport {
    let mut report = judge_profiled(id, result, bin, policy, reruns, method);
    let counting_run_passed = reruns
        .counting
        .is_some_and(|c| c.first_run_end() == ProcessEnd::Exited(0));
    mark_profiling_failure(&mut report, counting_run_passed);
    // Processes its counting run left running too (the profiled run's are in already).
    for left in reruns.counting.iter().flat_map(|c| &c.left_running) {
        if !report.left_processes.contains(left) {
            report.left_processes.push(left.clone());
        }
    }
    report
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

fn judge_profiled(
    id: &TestIdentity,
    result: &ProcessResult,
    bin: &mut BinaryAnalysis,
    policy: &Policy,
    reruns: &Reruns,
    method: Method,
) -> TestReport {
    let mut report = clean_report(id, result, policy, method, reruns.outcome);
    let code = match &result.end {
        ProcessEnd::Exited(c) => *c,
        ProcessEnd::TimedOut => {
            report.verdict = Verdict::Timeout;
            report.message = Some(format!(
                "killed after {:.1}s, its timeout; a killed process writes no heap dump, so its leaks cannot be analysed",
                result.timeout.as_secs_f64()
            ));
            return report;
        }
        ProcessEnd::Signaled(_) => {
            report.verdict = Verdict::Crashed;
            report.message = Some(format!(
                "killed by {}; no exit dump, so its leaks cannot be analysed{}",
                result.end.describe(),
                stderr_tail(&result.stderr)
            ));
            return report;
        }
        ProcessEnd::SpawnFailed(_) | ProcessEnd::Interrupted => {
            report.verdict = Verdict::Error;
            report.message = ending::never_ran(&result.end, "test");
            return report;
        }
    };
    let after = match load_dumps(result) {
        Ok(p) => p,
        Err(e) => {
            report.verdict = if code != 0 {
                Verdict::Failed
            } else {
                Verdict::Error
            };
            report.message = Some(format!("{e}{}", stderr_tail(&result.stderr)));
            return report;
        }
    };
    let empty = NormalizedProfile {
        stacks: HashMap::new(),
        sample_period: after.sample_period,
    };
    let before = bin.baseline.as_ref().unwrap_or(&empty);
    let deltas = diff::diff(&after, before);
    // Growth over the extra runs, when they were all made and measured.
    let series = match reruns.entry {
        Some(entry) if reruns.outcome.usable() && code == 0 => {
            match run_series(result, &bin.exe, entry) {
                Ok(s) => Some(s),
                Err(e) => {
                    let unusable = rerun::Outcome {
                        made: reruns.outcome.made,
                        status: rerun::Status::Unavailable(e.to_string()),
                    };
                    report.extra_runs = extra_runs_of(&unusable);
                    None
                }
            }
        }
        _ => None,
    };
    let retained = with_growth(deltas, series.as_ref(), &bin.exe, reruns.entry);
    // Without extra runs, reachability at exit tells what is kept from what is lost, for a
    // test that failed as well: what a static still holds is not lost because the test
    // failed.
    let lost = match &series {
        None => lost::load(result),
        Some(_) => None,
    };
    let retained = with_reachability(retained, lost.as_ref(), bin.baseline_unreached.as_ref());
    let held = held_by(result, series.is_some(), reruns.entry, &bin.exe);
    report.stacks = judge_stacks(
        &retained,
        bin,
        policy,
        reruns.entry.map(|e| e.file_range),
        &held,
    );
    for s in report.stacks.iter().filter(|s| s.kind == StackKind::Leak) {
        report.retained_bytes = report.retained_bytes.saturating_add(s.bytes);
        report.retained_objects = report.retained_objects.saturating_add(s.objects);
    }
    // What counts against the per-test total: leaks not suppressed (and one-time
    // initialisation when it is configured to fail).
    let counted: u64 = report
        .stacks
        .iter()
        .filter(|s| s.suppression.is_none())
        .filter(|s| {
            s.kind == StackKind::Leak
                || (matches!(s.kind, StackKind::OneTime | StackKind::ProcessLifetime)
                    && policy.effective.one_time_fails)
        })
        .map(|s| s.bytes)
        .sum();
    let over_total = policy.effective.test_threshold.filter(|&t| counted > t);
    let visible = bin.rust_allocations_visible || !result.app_dumps.is_empty();
    report.verdict = if code != 0 {
        report.message = Some(format!(
            "the test failed ({}){}",
            result.end.describe(),
            stderr_tail(&result.stderr)
        ));
        Verdict::Failed
    } else if !visible {
        report.message = Some(
            "the test binary installs its own #[global_allocator], whose allocations never reach malloc; cargo-leakcheck sees malloc and tikv-jemallocator (whose profiling it turns on), not this allocator".into(),
        );
        Verdict::Unanalysable
    } else if report.stacks.iter().any(|s| s.fails) {
        Verdict::Leak
    } else if let Some(limit) = over_total {
        report.message = Some(format!(
            "its leaked stacks retain {counted} bytes in all, over the test-threshold of {limit} bytes (set by {})",
            policy.effective.test_threshold_source
        ));
        Verdict::Leak
    } else {
        Verdict::Clean
    };
    if report.verdict == Verdict::Leak {
        if let Some(held) = held_by_threads(result, reruns.counting) {
            report.message = Some(match report.message.take() {
                Some(m) => format!("{m}; {held}"),
                None => held,
            });
        }
    }
    if unsettled_without_repetition(&report, &reruns.outcome.status) {
        let kept: u64 = report
            .stacks
            .iter()
            .filter(|s| s.kind == StackKind::ProcessLifetime)
            .map(|s| s.bytes)
            .sum();
        report.verdict = Verdict::Unsettled;
        report.message = Some(format!(
            "kept {} still reachable at exit, and its extra runs could not show whether that grows: {}",
            crate::model::human_bytes(kept),
            report.extra_runs.detail.as_deref().unwrap_or("not run again")
        ));
    }
    report
}

/// The retention paths of the process's last scan, by held stack cut at the test's entry
/// point when it is known (the extra runs' stacks start elsewhere than the test's own run's):
/// after the last extra run when the growth over them is judged (`series`), else after the
/// test's own run. Empty when the runtime wrote none.
fn held_by(
    result: &ProcessResult,
    series: bool,
    entry: Option<&Entry>,
    exe: &str,
) -> HashMap<Vec<FrameKey>, retention::HeldPath> {
    let dump = match series {
        true => result.run_dumps.last().and_then(|d| d.first()),
        false => result.preload_dumps.first(),
    };
    let Some(paths) = dump.and_then(|d| retention::read(&retention::paths_file(d))) else {
        return HashMap::new();
    };
    match entry {
        Some(entry) => retention::by_stack(paths, |f| {
            rerun::cut_at_entry(f, exe, entry.file_range).to_vec()
        }),
        None => retention::by_stack(paths, <[FrameKey]>::to_vec),
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
            plural_count(grace.threads_running, "thread", "threads"),
            if grace.threads_running == 1 { "was" } else { "were" },
            waited_ms as f64 / 1000.0
        )
    })
}

fn plural_count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The kind of a stack once its growth over the extra runs is known. Extra runs run nothing
/// but the test, so a stack that grew in every one of them is a leak whatever its frames
/// suggest (a once-initialiser frame, or none of the test's code: a release build can
/// inline a closure into std's generic thread start), except glibc's cache of thread
/// blocks, which grows with threads that never end and is their cost, not their cause. A
/// stack of the code under test that did not grow every time is process-lifetime state.
pub fn kind_with_growth(
    class: &classify::Classified,
    growth: Option<&[RunGrowth]>,
) -> (StackKind, Option<String>) {
    let Some(growth) = growth.filter(|g| !g.is_empty()) else {
        return (class.kind, class.reason.clone());
    };
    let n = growth.len();
    let grew = growth.iter().all(|g| g.bytes > 0);
    match (class.kind, grew) {
        (StackKind::Harness, true) if class.thread_cache => (class.kind, class.reason.clone()),
        (_, true) => (
            StackKind::Leak,
            Some(format!("grew in every one of {n} extra runs of the test")),
        ),
        (StackKind::Leak, false) => (
            StackKind::ProcessLifetime,
            Some(format!(
                "kept by the test's run; {n} extra runs did not add to it every time"
            )),
        ),
        (other, false) => (other, class.reason.clone()),
    }
}

/// The kind of a stack of a test that could not be run again, once the runtime's scan at
/// exit said whether its objects were still reachable. A reachable object is kept on
/// purpose (a pool's queues, a registry, a table built once), as far as one run can tell; a
/// lost one stays a leak, now with the proof that nothing can free it. What the frames show
/// to be one-time initialisation or the harness's stays so either way.
pub fn kind_with_reach(class: &classify::Classified, reach: Reach) -> (StackKind, Option<String>) {
    match (class.kind, reach) {
        (StackKind::Leak, Reach::Reachable) => {
            (StackKind::ProcessLifetime, Some(REACHABLE_REASON.into()))
        }
        (StackKind::Leak, Reach::Lost) => (StackKind::Leak, Some(LOST_REASON.into())),
        (kind, _) => (kind, class.reason.clone()),
    }
}

/// Why a reachable stack of a test without extra runs is not a leak.
pub const REACHABLE_REASON: &str = "still reachable at exit (from a global, a live thread's stack or thread-local storage); the test cannot run again in its process to show whether it grows";

/// Why a lost stack of a test without extra runs is a leak.
pub const LOST_REASON: &str = "unreachable at exit: no pointer to it was found in globals, thread-locals, live threads' stacks and registers, or reachable objects";

/// Symbolizes, trims, classifies and judges the retained stacks (thresholds,
/// suppressions), merging stacks that symbolize identically; largest first.
pub fn judge_stacks(
    retained: &[Retained],
    bin: &mut BinaryAnalysis,
    policy: &Policy,
    entry_range: Option<(u64, u64)>,
    held: &HashMap<Vec<FrameKey>, retention::HeldPath>,
) -> Vec<StackReport> {
    struct Merged {
        bytes: u64,
        objects: u64,
        reason: Option<String>,
        growth: Vec<RunGrowth>,
        held: Option<retention::HeldPath>,
    }
    let mut merged: HashMap<(StackKind, Vec<FrameReport>), Merged> = HashMap::new();
    let resolved: Vec<(Vec<FrameReport>, classify::Classified)> = retained
        .iter()
        .map(|r| {
            let frames = resolve_stack(&r.frames, &mut bin.symbolizer);
            let classified = classify::classify_test(&frames, &bin.exe, entry_range);
            (frames.iter().map(frame_report).collect(), classified)
        })
        .collect();
    let growing = growing_sites(
        retained
            .iter()
            .zip(&resolved)
            .filter_map(|(r, (shown, c))| {
                (c.kind == StackKind::Leak).then_some((site_of(shown)?, r.growth.as_deref()?))
            }),
    );
    for (r, (shown, classified)) in retained.iter().zip(&resolved) {
        let (kind, reason) = match r.reach {
            Some(reach) if r.growth.is_none() => kind_with_reach(classified, reach),
            _ => kind_with_growth(classified, r.growth.as_deref()),
        };
        // One line that allocates by different paths inside std from run to run (whether
        // `format!` grows a string once or twice depends on what it formats): no single
        // stack grows every time, the line does.
        let (kind, reason) = match (kind, r.growth.as_deref(), site_of(shown)) {
            (StackKind::ProcessLifetime, Some(g), Some(site))
                if classified.kind == StackKind::Leak
                    && g.iter().map(|g| g.bytes).sum::<i64>() > 0
                    && growing.contains(site) =>
            {
                (
                    StackKind::Leak,
                    Some(format!(
                        "grew in every one of {} extra runs of the test, with the other stacks that allocate at the same line",
                        g.len()
                    )),
                )
            }
            _ => (kind, reason),
        };
        // A stack the test's own run did not retain, that grew in some extra runs only, is
        // shown only as part of a line that grew on every run.
        if r.live.bytes == 0 && r.growth.is_some() && kind != StackKind::Leak {
            continue;
        }
        let e = merged.entry((kind, shown.clone())).or_insert(Merged {
            bytes: 0,
            objects: 0,
            reason,
            growth: vec![RunGrowth::default(); r.growth.as_ref().map_or(0, Vec::len)],
            held: None,
        });
        // Lost objects have no path; what is kept, or grew, may.
        let explained = matches!(kind, StackKind::Leak | StackKind::ProcessLifetime)
            && r.reach != Some(Reach::Lost);
        if explained && e.held.is_none() {
            // Paths are keyed as `held_by` keys them: cut at the entry point, when known.
            e.held = match entry_range {
                Some(range) => held.get(rerun::cut_at_entry(&r.frames, &bin.exe, range)),
                None => held.get(&r.frames),
            }
            .cloned();
        }
        e.bytes = e.bytes.saturating_add(r.live.bytes);
        e.objects = e.objects.saturating_add(r.live.objects);
        for (sum, g) in e.growth.iter_mut().zip(r.growth.iter().flatten()) {
            sum.objects = sum.objects.saturating_add(g.objects);
            sum.bytes = sum.bytes.saturating_add(g.bytes);
        }
    }
    let effective = policy.effective;
    let mut stacks: Vec<StackReport> = merged
        .into_iter()
        .map(|((kind, frames), m)| {
            let judged = kind == StackKind::Leak
                || (matches!(kind, StackKind::OneTime | StackKind::ProcessLifetime)
                    && effective.one_time_fails);
            let mut stack = StackReport {
                bytes: m.bytes,
                objects: m.objects,
                kind,
                reason: m.reason,
                fails: false,
                allowed: None,
                suppression: None,
                growth_per_run: m.growth,
                frames,
                retained_by: m.held.as_ref().map(|p| {
                    retention::describe(p, &bin.exe, &mut bin.symbolizer, &mut bin.data_symbols)
                }),
            };
            if !judged {
                return stack;
            }
            // A leak found by its growth is as large as what it adds per run, at least.
            let size = match (kind, stack.min_growth()) {
                (StackKind::Leak, Some(g)) => stack.bytes.max(g.max(0) as u64),
                _ => stack.bytes,
            };
            if let Some((index, s)) = policy
                .suppressions
                .iter()
                .find(|(_, s)| s.matches_stack(&stack.frames))
            {
                stack.suppression = Some(*index);
                stack.allowed = Some(Allowance {
                    by: AllowedBy::Suppression,
                    rule: format!(
                        "[[suppress]] #{} frame \"{}\" (line {})",
                        s.index,
                        s.frame.as_str(),
                        s.line
                    ),
                    reason: Some(s.reason.clone()),
                });
            } else if size > effective.stack_threshold {
                stack.fails = true;
            } else {
                stack.allowed = Some(Allowance {
                    by: AllowedBy::StackThreshold,
                    rule: format!(
                        "<= {} bytes (stack-threshold set by {})",
                        effective.stack_threshold, effective.stack_threshold_source
                    ),
                    reason: None,
                });
            }
            stack
        })
        .collect();
    stacks.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    stacks
}

/// Where a stack allocates, as the program sees it: its frames from the first one in the
/// program's own source outwards. Two stacks of one site differ only inside std or a
/// dependency. None when no frame is the program's own.
fn site_of(shown: &[FrameReport]) -> Option<&[FrameReport]> {
    let own = shown
        .iter()
        .position(|f| f.file.as_deref().is_some_and(classify::is_own_source))?;
    Some(&shown[own..])
}

/// The sites (see [`site_of`]) of two or more stacks whose growth, added up, was positive
/// in every extra run.
fn growing_sites<'a>(
    stacks: impl Iterator<Item = (&'a [FrameReport], &'a [RunGrowth])>,
) -> std::collections::HashSet<&'a [FrameReport]> {
    let mut sums: HashMap<&[FrameReport], (Vec<i64>, usize)> = HashMap::new();
    for (site, growth) in stacks {
        let (sum, n) = sums
            .entry(site)
            .or_insert_with(|| (vec![0; growth.len()], 0));
        for (s, g) in sum.iter_mut().zip(growth) {
            *s = s.saturating_add(g.bytes);
        }
        *n += 1;
    }
    sums.into_iter()
        .filter(|(_, (sum, n))| *n >= 2 && !sum.is_empty() && sum.iter().all(|&b| b > 0))
        .map(|(site, _)| site)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TargetKind;
    use std::path::Path;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn a_line_whose_stacks_vary_from_run_to_run_grows_as_one_site() {
        let at = |function: &str, file: &str| FrameReport {
            function: function.into(),
            file: Some(file.into()),
            line: Some(1),
            inlined: false,
        };
        let own = [
            at("app::register", "/src/app/src/lib.rs"),
            at("app::t", "/src/app/src/lib.rs"),
        ];
        // Two ways std grows a string at `app::register`'s line: runs 1 and 3 one way, run
        // 2 the other. Neither grows every run; the line does.
        let one: Vec<FrameReport> = [at("alloc::raw_vec::grow", "/rustc/x/raw_vec.rs")]
            .into_iter()
            .chain(own.clone())
            .collect();
        let two: Vec<FrameReport> = [at("alloc::fmt::pad", "/rustc/x/fmt.rs")]
            .into_iter()
            .chain(own.clone())
            .collect();
        let g = |b: &[i64]| -> Vec<RunGrowth> {
            b.iter()
                .map(|&bytes| RunGrowth { objects: 1, bytes })
                .collect()
        };
        let (g1, g2) = (g(&[2400, 0, 2400]), g(&[0, 2400, 0]));
        assert_eq!(site_of(&one), Some(&own[..]));
        assert_eq!(site_of(&own[..1]), Some(&own[..1]));
        let growing = growing_sites(
            [
                (site_of(&one).unwrap(), &g1[..]),
                (site_of(&two).unwrap(), &g2[..]),
            ]
            .into_iter(),
        );
        assert!(growing.contains(&own[..]));
        // A cache at one line that evicts as much as it adds does not grow.
        let evicts = g(&[-2400, 0, -2400]);
        let bounded = growing_sites(
            [
                (site_of(&one).unwrap(), &evicts[..]),
                (site_of(&two).unwrap(), &g2[..]),
            ]
            .into_iter(),
        );
        assert!(bounded.is_empty());
        // One stack alone is judged by its own growth, not as a site.
        assert!(growing_sites([(site_of(&one).unwrap(), &g1[..])].into_iter()).is_empty());
        // Frames only in std have no site.
        assert_eq!(site_of(&one[..1]), None);
    }

    #[test]
    fn reachable_memory_of_a_test_whose_runs_were_cut_short_is_unsettled_not_clean() {
        let mut report = crate::model::TestReport::example();
        report.stacks = vec![crate::model::StackReport::example(
            StackKind::ProcessLifetime,
            4096,
        )];
        assert!(unsettled_without_repetition(
            &report,
            &rerun::Status::TimedOut
        ));
        // Completed runs, or a test that cannot run again at all: reachability decides.
        assert!(unsettled_without_repetition(
            &report,
            &rerun::Status::NoEntryPoint("none is certain".into())
        ));
        assert!(!unsettled_without_repetition(
            &report,
            &rerun::Status::Completed
        ));
        assert!(!unsettled_without_repetition(
            &report,
            &rerun::Status::ShouldPanic
        ));
        // Only kept memory is in doubt: one-time initialisation is not.
        report.stacks[0].kind = StackKind::OneTime;
        assert!(!unsettled_without_repetition(
            &report,
            &rerun::Status::TimedOut
        ));
        // A leak stays a leak.
        report.stacks[0].kind = StackKind::ProcessLifetime;
        report.verdict = Verdict::Leak;
        assert!(!unsettled_without_repetition(
            &report,
            &rerun::Status::TimedOut
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

    /// Analyses a test that had no extra runs.
    fn analyze_single(
        id: &TestIdentity,
        result: &ProcessResult,
        bin: &mut BinaryAnalysis,
        policy: &Policy,
    ) -> TestReport {
        let none = rerun::Outcome::none(rerun::Status::Off);
        let reruns = Reruns {
            outcome: &none,
            entry: None,
            counting: None,
        };
        analyze_test(id, result, bin, policy, &reruns, Method::Stacks)
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
            run_dumps: Vec::new(),
            left_running: Vec::new(),
            preload_dumps: vec![dump],
            app_dumps: Vec::new(),
            stdout: PathBuf::from("/nonexistent/stdout"),
            stderr: PathBuf::from("/nonexistent/stderr"),
        }
    }

    /// The captured dumps' test binary is made to not exist: its frames stay unresolved,
    /// which must not make them disappear.
    fn probe_binary() -> BinaryAnalysis {
        let clean = profile::read_heap_profile(&testdata("clean.heap")).unwrap();
        BinaryAnalysis {
            exe: MISSING_EXE.into(),
            baseline: Some(diff::normalize(&clean.unbiased())),
            baseline_unreached: None,
            rust_allocations_visible: true,
            symbolizer: Symbolizer::new(),
            data_symbols: retention::DataSymbols::default(),
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
            lost::unreached_path(&dump),
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
        std::fs::write(lost::unreached_path(&dump), &text).unwrap();
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
        assert!(lost::load(&with_app).is_none());
    }

    #[test]
    fn a_partly_reached_stack_is_split_into_its_kept_and_lost_objects() {
        let frames = vec![FrameKey {
            object: "/x".into(),
            file_offset: 0x10,
        }];
        let retained = vec![Retained {
            frames: frames.clone(),
            live: Counts {
                objects: 5,
                bytes: 500,
            },
            growth: None,
            reach: None,
        }];
        let profile = |objects: u64, bytes: u64| Lost {
            stacks: HashMap::from([(frames.clone(), vec![(bytes / objects, objects)])]),
        };
        // The test lost 3 objects there, the harness's own run 1 of them.
        let split = with_reachability(retained, Some(&profile(3, 300)), Some(&profile(1, 100)));
        let got: Vec<(Option<Reach>, u64, u64)> = split
            .iter()
            .map(|r| (r.reach, r.live.objects, r.live.bytes))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(Reach::Lost), 2, 200),
                (Some(Reach::Reachable), 3, 300)
            ]
        );
        let growth = classify::Classified {
            kind: StackKind::OneTime,
            reason: Some("once".into()),
            thread_cache: false,
        };
        // A stack with growth over extra runs is judged by it, whatever the scan says.
        let grown = vec![Retained {
            frames: frames.clone(),
            live: Counts {
                objects: 5,
                bytes: 500,
            },
            growth: Some(vec![RunGrowth {
                objects: 1,
                bytes: 100,
            }]),
            reach: None,
        }];
        let kept = with_reachability(grown, Some(&profile(5, 500)), None);
        assert_eq!((kept.len(), kept[0].reach), (1, None));
        // What the frames show as one-time initialisation stays so either way.
        assert_eq!(kind_with_reach(&growth, Reach::Lost).0, StackKind::OneTime);
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
    fn growth_in_every_extra_run_decides_the_kind() {
        let class = |kind, thread_cache| classify::Classified {
            kind,
            reason: Some("as the frames say".into()),
            thread_cache,
        };
        let g = |bytes: &[i64]| -> Vec<RunGrowth> {
            bytes
                .iter()
                .map(|&b| RunGrowth {
                    objects: 1,
                    bytes: b,
                })
                .collect()
        };
        let every = g(&[8, 8, 8]);
        let once = g(&[8, 0, 0]);
        // The test's code, growing every time: a leak; growing once: kept for the process.
        assert_eq!(
            kind_with_growth(&class(StackKind::Leak, false), Some(&every)).0,
            StackKind::Leak
        );
        let (kind, reason) = kind_with_growth(&class(StackKind::Leak, false), Some(&once));
        assert_eq!(kind, StackKind::ProcessLifetime);
        assert!(reason.unwrap().contains("3 extra runs"));
        // Growth on every run outweighs a once-initialiser frame, or no frame of the test.
        for kind in [StackKind::OneTime, StackKind::Harness] {
            assert_eq!(
                kind_with_growth(&class(kind, false), Some(&every)).0,
                StackKind::Leak,
                "{kind:?}"
            );
            assert_eq!(kind_with_growth(&class(kind, false), Some(&once)).0, kind);
        }
        // glibc's thread cache grows with threads that never end; it stays harness.
        assert_eq!(
            kind_with_growth(&class(StackKind::Harness, true), Some(&every)).0,
            StackKind::Harness
        );
        // Without extra runs the frames decide.
        assert_eq!(
            kind_with_growth(&class(StackKind::Leak, false), None),
            (StackKind::Leak, Some("as the frames say".into()))
        );
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
