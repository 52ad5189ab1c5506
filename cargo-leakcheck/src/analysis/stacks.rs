//! The rules for a test's retained stacks: what the test's own run retained beyond the
//! harness, paired with its growth over the extra runs or with what the reachability scan
//! found; each stack's kind (leak, kept for the process lifetime, one-time, harness) and
//! whether it fails its test (thresholds, suppressions). [`crate::analysis::verdict`] puts
//! them together into the test's verdict.

use crate::analysis::classify;
use crate::analysis::delta;
use crate::analysis::frames::{frame_report, is_allocator_mapping, memory_of, resolve_stack};
use crate::analysis::lost;
use crate::analysis::retention;
use crate::analysis::settling;
use crate::analysis::tasks;
use crate::config::{Effective, Suppression};
use crate::evidence::normalized::FrameKey;
use crate::evidence::profile::Counts;
use crate::evidence::symbols::Symbols;
use crate::evidence::unreached::Lost;
use crate::evidence::Entry;
use crate::model::{
    Allowance, AllowedBy, FrameReport, Memory, RunGrowth, StackKind, StackReport, TaskReport,
};
use std::collections::HashMap;

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

/// Splits each retained stack into what is still reachable and what is lost, when the
/// test has no extra runs to judge it by and its dump says which objects were reached.
pub fn with_reachability(
    retained: Vec<RetainedStack>,
    lost: Option<&Lost>,
    baseline_lost: Option<&Lost>,
) -> Vec<RetainedStack> {
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
            out.push(RetainedStack {
                frames: r.frames.clone(),
                live: gone,
                growth: None,
                reach: Some(Reach::Lost),
            });
        }
        if kept.bytes > 0 {
            out.push(RetainedStack {
                frames: r.frames,
                live: kept,
                growth: None,
                reach: Some(Reach::Reachable),
            });
        }
    }
    out
}

/// One retained stack to judge: its frames, what the first run retained beyond the
/// harness, and what each extra run added, when extra runs were made.
pub struct RetainedStack {
    /// Frames, innermost first.
    pub frames: Vec<FrameKey>,
    /// RetainedStack by the test's own run, beyond the baseline.
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
    deltas: Vec<delta::StackDelta>,
    series: Option<&HashMap<Vec<FrameKey>, Vec<Counts>>>,
    exe: &str,
    entry: Option<&Entry>,
) -> Vec<RetainedStack> {
    let (Some(series), Some(entry)) = (series, entry) else {
        return deltas
            .into_iter()
            .map(|d| RetainedStack {
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
    let mut out: Vec<RetainedStack> = deltas
        .into_iter()
        .map(|d| {
            let cut = settling::cut_at_entry(&d.frames, exe, entry.file_range).to_vec();
            let growth = series.get(&cut).map(|s| growth_of(s));
            seen.insert(cut);
            RetainedStack {
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
            !seen.contains(*cut)
                && (settling::grows_every_run(&bytes) || bytes.last() > bytes.first())
        })
        .collect();
    late.sort_by(|a, b| a.0.cmp(b.0));
    out.extend(late.into_iter().map(|(cut, s)| RetainedStack {
        frames: cut.clone(),
        live: kept_by_the_extra_runs(s),
        growth: Some(growth_of(s)),
        reach: None,
    }));
    out
}

/// What a stack the test's own run left nothing in holds at the end of its extra runs:
/// its size, so that a stack that grew is never reported as holding nothing (its series'
/// first point is the end of the own run).
fn kept_by_the_extra_runs(series: &[Counts]) -> Counts {
    match (series.first(), series.last()) {
        (Some(first), Some(last)) => Counts {
            objects: last.objects.saturating_sub(first.objects),
            bytes: last.bytes.saturating_sub(first.bytes),
        },
        _ => Counts::default(),
    }
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
            Some(format!("grew in each of {n} runs with stacks")),
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
    retained: &[RetainedStack],
    exe: &str,
    symbols: &mut dyn Symbols,
    policy: &Policy,
    entry_range: Option<(u64, u64)>,
    held: &HashMap<Vec<FrameKey>, crate::evidence::paths::HeldPath>,
) -> Vec<StackReport> {
    let merged = merge_by_kind_and_frames(retained, exe, symbols, entry_range, held);
    let by_words = retention::TaskWords::of(held.values(), exe, symbols);
    let mut stacks: Vec<StackReport> = merged
        .into_iter()
        .map(|((kind, memory, frames), m)| {
            let stack = StackReport {
                bytes: m.bytes,
                objects: m.objects,
                kind,
                reason: m.reason,
                fails: false,
                memory,
                allowed: None,
                suppression: None,
                growth_per_run: m.growth,
                frames,
                retained_by: m
                    .held
                    .as_ref()
                    .map(|p| retention::describe(p, exe, symbols, &by_words)),
                unreachable: None,
                task: m.task.map(|mut t| {
                    if let Some(p) = m.held.as_ref() {
                        t.listed = retention::lists_task(p, &t.runtime, symbols);
                        tasks::read_state(&mut t, retention::held_first_word(p));
                    }
                    t
                }),
                process: None,
            };
            against_policy(stack, policy)
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

/// RetainedStack stacks that show alike, summed: their kind, why, growth per run, who holds
/// them.
struct Merged {
    bytes: u64,
    objects: u64,
    reason: Option<String>,
    growth: Vec<RunGrowth>,
    held: Option<crate::evidence::paths::HeldPath>,
    /// When its objects are task cells: what spawned them.
    task: Option<TaskReport>,
}

/// Each retained stack symbolized and given its kind (from its growth, or from what the
/// scan reached when it has none), then merged with the stacks of the same kind that show
/// alike.
fn merge_by_kind_and_frames(
    retained: &[RetainedStack],
    exe: &str,
    symbols: &mut dyn Symbols,
    entry_range: Option<(u64, u64)>,
    held: &HashMap<Vec<FrameKey>, crate::evidence::paths::HeldPath>,
) -> HashMap<(StackKind, Memory, Vec<FrameReport>), Merged> {
    let mut merged: HashMap<(StackKind, Memory, Vec<FrameReport>), Merged> = HashMap::new();
    type Resolved = (
        Vec<FrameReport>,
        classify::Classified,
        Option<TaskReport>,
        Memory,
    );
    let resolved: Vec<Resolved> = retained
        .iter()
        .map(|r| {
            let frames = resolve_stack(&r.frames, symbols);
            let classified = classify::classify_test(&frames, exe, entry_range);
            let task = tasks::task_of(&frames, exe);
            let memory = memory_of(&r.frames, symbols);
            (
                frames.iter().map(frame_report).collect(),
                classified,
                task,
                memory,
            )
        })
        .collect();
    let growing = growing_sites(retained.iter().zip(&resolved).filter_map(
        |(r, (shown, c, _, _))| {
            (c.kind == StackKind::Leak).then_some((site_of(shown)?, r.growth.as_deref()?))
        },
    ));
    // A global allocator's own extents are its heap, not the program's mappings.
    let allocators: Vec<bool> = retained
        .iter()
        .map(|r| is_allocator_mapping(&r.frames, symbols))
        .collect();
    let shown_for_site = representatives(retained, &resolved, &growing);
    for ((r, (shown, classified, task, memory)), allocator) in
        retained.iter().zip(&resolved).zip(allocators)
    {
        if allocator {
            continue;
        }
        let (kind, reason, by_site) = kind_of(r, classified, shown, &growing);
        // A stack the test's own run did not retain, that grew in some extra runs only, is
        // shown only as part of a line that grew on every run.
        if r.live.bytes == 0 && r.growth.is_some() && kind != StackKind::Leak {
            continue;
        }
        // The stacks of a line that grew only all together are one leak, shown by the
        // stack that holds the most of it.
        let shown = match by_site.and_then(|site| shown_for_site.get(site)) {
            Some(representative) => *representative,
            None => shown,
        };
        let e = merged
            .entry((kind, *memory, shown.clone()))
            .or_insert(Merged {
                bytes: 0,
                objects: 0,
                reason,
                growth: vec![RunGrowth::default(); r.growth.as_ref().map_or(0, Vec::len)],
                held: None,
                task: task.clone(),
            });
        // Lost objects have no path; what is kept, or grew, may.
        let explained = matches!(kind, StackKind::Leak | StackKind::ProcessLifetime)
            && r.reach != Some(Reach::Lost);
        if explained && e.held.is_none() {
            // Paths are keyed as `held_by` keys them: cut at the entry point, when known.
            e.held = match entry_range {
                Some(range) => held.get(settling::cut_at_entry(&r.frames, exe, range)),
                None => held.get(&r.frames),
            }
            .cloned();
        }
        e.add(r);
    }
    merged
}

/// A retained stack's kind, why, and the line it is a leak by when only the line grew on
/// every run (`classified`: its frames' class; `shown`: its frames as reported; `growing`:
/// the lines that grew on every run, all their stacks together).
fn kind_of<'a>(
    r: &RetainedStack,
    classified: &classify::Classified,
    shown: &'a [FrameReport],
    growing: &std::collections::HashSet<&[FrameReport]>,
) -> (StackKind, Option<String>, Option<&'a [FrameReport]>) {
    let (kind, reason) = match r.reach {
        Some(reach) if r.growth.is_none() => kind_with_reach(classified, reach),
        _ => kind_with_growth(classified, r.growth.as_deref()),
    };
    // One line that allocates by different paths from run to run (inside std: whether
    // `format!` grows a string once or twice depends on what it formats; above it: which
    // of a scheduler's paths polled the task): no single stack grows every time, the line
    // does.
    match (kind, r.growth.as_deref(), site_of(shown)) {
        (StackKind::ProcessLifetime, Some(g), Some(site))
            if classified.kind == StackKind::Leak
                && g.iter().map(|g| g.bytes).sum::<i64>() > 0
                && growing.contains(site) =>
        {
            (
                StackKind::Leak,
                Some(format!(
                    "grew in each of {} runs with stacks, with the other stacks that allocate at the same line",
                    g.len()
                )),
                Some(site),
            )
        }
        _ => (kind, reason, None),
    }
}

/// For each line that grew only with all its stacks together (`growing`), the frames of
/// its stack that holds the most (by what the test's own run kept, then by what the extra
/// runs added): the one the leak is shown by.
fn representatives<'a>(
    retained: &[RetainedStack],
    resolved: &'a [(
        Vec<FrameReport>,
        classify::Classified,
        Option<TaskReport>,
        Memory,
    )],
    growing: &std::collections::HashSet<&[FrameReport]>,
) -> HashMap<&'a [FrameReport], &'a Vec<FrameReport>> {
    let weight = |r: &RetainedStack| {
        let added: i64 = r.growth.iter().flatten().map(|g| g.bytes.max(0)).sum();
        (r.live.bytes, added)
    };
    type Best<'b> = (&'b Vec<FrameReport>, (u64, i64));
    let mut best: HashMap<&[FrameReport], Best> = HashMap::new();
    for (r, (shown, ..)) in retained.iter().zip(resolved) {
        let Some(site) = site_of(shown).filter(|s| growing.contains(s)) else {
            continue;
        };
        let w = weight(r);
        let e = best.entry(site).or_insert((shown, w));
        if w > e.1 || (w == e.1 && shown < e.0) {
            *e = (shown, w);
        }
    }
    best.into_iter()
        .map(|(site, (shown, _))| (site, shown))
        .collect()
}

impl Merged {
    /// Adds a retained stack's bytes, objects and growth per run.
    fn add(&mut self, r: &RetainedStack) {
        self.bytes = self.bytes.saturating_add(r.live.bytes);
        self.objects = self.objects.saturating_add(r.live.objects);
        for (sum, g) in self.growth.iter_mut().zip(r.growth.iter().flatten()) {
            sum.objects = sum.objects.saturating_add(g.objects);
            sum.bytes = sum.bytes.saturating_add(g.bytes);
        }
    }
}

/// A stack against the thresholds and suppressions: a leak (or, when configured to fail,
/// one-time state) over its threshold fails; one under it or suppressed is allowed, and
/// says by what.
fn against_policy(mut stack: StackReport, policy: &Policy) -> StackReport {
    let effective = policy.effective;
    let kind = stack.kind;
    let judged = kind == StackKind::Leak
        || (matches!(kind, StackKind::OneTime | StackKind::ProcessLifetime)
            && effective.one_time_fails);
    if !judged {
        return stack;
    }
    // A leak found by its growth is as large as what it adds per run, at least.
    let size = match (kind, stack.min_growth()) {
        (StackKind::Leak, Some(g)) => stack.bytes.max(g.max(0) as u64),
        _ => stack.bytes,
    };
    match allowance(policy, &stack.frames, size, "") {
        Allowed::Fails => stack.fails = true,
        Allowed::By(suppression, allowance) => {
            stack.suppression = suppression;
            stack.allowed = Some(allowance);
        }
    }
    stack
}

/// What the thresholds and suppressions make of a leak: it fails, or is allowed, and by what
/// (with the suppression's index, when one allowed it).
pub enum Allowed {
    Fails,
    By(Option<usize>, Allowance),
}

/// A leak of `size` bytes (`per` says per what: "" or " per run") with these frames, against
/// the policy: a suppression whose `frame` matches one of the frames allows it; otherwise it
/// fails when over the stack threshold.
pub fn allowance(policy: &Policy, frames: &[FrameReport], size: u64, per: &str) -> Allowed {
    let effective = policy.effective;
    if let Some((index, s)) = policy
        .suppressions
        .iter()
        .find(|(_, s)| s.matches_stack(frames))
    {
        let rule = format!(
            "[[suppress]] #{} frame \"{}\" (line {})",
            s.index,
            s.frame.as_str(),
            s.line
        );
        return Allowed::By(
            Some(*index),
            Allowance {
                by: AllowedBy::Suppression,
                rule,
                reason: Some(s.reason.clone()),
            },
        );
    }
    if size > effective.stack_threshold {
        return Allowed::Fails;
    }
    let rule = format!(
        "<= {} bytes{per} (stack-threshold set by {})",
        effective.stack_threshold, effective.stack_threshold_source
    );
    Allowed::By(
        None,
        Allowance {
            by: AllowedBy::StackThreshold,
            rule,
            reason: None,
        },
    )
}

/// Where a stack allocates, as the program sees it: its first frame in the program's own
/// source, the line that allocates. Two stacks of one site differ inside std or a
/// dependency below that line (whether `format!` grows a string once or twice) or in the
/// callers above it (which of a scheduler's paths polled the task that allocates). None when
/// no frame is the program's own.
fn site_of(shown: &[FrameReport]) -> Option<&[FrameReport]> {
    let own = shown
        .iter()
        .position(|f| f.file.as_deref().is_some_and(classify::is_own_source))?;
    Some(&shown[own..=own])
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

    #[test]
    fn a_line_whose_stacks_vary_from_run_to_run_below_or_above_it_grows_as_one_site() {
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
        assert_eq!(site_of(&one), Some(&own[..1]));
        assert_eq!(site_of(&own[..1]), Some(&own[..1]));
        let growing = growing_sites(
            [
                (site_of(&one).unwrap(), &g1[..]),
                (site_of(&two).unwrap(), &g2[..]),
            ]
            .into_iter(),
        );
        assert!(growing.contains(&own[..1]));
        // The same line reached by two of a scheduler's paths, polled one way in the first
        // run and the other way after: the line grew on every run.
        let polled = |path: &str| -> Vec<FrameReport> {
            [
                own[0].clone(),
                at("app::t::{{closure}}", "/src/app/src/lib.rs"),
            ]
            .into_iter()
            .chain([at(path, "/registry/tokio/src/worker.rs")])
            .collect()
        };
        let (lifo, queue) = (polled("tokio::run_task"), polled("tokio::steal"));
        let (first, later) = (g(&[896, 0, 0]), g(&[0, 896, 896]));
        let growing = growing_sites(
            [
                (site_of(&lifo).unwrap(), &first[..]),
                (site_of(&queue).unwrap(), &later[..]),
            ]
            .into_iter(),
        );
        assert!(growing.contains(&own[..1]));
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
    fn a_partly_reached_stack_is_split_into_its_kept_and_lost_objects() {
        let frames = vec![FrameKey {
            object: "/x".into(),
            file_offset: 0x10,
        }];
        let retained = vec![RetainedStack {
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
        let grown = vec![RetainedStack {
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
}
