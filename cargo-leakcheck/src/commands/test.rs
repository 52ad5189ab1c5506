//! The `test` command from start to finish: select, build, run, analyse, report.

use crate::analysis::symbols::{Captured, Recording, Symbols};
use crate::analysis::verdict::{self, BinaryEvidence, TestIdentity};
use crate::cli::TestArgs;
use crate::errors::{Error, ExitCode};
use crate::execution::binary_symbols::FromFiles;
use crate::execution::capture;
use crate::execution::cargo::{self, TestBinary};
use crate::execution::history::History;
use crate::execution::load;
use crate::execution::passes::{self, Method};
use crate::execution::protocol::ProfileSettings;
use crate::execution::runner::{self, RunConfig, TestFilter};
use crate::model::{NotRun, Report, ReportSettings, StackKind, TargetKind, TestReport};
use crate::report::{flamegraph, human, junit, pprof};
use crate::{commands::session, config, report::suppressions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs `cargo leakcheck test`; returns the exit code.
pub fn run(args: &TestArgs) -> Result<ExitCode, Error> {
    let cli = check_arguments(args)?;
    let mut session = session::prepare(
        &args.selection,
        &args.tests,
        args.config.as_deref(),
        args.verbose,
    )?;
    session.annotations = args.checking.annotations.clone();
    // A FILE not there yet (a cache's first job) leaves the target directory's own, which
    // is also what a FILE inside that directory was before it was emptied.
    if let Some(path) = args.history.as_deref().filter(|p| p.is_file()) {
        session.history = History::read(path);
    }
    let base = session::read_baseline(&args.checking.against)?;
    let mut binaries = build(&session, args)?;
    let mut notes = session.notes.clone();
    note_doctests(&session, args, &mut notes);
    let Checked {
        mut tests,
        results,
        mut timings,
        run_seconds,
    } = run_and_judge(&session, args, &cli, &mut binaries, &mut notes)?;
    warn_stale_suppressions(&session, args, &tests, &mut notes);
    write_flamegraphs(&mut tests, &session.out_dir, &mut notes, &mut timings);
    let mut report = assemble(&session, args, &cli, &binaries, tests, &results, notes);
    session::compare_with_baseline(&mut report, base.as_ref(), &args.checking.against)?;
    write_suppressions(&session, args, &report)?;
    let metrics = metrics_json(&binaries, &results, run_seconds, &timings, &session.history);
    let metrics_path = session.out_dir.join("metrics.json");
    std::fs::write(&metrics_path, &metrics)
        .map_err(|e| Error::io(format!("write `{}`", metrics_path.display()), e))?;
    if let Some(path) = &args.history {
        keep_history(path, &metrics);
    }
    session.durations = durations(&binaries, &results);
    write_junit(&session, args, &binaries, &results, &report)?;
    let cost = crate::report::cost::line(&costs(&binaries, &results));
    session::finish(&session, &report, |r, root, shown| {
        human::render_with_cost(r, root, shown, cost.as_deref())
    })?;
    Ok(report.exit_code())
}

/// Writes this run's timings to `--history`'s file. A file that cannot be written costs the
/// next run its head start, never this run's results: a warning, not an error.
fn keep_history(path: &Path, metrics: &str) {
    let written = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, metrics));
    if let Err(e) = written {
        crate::say!(
            "warning: cannot keep this run's timings in `{}` (--history): {e}",
            path.display()
        );
    }
}

/// The command line's settings, once the arguments are checked.
fn check_arguments(args: &TestArgs) -> Result<config::SettingsLayer, Error> {
    let cli = session::cli_settings(&args.checking)?;
    if args.jobs == Some(0) {
        return Err(Error::Usage("-j/--jobs must be at least 1".into()));
    }
    if let Some(path) = &args.write_suppressions {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(Error::Usage(format!(
                "--write-suppressions: directory `{}` does not exist",
                parent.display()
            )));
        }
    }
    Ok(cli)
}

/// The test executables, built as `cargo test` builds them.
fn build(session: &session::Session, args: &TestArgs) -> Result<Vec<TestBinary>, Error> {
    let targets = cargo::Targets {
        lib: args.lib,
        tests: &args.tests,
        benches: &[],
        release: args.release,
    };
    cargo::build_tests(
        &session.ws,
        &args.selection,
        &targets,
        &session.selected(),
        args.verbose,
    )
}

/// Doc-tests are not run: say so when the selection has some.
fn note_doctests(session: &session::Session, args: &TestArgs, notes: &mut Vec<String>) {
    if !args.lib && args.tests.is_empty() && session.selected().iter().any(|m| m.has_doctests) {
        notes.push(
            "doc-tests are not checked (each is compiled into a temporary binary by rustdoc)"
                .to_string(),
        );
        crate::info!("    Note doc-tests are skipped");
    }
}

/// Runs the passes over every selected test and judges each.
fn run_and_judge(
    session: &session::Session,
    args: &TestArgs,
    cli: &config::SettingsLayer,
    binaries: &mut [TestBinary],
    notes: &mut Vec<String>,
) -> Result<Checked, Error> {
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let filter = TestFilter {
        partition: args.partition,
        ..TestFilter::from_args(&args.filters)
    };
    let setup = CheckSetup {
        ws: &session.ws,
        runtime: &session.runtime,
        work_dir: &session.work_dir,
        config: &session.config,
        cli,
        jobs,
        filter: &filter,
        wrapper: &[],
        stacks_for_all: args.checking.stacks_for_all,
        verbose: args.verbose,
        progress: true,
        known_layout: None,
        history: &session.history,
    };
    crate::info!(
        "     Running tests of {} with heap profiling ({} at a time)",
        plural(binaries.len(), "binary", "binaries"),
        jobs
    );
    check(binaries, &setup, notes)
}

/// A suppression nothing needed is stale: say so, when the whole suite ran (one shard of a
/// partition is not the whole suite).
fn warn_stale_suppressions(
    session: &session::Session,
    args: &TestArgs,
    tests: &[TestReport],
    notes: &mut Vec<String>,
) {
    let whole_suite =
        args.filters.is_empty() && !args.lib && args.tests.is_empty() && args.partition.is_none();
    if !whole_suite {
        return;
    }
    let config = &session.config;
    for (i, s) in config.suppress.iter().enumerate() {
        let used = tests.iter().any(|t| {
            t.stacks.iter().any(|st| st.suppression == Some(i))
                || t.collections.iter().any(|c| c.suppression == Some(i))
        });
        if !used {
            let path = config
                .path
                .as_deref()
                .unwrap_or(Path::new("leakcheck.toml"));
            let w = format!(
                "{}:{}: [[suppress]] #{} (frame \"{}\") matched nothing in this run over the whole suite",
                path.display(),
                s.line,
                s.index,
                s.frame.as_str()
            );
            crate::say!("warning: {w}");
            notes.push(w);
        }
    }
}

/// The run's report: the judged tests and what did not run.
fn assemble(
    session: &session::Session,
    args: &TestArgs,
    cli: &config::SettingsLayer,
    binaries: &[TestBinary],
    tests: Vec<TestReport>,
    results: &passes::Outcome,
    notes: Vec<String>,
) -> Report {
    let config = &session.config;
    Report {
        tests,
        ignored: results.ignored.len(),
        partition: args.partition.map(|p| p.to_string()),
        other_shards: results.other_shards,
        unlisted: results
            .list_errors
            .iter()
            .map(|(b, _)| binaries[*b].id())
            .collect(),
        not_run: NotRun::of(
            results
                .not_finished
                .iter()
                .map(|c| format!("{} {}", binaries[c.binary].id(), c.name))
                .collect(),
            session::interrupted_why(),
        ),
        notes,
        ..Report::new(ReportSettings {
            sample_period: 1u64 << ProfileSettings::default().lg_sample,
            stack_threshold: config.global(cli).stack_threshold,
            config: config.path.as_ref().map(|p| p.display().to_string()),
        })
    }
}

/// `--write-suppressions`: an entry for every failing stack.
fn write_suppressions(
    session: &session::Session,
    args: &TestArgs,
    report: &Report,
) -> Result<(), Error> {
    if let Some(path) = &args.write_suppressions {
        let n = suppressions::write(report, path, &session.ws.root)?;
        crate::say!(
            "       Wrote {} to `{}`; each has a placeholder reason to replace",
            plural(n, "suppression", "suppressions"),
            path.display()
        );
    }
    Ok(())
}

/// How long each test's process ran, by (package, binary, name).
fn durations(binaries: &[TestBinary], results: &passes::Outcome) -> junit::Durations {
    results
        .tests
        .iter()
        .map(|t| {
            let b = &binaries[t.case.binary];
            let seconds = t
                .counted
                .as_ref()
                .unwrap_or(&t.result)
                .duration
                .as_secs_f64();
            (
                (b.package.clone(), b.target.clone(), t.case.name.clone()),
                seconds,
            )
        })
        .collect()
}

/// JUnit XML, when asked for (`--junit` or `[output] junit`): ignored tests and tests an
/// interruption left unjudged are listed as skipped.
fn write_junit(
    session: &session::Session,
    args: &TestArgs,
    binaries: &[TestBinary],
    results: &passes::Outcome,
    report: &Report,
) -> Result<(), Error> {
    let (ws, config) = (&session.ws, &session.config);
    let junit = args
        .junit
        .clone()
        .or_else(|| config.junit.as_ref().map(|p| ws.root.join(p)));
    let Some(path) = junit else {
        return Ok(());
    };
    let interrupted = session::interrupted_why();
    let skipped: Vec<junit::Skipped> = (results.ignored.iter().map(|(b, n)| (*b, n, "ignored")))
        .chain((results.not_finished.iter()).map(|c| (c.binary, &c.name, interrupted.as_str())))
        .map(|(b, name, why)| (binaries[b].id(), name.clone(), why.to_string()))
        .collect();
    let xml = junit::render(
        report,
        &session.durations,
        &skipped,
        &session.out_dir,
        &ws.root,
    );
    session::write_file(&path, &xml)?;
    crate::info!("       Wrote JUnit XML to `{}`", path.display());
    Ok(())
}

/// What the check step needs besides the binaries.
pub(crate) struct CheckSetup<'a> {
    pub ws: &'a cargo::Workspace,
    pub runtime: &'a Path,
    /// Where the processes' dumps go.
    pub work_dir: &'a Path,
    pub config: &'a config::Config,
    /// Settings from the command line, over the configuration's.
    pub cli: &'a config::SettingsLayer,
    pub jobs: usize,
    pub filter: &'a TestFilter,
    /// A target runner the test binaries run under (empty: none).
    pub wrapper: &'a [String],
    pub stacks_for_all: bool,
    pub verbose: bool,
    /// Progress lines on stderr.
    pub progress: bool,
    /// libtest's layout as a binary outside this run proved it.
    pub known_layout: Option<crate::execution::entry::Layout>,
    /// How long each test took in the previous run.
    pub history: &'a crate::execution::history::History,
}

/// What the check step found.
pub(crate) struct Checked {
    /// Every judged test, sorted, harness stacks moved to `timings`.
    pub tests: Vec<TestReport>,
    /// How the passes went.
    pub results: passes::Outcome,
    pub timings: Timings,
    /// Seconds the passes took.
    pub run_seconds: f64,
}

/// The step `test` and the nextest runner share: run the passes over built binaries and
/// judge every test (notes about interruptions and unlisted binaries go to `notes`).
pub(crate) fn check(
    binaries: &mut [TestBinary],
    setup: &CheckSetup,
    notes: &mut Vec<String>,
) -> Result<Checked, Error> {
    let settings = config::Layers {
        config: setup.config,
        cli: setup.cli,
    };
    let run_config = RunConfig {
        workspace: setup.ws,
        runtime: setup.runtime,
        work_dir: setup.work_dir,
        jobs: setup.jobs,
        timeout: settings.global().timeout.map(Duration::from_secs),
        settings,
        filter: setup.filter,
        wrapper: setup.wrapper,
        verbose: setup.verbose,
        progress: setup.progress,
        known_layout: setup.known_layout,
        history: setup.history,
    };
    let run_started = std::time::Instant::now();
    let results = passes::run(binaries, &run_config, setup.stacks_for_all)?;
    let run_seconds = run_started.elapsed().as_secs_f64();
    notes.extend(crate::execution::collections::note(binaries));
    if !results.not_finished.is_empty() {
        notes.push(session::interrupted_note(
            results.not_finished.len(),
            "test",
            "tests",
        ));
    }
    for (b, e) in &results.list_errors {
        let note = format!(
            "error: could not list the tests of `{}`, so none of them ran: {e}",
            binaries[*b].id()
        );
        crate::say!("{note}");
        notes.push(note);
    }
    let mut timings = Timings::default();
    let mut tests = analyse(
        binaries,
        &results,
        &settings,
        setup.jobs,
        notes,
        &mut timings,
    );
    // Which harness allocations are still live at a test's exit depends on timing (what
    // libtest's threads were doing, how many ran at once), so they stay out of report.json,
    // which must not change with `-j`; metrics.json keeps them for the curious.
    for t in &mut tests {
        let (harness, own): (Vec<_>, Vec<_>) = std::mem::take(&mut t.stacks)
            .into_iter()
            .partition(|s| s.kind == StackKind::Harness);
        t.stacks = own;
        if !harness.is_empty() {
            timings.harness.insert(test_key(t), harness);
        }
    }
    tests.sort_by(|a, b| {
        (&a.package, &a.kind, &a.binary, &a.name).cmp(&(&b.package, &b.kind, &b.binary, &b.name))
    });
    Ok(Checked {
        tests,
        results,
        timings,
        run_seconds,
    })
}

/// What each test cost beyond its own run (see [`crate::report::cost`]).
pub(crate) fn costs(
    binaries: &[TestBinary],
    results: &passes::Outcome,
) -> Vec<crate::report::cost::TestCost> {
    results
        .tests
        .iter()
        .map(|t| test_cost(&binaries[t.case.binary], t))
        .collect()
}

fn test_cost(binary: &TestBinary, t: &passes::TestOutcome) -> crate::report::cost::TestCost {
    let own_of = |r: &runner::ProcessResult| {
        r.record
            .as_ref()
            .and_then(|rec| rec.own_cost)
            .map_or(r.duration.as_secs_f64(), |(_, wall)| wall as f64 / 1000.0)
    };
    let (own_seconds, mut extra_seconds) = match &t.counted {
        Some(c) => {
            let own = own_of(c);
            (own, (c.duration.as_secs_f64() - own).max(0.0))
        }
        None => (own_of(&t.result), 0.0),
    };
    if t.method == Method::Stacks {
        extra_seconds += match &t.counted {
            // The stacks process ran the test from scratch: all of it is beyond the own run.
            Some(_) => t.result.duration.as_secs_f64(),
            None => (t.result.duration.as_secs_f64() - own_seconds).max(0.0),
        };
    }
    // The count the report gives (`extra_runs.in_all`), so the cost line and the report
    // never disagree.
    let counting = t.counted.as_ref().filter(|_| t.method == Method::Stacks);
    crate::report::cost::TestCost {
        binary: binary.target.clone(),
        name: t.case.name.clone(),
        own_seconds,
        extra_runs: crate::analysis::verdict::runs_in_all(t.method, counting, &t.result),
        extra_seconds,
    }
}

/// What goes to `metrics.json` beside the processes' own times and peak RSS, kept out of
/// `report.json` so that stays deterministic: how long each stage took per test and per
/// binary, and the harness stacks live at each test's exit.
#[derive(Default)]
pub(crate) struct Timings {
    /// Seconds spent reading a test's dumps, diffing, symbolizing and judging.
    analysis: std::collections::HashMap<TestKey, f64>,
    /// Seconds spent writing a test's folded stacks and SVG.
    flamegraph: std::collections::HashMap<TestKey, f64>,
    /// binary id -> seconds spent preparing it (baseline, allocator check).
    binaries: Vec<(String, f64)>,
    /// Harness stacks live at a test's exit (timing-dependent, so not in report.json).
    harness: std::collections::HashMap<TestKey, Vec<crate::model::StackReport>>,
}

fn metrics_json(
    binaries: &[TestBinary],
    results: &passes::Outcome,
    run_seconds: f64,
    timings: &Timings,
    history: &crate::execution::history::History,
) -> String {
    let entry = |b: &TestBinary, name: Option<&str>, r: &runner::ProcessResult| {
        serde_json::json!({
            "binary": b.id(),
            "test": name,
            "seconds": r.duration.as_secs_f64(),
            "peak_rss_kib": r.peak_rss_kib,
            "exit": r.end.describe(),
            "executable": b.path,
            "dumps": r.preload_dumps.iter().chain(&r.app_dumps).collect::<Vec<_>>(),
            "own_seconds": r.record.as_ref().and_then(|rec| rec.own_cost).map(|(_, wall)| wall as f64 / 1000.0),
            "extra_runs": r.record.as_ref().map(|rec| serde_json::json!({
                "made": rec.runs.len(),
                "end": rec.end.map(|e| e.word()),
                "dumps": r.run_dumps,
            })),
        })
    };
    let mut tests: Vec<_> = Vec::new();
    for t in &results.tests {
        let b = &binaries[t.case.binary];
        let cost = test_cost(b, t);
        let cost = serde_json::json!({
            "own_seconds": cost.own_seconds,
            "extra_runs": cost.extra_runs,
            "extra_seconds": cost.extra_seconds,
        });
        let stacks = t.method == Method::Stacks;
        let took = t.counted.as_ref().map_or(0.0, |c| c.duration.as_secs_f64())
            + if stacks {
                t.result.duration.as_secs_f64()
            } else {
                0.0
            };
        let expected = crate::execution::history::next_expectation(
            history.expected(&b.id(), &t.case.name),
            took,
        );
        // Whether it runs alone next time (see `crate::execution::slots`).
        let alone = crate::execution::history::next_alone(
            history.alone(&b.id(), &t.case.name),
            t.wanted_every_core,
            crate::execution::history::collapsed(history.expected(&b.id(), &t.case.name), took),
        );
        if let Some(c) = &t.counted {
            let mut e = entry(b, Some(&t.case.name), c);
            e["pass"] = "count".into();
            e["alone"] = alone.into();
            e["expected_seconds"] = expected.into();
            e["cost"] = cost.clone();
            if let Some(ahead) = t.ahead {
                e["stacks_beside"] = ahead.word().into();
            }
            tests.push(e);
        }
        if stacks {
            let mut e = entry(b, Some(&t.case.name), &t.result);
            e["pass"] = "stacks".into();
            if t.counted.is_none() {
                e["expected_seconds"] = expected.into();
                e["cost"] = cost;
                e["alone"] = alone.into();
            }
            // What the next run's stacks process, started beside the counting process,
            // is asked for (see `crate::execution::history`).
            if let Some(asked) = t.stacks_asked {
                e["asked"] = asked.map_or(
                    serde_json::Value::Null,
                    |a| serde_json::json!({"runs": a.runs, "grace_ms": a.grace_ms}),
                );
            }
            let key = (
                b.package.clone(),
                b.kind,
                b.target.clone(),
                t.case.name.clone(),
            );
            e["analysis_seconds"] = timings.analysis.get(&key).copied().into();
            e["flamegraph_seconds"] = timings.flamegraph.get(&key).copied().into();
            if let Some(stacks) = timings.harness.get(&key) {
                e["harness_stacks"] = serde_json::to_value(stacks).unwrap_or_default();
            }
            tests.push(e);
        }
    }
    let ran: std::collections::HashSet<(String, String)> = results
        .tests
        .iter()
        .map(|t| (binaries[t.case.binary].id(), t.case.name.clone()))
        .collect();
    let baselines: Vec<_> = results
        .baselines
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().map(|r| entry(&binaries[i], None, r)))
        .collect();
    let mut text = serde_json::to_string_pretty(&serde_json::json!({
        "run_seconds": run_seconds,
        "tool_peak_rss_kib": own_peak_rss_kib(),
        "processes": tests.len() + baselines.len(),
        "tests": tests,
        // Tests this run left out, as the previous metrics had them: the next run starts
        // from them (see `crate::execution::history`).
        "history": history.carried_over(&ran),
        "baselines": baselines,
        "binary_preparation": timings.binaries.iter().map(|(b, s)| serde_json::json!({"binary": b, "seconds": s})).collect::<Vec<_>>(),
    }))
    .expect("metrics serialize");
    text.push('\n');
    text
}

/// This process's peak resident set size so far, KiB: `VmHWM` of /proc/self/status.
/// Not getrusage's `ru_maxrss`, which Linux carries over `exec` and so includes whatever
/// the parent held when it forked us (a test harness holding captured output, say).
fn own_peak_rss_kib() -> Option<u64> {
    peak_from_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn peak_from_status(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

fn plural(n: usize, one: &str, many: &str) -> String {
    crate::model::count_of(n as u64, one, many)
}

/// What analysing one binary's tests produced.
#[derive(Default)]
struct BinaryOutput {
    reports: Vec<TestReport>,
    notes: Vec<String>,
    timings: Timings,
}

/// Analyses every test, one binary per thread (up to `jobs` at once): each binary has its
/// own symbol contexts, and building them is most of the cost. Results are merged in
/// binary order, so the output does not depend on scheduling.
fn analyse(
    binaries: &[TestBinary],
    results: &passes::Outcome,
    policy: &config::Layers,
    jobs: usize,
    notes: &mut Vec<String>,
    timings: &mut Timings,
) -> Vec<TestReport> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outputs: std::sync::Mutex<Vec<Option<BinaryOutput>>> =
        std::sync::Mutex::new((0..binaries.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(binaries.len().max(1)) {
            scope.spawn(|| loop {
                let bi = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if bi >= binaries.len() {
                    break;
                }
                let out = analyse_binary(bi, &binaries[bi], results, policy);
                outputs
                    .lock()
                    .expect("no analysis thread panics holding the lock")[bi] = Some(out);
            });
        }
    });
    let mut reports = Vec::with_capacity(results.tests.len());
    for out in outputs
        .into_inner()
        .expect("analysis threads ended")
        .into_iter()
        .flatten()
    {
        reports.extend(out.reports);
        for n in out.notes {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        timings.analysis.extend(out.timings.analysis);
        timings.binaries.extend(out.timings.binaries);
    }
    reports
}

/// Where each test's policy comes from.
fn analyse_binary(
    bi: usize,
    binary: &TestBinary,
    results: &passes::Outcome,
    source: &config::Layers,
) -> BinaryOutput {
    let mut out = BinaryOutput::default();
    // Symbol contexts are opened on first use; a binary has a baseline only when some of its
    // tests were profiled.
    let mut symbols = FromFiles::default();
    let capture_root = std::env::var_os(capture::CAPTURE_VAR).map(PathBuf::from);
    let mut binary_symbols = Captured::default();
    let mut evidence: Option<BinaryEvidence> = None;
    for t in results.tests.iter().filter(|t| t.case.binary == bi) {
        let id = TestIdentity {
            package: &binary.package,
            binary: &binary.target,
            kind: binary.kind,
            name: &t.case.name,
        };
        let policy = verdict::Policy {
            effective: &t.case.settings,
            suppressions: source.config.suppressions_for(&t.case.name).collect(),
        };
        let started = std::time::Instant::now();
        let bin = evidence.get_or_insert_with(|| {
            let read = |symbols: &mut dyn Symbols| {
                load::binary(
                    &binary.path,
                    binary.facts.symbols.custom_global_allocator,
                    results.baselines[bi].as_ref(),
                    binary.facts.collections.clone(),
                    symbols,
                )
            };
            let (e, note) = match capture_root {
                None => read(&mut symbols),
                Some(_) => {
                    let mut recording = Recording::new(&mut symbols);
                    let read = read(&mut recording);
                    binary_symbols = recording.captured();
                    read
                }
            };
            out.notes.extend(note);
            if t.method != Method::Counters {
                out.timings
                    .binaries
                    .push((binary.id(), started.elapsed().as_secs_f64()));
            }
            e
        });
        let started = std::time::Instant::now();
        let test = load::test(t);
        let report = match &capture_root {
            None => verdict::judge(&id, &test, bin, &mut symbols, &policy),
            Some(root) => {
                let (report, mut asked) =
                    capture::judge_recorded(&id, &test, bin, &mut symbols, &policy);
                asked.extend(binary_symbols.clone());
                let written = capture::write(
                    root,
                    &capture::Capture {
                        id: &id,
                        test: t,
                        exe: &bin.exe,
                        custom_allocator: binary.facts.symbols.custom_global_allocator,
                        baseline: results.baselines[bi].as_ref(),
                        cli: source.cli,
                        config_file: source.config.path.as_deref(),
                        symbols: asked,
                        report: &report,
                        collections: &binary.facts.collections,
                    },
                );
                if let Err(e) = written {
                    out.notes.push(format!(
                        "could not capture `{}` under {}: {e}",
                        t.case.name,
                        root.display()
                    ));
                }
                report
            }
        };
        if t.method != Method::Counters {
            out.timings
                .analysis
                .insert(test_key(&report), started.elapsed().as_secs_f64());
        }
        out.reports.push(report);
    }
    out.notes.extend(symbols.code.warnings());
    out
}

pub(crate) fn write_flamegraphs(
    tests: &mut [TestReport],
    out_dir: &Path,
    notes: &mut Vec<String>,
    timings: &mut Timings,
) {
    for t in tests.iter_mut() {
        if t.failing_stacks().next().is_none() && !t.collections.iter().any(|c| c.fails) {
            continue;
        }
        let started = std::time::Instant::now();
        let lines = flamegraph::folded_lines(t);
        let dir_name = flamegraph::file_stem(&format!("{}-{}-{}", t.package, t.kind, t.binary));
        let dir = out_dir.join(&dir_name);
        let stem = flamegraph::file_stem(&t.name);
        let folded_rel = PathBuf::from(&dir_name).join(format!("{stem}.folded"));
        let svg_rel = PathBuf::from(&dir_name).join(format!("{stem}.svg"));
        let pprof_rel = PathBuf::from(&dir_name).join(format!("{stem}.pb.gz"));
        let result = std::fs::create_dir_all(&dir)
            .and_then(|_| {
                let mut text = lines.join("\n");
                text.push('\n');
                std::fs::write(out_dir.join(&folded_rel), text)
            })
            .and_then(|_| {
                let file = std::fs::File::create(out_dir.join(&svg_rel))?;
                flamegraph::svg(
                    &format!("{} {}", t.binary, t.name),
                    &lines,
                    std::io::BufWriter::new(file),
                )
            })
            .and_then(|_| {
                let graphed = flamegraph::graphed_stacks(t);
                let samples: Vec<pprof::Sample> = graphed
                    .iter()
                    .map(|g| pprof::Sample {
                        frames: &g.frames,
                        objects: g.objects,
                        bytes: g.bytes,
                    })
                    .collect();
                let profile = pprof::encode(
                    &samples,
                    &t.binary,
                    &format!("memory {} retained at its end (cargo-leakcheck)", t.name),
                );
                pprof::write_gz(&out_dir.join(&pprof_rel), &profile)
            });
        match result {
            Ok(()) => {
                t.artifacts.folded = Some(folded_rel.display().to_string());
                t.artifacts.flamegraph = Some(svg_rel.display().to_string());
                t.artifacts.pprof = Some(pprof_rel.display().to_string());
            }
            Err(e) => notes.push(format!(
                "could not write the flame graph of `{}`: {e}",
                t.name
            )),
        }
        timings
            .flamegraph
            .insert(test_key(t), started.elapsed().as_secs_f64());
    }
}

/// Identifies a test across the report and the metrics: package, kind, target, name.
type TestKey = (String, TargetKind, String, String);

fn test_key(t: &TestReport) -> TestKey {
    (t.package.clone(), t.kind, t.binary.clone(), t.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_this_images_high_water_mark() {
        let status = "Name:\tcargo-leakcheck\nVmPeak:\t  300000 kB\nVmHWM:\t   91392 kB\nVmRSS:\t 80000 kB\n";
        assert_eq!(peak_from_status(status), Some(91392));
        assert_eq!(peak_from_status("Name:\tx\n"), None);
        let own = own_peak_rss_kib().expect("Linux has /proc/self/status");
        assert!(own > 0);
    }
}
