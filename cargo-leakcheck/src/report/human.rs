//! The human summary on stderr: each leaking or broken test with its largest stacks and
//! the first frames of the code under test, then totals and where the artifacts are.

use crate::model::count_of as plural;
use crate::model::ExtraRunsStatus as Status;
use crate::model::{
    human_bytes, AllowedBy, Change, FrameReport, Method, Report, StackKind, StackReport,
    TestReport, Verdict,
};
use crate::report::text::{
    baseline_counts, collection_text, frame_text, held_text, notes_and_outputs, task_text,
    unreachable_text,
};
use std::fmt::Write;
use std::path::Path;

/// How many stacks to show per test, and frames per stack.
const STACKS_SHOWN: usize = 3;
const FRAMES_SHOWN: usize = 4;

/// The spawn sites whose live tasks grew on every run in a failing stack, each with how
/// many per run and in which tests: `(site, "+1 tokio task per run, in 2 tests")`.
fn growing_task_sites(report: &Report) -> Vec<(FrameReport, String)> {
    let mut by: std::collections::BTreeMap<FrameReport, (String, i64, u64)> = Default::default();
    for t in &report.tests {
        for st in t.stacks.iter().filter(|s| s.fails) {
            let Some(task) = &st.task else { continue };
            let per_run = st
                .growth_per_run
                .iter()
                .map(|g| g.objects)
                .min()
                .unwrap_or(0);
            if per_run <= 0 {
                continue;
            }
            let e = by
                .entry(task.spawned_at.clone())
                .or_insert_with(|| (task.runtime.clone(), per_run, 0));
            e.1 = e.1.max(per_run);
            e.2 += 1;
        }
    }
    by.into_iter()
        .map(|(site, (runtime, per_run, tests))| {
            let text = format!(
                "+{} {} per run, in {}",
                per_run,
                if per_run == 1 {
                    format!("{runtime} task")
                } else {
                    format!("{runtime} tasks")
                },
                plural(tests, "test", "tests")
            );
            (site, text)
        })
        .collect()
}

/// What the tests keep for the process lifetime, by the root that holds it (largest
/// first): bytes and how many tests.
fn kept_by_root(report: &Report) -> Vec<(String, u64, u64)> {
    let mut by: std::collections::BTreeMap<String, (u64, std::collections::BTreeSet<usize>)> =
        Default::default();
    for (i, t) in report.tests.iter().enumerate() {
        if !keeps_for_the_summary(t) {
            continue;
        }
        for st in t
            .stacks
            .iter()
            .filter(|st| st.kind == StackKind::ProcessLifetime)
        {
            if let Some(held) = &st.retained_by {
                let root = match &held.frame {
                    Some(f) => format!("{}, in `{}`", held.root, f.function),
                    None => held.root.clone(),
                };
                let e = by.entry(root).or_default();
                e.0 += st.bytes;
                e.1.insert(i);
            }
        }
    }
    let mut roots: Vec<(String, u64, u64)> = by
        .into_iter()
        .map(|(root, (bytes, tests))| (root, bytes, tests.len() as u64))
        .collect();
    roots.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    roots
}

/// Frames worth showing: from the first frame whose source is in the workspace onwards,
/// since the innermost frames are usually `Vec::push`, `format!` or `Box::new` in std.
fn interesting_frames<'a>(frames: &'a [FrameReport], root: &Path) -> &'a [FrameReport] {
    let in_workspace = |f: &FrameReport| {
        f.file
            .as_deref()
            .is_some_and(|p| Path::new(p).starts_with(root))
    };
    match frames.iter().position(in_workspace) {
        Some(i) => &frames[i..],
        None => frames,
    }
}

/// `1.5 KiB in 12 objects`, or for the program's own mappings `64.0 KiB of mapped memory
/// in 1 mapping`.
fn amount_text(stack: &StackReport) -> String {
    match stack.memory.label() {
        None => format!(
            "{} in {}",
            human_bytes(stack.bytes),
            plural(stack.objects, "object", "objects")
        ),
        Some(label) => format!(
            "{} of {label} in {}",
            human_bytes(stack.bytes),
            plural(stack.objects, "mapping", "mappings")
        ),
    }
}

/// `, +2.0 KiB in each of 5 runs with stacks` for a stack the extra runs measured as growing.
fn growth_text(stack: &StackReport) -> String {
    let bytes: Vec<i64> = stack.growth_per_run.iter().map(|g| g.bytes).collect();
    let (Some(&min), Some(&max)) = (bytes.iter().min(), bytes.iter().max()) else {
        return String::new();
    };
    if min <= 0 {
        return String::new();
    }
    let per_run = if min == max {
        format!("+{}", human_bytes(min as u64))
    } else {
        format!(
            "+{} to +{}",
            human_bytes(min as u64),
            human_bytes(max as u64)
        )
    };
    format!(
        ", {per_run} in each of {} with stacks",
        plural(bytes.len() as u64, "run", "runs")
    )
}

/// Whether what a test kept belongs in the summary's "kept for the process lifetime": only
/// a test that passed says anything there. A failed test's process holds what its failure
/// left (unwound frames' values, std's backtrace symbol cache when `RUST_BACKTRACE` is on:
/// tens of MiB), and it was never run again.
fn keeps_for_the_summary(t: &TestReport) -> bool {
    matches!(t.verdict, Verdict::Clean | Verdict::Leak)
}

/// What the programs the tests started lost once per process (at their start-up), by
/// program and stack, counted once however many tests show it: the bytes and the programs.
fn lost_once_by_programs(report: &Report) -> (u64, Vec<&str>) {
    let mut by: std::collections::BTreeMap<(&str, &[crate::model::FrameReport]), u64> =
        Default::default();
    for t in report.tests.iter().filter(|t| keeps_for_the_summary(t)) {
        for st in t
            .stacks
            .iter()
            .filter(|st| st.kind == StackKind::OneTime && !st.fails)
        {
            if let Some(process) = &st.process {
                let bytes = by
                    .entry((process.as_str(), st.frames.as_slice()))
                    .or_default();
                *bytes = (*bytes).max(st.bytes);
            }
        }
    }
    let mut programs: Vec<&str> = by.keys().map(|(p, _)| *p).collect();
    programs.dedup();
    (by.values().sum(), programs)
}

/// Whether what a test kept was shown to be kept for the process lifetime by running the
/// test again (its extra runs completed), rather than judged reachable after one run.
fn kept_shown_by_running_again(t: &TestReport) -> bool {
    t.extra_runs.status == Status::Completed
}

/// What a test kept for the process lifetime: its one-time and process-lifetime stacks,
/// or, when the counting pass settled it, everything its own run retained.
fn kept_bytes(t: &TestReport) -> u64 {
    if !keeps_for_the_summary(t) {
        return 0;
    }
    let stacks: u64 = t
        .stacks
        .iter()
        .filter(|st| matches!(st.kind, StackKind::OneTime | StackKind::ProcessLifetime))
        .filter(|st| !st.fails && st.process.is_none())
        .map(|st| st.bytes)
        .sum();
    match (t.method, &t.extra_runs.status, &t.first_run_retained) {
        (Method::Counters, Status::Completed, Some(r)) => r.bytes,
        _ => stacks,
    }
}

/// What draining freed over the run, when it freed anything: garbage the program had
/// already scheduled to free, which no test was charged for.
fn drained_line(report: &Report) -> Option<String> {
    let drained: Vec<&crate::model::Drained> = report
        .tests
        .iter()
        .filter_map(|t| t.drained.as_ref())
        .collect();
    let first = drained.first()?;
    let objects: u64 = drained.iter().map(|d| d.objects).sum();
    let bytes: u64 = drained.iter().map(|d| d.bytes).sum();
    let size = match bytes {
        0 => String::new(),
        b => format!(" ({})", human_bytes(b)),
    };
    Some(format!(
        "{}{size} of {} garbage drained in {} before judging (already scheduled to be freed, never counted as retained)",
        plural(objects, "object", "objects"),
        first.runtime,
        plural(drained.len() as u64, "test", "tests"),
    ))
}

fn test_header(t: &TestReport) -> String {
    format!("{} {}", t.binary, t.name)
}

/// The baseline's block: the counts, then each new, grown, changed and gone test.
fn baseline_text(s: &mut String, b: &crate::model::Baseline) {
    let _ = writeln!(
        s,
        "{:>8} against `{}`: {}{}",
        "Baseline",
        b.path,
        baseline_counts(b),
        if b.fail_on_new {
            "; only new and grown leaks fail (--fail-on new)"
        } else {
            ""
        }
    );
    let order = [Change::New, Change::Grown, Change::Changed];
    for change in order {
        for c in b.tests.iter().filter(|c| c.change == change) {
            let _ = writeln!(
                s,
                "{:>8} {} {} ({})",
                change.as_str().to_uppercase(),
                c.binary,
                c.name,
                c.detail
            );
        }
    }
    for g in &b.gone {
        let _ = writeln!(s, "{:>8} {g} (leaked in the base run)", "GONE");
    }
    s.push('\n');
}

/// The whole summary, without a cost line.
#[cfg(test)]
pub fn render(report: &Report, workspace_root: &Path, out_dir: &Path) -> String {
    render_with_cost(report, workspace_root, out_dir, None)
}

/// [`render`], with the run's `Cost` line (see [`crate::report::cost`]) under the totals.
pub fn render_with_cost(
    report: &Report,
    workspace_root: &Path,
    out_dir: &Path,
    cost: Option<&str>,
) -> String {
    let mut s = String::new();
    // What changed against the base run leads.
    if let Some(b) = &report.baseline {
        baseline_text(&mut s, b);
    }
    for t in &report.tests {
        match t.verdict {
            Verdict::Clean => allowed_text(&mut s, t),
            Verdict::Leak | Verdict::Failed => {
                failing_text(&mut s, report, t, workspace_root, out_dir)
            }
            _ => other_text(&mut s, report, t),
        }
    }
    summary_text(&mut s, report, cost, workspace_root);
    after_summary_text(&mut s, report);
    notes_and_outputs(&mut s, &report.notes, out_dir);
    s
}

/// A clean test's allowed leaks, summarised: nothing is dropped silently.
fn allowed_text(s: &mut String, t: &TestReport) {
    // Allowed leaks are summarised: nothing is dropped silently.
    let allowed: Vec<_> = t
        .stacks
        .iter()
        .filter_map(|st| st.allowed.as_ref().map(|a| (st, a)))
        .collect();
    let collections: Vec<_> = t
        .collections
        .iter()
        .filter_map(|c| c.allowed.as_ref())
        .collect();
    if !allowed.is_empty() || !collections.is_empty() {
        let bytes: u64 = allowed.iter().map(|(st, _)| st.bytes).sum();
        let what = match (allowed.len(), collections.len()) {
            (n, 0) => format!(
                "{} in {}",
                human_bytes(bytes),
                plural(n as u64, "stack", "stacks")
            ),
            (0, c) => plural(c as u64, "growing collection", "growing collections"),
            (n, c) => format!(
                "{} in {} and {}",
                human_bytes(bytes),
                plural(n as u64, "stack", "stacks"),
                plural(c as u64, "growing collection", "growing collections")
            ),
        };
        let _ = writeln!(s, "{:>8} {}: {what} allowed", "ALLOWED", test_header(t));
        let mut rules: Vec<String> = allowed
            .iter()
            .map(|(_, a)| *a)
            .chain(collections.iter().copied())
            .map(|a| match &a.reason {
                Some(r) => format!("{} ({r})", a.rule),
                None => a.rule.clone(),
            })
            .collect();
        // The same rule may allow stacks that are not next to each other.
        let mut seen = std::collections::HashSet::new();
        rules.retain(|r| seen.insert(r.clone()));
        for r in rules {
            let _ = writeln!(s, "           by {r}");
        }
    }
}

/// A leaking or failed test: what it retained, its failing stacks from your code, who holds
/// each, its flame graph.
fn failing_text(
    s: &mut String,
    report: &Report,
    t: &TestReport,
    workspace_root: &Path,
    out_dir: &Path,
) {
    failing_headline(s, report, t);
    if let Some(m) = &t.message {
        for line in m.lines().take(20) {
            let _ = writeln!(s, "           | {line}");
        }
    }
    if let Some(why) = crate::report::judged::one_run_reason(t) {
        let _ = writeln!(s, "           judged on its own run: {why}");
    } else if t.extra_runs.in_all > 0 {
        let _ = writeln!(
            s,
            "           runs: {}",
            crate::report::judged::runs_text(t)
        );
    }
    let mut said_lost: Vec<String> = Vec::new();
    let shown = t.shown_stacks(t.failing_stacks(), STACKS_SHOWN);
    for stack in &shown {
        failing_stack_text(s, stack, workspace_root, &mut said_lost);
    }
    for c in t.collections.iter().filter(|c| c.fails).take(STACKS_SHOWN) {
        let _ = writeln!(s, "           {}", collection_text(c, workspace_root));
        frame_lines(s, &c.allocated_at, workspace_root, "grown at");
    }
    let more = t.failing_stacks().count() - shown.iter().filter(|s| s.fails).count();
    if more > 0 {
        let more = plural(more as u64, "more stack", "more stacks");
        let _ = writeln!(s, "           … and {more} (see report.json)");
    }
    if let Some(svg) = &t.artifacts.flamegraph {
        let _ = writeln!(s, "           flame graph: {}", out_dir.join(svg).display());
    }
}

/// The frames shown of a stack, one a line, the first led by `lead` (`at`, `grown at`).
fn frame_lines(s: &mut String, frames: &[FrameReport], workspace_root: &Path, lead: &str) {
    let indent = " ".repeat(lead.len());
    for (i, f) in interesting_frames(frames, workspace_root)
        .iter()
        .take(FRAMES_SHOWN)
        .enumerate()
    {
        let lead = if i == 0 { lead } else { &indent };
        let _ = writeln!(s, "             {lead} {}", frame_text(f, workspace_root));
    }
}

/// A failing test's first line: its label, its change against the base run, what it
/// retained in how many stacks, and how many of its collections grew.
fn failing_headline(s: &mut String, report: &Report, t: &TestReport) {
    let label = if t.verdict == Verdict::Leak {
        "LEAK"
    } else {
        "FAILED"
    };
    let failing = t.failing_stacks().count();
    let _ = write!(s, "{label:>8} {}", test_header(t));
    if let Some(c) = report.change_of(t) {
        let _ = write!(s, " [{}]", c.change.as_str());
    }
    if t.retained_bytes > 0 {
        let _ = write!(
            s,
            ": retained {} in {} ({})",
            human_bytes(t.retained_bytes),
            plural(t.retained_objects, "object", "objects"),
            plural(
                failing as u64,
                "stack over the threshold",
                "stacks over the threshold"
            ),
        );
    }
    let growing = t.collections.iter().filter(|c| c.fails).count();
    if growing > 0 {
        let _ = write!(
            s,
            "{}{} longer on every run",
            if t.retained_bytes > 0 { "; " } else { ": " },
            plural(growing as u64, "collection", "collections"),
        );
    }
    s.push('\n');
}

/// A failing stack: what it retained and grew by, its frames from your code, the task that
/// allocated it, how its objects are lost (a cycle once a test: `said_lost` holds those
/// said) and who holds them.
fn failing_stack_text(
    s: &mut String,
    stack: &StackReport,
    workspace_root: &Path,
    said_lost: &mut Vec<String>,
) {
    let _ = writeln!(s, "           {}{}", amount_text(stack), growth_text(stack));
    frame_lines(s, &stack.frames, workspace_root, "at");
    if let Some(task) = task_text(stack, workspace_root) {
        let _ = writeln!(s, "             {task}");
    }
    // Every member stack of a cycle is lost by the same cycle: said once a test.
    if let Some(lost) = unreachable_text(stack, workspace_root) {
        let cycle = matches!(stack.unreachable, Some(crate::model::Unreachable::Cycle(_)));
        match cycle && said_lost.contains(&lost) {
            true => {
                let _ = writeln!(s, "             unreachable: in the reference cycle above");
            }
            false => {
                let _ = writeln!(s, "             {lost}");
                said_lost.push(lost);
            }
        }
    }
    for line in stack
        .retained_by
        .iter()
        .flat_map(|h| held_text(h, workspace_root))
    {
        let _ = writeln!(s, "             {line}");
    }
}

/// Any other verdict: its label and why.
fn other_text(s: &mut String, report: &Report, t: &TestReport) {
    let label = t.verdict.as_str().to_uppercase();
    let fails = if t.verdict == Verdict::Unsettled && report.fails(t) {
        " (fails the run: unsettled-fails)"
    } else {
        ""
    };
    let _ = writeln!(s, "{label:>8} {}{fails}", test_header(t));
    if let Some(m) = &t.message {
        for line in m.lines().take(20) {
            let _ = writeln!(s, "           | {line}");
        }
    }
}

/// The counts by verdict, how tests were judged, what was drained, the cost, what leaked
/// and what was kept for the process lifetime, by root.
fn summary_text(s: &mut String, report: &Report, cost: Option<&str>, root: &Path) {
    // Memory kept for the process lifetime is allowed but worth knowing about.
    let kept: Vec<u64> = report.tests.iter().map(kept_bytes).collect();
    let kept_total: u64 = kept.iter().sum();
    let keeping = kept.iter().filter(|&&b| b > 0).count() as u64;
    let count = |v: Verdict| report.tests.iter().filter(|t| t.verdict == v).count();
    let mut parts = Vec::new();
    for v in [
        Verdict::Clean,
        Verdict::Leak,
        Verdict::Failed,
        Verdict::Crashed,
        Verdict::Timeout,
        Verdict::Error,
        Verdict::Unanalysable,
        Verdict::Unsettled,
    ] {
        let n = count(v);
        if n > 0 {
            parts.push(format!("{n} {}", v.as_str()));
        }
    }
    let _ = writeln!(
        s,
        "\n Summary {}: {}{}",
        plural(report.tests.len() as u64, "test", "tests"),
        if parts.is_empty() {
            "none run".to_string()
        } else {
            parts.join(", ")
        },
        match report.ignored {
            0 => String::new(),
            n => format!("; {n} ignored (not run; `-- --include-ignored` runs them)"),
        }
    );
    if let Some(line) = crate::report::judged::judged_line(report) {
        let _ = writeln!(s, "  Judged {line}");
    }
    for line in crate::report::judged::one_run_lines(report) {
        let _ = writeln!(s, "         {line}");
    }
    if let Some(line) = drained_line(report) {
        let _ = writeln!(s, "         {line}");
    }
    for line in crate::report::judged::processes_lines(report) {
        let _ = writeln!(s, "         {line}");
    }
    if let Some(line) = cost {
        let _ = writeln!(s, "    Cost {line}");
    }
    if let Some(partition) = &report.partition {
        let _ = writeln!(
            s,
            " Partition {partition}: {} in other shards, not run here",
            plural(report.other_shards as u64, "test", "tests")
        );
    }
    let leaked = report.leaked_bytes();
    if leaked > 0 {
        let _ = writeln!(
            s,
            "         {} retained by leaking tests",
            human_bytes(leaked)
        );
    }
    let sites = growing_task_sites(report);
    if !sites.is_empty() {
        let _ = writeln!(s, "         tasks left alive on every run, by spawn site:");
        for (site, text) in sites {
            let _ = writeln!(s, "           {} ({text})", frame_text(&site, root));
        }
    }
    kept_lines(s, report, kept_total, keeping);
}

/// What the tests kept for the process lifetime (`kept_total` bytes, by `keeping` tests),
/// by root, and what the programs they started lost once per process.
fn kept_lines(s: &mut String, report: &Report, kept_total: u64, keeping: u64) {
    if kept_total > 0 {
        let once_only = report
            .tests
            .iter()
            .filter(|t| kept_bytes(t) > 0 && !kept_shown_by_running_again(t))
            .count() as u64;
        let shown = match once_only {
            0 => "running the test again added nothing".to_string(),
            1 if keeping == 1 => "still reachable after the one run it could make".to_string(),
            n if n == keeping => "still reachable after the one run they could make".to_string(),
            n => format!(
                "running the test again added nothing, or still reachable after the one run {} could make",
                plural(n, "test", "tests")
            ),
        };
        let _ = writeln!(
            s,
            "         {} kept for the process lifetime by {} (one-time initialisation, pools, tables: {shown}), not counted",
            human_bytes(kept_total),
            plural(keeping, "test", "tests")
        );
        const ROOTS_SHOWN: usize = 5;
        let roots = kept_by_root(report);
        for (root, bytes, tests) in roots.iter().take(ROOTS_SHOWN) {
            let _ = writeln!(
                s,
                "           {} held by {root}, {}",
                human_bytes(*bytes),
                plural(*tests, "test", "tests")
            );
        }
        if roots.len() > ROOTS_SHOWN {
            let _ = writeln!(
                s,
                "           … and {} more roots (see report.json)",
                roots.len() - ROOTS_SHOWN
            );
        }
    }
    let (lost_once, programs) = lost_once_by_programs(report);
    if lost_once > 0 {
        let names: Vec<String> = programs.iter().map(|p| format!("`{p}`")).collect();
        let _ = writeln!(
            s,
            "         {} lost once per process by {} the tests started ({}: the same in every process, whatever it was asked), not counted",
            human_bytes(lost_once),
            plural(programs.len() as u64, "program", "programs"),
            names.join(", ")
        );
    }
}

/// What did not run, processes left behind, what was allowed.
fn after_summary_text(s: &mut String, report: &Report) {
    if let Some(not_run) = &report.not_run {
        let _ = writeln!(
            s,
            " Not run {} selected, never judged: {}",
            plural(not_run.count as u64, "test", "tests"),
            not_run.why
        );
        const SHOWN: usize = 5;
        for name in not_run.tests.iter().take(SHOWN) {
            let _ = writeln!(s, "         {name}");
        }
        if not_run.count > SHOWN {
            let _ = writeln!(
                s,
                "         and {} more (report.json `not_run` lists them all)",
                not_run.count - SHOWN
            );
        }
    }
    let leaving: Vec<&TestReport> = report
        .tests
        .iter()
        .filter(|t| !t.left_processes.is_empty())
        .collect();
    if !leaving.is_empty() {
        let _ = writeln!(
            s,
            "Leftover {} left processes running when {} ended; they were killed",
            plural(leaving.len() as u64, "test", "tests"),
            if leaving.len() == 1 { "it" } else { "they" }
        );
        for t in leaving {
            let _ = writeln!(
                s,
                "         {}: {}",
                test_header(t),
                t.left_processes.join(", ")
            );
        }
    }
    let allowed: Vec<_> = report
        .tests
        .iter()
        .flat_map(|t| &t.stacks)
        .filter_map(|st| st.allowed.as_ref())
        .collect();
    if !allowed.is_empty() {
        let suppressed = allowed
            .iter()
            .filter(|a| a.by == AllowedBy::Suppression)
            .count() as u64;
        let _ = writeln!(
            s,
            "         {} allowed: {} by suppressions, {} by thresholds (listed in the report)",
            plural(allowed.len() as u64, "leaked stack", "leaked stacks"),
            suppressed,
            allowed.len() as u64 - suppressed
        );
    }
    let placeholders = report
        .tests
        .iter()
        .flat_map(|t| &t.stacks)
        .filter_map(|st| st.allowed.as_ref())
        .filter(|a| a.reason.as_deref() == Some(crate::report::suppressions::PLACEHOLDER_REASON))
        .count();
    if placeholders > 0 {
        let _ = writeln!(
            s,
            "         {} allowed by suppressions whose reason is still the placeholder",
            plural(placeholders as u64, "stack is", "stacks are")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(kind: StackKind, bytes: u64, growth: &[i64]) -> StackReport {
        StackReport {
            growth_per_run: growth
                .iter()
                .map(|&b| crate::model::RunGrowth {
                    objects: 1,
                    bytes: b,
                })
                .collect(),
            ..StackReport::example(kind, bytes)
        }
    }

    #[test]
    fn mapped_memory_is_named_as_such_and_counted_in_mappings() {
        let heap = stack(StackKind::Leak, 1536, &[]);
        assert_eq!(amount_text(&heap), "1.5 KiB in 1 object");
        let mapped = StackReport {
            memory: crate::model::Memory::Mapped,
            objects: 2,
            ..stack(StackKind::Leak, 128 << 10, &[])
        };
        assert_eq!(
            amount_text(&mapped),
            "128.0 KiB of mapped memory in 2 mappings"
        );
        let file = StackReport {
            memory: crate::model::Memory::MappedFile,
            ..stack(StackKind::Leak, 4096, &[])
        };
        assert_eq!(amount_text(&file), "4.0 KiB of mapped file in 1 mapping");
    }

    #[test]
    fn growth_per_run_is_shown_for_stacks_that_grew_every_time() {
        let same = stack(StackKind::Leak, 2560, &[2560, 2560, 2560]);
        assert_eq!(
            growth_text(&same),
            ", +2.5 KiB in each of 3 runs with stacks"
        );
        let varying = stack(StackKind::Leak, 96, &[64, 96]);
        assert_eq!(
            growth_text(&varying),
            ", +64 B to +96 B in each of 2 runs with stacks"
        );
        // No extra runs, or not growing every time: nothing to say.
        assert_eq!(growth_text(&stack(StackKind::Leak, 8, &[])), "");
        assert_eq!(
            growth_text(&stack(StackKind::ProcessLifetime, 8, &[8, 0])),
            ""
        );
    }

    fn test_report() -> TestReport {
        TestReport::example()
    }

    #[test]
    fn kept_memory_comes_from_lifetime_stacks_or_from_a_settled_count() {
        let mut t = test_report();
        t.stacks = vec![
            stack(StackKind::ProcessLifetime, 100, &[0, 0]),
            stack(StackKind::OneTime, 20, &[]),
            stack(StackKind::Leak, 8, &[8, 8]),
        ];
        assert_eq!(kept_bytes(&t), 120);
        // A failed test's process holds what its failure left (std's backtrace cache):
        // not counted as kept.
        t.verdict = Verdict::Failed;
        assert_eq!(kept_bytes(&t), 0);
        t.verdict = Verdict::Clean;
        // Settled by the counting pass: no stacks, everything its run retained was kept.
        t.stacks.clear();
        t.method = Method::Counters;
        t.extra_runs.status = Status::Completed;
        t.first_run_retained = Some(crate::model::Retained {
            objects: 3,
            bytes: 4096,
        });
        assert_eq!(kept_bytes(&t), 4096);
        // A test that retained nothing kept nothing.
        t.extra_runs.status = Status::NotNeeded;
        assert_eq!(kept_bytes(&t), 0);
    }

    #[test]
    fn each_rule_that_allowed_stacks_is_named_once() {
        let allow = |rule: &str, bytes| StackReport {
            allowed: Some(crate::model::Allowance {
                by: AllowedBy::Suppression,
                rule: rule.into(),
                reason: None,
            }),
            fails: false,
            ..stack(StackKind::Leak, bytes, &[])
        };
        let mut t = test_report();
        // Largest first: the two stacks of rule A are not next to each other.
        t.stacks = vec![allow("A", 300), allow("B", 200), allow("A", 100)];
        let report = Report {
            tests: vec![t],
            ..Report::example()
        };
        let text = render(&report, Path::new("/ws"), Path::new("out"));
        assert_eq!(text.matches("by A").count(), 1, "{text}");
        assert_eq!(text.matches("by B").count(), 1, "{text}");
    }

    #[test]
    fn a_held_stack_says_by_what_and_kept_memory_is_grouped_by_root() {
        let frame = |function: &str, line| FrameReport::at(function, "/ws/src/lib.rs", line);
        let registry = crate::model::RetainedBy {
            root_kind: crate::model::RootKind::Static,
            root: "static `app::REGISTRY`".into(),
            symbol: Some("app::REGISTRY".into()),
            thread: None,
            frame: None,
            definition: None,
            via: vec![frame("app::register", 12)],
            skipped: 0,
            task: None,
            holder: None,
        };
        let mut leak = test_report();
        leak.name = "tests::grows".into();
        leak.verdict = Verdict::Leak;
        leak.retained_bytes = 64;
        let mut grows = StackReport::example(StackKind::Leak, 64);
        grows.frames = vec![frame("app::remember", 20)];
        grows.retained_by = Some(registry.clone());
        leak.stacks = vec![grows];
        let kept = |name: &str, bytes| {
            let mut t = test_report();
            t.name = name.into();
            let mut st = StackReport::example(StackKind::ProcessLifetime, bytes);
            st.retained_by = Some(registry.clone());
            t.stacks = vec![st];
            t
        };
        let report = Report {
            tests: vec![leak, kept("tests::a", 1024), kept("tests::b", 2048)],
            ..Report::example()
        };
        let text = render(&report, Path::new("/ws"), Path::new("out"));
        assert!(
            text.contains(
                "             at app::remember (src/lib.rs:20)\n             held by static `app::REGISTRY`\n               → app::register (src/lib.rs:12)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("           3.0 KiB held by static `app::REGISTRY`, 2 tests\n"),
            "{text}"
        );
        let long = crate::model::RetainedBy {
            via: vec![frame("a", 1), frame("b", 2), frame("c", 3)],
            skipped: 40,
            ..registry
        };
        let lines = held_text(&long, Path::new("/ws"));
        assert_eq!(lines[3], "  → … 40 objects more", "{lines:?}");
    }

    #[test]
    fn a_task_holds_by_its_spawn_site_and_its_cells_count_tasks_per_run() {
        let frame = |function: &str, line| FrameReport::at(function, "/ws/src/lib.rs", line);
        let task = crate::model::TaskReport {
            runtime: "tokio".into(),
            spawned_at: frame("app::subscribe", 20),
            spawned_by: Some("tokio::runtime::runtime::Runtime::spawn".into()),
            future: None,
            listed: true,
            state: None,
            layout_known: false,
        };
        let runtime = crate::model::RetainedBy {
            root_kind: crate::model::RootKind::Static,
            root: "static `app::RT`".into(),
            symbol: Some("app::RT".into()),
            thread: None,
            frame: None,
            definition: None,
            via: vec![
                frame("app::RT::{{closure}}", 11),
                frame("app::subscribe", 20),
                frame("app::subscribe::{{closure}}", 23),
            ],
            skipped: 0,
            task: Some(crate::model::HoldingTask {
                task: task.clone(),
                via_index: 1,
                kept_by: Some(
                    "its runtime's own structures (its scheduler, its list of tasks)".into(),
                ),
            }),
            holder: None,
        };
        let mut t = test_report();
        t.name = "tests::subscribes".into();
        t.verdict = Verdict::Leak;
        t.retained_bytes = 4096 + 256;
        let mut buffer = StackReport::example(StackKind::Leak, 4096);
        buffer.frames = vec![frame("app::subscribe", 19)];
        buffer.retained_by = Some(runtime.clone());
        let mut cells = StackReport::example(StackKind::Leak, 256);
        cells.frames = vec![frame("app::subscribe", 20)];
        cells.task = Some(task);
        cells.growth_per_run = vec![
            crate::model::RunGrowth {
                objects: 1,
                bytes: 256
            };
            5
        ];
        t.stacks = vec![buffer, cells];
        let report = Report {
            tests: vec![t],
            ..Report::example()
        };
        let text = render(&report, Path::new("/ws"), Path::new("out"));
        assert!(
            text.contains(
                "             held by a tokio task spawned at app::subscribe (src/lib.rs:20), not finished: its runtime still lists it\n               inside the task:\n                 → app::subscribe::{{closure}} (src/lib.rs:23)\n               the task is held by static `app::RT`\n                 → app::RT::{{closure}} (src/lib.rs:11)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "             1 tokio task still alive, spawned at app::subscribe (src/lib.rs:20) by `tokio::runtime::runtime::Runtime::spawn`, +1 task per run; not finished: its runtime still lists them\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "         tasks left alive on every run, by spawn site:\n           app::subscribe (src/lib.rs:20) (+1 tokio task per run, in 1 test)\n"
            ),
            "{text}"
        );
        // Its state word read: said instead.
        let mut read = runtime;
        if let Some(t) = read.task.as_mut() {
            t.task.state = Some("pending".into());
        }
        let lines = held_text(&read, Path::new("/ws"));
        assert_eq!(
            lines[0],
            "held by a tokio task spawned at app::subscribe (src/lib.rs:20), still pending (waiting to be woken)"
        );
        // Then what keeps it is said in words of its own.
        assert!(
            lines.contains(
                &"  the task is kept by its runtime's own structures (its scheduler, its list of tasks)"
                    .to_owned()
            ),
            "{lines:?}"
        );
    }

    /// A report with one test of each kind of outcome the summary tells apart.
    fn varied_report() -> Report {
        let fr = FrameReport::at;
        let leak_frames = vec![
            fr(
                "alloc::vec::from_elem",
                "/rustc/x/library/alloc/src/vec/mod.rs",
                3,
            ),
            fr("demo::cache::tests::grows", "/ws/src/cache.rs", 42),
            fr(
                "demo::cache::tests::grows::{{closure}}",
                "/ws/src/cache.rs",
                40,
            ),
            fr("test::run_test", "/rustc/x/library/test/src/lib.rs", 600),
        ];
        let mut leak = test_report();
        leak.name = "cache::tests::grows".into();
        leak.verdict = Verdict::Leak;
        leak.retained_bytes = 8192 + 64;
        leak.retained_objects = 2;
        leak.stacks = vec![
            StackReport {
                frames: leak_frames.clone(),
                ..stack(StackKind::Leak, 8192, &[8192, 8192, 8192])
            },
            StackReport {
                frames: leak_frames[1..].to_vec(),
                ..stack(StackKind::Leak, 64, &[64, 64, 64])
            },
            StackReport {
                frames: leak_frames[1..].to_vec(),
                ..stack(StackKind::ProcessLifetime, 512, &[0, 0, 0])
            },
        ];
        leak.artifacts.flamegraph = Some("demo-lib-demo/cache.tests.grows.svg".into());
        leak.extra_runs.made = 3;
        leak.extra_runs.in_all = 14;

        let mut allowed = test_report();
        allowed.name = "cache::tests::warm".into();
        allowed.stacks = vec![StackReport {
            allowed: Some(crate::model::Allowance {
                by: AllowedBy::Suppression,
                rule: "[[suppress]] #1 frame \"demo::cache::warm\" (leakcheck.toml:3)".into(),
                reason: Some("a warm cache on purpose".into()),
            }),
            fails: false,
            frames: leak_frames[1..].to_vec(),
            ..stack(StackKind::Leak, 128, &[])
        }];

        let mut failed = test_report();
        failed.name = "net::tests::times_out_when_profiled".into();
        failed.verdict = Verdict::Failed;
        failed.passed_without_profiling = true;
        failed.message = Some(
            "passed without profiling, failed when profiled: … thread 'x' panicked at src/net.rs:9:5:\ntoo slow".into(),
        );
        failed.extra_runs = crate::model::ExtraRuns {
            made: 0,
            in_all: 0,
            status: Status::TestFailed,
            detail: Some("the test did not pass its own run".into()),
        };

        let mut hung = test_report();
        hung.name = "net::tests::hangs".into();
        hung.verdict = Verdict::Timeout;
        hung.message = Some("killed after 20.0s, its timeout".into());

        let mut kept = test_report();
        kept.name = "pool::tests::sums".into();
        kept.method = Method::Counters;
        kept.first_run_retained = Some(crate::model::Retained {
            objects: 4,
            bytes: 4096,
        });

        let mut clean = test_report();
        clean.name = "tree::tests::root".into();
        clean.extra_runs.status = Status::NotNeeded;

        let mut slow = test_report();
        slow.name = "pool::tests::slow_sums".into();
        slow.method = Method::Counters;
        slow.verdict = Verdict::Unsettled;
        slow.unsettled_fails = true;
        slow.extra_runs = crate::model::ExtraRuns {
            made: 0,
            in_all: 0,
            status: Status::TimedOut,
            detail: Some("the 1st extra run did not finish in time (…)".into()),
        };
        slow.message = Some(
            "kept 4.0 KiB still reachable at exit, and its extra runs could not show whether that grows: …"
                .into(),
        );

        let mut report = Report {
            tests: vec![leak, allowed, failed, hung, kept, clean, slow],
            ignored: 2,
            notes: vec!["doc-tests are not checked".into()],
            ..Report::example()
        };
        report.settings.config = Some("/ws/leakcheck.toml".into());
        report
    }

    #[test]
    fn the_summary_of_a_varied_run() {
        let text = render(
            &varied_report(),
            Path::new("/ws"),
            Path::new("target/leakcheck"),
        );
        crate::report::expected_text::assert_matches("test-summary", &text);
    }

    #[test]
    fn a_should_panic_test_that_retained_nothing_is_not_said_to_have_run_again() {
        let mut panics = test_report();
        panics.method = Method::Counters;
        panics.verdict = Verdict::Clean;
        panics.extra_runs = crate::model::ExtraRuns {
            made: 0,
            in_all: 0,
            status: Status::ShouldPanic,
            detail: None,
        };
        panics.first_run_retained = Some(crate::model::Retained {
            objects: 0,
            bytes: 0,
        });
        let mut kept = panics.clone();
        kept.first_run_retained = Some(crate::model::Retained {
            objects: 1,
            bytes: 64,
        });
        let report = Report {
            tests: vec![panics, kept],
            ..Report::example()
        };
        let line = crate::report::judged::judged_line(&report).unwrap();
        assert!(
            line.contains("1 retained nothing")
                && line.contains("1 by their own run alone")
                && !line.contains("running again"),
            "{line}"
        );
    }

    #[test]
    fn a_shard_says_which_and_how_many_tests_other_shards_have() {
        let mut report = varied_report();
        report.partition = Some("hash:2/3".into());
        report.other_shards = 11;
        let text = render(&report, Path::new("/ws"), Path::new("target/leakcheck"));
        assert!(
            text.contains(" Partition hash:2/3: 11 tests in other shards, not run here\n"),
            "{text}"
        );
        let whole = render(
            &varied_report(),
            Path::new("/ws"),
            Path::new("target/leakcheck"),
        );
        assert!(!whole.contains("Partition"), "{whole}");
    }

    #[test]
    fn tests_that_never_ran_are_counted_named_and_explained() {
        let mut report = varied_report();
        let names: Vec<String> = (0..7).map(|i| format!("p::it t{i}")).collect();
        report.not_run =
            crate::model::NotRun::of(names, "nextest stopped at the first failure (fail-fast)");
        let text = render(&report, Path::new("/ws"), Path::new("target/leakcheck"));
        assert!(
            text.contains(
                " Not run 7 tests selected, never judged: nextest stopped at the first failure (fail-fast)\n         p::it t0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "         p::it t4\n         and 2 more (report.json `not_run` lists them all)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("p::it t5"), "{text}");
        let whole = render(
            &varied_report(),
            Path::new("/ws"),
            Path::new("target/leakcheck"),
        );
        assert!(!whole.contains("Not run"), "{whole}");
    }

    #[test]
    fn the_summary_of_an_empty_run() {
        let mut report = varied_report();
        report.tests.clear();
        report.ignored = 0;
        report.notes.clear();
        let text = render(&report, Path::new("/ws"), Path::new("target/leakcheck"));
        crate::report::expected_text::assert_matches("test-summary-empty", &text);
    }

    #[test]
    fn shown_frames_start_in_the_workspace() {
        let root = Path::new("/ws");
        let fr = |name: &str, file: &str| FrameReport::at(name, file, 3);
        let frames = vec![
            fr(
                "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                "/rustc/abc/library/alloc/src/vec/spec_from_elem.rs",
            ),
            fr("leaky::tests::t", "/ws/src/lib.rs"),
        ];
        assert_eq!(
            interesting_frames(&frames, root)[0].function,
            "leaky::tests::t"
        );
        assert_eq!(
            frame_text(&frames[1], root),
            "leaky::tests::t (src/lib.rs:3)"
        );
    }
}
