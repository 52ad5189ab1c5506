//! Growth over time, for benchmarks (pure): given heap snapshots taken while a benchmark
//! ran, which allocation stacks keep growing after warm-up?
//!
//! The rule. The first half of the run is warm-up and is ignored (caches fill, pools reach
//! their size, lazy statics initialise). The later half is split in two quarters. A stack
//! is flagged when its retained bytes rose across the third quarter *and* across the fourth,
//! and the rise over the whole later half exceeds the growth threshold. A bounded cache or
//! pool that has reached its size rises no further in the last quarter (a plateau) and is
//! not flagged; a leak that grows with every iteration rises in both.

use crate::analysis::classify;
use crate::analysis::ending::Ending;
use crate::analysis::frames::{frame_report, is_allocator_mapping, memory_of, resolve_stack};
use crate::analysis::retention;
use crate::analysis::tasks;
use crate::evidence::growth_run::{After, GrowthEvidence, Snapshot};
use crate::evidence::normalized::{FrameKey, NormalizedProfile};
use crate::evidence::symbols::Symbols;
use crate::evidence::ProcessEnd;
use crate::model::{BenchArtifacts, BenchStack, GrowthReport, StackKind, Verdict};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A stack's retained bytes over time and the verdict of the rule.
#[derive(Clone, Debug, PartialEq)]
pub struct StackGrowth {
    /// The stack, as (object, file offset) frames, innermost first.
    pub frames: Vec<FrameKey>,
    /// (seconds, retained bytes) at every snapshot.
    pub series: Vec<(f64, u64)>,
    /// Rise in bytes over the later half of the run.
    pub growth: i64,
    /// That rise divided by the later half's length.
    pub bytes_per_second: f64,
    /// Whether the rule flags it.
    pub flagged: bool,
}

/// What the rule needs: at least this many snapshots.
pub const MIN_SNAPSHOTS: usize = 4;

/// The index of the first snapshot taken at or after `fraction` of the run.
fn at_fraction(snapshots: &[Snapshot], fraction: f64) -> usize {
    let end = snapshots.last().map(|s| s.seconds).unwrap_or(0.0);
    let t = end * fraction;
    snapshots
        .iter()
        .position(|s| s.seconds >= t)
        .unwrap_or(snapshots.len() - 1)
}

/// Why a series cannot be judged: it is too short for the rule, which needs three distinct
/// snapshots, at half, three quarters and the end of the run. Such a run is neither clean nor
/// growing.
#[derive(Clone, Debug, PartialEq)]
pub struct TooShort {
    pub snapshots: usize,
    pub seconds: f64,
}

impl std::fmt::Display for TooShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "too short to judge: {} over {:.2} s; the growth rule needs distinct snapshots at half, three quarters and the end of the run (let it run longer)",
            crate::model::count_of(self.snapshots as u64, "heap snapshot", "heap snapshots"),
            self.seconds
        )
    }
}

/// Applies the rule to every stack; flagged stacks first, then by final size.
pub fn analyze(snapshots: &[Snapshot], threshold: u64) -> Result<Vec<StackGrowth>, TooShort> {
    let too_short = || TooShort {
        snapshots: snapshots.len(),
        seconds: snapshots.last().map_or(0.0, |s| s.seconds),
    };
    if snapshots.len() < MIN_SNAPSHOTS {
        return Err(too_short());
    }
    let (a, b, c) = (
        at_fraction(snapshots, 0.5),
        at_fraction(snapshots, 0.75),
        snapshots.len() - 1,
    );
    // With two of the three the same snapshot, no stack could rise across both quarters:
    // judging anyway would call every such run clean.
    if !(a < b && b < c) {
        return Err(too_short());
    }
    let window = (snapshots[c].seconds - snapshots[a].seconds).max(1e-9);
    let mut keys: BTreeMap<&Vec<FrameKey>, ()> = BTreeMap::new();
    for s in snapshots {
        for k in s.profile.stacks.keys() {
            keys.insert(k, ());
        }
    }
    let value =
        |s: &Snapshot, k: &Vec<FrameKey>| s.profile.stacks.get(k).map(|c| c.bytes).unwrap_or(0);
    let mut out: Vec<StackGrowth> = keys
        .into_keys()
        .map(|k| {
            let series: Vec<(f64, u64)> =
                snapshots.iter().map(|s| (s.seconds, value(s, k))).collect();
            let (va, vb, vc) = (series[a].1, series[b].1, series[c].1);
            let growth = vc as i64 - va as i64;
            StackGrowth {
                frames: k.clone(),
                growth,
                bytes_per_second: growth as f64 / window,
                flagged: vb > va && vc > vb && growth > 0 && growth as u64 > threshold,
                series,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        y.flagged
            .cmp(&x.flagged)
            .then_with(|| {
                y.series
                    .last()
                    .map(|p| p.1)
                    .cmp(&x.series.last().map(|p| p.1))
            })
            .then_with(|| x.frames.cmp(&y.frames))
    });
    Ok(out)
}

/// Unflags the stacks that no longer hold, in `held` (a later snapshot), what they held at
/// snapshot `at` (three quarters into the window), and lists the flagged ones first again.
fn unflag_drained(stacks: &mut [StackGrowth], held: &NormalizedProfile, at: usize) {
    for g in stacks.iter_mut().filter(|g| g.flagged) {
        let now = held.stacks.get(&g.frames).map_or(0, |c| c.bytes);
        if now < g.series.get(at).map_or(0, |p| p.1) {
            g.flagged = false;
        }
    }
    stacks.sort_by_key(|g| std::cmp::Reverse(g.flagged));
}

/// Which bench is judged: its package, target, name and executable (canonical, as the
/// symbols name it), and whether criterion runs it (then a stop at the time cap is a
/// failure, not the plan).
pub struct BenchIdentity<'a> {
    pub package: &'a str,
    pub binary: &'a str,
    pub name: &'a str,
    pub exe: &'a Path,
    pub criterion: bool,
    /// The whole program is under check (a service under `run`), not code inside a harness:
    /// a growing stack without a frame of the program's own code (a release build inlines
    /// a thread's closure into std's thread start) is still the program's, unless it is
    /// glibc's cache of thread blocks.
    pub whole_program: bool,
}

/// How many stacks a bench's report entry lists (flagged ones first).
const STACKS_LISTED: usize = 10;

/// Applies the growth rule to a bench's snapshots and symbolizes the stacks worth listing.
/// With `after`, a stack that grew but no longer holds, there, what it held three quarters
/// into the window drained (a cache emptied) and is not flagged; a flagged one says who
/// holds it. A run too short for the rule is `unsettled`, never `clean`.
pub fn judge_bench(
    id: &BenchIdentity,
    end: &ProcessEnd,
    evidence: &GrowthEvidence,
    symbols: &mut dyn Symbols,
    threshold: u64,
    period: u64,
) -> GrowthReport {
    let stopped_at_cap = *end == ProcessEnd::TimedOut && !id.criterion;
    let exit = if stopped_at_cap {
        "stopped at the time cap".into()
    } else {
        end.describe()
    };
    let mut report = blank_report(id, exit, threshold, period);
    let ending = Ending::of(end, "bench");
    match &ending {
        Ending::Exited(0) => {}
        Ending::TimedOut if stopped_at_cap => {}
        Ending::Exited(_) => {
            report.verdict = Verdict::Failed;
            report.message = Some(format!(
                "the bench failed ({}){}",
                end.describe(),
                evidence.stderr_tail
            ));
        }
        // A bench has no time limit of its own: only criterion's cap, plus a minute.
        Ending::TimedOut => {
            report.verdict = Verdict::Failed;
            report.message =
                Some("criterion did not finish within the time cap plus a minute".into());
        }
        Ending::Crashed(by) => {
            report.verdict = ending.verdict().unwrap_or(Verdict::Crashed);
            report.message = Some(format!("killed by {by}{}", evidence.stderr_tail));
        }
        Ending::NeverRan(why) => {
            report.verdict = ending.verdict().unwrap_or(Verdict::Error);
            report.message = Some(why.clone());
            return report;
        }
    }
    judge_growth(&mut report, id, evidence, symbols, period);
    report
}

/// A bench's report before its verdict: clean, no stacks, `exit` as it ended.
pub fn blank_report(id: &BenchIdentity, exit: String, threshold: u64, period: u64) -> GrowthReport {
    GrowthReport {
        package: id.package.to_string(),
        binary: id.binary.to_string(),
        name: id.name.to_string(),
        verdict: Verdict::Clean,
        exit,
        message: None,
        sample_period: period,
        growth_threshold: threshold,
        growth_threshold_source: String::new(),
        snapshots: 0,
        duration_seconds: 0.0,
        stacks: Vec::new(),
        heap: Vec::new(),
        rss: Vec::new(),
        memory: None,
        artifacts: BenchArtifacts::default(),
        unsettled_fails: false,
        service: id.whole_program,
        not_checked: false,
        collections: Vec::new(),
    }
}

/// Applies the growth rule to the snapshots of a run that ended as planned, into `report`
/// (a verdict already drawn from how it ended stays).
pub fn judge_growth(
    report: &mut GrowthReport,
    id: &BenchIdentity,
    evidence: &GrowthEvidence,
    symbols: &mut dyn Symbols,
    period: u64,
) {
    let threshold = report.growth_threshold;
    let snapshots = match &evidence.snapshots {
        Ok(s) => s,
        Err(e) => {
            report.verdict = Verdict::Error;
            report.message = Some(e.to_string());
            return;
        }
    };
    report.snapshots = snapshots.len();
    report.duration_seconds = snapshots.last().map(|s| s.seconds).unwrap_or(0.0);
    report.heap = heap_line(snapshots, symbols);
    let mut stacks = match analyze(snapshots, threshold) {
        Ok(s) => s,
        Err(too_short) => {
            if report.verdict == Verdict::Clean {
                report.verdict = Verdict::Unsettled;
            }
            report.message.get_or_insert(too_short.to_string());
            return;
        }
    };
    if let Some(after) = &evidence.after {
        match &after.profile {
            Ok(held) => unflag_drained(&mut stacks, held, at_fraction(snapshots, 0.75)),
            Err(e) => {
                report.verdict = Verdict::Error;
                report.message = Some(format!("the snapshot after the load: {e}"));
                return;
            }
        }
    }
    let exe = id.exe.display().to_string();
    let by_words = match &evidence.after {
        Some(a) => retention::TaskWords::of(a.held.values(), &exe, symbols),
        None => retention::TaskWords::default(),
    };
    let listing = ListedStack {
        exe: &exe,
        whole_program: id.whole_program,
        after: evidence.after.as_ref(),
        last_snapshot: snapshots.last().map(|s| &s.profile.stacks),
        by_words: &by_words,
        period,
    };
    // A global allocator's own extents are its heap, not the program's mappings.
    let mut own = Vec::with_capacity(stacks.len());
    for g in stacks {
        if !is_allocator_mapping(&g.frames, symbols) {
            own.push(g);
        }
    }
    for g in own.into_iter().take(STACKS_LISTED) {
        report.stacks.push(listing.stack(g, symbols));
    }
    report.collections = collections_over_time(
        &evidence.collections,
        snapshots,
        evidence.after.as_ref().and_then(|a| a.lengths.as_ref()),
        threshold,
    );
    let grows =
        report.stacks.iter().any(|s| s.flagged) || report.collections.iter().any(|c| c.flagged);
    if report.verdict == Verdict::Clean && grows {
        report.verdict = Verdict::Leak;
    }
}

/// The heap's bytes at each snapshot: the program's own mappings, which the dumps carry
/// too, left out.
fn heap_line(snapshots: &[Snapshot], symbols: &mut dyn Symbols) -> Vec<(f64, u64)> {
    let mut mapping: HashMap<&[FrameKey], bool> = HashMap::new();
    let mut heap = Vec::with_capacity(snapshots.len());
    for s in snapshots {
        let mut bytes = 0;
        for (keys, c) in &s.profile.stacks {
            let mapped = *mapping
                .entry(keys.as_slice())
                .or_insert_with(|| !memory_of(keys, symbols).is_heap());
            if !mapped {
                bytes += c.bytes;
            }
        }
        heap.push((s.seconds, bytes));
    }
    heap
}

/// What a listed stack's report entry is drawn from besides its growth.
struct ListedStack<'a> {
    /// The executable, as classification and retention name it.
    exe: &'a str,
    /// See [`BenchIdentity::whole_program`].
    whole_program: bool,
    after: Option<&'a After>,
    /// The stacks of the last snapshot (their object counts).
    last_snapshot: Option<&'a HashMap<Vec<FrameKey>, crate::evidence::profile::Counts>>,
    by_words: &'a retention::TaskWords,
    /// The sample period of the dumps.
    period: u64,
}

impl ListedStack<'_> {
    /// A growing stack's report entry: classified, flagged when it is a leak whose growth
    /// stands clear of sampling noise, with who holds it after the load.
    fn stack(&self, g: StackGrowth, symbols: &mut dyn Symbols) -> BenchStack {
        let exe = self.exe;
        let trimmed = resolve_stack(&g.frames, symbols);
        let class = classify::classify_test(&trimmed, exe, None);
        let kind = match class.kind {
            StackKind::Harness if self.whole_program && !class.thread_cache => StackKind::Leak,
            kind => kind,
        };
        let last = g.series.last().map(|p| p.1).unwrap_or(0);
        // Sampling noise: an estimate of B bytes at period P varies by about sqrt(B * P);
        // growth must stand three of those clear of it.
        let noise = 3.0 * ((last as f64) * self.period as f64).sqrt();
        let flagged = g.flagged && kind == StackKind::Leak && (g.growth as f64) > noise;
        let held = self.after.and_then(|a| a.held.get(&g.frames));
        BenchStack {
            memory: memory_of(&g.frames, symbols),
            bytes: last,
            growth_bytes: g.growth,
            growth_bytes_per_second: g.bytes_per_second,
            flagged,
            kind,
            objects: (self.last_snapshot)
                .and_then(|stacks| stacks.get(&g.frames))
                .map_or(0, |c| c.objects),
            task: tasks::task_of(&trimmed, exe).map(|mut t| {
                tasks::read_state(&mut t, held.and_then(retention::held_first_word));
                t
            }),
            frames: trimmed.iter().map(frame_report).collect(),
            retained_by: held
                .filter(|_| flagged)
                .map(|p| retention::describe(p, exe, symbols, self.by_words)),
            series: g.series,
        }
    }
}

/// The growth rule on the program's own collections: one whose length rose across the third
/// quarter and across the fourth, by more than `threshold` in all (its entries times their
/// size, an entry of unknown size counting a byte), is flagged, unless after a service's load
/// it is back below where it was three quarters in (its entries were let go). Collections
/// whose length never changed are left out; flagged ones first.
fn collections_over_time(
    table: &crate::evidence::CollectionTable,
    snapshots: &[Snapshot],
    after: Option<&BTreeMap<u32, i64>>,
    threshold: u64,
) -> Vec<crate::model::BenchCollection> {
    use crate::model::BenchCollection;
    if snapshots.len() < MIN_SNAPSHOTS {
        return Vec::new();
    }
    let (a, b, c) = (
        at_fraction(snapshots, 0.5),
        at_fraction(snapshots, 0.75),
        snapshots.len() - 1,
    );
    let window = (snapshots[c].seconds - snapshots[a].seconds).max(1e-9);
    let mut out: Vec<BenchCollection> = Vec::new();
    for (index, info) in table.collections.iter().enumerate() {
        let index = index as u32;
        let at = |s: &Snapshot| s.lengths.get(&index).copied().unwrap_or(-1).max(0);
        let series: Vec<(f64, i64)> = snapshots
            .iter()
            .filter(|s| s.lengths.get(&index).is_some_and(|&r| r >= 0))
            .map(|s| (s.seconds, at(s)))
            .collect();
        if series.windows(2).all(|w| w[0].1 == w[1].1) {
            continue;
        }
        let (va, vb, vc) = (at(&snapshots[a]), at(&snapshots[b]), at(&snapshots[c]));
        let growth = vc - va;
        let bytes = crate::analysis::lengths::identity(info).bytes_of(growth);
        let after = after
            .and_then(|l| l.get(&index).copied())
            .filter(|&r| r >= 0);
        let let_go = after.is_some_and(|n| n < vb);
        out.push(BenchCollection {
            collection: crate::analysis::lengths::identity(info),
            series,
            growth,
            per_second: growth as f64 / window,
            flagged: vb > va && vc > vb && bytes > threshold && !let_go,
            after,
        });
    }
    out.sort_by(|x, y| {
        y.flagged
            .cmp(&x.flagged)
            .then_with(|| y.growth.cmp(&x.growth))
            .then_with(|| x.collection.root.cmp(&y.collection.root))
    });
    out.truncate(STACKS_LISTED);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::evidence::profile::Counts;
    use std::sync::Arc;

    fn key(n: u64) -> Vec<FrameKey> {
        vec![FrameKey {
            object: Arc::from("/bin/bench"),
            file_offset: n,
        }]
    }

    /// Snapshots at t = 0..n-1 seconds; `values[i]` gives (stack, bytes) pairs at t = i.
    fn snaps(values: &[&[(u64, u64)]]) -> Vec<Snapshot> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Snapshot {
                lengths: BTreeMap::new(),
                seconds: i as f64,
                profile: NormalizedProfile {
                    stacks: v
                        .iter()
                        .map(|&(k, b)| {
                            (
                                key(k),
                                Counts {
                                    objects: 1,
                                    bytes: b,
                                },
                            )
                        })
                        .collect(),
                    sample_period: 4096,
                },
            })
            .collect()
    }

    #[test]
    fn steady_growth_is_flagged_a_plateau_and_warm_up_are_not() {
        // Stack 1 grows 100 KiB a second throughout; stack 2 fills a cache during the
        // first half and then stays flat; stack 3 grows only in the third quarter.
        let k = 1024;
        let s = snaps(&[
            &[(1, 0), (2, 0), (3, 0)],
            &[(1, 100 * k), (2, 400 * k), (3, 0)],
            &[(1, 200 * k), (2, 800 * k), (3, 0)],
            &[(1, 300 * k), (2, 800 * k), (3, 0)],
            &[(1, 400 * k), (2, 800 * k), (3, 0)],
            &[(1, 500 * k), (2, 800 * k), (3, 0)],
            &[(1, 600 * k), (2, 800 * k), (3, 300 * k)],
            &[(1, 700 * k), (2, 800 * k), (3, 300 * k)],
            &[(1, 800 * k), (2, 800 * k), (3, 300 * k)],
        ]);
        let out = analyze(&s, 64 * k).unwrap();
        let by = |n: u64| out.iter().find(|g| g.frames == key(n)).unwrap();
        assert!(by(1).flagged);
        assert_eq!(by(1).growth, 400 * 1024, "from t=4 (half) to t=8");
        assert!((by(1).bytes_per_second - 100.0 * 1024.0).abs() < 1e-6);
        assert!(!by(2).flagged, "plateau");
        assert!(!by(3).flagged, "no rise in the last quarter");
        assert_eq!(out[0].frames, key(1), "flagged first");
        assert_eq!(by(1).series.len(), 9);
    }

    #[test]
    fn growth_under_the_threshold_and_too_few_snapshots() {
        let s = snaps(&[&[(1, 0)], &[(1, 10)], &[(1, 20)], &[(1, 30)], &[(1, 40)]]);
        assert!(
            !analyze(&s, 64).unwrap()[0].flagged,
            "20 bytes over the later half"
        );
        assert!(analyze(&s, 10).unwrap()[0].flagged);
        let e = analyze(&s[..3], 0).unwrap_err();
        assert_eq!(e.snapshots, 3);
        assert!(e
            .to_string()
            .starts_with("too short to judge: 3 heap snapshots over 2.00 s"));
    }

    /// Snapshots at the given seconds, one stack (1) at the given bytes.
    pub(crate) fn series(points: &[(f64, u64)]) -> Vec<Snapshot> {
        points
            .iter()
            .map(|&(seconds, bytes)| Snapshot {
                lengths: BTreeMap::new(),
                seconds,
                profile: NormalizedProfile {
                    stacks: [(
                        key(1),
                        Counts {
                            objects: bytes / 64,
                            bytes,
                        },
                    )]
                    .into(),
                    sample_period: 4096,
                },
            })
            .collect()
    }

    /// Symbols that resolve stack 1 to the bench's own `intern_record`.
    pub(crate) fn symbols() -> crate::evidence::symbols::Replay {
        use crate::evidence::symbols::{Captured, CodeAnswer, Replay};
        Replay::new(Captured {
            code: vec![CodeAnswer {
                object: "/bin/bench".into(),
                offset: 1,
                frames: vec![crate::evidence::symbols::Frame {
                    function: Some("bench::intern_record".into()),
                    file: Some("/src/bench/benches/intern.rs".into()),
                    line: Some(12),
                    column: None,
                    object: "/bin/bench".into(),
                    offset: 1,
                    inlined: false,
                }],
            }],
            ..Captured::default()
        })
    }

    /// A bench or service of the program `/bin/bench`.
    pub(crate) fn identity(whole_program: bool) -> BenchIdentity<'static> {
        BenchIdentity {
            package: "bench",
            binary: "intern",
            name: "intern",
            exe: Path::new("/bin/bench"),
            criterion: false,
            whole_program,
        }
    }

    /// Evidence of the series `points`.
    pub(crate) fn evidence(points: &[(f64, u64)]) -> GrowthEvidence {
        GrowthEvidence {
            stderr_tail: String::new(),
            snapshots: Ok(series(points)),
            after: None,
            collections: Default::default(),
        }
    }

    #[test]
    fn a_collection_longer_in_both_later_quarters_is_flagged_a_full_one_is_not() {
        let c = |root: &str| crate::evidence::Collection {
            root: root.into(),
            thread_local: false,
            file: Some("src/main.rs".into()),
            line: Some(9),
            field: String::new(),
            type_name: "HashMap<u64, u64>".into(),
            bytes: false,
            entry_size: 16,
            program: String::new(),
        };
        let table = crate::evidence::CollectionTable {
            collections: vec![c("app::VISITS"), c("app::CACHE"), c("app::LATE")],
            note: None,
        };
        // VISITS gains 2000 entries a second (32 KB); CACHE fills to 200 in the first half; LATE
        // grows only at the end, by a few entries.
        let mut snapshots = series(&[(0.0, 0); 9]);
        for (t, s) in snapshots.iter_mut().enumerate() {
            s.seconds = t as f64;
            let t = t as i64;
            s.lengths = [(0, 2000 * t), (1, (100 * t).min(200)), (2, (t - 5).max(0))].into();
        }
        let found = collections_over_time(&table, &snapshots, None, 64 << 10);
        let by = |root: &str| found.iter().find(|c| c.collection.root == root).unwrap();
        assert!(by("app::VISITS").flagged);
        assert_eq!(by("app::VISITS").growth, 8000);
        assert!((by("app::VISITS").per_second - 2000.0).abs() < 1e-6);
        assert!(!by("app::CACHE").flagged, "full");
        assert!(
            !by("app::LATE").flagged,
            "3 entries of 16 bytes are under the threshold"
        );
        assert_eq!(found[0].collection.root, "app::VISITS");
        // After the load, back below where it was three quarters in: let go.
        let after = [(0u32, 10)].into();
        let drained = collections_over_time(&table, &snapshots, Some(&after), 64 << 10);
        assert!(!drained.iter().any(|c| c.flagged));
    }

    /// `growth::judge_bench` on a bench that exited 0.
    fn judge(points: &[(f64, u64)]) -> GrowthReport {
        judge_bench(
            &identity(false),
            &ProcessEnd::Exited(0),
            &evidence(points),
            &mut symbols(),
            64 * 1024,
            4096,
        )
    }

    const MB: u64 = 1 << 20;

    #[test]
    fn a_bench_that_grows_in_under_a_second_is_growing_at_its_line() {
        // The points the runtime's schedule gives a 0.7 s bench, the heap rising 12 → 48 MB.
        let points: Vec<(f64, u64)> = (0..=28)
            .map(|i| {
                let t = i as f64 * 0.025;
                (t, 12 * MB + (t * 52.0 * MB as f64) as u64)
            })
            .collect();
        let r = judge(&points);
        assert_eq!(r.verdict, Verdict::Leak, "{r:?}");
        assert!(r.stacks[0].flagged);
        assert_eq!(r.stacks[0].frames[0].line, Some(12));
        // Four snapshots of the same bench (one every 250 ms) were judged clean once: too
        // few for both quarters to hold a distinct point. Now that is said, not passed.
        let four = judge(&[
            (0.0, 12 * MB),
            (0.25, 24 * MB),
            (0.5, 39 * MB),
            (0.75, 48 * MB),
        ]);
        assert_eq!(four.verdict, Verdict::Unsettled, "{four:?}");
        assert!(four
            .message
            .as_deref()
            .unwrap()
            .starts_with("too short to judge"));
    }

    #[test]
    fn a_long_growing_series_is_growing_and_a_plateau_or_a_drain_is_clean() {
        let long: Vec<(f64, u64)> = (0..240).map(|i| (i as f64 * 0.25, i * MB / 4)).collect();
        assert_eq!(judge(&long).verdict, Verdict::Leak);
        // Fills during warm-up, then flat.
        let plateau: Vec<(f64, u64)> = (0..40)
            .map(|i| (i as f64 * 0.1, (i.min(12)) * MB))
            .collect();
        assert_eq!(judge(&plateau).verdict, Verdict::Clean);
        // Rises in the third quarter, drains in the fourth.
        let draining: Vec<(f64, u64)> = (0..40)
            .map(|i| {
                (
                    i as f64 * 0.1,
                    if (20..30).contains(&i) {
                        (i - 19) * MB
                    } else {
                        MB
                    },
                )
            })
            .collect();
        assert_eq!(judge(&draining).verdict, Verdict::Clean);
    }

    #[test]
    fn noise_around_a_flat_heap_is_clean() {
        // ±3 % around 8 MB: a sampled heap's estimate wanders; the last quarter's points may
        // rise, but not by more than the threshold and the sampling noise.
        let noisy: Vec<(f64, u64)> = (0..40u64)
            .map(|i| {
                let wobble = (i * 7919 % 13) as i64 - 6;
                (i as f64 * 0.1, (8 * MB as i64 + wobble * 40 * 1024) as u64)
            })
            .collect();
        assert_eq!(judge(&noisy).verdict, Verdict::Clean);
        // The same noise on a heap that grows 4 MB/s: growing.
        let rising: Vec<(f64, u64)> = noisy
            .iter()
            .map(|&(t, b)| (t, b + (t * 4.0 * MB as f64) as u64))
            .collect();
        assert_eq!(judge(&rising).verdict, Verdict::Leak);
    }

    #[test]
    fn a_bench_with_one_snapshot_is_unsettled() {
        let r = judge(&[(0.0, MB)]);
        assert_eq!(r.verdict, Verdict::Unsettled);
        assert_eq!(r.snapshots, 1);
        assert!(r.message.unwrap().contains("1 heap snapshot over 0.00 s"));
    }
}
