//! Reads what a test process left on disk (its heap dumps, the scan's `.unreached` and
//! `.paths` files beside them, the tail of its stderr) into the evidence the verdict stage
//! judges ([`crate::analysis::verdict`]). It decides nothing: a file that cannot be read
//! is carried as such, for the verdict to say what that means.

use crate::evidence::died::Died;
use crate::evidence::growth_run::{After, GrowthEvidence, Snapshot, SnapshotsError};
use crate::evidence::normalized::{self, NormalizedProfile};
use crate::evidence::paths::HeldPath;
use crate::evidence::profile;
use crate::evidence::test_run::{
    Allocator, BinaryEvidence, DumpError, Dumps, ExtraRunsOutcome, TestEvidence,
};
use crate::evidence::test_run::{ChildEvidence, SuiteProcesses};
use crate::evidence::unreached::Lost;
use crate::evidence::{stderr_tail, ProcessResult};
use crate::model::Method;
use leakcheck_protocol::collections::Reading;
use leakcheck_protocol::files;
use leakcheck_protocol::timeline::LengthAt;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// What is known about a binary: its canonical path, and its harness baseline read, from
/// `baseline` (its harness-only run, when it had one); a note when the baseline cannot be
/// used. `custom_allocator`: the binary installs its own `#[global_allocator]`; then what its
/// baseline ever allocated is read too, for the analysis to see whether it reaches malloc.
pub fn binary(
    exe_path: &Path,
    custom_allocator: bool,
    baseline: Option<&ProcessResult>,
    collections: std::sync::Arc<crate::evidence::CollectionTable>,
) -> (BinaryEvidence, Option<String>) {
    let exe = exe_path
        .canonicalize()
        .unwrap_or_else(|_| exe_path.to_path_buf())
        .display()
        .to_string();
    let mut note = None;
    let profile = match baseline {
        None => None,
        Some(r) => match own_profile(r) {
            Ok(p) => Some(p),
            Err(e) => {
                note = Some(format!(
                    "the harness baseline of `{exe}` is unusable ({e}); its tests are judged without it"
                ));
                None
            }
        },
    };
    let allocator = match (custom_allocator, baseline) {
        (false, _) => Allocator::Malloc,
        (true, None) => Allocator::Own {
            own_jemalloc: false,
            ever_allocated: Vec::new(),
        },
        (true, Some(r)) => Allocator::Own {
            own_jemalloc: !r.app_dumps.is_empty(),
            ever_allocated: ever_allocated(r),
        },
    };
    (
        BinaryEvidence {
            exe,
            baseline: profile,
            baseline_unreached: baseline.and_then(own_lost),
            allocator,
            collections,
        },
        note,
    )
}

/// One judged test's evidence, from its process (`result`, the one its verdict is drawn
/// from) and its counting process when it had one apart; its dumps are read when its
/// verdict is drawn from them.
pub fn test<'a>(
    result: &'a ProcessResult,
    counted: Option<&'a ProcessResult>,
    method: Method,
    extra_runs: &'a ExtraRunsOutcome,
    entry: Option<&'a crate::evidence::Entry>,
    suite: &'a SuiteProcesses,
) -> TestEvidence<'a> {
    let profiled = method != Method::Counters;
    TestEvidence {
        result,
        method,
        extra_runs,
        entry,
        counting: counted,
        stderr_tail: if profiled {
            stderr_tail(&result.stderr)
        } else {
            String::new()
        },
        dumps: profiled.then(|| dumps(result)),
        children: children_of(result, counted, method),
        suite,
        died: died(result, counted),
    }
}

/// Where an extra run died: of the verdict's process, else of its counting process.
fn died(result: &ProcessResult, counted: Option<&ProcessResult>) -> Option<Died> {
    [Some(result), counted]
        .into_iter()
        .flatten()
        .filter_map(|p| p.record_file.as_deref())
        .find_map(crate::evidence::died::read)
}

/// The processes a test's processes started: `result` its verdict's, `counted` its counting
/// process when it had one apart.
pub fn children_of(
    result: &ProcessResult,
    counted: Option<&ProcessResult>,
    method: Method,
) -> Vec<ChildEvidence> {
    // A test settled by counting has one process, which is both.
    children(&match method {
        Method::Stacks => [counted, Some(result)],
        _ => [Some(result), None],
    })
}

/// The processes a test's processes started (its counting process's, then its stacks
/// process's), each with what it lost at its exit when it was scanned.
fn children(processes: &[Option<&ProcessResult>]) -> Vec<ChildEvidence> {
    let mut out = Vec::new();
    for (pass, p) in processes.iter().flatten().enumerate() {
        for c in &p.children {
            let lost = c.dump.as_ref().and_then(|dump| {
                let parsed =
                    heap_profile(&crate::evidence::unreached::unreached_path(dump)).ok()?;
                let mut lost = Lost::default();
                crate::evidence::unreached::add_unreached(&mut lost, &parsed);
                Some(lost)
            });
            out.push(ChildEvidence {
                exe: c.exe.clone(),
                run: c.run,
                pass: pass as u32,
                checked: c.checked,
                lost,
            });
        }
    }
    out
}

/// A profiled process's dumps, and the scan's files beside them.
pub fn dumps(result: &ProcessResult) -> Result<Dumps, DumpError> {
    let own = own_profile(result)?;
    let kinds = 1 + usize::from(!result.app_dumps.is_empty());
    let runs = result
        .run_dumps
        .iter()
        .enumerate()
        .map(|(k, dumps)| {
            if dumps.len() != kinds {
                return Err(DumpError::NoRunDump(k + 1));
            }
            merged(dumps, &[])
        })
        .collect();
    let own_dump = result.preload_dumps.first();
    // The scan's files beside the last extra run's dump.
    let last_run = result.run_dumps.last().and_then(|d| d.first());
    Ok(Dumps {
        own,
        runs,
        own_lost: own_lost(result),
        own_paths: own_dump.and_then(|d| paths(d)),
        last_run_paths: last_run.and_then(|d| paths(d)),
        own_cycles: own_dump.and_then(|d| cycles(d)),
        last_run_cycles: last_run.and_then(|d| cycles(d)),
        sites: last_run.and_then(|d| sites(d)).unwrap_or_default(),
    })
}

/// The stacks of the collections' buffers written beside `dump`; None when there is no such
/// file, or it is not whole.
fn sites(dump: &Path) -> Option<HashMap<u32, crate::evidence::sites::BufferSite>> {
    crate::evidence::sites::parse_sites(&std::fs::read_to_string(sites_file(dump)).ok()?)
}

/// The file of collection sites beside a dump.
pub fn sites_file(dump: &Path) -> PathBuf {
    let mut name = dump.as_os_str().to_owned();
    name.push(leakcheck_protocol::files::COLLECTIONS);
    PathBuf::from(name)
}

/// Reads and merges a process's dumps of the test's own run (the runtime's, plus the test
/// binary's own jemalloc's when it has one).
pub fn own_profile(result: &ProcessResult) -> Result<NormalizedProfile, DumpError> {
    if result.preload_dumps.is_empty() {
        return Err(DumpError::NoExitDump);
    }
    merged(&result.preload_dumps, &result.app_dumps)
}

/// Reads the runtime's dump of one moment of one process and the binary's own (if any), and
/// merges them.
fn merged(preload: &[PathBuf], app: &[PathBuf]) -> Result<NormalizedProfile, DumpError> {
    let mut merged: Option<NormalizedProfile> = None;
    for path in preload.iter().chain(app) {
        let parsed = heap_profile(path)?;
        let norm = normalized::normalize(&parsed.unbiased());
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

/// Every stack the process ever allocated at, with its accumulated counts as its live ones.
fn ever_allocated(result: &ProcessResult) -> Vec<NormalizedProfile> {
    result
        .preload_dumps
        .iter()
        .filter_map(|path| heap_profile(path).ok())
        .map(|mut parsed| {
            for s in &mut parsed.stacks {
                s.live = s.accum;
            }
            normalized::normalize(&parsed)
        })
        .collect()
}

/// The objects of the process's dump of its own run that nothing pointed to at that moment.
/// None when a dump has no such file, cannot be read, or when the binary's own jemalloc
/// holds objects the scan did not see (tikv-jemallocator): then reachability is unknown.
pub fn own_lost(result: &ProcessResult) -> Option<Lost> {
    if result.preload_dumps.is_empty() || !result.app_dumps.is_empty() {
        return None;
    }
    let mut lost = Lost::default();
    for dump in &result.preload_dumps {
        let parsed = heap_profile(&crate::evidence::unreached::unreached_path(dump)).ok()?;
        crate::evidence::unreached::add_unreached(&mut lost, &parsed);
    }
    Some(lost)
}

/// The retention paths written beside `dump`, by the frames of the stack each holds.
pub fn held_by_stack(
    dump: &Path,
) -> std::collections::HashMap<Vec<crate::evidence::normalized::FrameKey>, HeldPath> {
    paths(dump).map_or_else(Default::default, |p| {
        crate::evidence::paths::by_stack(p, <[crate::evidence::normalized::FrameKey]>::to_vec)
    })
}

/// The retention paths written beside `dump`; None when there are none, or the file is not
/// whole (a process that died while writing it).
fn paths(dump: &Path) -> Option<Vec<HeldPath>> {
    crate::evidence::paths::parse(
        &std::fs::read_to_string(crate::evidence::paths::paths_file(dump)).ok()?,
    )
}

/// The reference cycles among the lost objects of `dump`; None when there is no such file,
/// or it is not whole.
fn cycles(dump: &Path) -> Option<crate::evidence::cycles::Cycles> {
    crate::evidence::cycles::parse(
        &std::fs::read_to_string(crate::evidence::cycles::cycles_file(dump)).ok()?,
    )
}

/// A bench's or a service's snapshots, each the dumps of one moment (see
/// `snapshot_parts` of the execution), on the time axis of the runtime's
/// timeline: seconds since the first. A dump the timeline does not name is left out (a kill
/// cut its line short), and so is a last dump that cannot be read (cut short by the kill at
/// the time cap); any other unreadable dump is an error.
pub fn growth_snapshots(
    dumps: &[Vec<PathBuf>],
    timeline: &Path,
) -> Result<Vec<Snapshot>, SnapshotsError> {
    let text = match std::fs::read_to_string(timeline) {
        Ok(t) => t,
        Err(_) if dumps.is_empty() => String::new(),
        Err(source) => {
            return Err(SnapshotsError::Timeline {
                path: timeline.to_path_buf(),
                source,
            })
        }
    };
    let when = marks_of(&text);
    let lengths = lengths_of(&text);
    let mut snapshots = Vec::new();
    let mut first = None;
    for (i, parts) in dumps.iter().enumerate() {
        let Some(micros) = parts.first().and_then(|p| moment_of(&when, p)) else {
            continue;
        };
        let profile = match snapshot(parts) {
            Ok(p) => p,
            Err(_) if i + 1 == dumps.len() => continue,
            Err(e) => return Err(e.into()),
        };
        let t0 = *first.get_or_insert(micros);
        snapshots.push(Snapshot {
            seconds: micros.saturating_sub(t0) as f64 / 1e6,
            profile,
            lengths: parts
                .first()
                .and_then(|p| lengths_at(&lengths, p))
                .unwrap_or_default(),
        });
    }
    Ok(snapshots)
}

/// The length lines of a timeline.
fn lengths_of(text: &str) -> Vec<leakcheck_protocol::timeline::LengthAt> {
    text.lines()
        .filter_map(leakcheck_protocol::timeline::LengthAt::parse)
        .collect()
}

/// The collections' lengths when the periodic dump `dump` was taken.
fn lengths_at(
    lengths: &[leakcheck_protocol::timeline::LengthAt],
    dump: &Path,
) -> Option<std::collections::BTreeMap<u32, i64>> {
    match timeline_dump(dump)? {
        leakcheck_protocol::timeline::Dump::Periodic(seq) => Some(at_dump(lengths, seq)),
        leakcheck_protocol::timeline::Dump::Final => None,
    }
}

/// When each dump of a timeline was taken (microseconds on the monotonic clock).
pub type Marks = HashMap<leakcheck_protocol::timeline::Dump, u64>;

/// The runtime's timeline of a job's dumps; empty when it cannot be read.
pub fn timeline_marks(timeline: &Path) -> Marks {
    std::fs::read_to_string(timeline)
        .map(|t| marks_of(&t))
        .unwrap_or_default()
}

fn marks_of(text: &str) -> Marks {
    text.lines()
        .filter_map(leakcheck_protocol::timeline::Mark::parse)
        .map(|m| (m.dump, m.micros))
        .collect()
}

/// The allocator's figures the timeline holds, each at the moment of its dump
/// (microseconds on the monotonic clock), oldest first.
pub fn memory_figures(timeline: &Path) -> Vec<(u64, leakcheck_protocol::timeline::MemoryAt)> {
    let Ok(text) = std::fs::read_to_string(timeline) else {
        return Vec::new();
    };
    let marks = marks_of(&text);
    let mut figures: Vec<_> = text
        .lines()
        .filter_map(leakcheck_protocol::timeline::MemoryAt::parse)
        .filter_map(|m| {
            let at = marks.get(&leakcheck_protocol::timeline::Dump::Periodic(m.seq))?;
            Some((*at, m))
        })
        .collect();
    figures.sort_by_key(|(at, _)| *at);
    figures
}

/// The allocator's figures and the kernel's split from the last reading at or before
/// `from` (the first there is without it) to the first at or after `until` (the process at
/// rest after its load; the last there is without one), in seconds since `t0` (the
/// snapshots' origin), from 0.
pub fn memory_points(
    timeline: &Path,
    t0: u64,
    from: Option<u64>,
    until: Option<u64>,
) -> Vec<(f64, leakcheck_protocol::timeline::MemoryAt)> {
    let figures = memory_figures(timeline);
    let start = from
        .and_then(|f| figures.iter().rposition(|(at, _)| *at <= f))
        .unwrap_or(0);
    let end = until
        .and_then(|u| figures.iter().position(|(at, _)| *at >= u))
        .map_or(figures.len(), |i| i + 1);
    figures[start.min(end)..end]
        .iter()
        .map(|(at, m)| (at.saturating_sub(t0) as f64 / 1e6, *m))
        .collect()
}

/// When the timeline says `dump` was taken.
pub fn moment_of(marks: &Marks, dump: &Path) -> Option<u64> {
    marks.get(&timeline_dump(dump)?).copied()
}

/// The snapshot after a service's load (its parts), with how the scan found each stack held
/// when `scanned` is the dump it scanned, and the collections' lengths then (from the
/// `timeline`).
pub fn growth_after(parts: &[PathBuf], scanned: &Path, timeline: &Path) -> After {
    let lengths = std::fs::read_to_string(timeline)
        .ok()
        .map(|text| lengths_of(&text));
    After {
        profile: snapshot(parts),
        held: held_by_stack(scanned),
        lengths: parts
            .first()
            .zip(lengths.as_deref())
            .and_then(|(p, l)| lengths_at(l, p)),
    }
}

/// What a bench's or a service's run left: its stderr's tail, its snapshots, and the
/// snapshot after a service's load.
pub fn growth(
    stderr: &Path,
    dumps: &[Vec<PathBuf>],
    timeline: &Path,
    after: Option<After>,
    collections: std::sync::Arc<crate::evidence::CollectionTable>,
) -> GrowthEvidence {
    GrowthEvidence {
        stderr_tail: stderr_tail(stderr),
        snapshots: growth_snapshots(dumps, timeline),
        after,
        collections,
    }
}

/// One snapshot from the dumps taken at the same moment (the runtime's, and the program's
/// own jemalloc's when it has one), each unbiased, their stacks summed. Its sample period
/// is the coarsest of theirs, for the noise estimate.
fn snapshot(parts: &[PathBuf]) -> Result<NormalizedProfile, profile::ProfileError> {
    let mut merged: Option<NormalizedProfile> = None;
    for path in parts {
        let one = normalized::normalize(&heap_profile(path)?.unbiased());
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

/// Reads one dump file; errors name the file.
pub fn heap_profile(path: &Path) -> Result<profile::HeapProfile, profile::ProfileError> {
    let file = std::fs::File::open(path).map_err(|err| {
        profile::ProfileError::new(None, "", profile::ProfileErrorKind::Io(err)).with_path(path)
    })?;
    profile::parse_heap_profile(std::io::BufReader::new(file)).map_err(|err| err.with_path(path))
}

/// The readings of every collection when the periodic dump `seq` was taken, from a
/// timeline's length lines (each written when a reading changed, in order).
fn at_dump(lines: &[LengthAt], seq: u64) -> BTreeMap<u32, Reading> {
    let mut out = BTreeMap::new();
    for l in lines.iter().filter(|l| l.seq <= seq) {
        out.insert(l.index, l.reading);
    }
    out
}

/// Which dump of the timeline a dump file is: the exit dump, or a periodic one by its
/// sequence number.
pub fn timeline_dump(path: &Path) -> Option<leakcheck_protocol::timeline::Dump> {
    use leakcheck_protocol::timeline::Dump;
    let name = path.file_name()?.to_str()?;
    if files::is_final(name) {
        return Some(Dump::Final);
    }
    files::dump_seq(name).map(Dump::Periodic)
}
