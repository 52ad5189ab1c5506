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
use crate::analysis::diff::{self, FrameKey, NormalizedProfile};
use crate::analysis::ending::Ending;
use crate::analysis::frames::{frame_report, resolve_stack};
use crate::analysis::profile;
use crate::analysis::retention::{self, HeldPath};
use crate::analysis::symbols::FromFiles;
use crate::evidence::stderr_tail;
use crate::evidence::{ProcessEnd, ProcessResult};
use crate::model::{BenchArtifacts, BenchReport, BenchStack, StackKind, Verdict};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One heap snapshot and when it was taken, in seconds since the first.
pub struct Snapshot {
    /// Seconds since the first snapshot.
    pub seconds: f64,
    /// Live bytes per stack (unbiased).
    pub profile: NormalizedProfile,
}

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

/// Applies the rule to every stack; flagged stacks first, then by final size. Err when
/// there are too few snapshots to judge.
pub fn analyze(snapshots: &[Snapshot], threshold: u64) -> Result<Vec<StackGrowth>, String> {
    if snapshots.len() < MIN_SNAPSHOTS {
        return Err(format!(
            "only {} heap snapshots were taken; growth needs at least {MIN_SNAPSHOTS} (let the bench run longer)",
            snapshots.len()
        ));
    }
    let (a, b, c) = (
        at_fraction(snapshots, 0.5),
        at_fraction(snapshots, 0.75),
        snapshots.len() - 1,
    );
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
                flagged: vb > va && vc > vb && growth > threshold as i64,
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

/// One snapshot from the dumps taken at the same moment (the runtime's, and the program's
/// own jemalloc's when it has one), each unbiased, their stacks summed. Its sample period
/// is the coarsest of theirs, for the noise estimate.
fn read_snapshot(parts: &[PathBuf]) -> Result<NormalizedProfile, profile::ProfileError> {
    let mut merged: Option<NormalizedProfile> = None;
    for path in parts {
        let one = diff::normalize(&profile::read_heap_profile(path)?.unbiased());
        match &mut merged {
            None => merged = Some(one),
            Some(m) => {
                m.sample_period = m.sample_period.max(one.sample_period);
                for (frames, c) in one.stacks {
                    let e = m.stacks.entry(frames).or_default();
                    e.objects += c.objects;
                    e.bytes += c.bytes;
                }
            }
        }
    }
    Ok(merged.unwrap_or(NormalizedProfile {
        stacks: HashMap::new(),
        sample_period: 1,
    }))
}

/// Which bench is judged: its package, target, name and executable, and whether criterion
/// runs it (then a stop at the time cap is a failure, not the plan).
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

/// A snapshot taken a while after the growth window (a service's, once its load ended and
/// a settle pause passed; its dumps as in [`judge_bench`]), and how the reachability scan
/// then found each stack held.
pub struct After<'a> {
    pub dump: &'a [PathBuf],
    /// Retention paths by the held stack's frames (empty without a scan).
    pub held: HashMap<Vec<FrameKey>, HeldPath>,
}

/// Reads a bench's snapshots, applies the growth rule, symbolizes the stacks worth listing.
/// Each snapshot is the dumps taken at one moment, the first of which gives its time. With
/// `after`, a stack that grew but no longer holds, there, what it held three quarters
/// into the window drained (a cache emptied) and is not flagged; a flagged one says who
/// holds it.
pub fn judge_bench(
    id: &BenchIdentity,
    result: &ProcessResult,
    dumps: &[Vec<PathBuf>],
    after: Option<&After>,
    symbols: &mut FromFiles,
    threshold: u64,
    period: u64,
) -> BenchReport {
    let stopped_at_cap = result.end == ProcessEnd::TimedOut && !id.criterion;
    let mut report = BenchReport {
        package: id.package.to_string(),
        binary: id.binary.to_string(),
        name: id.name.to_string(),
        verdict: Verdict::Clean,
        exit: if stopped_at_cap {
            "stopped at the time cap".into()
        } else {
            result.end.describe()
        },
        message: None,
        sample_period: period,
        growth_threshold: threshold,
        growth_threshold_source: String::new(),
        snapshots: 0,
        duration_seconds: 0.0,
        stacks: Vec::new(),
        heap: Vec::new(),
        rss: Vec::new(),
        artifacts: BenchArtifacts::default(),
    };
    let ending = Ending::of(&result.end, "bench");
    match &ending {
        Ending::Exited(0) => {}
        Ending::TimedOut if stopped_at_cap => {}
        Ending::Exited(_) => {
            report.verdict = Verdict::Failed;
            report.message = Some(format!(
                "the bench failed ({}){}",
                result.end.describe(),
                stderr_tail(&result.stderr)
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
            report.message = Some(format!("killed by {by}{}", stderr_tail(&result.stderr)));
        }
        Ending::NeverRan(why) => {
            report.verdict = ending.verdict().unwrap_or(Verdict::Error);
            report.message = Some(why.clone());
            return report;
        }
    }
    let mut snapshots = Vec::new();
    let mut first = None;
    for parts in dumps {
        let Some(path) = parts.first() else { continue };
        let profile = match read_snapshot(parts) {
            Ok(p) => p,
            // A dump cut short by the kill at the time cap: the others still count.
            Err(_) if parts == dumps.last().expect("non-empty") => continue,
            Err(e) => {
                report.verdict = Verdict::Error;
                report.message = Some(e.to_string());
                return report;
            }
        };
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let t = match (first, modified) {
            (None, Some(m)) => {
                first = Some(m);
                0.0
            }
            (Some(f), Some(m)) => m.duration_since(f).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            _ => continue,
        };
        snapshots.push(Snapshot {
            seconds: t,
            profile,
        });
    }
    report.snapshots = snapshots.len();
    report.duration_seconds = snapshots.last().map(|s| s.seconds).unwrap_or(0.0);
    report.heap = snapshots
        .iter()
        .map(|s| (s.seconds, s.profile.stacks.values().map(|c| c.bytes).sum()))
        .collect();
    let mut stacks = match analyze(&snapshots, threshold) {
        Ok(s) => s,
        Err(e) => {
            if report.verdict == Verdict::Clean {
                report.verdict = Verdict::Error;
            }
            report.message.get_or_insert(e);
            return report;
        }
    };
    if let Some(after) = after {
        match read_snapshot(after.dump) {
            Ok(held) => {
                unflag_drained(&mut stacks, &held, at_fraction(&snapshots, 0.75));
            }
            Err(e) => {
                report.verdict = Verdict::Error;
                report.message = Some(format!("the snapshot after the load: {e}"));
                return report;
            }
        }
    }
    let exe = id
        .exe
        .canonicalize()
        .unwrap_or_else(|_| id.exe.to_path_buf())
        .display()
        .to_string();
    for g in stacks.into_iter().take(STACKS_LISTED) {
        let trimmed = resolve_stack(&g.frames, &mut symbols.code);
        let class = classify::classify_test(&trimmed, &exe, None);
        let kind = match class.kind {
            StackKind::Harness if id.whole_program && !class.thread_cache => StackKind::Leak,
            kind => kind,
        };
        let last = g.series.last().map(|p| p.1).unwrap_or(0);
        // Sampling noise: an estimate of B bytes at period P varies by about sqrt(B * P);
        // growth must stand three of those clear of it.
        let noise = 3.0 * ((last as f64) * period as f64).sqrt();
        let flagged = g.flagged && kind == StackKind::Leak && (g.growth as f64) > noise;
        report.stacks.push(BenchStack {
            bytes: last,
            growth_bytes: g.growth,
            growth_bytes_per_second: g.bytes_per_second,
            flagged,
            kind,
            frames: trimmed.iter().map(frame_report).collect(),
            retained_by: after
                .and_then(|a| a.held.get(&g.frames))
                .filter(|_| flagged)
                .map(|p| retention::describe(p, &exe, symbols)),
            series: g.series,
        });
    }
    if report.verdict == Verdict::Clean && report.stacks.iter().any(|s| s.flagged) {
        report.verdict = Verdict::Leak;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::profile::Counts;
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
        assert!(e.contains("only 3 heap snapshots"), "{e}");
    }
}
