//! `cargo leakcheck merge`: one report from the reports of several runs — the shards of a
//! `--partition`ed suite, or runs of different packages on different machines.
//!
//! The merge is refused (exit 2) rather than guessed when the inputs do not describe one
//! run: different schema versions, different settings (what the numbers mean), shards of
//! different splits, or one test judged twice with different verdicts. Flame graphs are
//! copied beside the merged report, so its artifact paths stay relative and reachable.

use crate::errors::{Error, ExitCode, MergeError};
use crate::execution::partition::Partition;
use crate::model::{Report, Verdict};
use crate::report::export::{self, Destination, RunFacts};
use crate::report::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// One report to merge, and where it came from.
#[derive(Clone, Debug)]
pub struct Input {
    /// The report.json file.
    pub path: PathBuf,
    /// The report.
    pub report: Report,
}

impl Input {
    /// The directory its artifact paths are relative to.
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

/// A file to copy next to the merged report: from an input's directory, to the same
/// relative path under the output directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    /// The file.
    pub from: PathBuf,
    /// Its path relative to the output directory.
    pub to: String,
}

/// Reads a report: `path` is a report.json or a directory holding one.
pub fn read(path: &Path) -> Result<Input, MergeError> {
    let (path, report) = json::read(path)?;
    Ok(Input { path, report })
}

use crate::model::TestKey;

/// Merges reports (pure: nothing is read or written). Returns the merged report and the
/// artifacts to copy beside it.
pub fn merge(inputs: &[Input]) -> Result<(Report, Vec<Copy>), MergeError> {
    let first = inputs.first().expect("clap requires at least one report");
    check_one_run(inputs)?;
    let shards = shards(inputs)?;
    let mut all = gather(inputs)?;
    let mut copies = Vec::new();
    let (tests, benches) = relocate_artifacts(inputs, &mut all, &mut copies);
    let judged: BTreeSet<String> = tests
        .iter()
        .map(|t| format!("{} {}", t.binary_id(), t.name))
        .collect();
    let (partition, other_shards) = match shards {
        Some((kind_total, present)) if present.len() as u64 != kind_total.total => {
            // Part of a split suite: say which shards, and how much is missing.
            let listed =
                first.report.tests.len() + first.report.ignored + first.report.other_shards;
            let here = tests.len() + all.ignored;
            let missing: Vec<String> = (1..=kind_total.total)
                .filter(|s| !present.contains(s))
                .map(|s| s.to_string())
                .collect();
            all.notes.push(format!(
                "shard(s) {} of {} are not in this merge: it covers part of the suite",
                missing.join(", "),
                partition_text(kind_total, &present)
            ));
            (
                Some(partition_text(kind_total, &present)),
                listed.saturating_sub(here),
            )
        }
        _ => (None, 0),
    };
    let report = Report {
        version: first.report.version,
        settings: first.report.settings.clone(),
        tests,
        ignored: all.ignored,
        partition,
        other_shards,
        unlisted: all.unlisted.into_iter().collect(),
        runner_failed: (!all.runner_failed.is_empty())
            .then(|| all.runner_failed.into_iter().collect::<Vec<_>>().join("; ")),
        // A test one shard did not run and another judged was run after all.
        not_run: crate::model::NotRun::of(
            all.not_run
                .into_iter()
                .filter(|id| !judged.contains(id))
                .collect(),
            all.not_run_why.join("; "),
        ),
        benches,
        notes: all.notes,
        // A merge is compared with a base of its own (`merge --baseline`), not its inputs'.
        baseline: None,
    };
    Ok((report, copies))
}

/// Refuses inputs that are not of one run: other schema versions, other settings.
fn check_one_run(inputs: &[Input]) -> Result<(), MergeError> {
    let first = inputs.first().expect("clap requires at least one report");
    for input in &inputs[1..] {
        if input.report.version != first.report.version {
            return Err(MergeError::Version {
                path: input.path.clone(),
                found: input.report.version.into(),
                expected: format!(
                    "but `{}` has version {}",
                    first.path.display(),
                    first.report.version
                ),
            });
        }
        check_settings(first, input)?;
    }
    Ok(())
}

/// Everything the inputs hold, each test and bench once (by the input it came from).
struct Gathered {
    tests: BTreeMap<TestKey, (usize, crate::model::TestReport)>,
    benches: BTreeMap<(String, String, String), (usize, crate::model::GrowthReport)>,
    unlisted: BTreeSet<String>,
    runner_failed: BTreeSet<String>,
    not_run: Vec<String>,
    not_run_why: Vec<String>,
    ignored: usize,
    notes: Vec<String>,
}

/// Every test, bench, note and count of the inputs; a test judged differently twice is
/// refused.
fn gather(inputs: &[Input]) -> Result<Gathered, MergeError> {
    let mut all = Gathered {
        tests: BTreeMap::new(),
        benches: BTreeMap::new(),
        unlisted: BTreeSet::new(),
        runner_failed: BTreeSet::new(),
        not_run: Vec::new(),
        not_run_why: Vec::new(),
        ignored: 0,
        notes: Vec::new(),
    };
    let mut counted_shards = BTreeSet::new();
    for (i, input) in inputs.iter().enumerate() {
        let r = &input.report;
        // A shard given twice counts its ignored tests once.
        let shard = r
            .partition
            .as_deref()
            .and_then(|p| p.parse::<Partition>().ok());
        if shard.is_none_or(|p| counted_shards.insert(p.shard)) {
            all.ignored += r.ignored;
        }
        all.unlisted.extend(r.unlisted.iter().cloned());
        all.runner_failed.extend(r.runner_failed.iter().cloned());
        if let Some(n) = &r.not_run {
            all.not_run.extend(n.tests.iter().cloned());
            if !all.not_run_why.contains(&n.why) {
                all.not_run_why.push(n.why.clone());
            }
        }
        for note in &r.notes {
            if !all.notes.contains(note) {
                all.notes.push(note.clone());
            }
        }
        for t in &r.tests {
            let key = (t.package.clone(), t.kind, t.binary.clone(), t.name.clone());
            let name = || format!("{} {} {}", t.package, t.binary, t.name);
            add_once(&mut all.tests, key, (i, t), name, inputs)?;
        }
        for b in &r.benches {
            let key = (b.package.clone(), b.binary.clone(), b.name.clone());
            let name = || format!("{} {} {}", b.package, b.binary, b.name);
            add_once(&mut all.benches, key, (i, b), name, inputs)?;
        }
    }
    Ok(all)
}

/// The tests and benches with their artifacts' paths relative to the merged report, and the
/// files to copy there; an artifact not below its report is left out, with a note.
fn relocate_artifacts(
    inputs: &[Input],
    all: &mut Gathered,
    copies: &mut Vec<Copy>,
) -> (
    Vec<crate::model::TestReport>,
    Vec<crate::model::GrowthReport>,
) {
    let notes = &mut all.notes;
    let mut artifact = |from: usize, rel: &mut Option<String>, what: &str, name: &str| {
        let Some(path) = rel.take() else { return };
        if !is_plain_relative(&path) {
            notes.push(format!(
                "the {what} of `{name}` in `{}` is not a path below its report (`{path}`); left out",
                inputs[from].path.display()
            ));
            return;
        }
        copies.push(Copy {
            from: inputs[from].dir().join(&path),
            to: path.clone(),
        });
        *rel = Some(path);
    };
    let tests = std::mem::take(&mut all.tests)
        .into_values()
        .map(|(from, mut t)| {
            artifact(from, &mut t.artifacts.flamegraph, "flame graph", &t.name);
            artifact(from, &mut t.artifacts.folded, "folded stacks", &t.name);
            artifact(from, &mut t.artifacts.pprof, "pprof profile", &t.name);
            t
        })
        .collect();
    let benches = std::mem::take(&mut all.benches)
        .into_values()
        .map(|(from, mut b)| {
            artifact(from, &mut b.artifacts.flamegraph, "flame graph", &b.name);
            artifact(from, &mut b.artifacts.folded, "folded stacks", &b.name);
            artifact(from, &mut b.artifacts.plot, "plot", &b.name);
            artifact(from, &mut b.artifacts.pprof, "pprof profile", &b.name);
            artifact(from, &mut b.artifacts.memory_plot, "memory plot", &b.name);
            b
        })
        .collect();
    (tests, benches)
}

/// Keeps the first report of a test (`item`: from which input, and the entry); the same
/// test again must have the same verdict.
fn add_once<K: Ord, T: Clone + HasVerdict>(
    seen: &mut BTreeMap<K, (usize, T)>,
    key: K,
    (from, item): (usize, &T),
    name: impl FnOnce() -> String,
    inputs: &[Input],
) -> Result<(), MergeError> {
    let verdict = item.verdict();
    match seen.get(&key) {
        Some((first, earlier)) if earlier.verdict() != verdict => Err(MergeError::Conflict {
            test: name(),
            path: inputs[from].path.clone(),
            verdict,
            first_path: inputs[*first].path.clone(),
            first_verdict: earlier.verdict(),
        }),
        Some(_) => Ok(()),
        None => {
            seen.insert(key, (from, item.clone()));
            Ok(())
        }
    }
}

/// What a test or a bench was judged.
trait HasVerdict {
    fn verdict(&self) -> Verdict;
}

impl HasVerdict for crate::model::TestReport {
    fn verdict(&self) -> Verdict {
        self.verdict
    }
}

impl HasVerdict for crate::model::GrowthReport {
    fn verdict(&self) -> Verdict {
        self.verdict
    }
}

/// `slice:1+3/4` for shards 1 and 3 of a four-way slice split.
fn partition_text(p: Partition, present: &BTreeSet<u64>) -> String {
    let shards: Vec<String> = present.iter().map(u64::to_string).collect();
    let whole = p.to_string();
    let kind = whole.split(':').next().unwrap_or_default();
    format!("{kind}:{}/{}", shards.join("+"), p.total)
}

/// The reports must say the same thing with the same numbers.
fn check_settings(first: &Input, input: &Input) -> Result<(), MergeError> {
    let (a, b) = (&first.report.settings, &input.report.settings);
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "no configuration file".into());
    let differs: Option<(&'static str, String, String)> = if a.sample_period != b.sample_period {
        Some((
            "sample period",
            b.sample_period.to_string(),
            a.sample_period.to_string(),
        ))
    } else if a.stack_threshold != b.stack_threshold {
        Some((
            "stack threshold",
            format!("{} bytes", b.stack_threshold),
            format!("{} bytes", a.stack_threshold),
        ))
    } else if a.config != b.config {
        Some(("configuration", show(&b.config), show(&a.config)))
    } else {
        None
    };
    match differs {
        Some((what, value, first_value)) => Err(MergeError::Settings {
            path: input.path.clone(),
            what,
            value,
            first_path: first.path.clone(),
            first_value,
        }),
        None => Ok(()),
    }
}

/// The split the inputs are shards of, and which shards are present; `None` when none is
/// a shard. Shards of different splits, or a shard beside a whole run, are refused.
fn shards(inputs: &[Input]) -> Result<Option<(Partition, BTreeSet<u64>)>, MergeError> {
    let parse = |input: &Input| -> Result<Option<Partition>, MergeError> {
        input
            .report
            .partition
            .as_deref()
            .map(|p| {
                p.parse::<Partition>().map_err(|e| MergeError::NotAReport {
                    path: input.path.clone(),
                    reason: e.to_string(),
                })
            })
            .transpose()
    };
    let first = &inputs[0];
    let first_split = parse(first)?;
    let mut present = BTreeSet::new();
    for input in inputs {
        let split = parse(input)?;
        let same = match (split, first_split) {
            (Some(p), Some(q)) => p.kind == q.kind && p.total == q.total,
            (None, None) => true,
            _ => false,
        };
        if !same {
            let show = |p: Option<Partition>| p.map_or("no partition".into(), |p| p.to_string());
            return Err(MergeError::Settings {
                path: input.path.clone(),
                what: "partition",
                value: show(split),
                first_path: first.path.clone(),
                first_value: show(first_split),
            });
        }
        present.extend(split.map(|p| p.shard));
    }
    Ok(first_split.map(|p| (p, present)))
}

/// A path that stays below the directory it is relative to.
fn is_plain_relative(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Runs `cargo leakcheck merge`.
pub fn run(args: &crate::cli::MergeArgs) -> Result<ExitCode, Error> {
    let inputs = args
        .reports
        .iter()
        .map(|p| read(p))
        .collect::<Result<Vec<_>, _>>()?;
    let base = crate::commands::session::read_baseline(&args.against)?;
    let (mut report, copies) = merge(&inputs)?;
    crate::commands::session::compare_with_baseline(&mut report, base.as_ref(), &args.against)?;
    let out = prepare_output(&args.output_dir, &inputs)?;
    copy_artifacts(&mut report, &copies, &out);
    crate::say!(
        "      Merged {} report(s) into `{}`",
        inputs.len(),
        args.output_dir.display()
    );
    let root = std::env::current_dir().unwrap_or_default();
    let to = Destination {
        out_dir: out,
        shown: args.output_dir.clone(),
        root,
    };
    let (outputs, _) = export::choose(&args.outputs.0, &Default::default(), &to.root);
    let facts = RunFacts {
        skipped: skipped(&report),
        ..RunFacts::default()
    };
    crate::commands::session::finish(&report, &to, facts, &outputs)
}

/// Copies the inputs' flame graphs and profiles into the merged report's directory; one
/// that cannot be copied is a note, and its entry is dropped, not left dangling.
fn copy_artifacts(report: &mut Report, copies: &[Copy], out: &Path) {
    for copy in copies {
        let to = out.join(&copy.to);
        let copied = to
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::copy(&copy.from, &to));
        if let Err(e) = copied {
            // The verdicts stand without the picture; the entry is dropped, not left dangling.
            report.notes.push(format!(
                "could not copy `{}` into the merged report: {e}",
                copy.from.display()
            ));
            for t in &mut report.tests {
                let a = &mut t.artifacts;
                for a in [&mut a.flamegraph, &mut a.folded, &mut a.pprof] {
                    if a.as_deref() == Some(copy.to.as_str()) {
                        *a = None;
                    }
                }
            }
            for b in &mut report.benches {
                let a = &mut b.artifacts;
                for a in [
                    &mut a.flamegraph,
                    &mut a.folded,
                    &mut a.plot,
                    &mut a.pprof,
                    &mut a.memory_plot,
                ] {
                    if a.as_deref() == Some(copy.to.as_str()) {
                        *a = None;
                    }
                }
            }
        }
    }
}

/// Tests a shard selected and never ran: listed in JUnit as skipped, with why.
fn skipped(report: &Report) -> Vec<crate::report::junit::Skipped> {
    (report.not_run.iter())
        .flat_map(|n| n.tests.iter().map(move |t| (t, &n.why)))
        .filter_map(|(t, why)| {
            let (id, name) = t.split_once(' ')?;
            Some((id.to_string(), name.to_string(), why.clone()))
        })
        .collect()
}

/// Makes `dir` ready for the merged report: created if new; an earlier merge there is
/// replaced; anything else there, or an input's own directory, is refused.
fn prepare_output(dir: &Path, inputs: &[Input]) -> Result<PathBuf, Error> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    if dir.exists() {
        let here = canonical(dir);
        if inputs.iter().any(|i| canonical(i.dir()) == here) {
            return Err(MergeError::OutputIsInput(dir.to_path_buf()).into());
        }
        let empty = std::fs::read_dir(dir)
            .map_err(|e| Error::io(format!("read `{}`", dir.display()), e))?
            .next()
            .is_none();
        if !empty {
            if !dir.join("report.json").is_file() {
                return Err(MergeError::OutputNotEmpty(dir.to_path_buf()).into());
            }
            std::fs::remove_dir_all(dir)
                .map_err(|e| Error::io(format!("clear `{}`", dir.display()), e))?;
        }
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("create `{}`", dir.display()), e))?;
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TargetKind, TestReport};

    fn test(name: &str, verdict: Verdict) -> TestReport {
        TestReport {
            name: name.into(),
            verdict,
            ..TestReport::example()
        }
    }

    fn input(path: &str, partition: Option<&str>, tests: Vec<TestReport>) -> Input {
        Input {
            path: PathBuf::from(path),
            report: Report {
                partition: partition.map(str::to_string),
                tests,
                ..Report::example()
            },
        }
    }

    #[test]
    fn shards_merge_into_the_whole_run_sorted_with_artifacts_to_copy() {
        let mut leak = test("a::leaks", Verdict::Leak);
        leak.artifacts.flamegraph = Some("p-lib-p/a.leaks.svg".into());
        let mut one = input("s1/report.json", Some("slice:1/2"), vec![leak]);
        one.report.other_shards = 1;
        one.report.ignored = 1;
        let mut two = input(
            "s2/report.json",
            Some("slice:2/2"),
            vec![test("a::clean", Verdict::Clean)],
        );
        two.report.other_shards = 2;
        two.report.notes = vec!["doc-tests are not checked".into()];
        one.report.notes = vec!["doc-tests are not checked".into()];
        let (merged, copies) = merge(&[one, two]).unwrap();
        let names: Vec<&str> = merged.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a::clean", "a::leaks"]);
        assert_eq!(merged.partition, None);
        assert_eq!((merged.other_shards, merged.ignored), (0, 1));
        assert_eq!(merged.notes, ["doc-tests are not checked"]);
        assert_eq!(merged.exit_code(), ExitCode::LeaksFound);
        assert_eq!(
            copies,
            [Copy {
                from: PathBuf::from("s1/p-lib-p/a.leaks.svg"),
                to: "p-lib-p/a.leaks.svg".into()
            }]
        );
    }

    #[test]
    fn tests_a_shard_never_ran_stay_counted_unless_another_judged_them() {
        let mut one = input(
            "s1/report.json",
            Some("hash:1/2"),
            vec![test("t1", Verdict::Clean)],
        );
        let id = |name: &str| format!("{} {name}", test(name, Verdict::Clean).binary_id());
        one.report.not_run = crate::model::NotRun::of(vec![id("t2"), id("t3")], "stopped early");
        let two = input(
            "s2/report.json",
            Some("hash:2/2"),
            vec![test("t2", Verdict::Clean)],
        );
        let (merged, _) = merge(&[one, two]).unwrap();
        let not_run = merged.not_run.as_ref().expect("t3 never ran");
        assert_eq!((not_run.count, not_run.why.as_str()), (1, "stopped early"));
        assert_eq!(not_run.tests, [id("t3")]);
        assert_eq!(merged.exit_code(), ExitCode::Incomplete);
    }

    #[test]
    fn a_missing_shard_is_said_and_counted() {
        let mut one = input(
            "s1/report.json",
            Some("hash:1/3"),
            vec![test("t1", Verdict::Clean)],
        );
        one.report.other_shards = 4;
        let three = input(
            "s3/report.json",
            Some("hash:3/3"),
            vec![test("t3", Verdict::Clean)],
        );
        let (merged, _) = merge(&[one, three]).unwrap();
        assert_eq!(merged.partition.as_deref(), Some("hash:1+3/3"));
        assert_eq!(merged.other_shards, 3);
        assert!(
            merged.notes[0].contains("shard(s) 2 of hash:1+3/3"),
            "{:?}",
            merged.notes
        );
    }

    #[test]
    fn refuses_what_is_not_one_run() {
        let a = input("a/report.json", None, vec![test("t", Verdict::Clean)]);
        // The same test, judged differently.
        let b = input("b/report.json", None, vec![test("t", Verdict::Leak)]);
        let e = merge(&[a.clone(), b]).unwrap_err().to_string();
        assert!(
            e.contains("`p p t` is `leak` in `b/report.json` but `clean` in `a/report.json`"),
            "{e}"
        );
        // The same test with the same verdict is one test.
        let (merged, _) = merge(&[a.clone(), a.clone()]).unwrap();
        assert_eq!(merged.tests.len(), 1);
        // Different settings.
        let mut c = input("c/report.json", None, vec![]);
        c.report.settings.stack_threshold = 4096;
        let e = merge(&[a.clone(), c]).unwrap_err().to_string();
        assert!(
            e.contains("stack threshold 4096 bytes") && e.contains("0 bytes"),
            "{e}"
        );
        let mut d = input("d/report.json", None, vec![]);
        d.report.settings.config = Some("/ws/leakcheck.toml".into());
        assert!(merge(&[a.clone(), d])
            .unwrap_err()
            .to_string()
            .contains("configuration"));
        // Different splits, or a shard beside a whole run.
        let s = input("s/report.json", Some("slice:1/2"), vec![]);
        let h = input("h/report.json", Some("hash:2/2"), vec![]);
        let e = merge(&[s.clone(), h]).unwrap_err().to_string();
        assert!(
            e.contains("partition hash:2/2") && e.contains("slice:1/2"),
            "{e}"
        );
        assert!(merge(&[a.clone(), s])
            .unwrap_err()
            .to_string()
            .contains("no partition"));
        // A different schema version.
        let mut v = a.clone();
        v.report.version = 2;
        let e = merge(&[a, v]).unwrap_err().to_string();
        assert!(
            e.contains("schema version 2") && e.contains("different schema versions"),
            "{e}"
        );
    }

    #[test]
    fn artifact_paths_that_leave_the_report_directory_are_not_followed() {
        let mut t = test("t", Verdict::Leak);
        t.artifacts.flamegraph = Some("../../etc/passwd".into());
        t.artifacts.folded = Some("/etc/passwd".into());
        let (merged, copies) = merge(&[input("a/report.json", None, vec![t])]).unwrap();
        assert!(copies.is_empty());
        assert_eq!(merged.tests[0].artifacts.flamegraph, None);
        assert_eq!(merged.tests[0].artifacts.folded, None);
        assert_eq!(merged.notes.len(), 2);
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("leakcheck-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = test("t", Verdict::Leak);
        t.kind = TargetKind::Test;
        t.stacks = vec![crate::model::StackReport::example(
            crate::model::StackKind::Leak,
            64,
        )];
        let report = Report {
            tests: vec![t],
            ..Report::example()
        };
        let text = json::to_string(&report);
        std::fs::write(dir.join("report.json"), &text).unwrap();
        let back = read(&dir).unwrap();
        assert_eq!(json::to_string(&back.report), text);
        // Not a report, and a newer one.
        std::fs::write(dir.join("report.json"), "{\"tests\": 3}").unwrap();
        let e = read(&dir).unwrap_err().to_string();
        assert!(e.contains("is not a cargo-leakcheck report.json"), "{e}");
        std::fs::write(dir.join("report.json"), "{\"version\": 9, \"tests\": 3}").unwrap();
        let e = read(&dir).unwrap_err().to_string();
        assert!(
            e.contains("schema version 9, but this cargo-leakcheck reads version 1"),
            "{e}"
        );
        let e = read(&dir.join("missing.json")).unwrap_err().to_string();
        assert!(e.contains("cannot read the report"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
