//! The `test` command from start to finish: select, build, run, analyse, report.

use crate::cli::TestArgs;
use crate::errors::{Error, ExitCode};
use crate::execution::cargo::{self, TestBinary};
use crate::execution::doctests;
use crate::execution::history::History;
use crate::execution::passes;
use crate::execution::preload::ProfileSettings;
use crate::execution::runner::{RunConfig, TestFilter};
use crate::judging::capture::Recorder;
use crate::judging::verdicts::{self, Timings};
use crate::model::{NotRun, Report, ReportSettings, StackKind, TestReport};
use crate::report::export::RunFacts;
use crate::report::junit;
use crate::report::metrics::{self, costs};
use crate::{commands::session, config, report::suppressions};
use std::path::Path;
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
    let outputs = session.outputs(&args.outputs);
    read_history(&mut session, args);
    let base = session::read_baseline(&args.checking.against)?;
    let mut binaries = build(&session, args)?;
    let mut notes = session.notes.clone();
    let docs = collect_doctests(&session, args, &mut binaries, &mut notes);
    let mut checked = run_tests(&session, args, &cli, &mut binaries, &mut notes)?;
    warn_stale_suppressions(&session, args, &checked.tests, &mut notes);
    let mut report = assemble(&session, args, &cli, &binaries, &mut checked, notes);
    add_doctests_not_run(&mut report, &docs);
    let to = session.destination();
    checked.timings.flamegraph = session::draw(&mut report, &to);
    session::compare_with_baseline(&mut report, base.as_ref(), &args.checking.against)?;
    write_suppressions(&session, args, &report)?;
    write_metrics(&session, args, &binaries, &checked)?;
    session::finish(&report, &to, facts(&binaries, &checked.results), &outputs)
}

/// `--history`: a FILE not there yet (a cache's first job) leaves the target directory's
/// own, which is also what a FILE inside that directory was before it was emptied.
fn read_history(session: &mut session::Session, args: &TestArgs) {
    if let Some(path) = args.history.as_deref().filter(|p| p.is_file()) {
        session.history = History::read(path);
    }
}

/// metrics.json (and `--history`'s copy): what each process cost, for the next run's
/// order and for the curious.
fn write_metrics(
    session: &session::Session,
    args: &TestArgs,
    binaries: &[TestBinary],
    checked: &Checked,
) -> Result<(), Error> {
    let metrics = metrics::json(
        binaries,
        &checked.results,
        checked.run_seconds,
        &checked.timings,
        &session.history,
    );
    let path = session.out_dir.join("metrics.json");
    std::fs::write(&path, &metrics)
        .map_err(|e| Error::io(format!("write `{}`", path.display()), e))?;
    if let Some(path) = &args.history {
        keep_history(path, &metrics);
    }
    Ok(())
}

/// What the outputs need of the run besides the report: how long each test ran, the tests
/// listed and not run (ignored, or left by an interruption), and the run's cost line.
fn facts(binaries: &[TestBinary], results: &passes::PassResults) -> RunFacts {
    let interrupted = session::interrupted_why();
    let skipped = (results.ignored.iter().map(|(b, n)| (*b, n, "ignored")))
        .chain((results.not_finished.iter()).map(|c| (c.binary, &c.name, interrupted.as_str())))
        .map(|(b, name, why)| (binaries[b].id(), name.clone(), why.to_string()))
        .collect();
    RunFacts {
        durations: durations(binaries, results),
        skipped,
        cost: crate::report::cost::line(&costs(binaries, results)),
        ..RunFacts::default()
    }
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

/// The test executables, built as `cargo test` builds them (none under `--doc`, whose
/// doc-tests rustdoc builds).
fn build(session: &session::Session, args: &TestArgs) -> Result<Vec<TestBinary>, Error> {
    if args.doc {
        return Ok(Vec::new());
    }
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

/// The doc-tests, as `cargo test` runs them when no target is selected (or `--doc`): each
/// executable rustdoc builds is kept and becomes a test binary of the run (see
/// [`doctests`]). What could not be kept or told apart is said.
fn collect_doctests(
    session: &session::Session,
    args: &TestArgs,
    binaries: &mut Vec<TestBinary>,
    notes: &mut Vec<String>,
) -> doctests::Collected {
    let wanted = args.doc || (!args.no_doc && !args.lib && args.tests.is_empty());
    let members = session.selected();
    let with_doctests = members.iter().filter(|m| m.has_doctests).count();
    if !wanted || with_doctests == 0 {
        return doctests::Collected::default();
    }
    crate::info!(
        "  Doc-tests of {}: building and keeping each executable (`cargo test --doc`)",
        plural(with_doctests, "package", "packages")
    );
    let collected = doctests::collect(&doctests::Request {
        ws: &session.ws,
        selection: &args.selection,
        members: &members,
        release: args.release,
        filters: &args.filters,
        dir: &session.work_dir.join("doctests"),
        verbose: args.verbose,
    });
    for problem in &collected.problems {
        crate::say!("warning: {problem}");
        notes.push(problem.clone());
    }
    let only_compiled = collected.compile_only.len();
    if only_compiled > 0 {
        notes.push(format!(
            "{} only compiled, never run (`no_run`, `compile_fail`): nothing of them is checked",
            plural(only_compiled, "doc-test", "doc-tests")
        ));
    }
    binaries.extend(collected.binaries.iter().cloned());
    collected
}

/// Doc-tests that never ran under the tool: those rustdoc ignored are counted as ignored,
/// and one that rustdoc failed before it ran (it did not build) is a failed test.
fn add_doctests_not_run(report: &mut Report, docs: &doctests::Collected) {
    report.ignored += docs.ignored.len();
    for (package, name, why) in &docs.failed_to_build {
        let target = package.replace('-', "_");
        let mut failed =
            crate::analysis::ending::never_judged(&crate::evidence::identity::TestIdentity {
                package,
                binary: &target,
                kind: crate::model::TargetKind::Doc,
                name,
            });
        failed.verdict = crate::model::Verdict::Failed;
        failed.exit = "did not build".into();
        failed.message = Some(format!(
            "{why}: see `cargo test --doc` for rustdoc's message"
        ));
        report.tests.push(failed);
    }
    report.tests.sort_by(|a, b| {
        (&a.package, &a.kind, &a.binary, &a.name).cmp(&(&b.package, &b.kind, &b.binary, &b.name))
    });
}

/// Runs the passes over every selected test and has each judged.
fn run_tests(
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
        memo: None,
        others: &[],
        history: &session.history,
        recorder: &session.recorder,
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
    checked: &mut Checked,
    notes: Vec<String>,
) -> Report {
    let config = &session.config;
    let results = &checked.results;
    Report {
        tests: std::mem::take(&mut checked.tests),
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
fn durations(binaries: &[TestBinary], results: &passes::PassResults) -> junit::Durations {
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
    /// Where the processes of one nextest run keep what reading a binary found.
    pub memo: Option<&'a Path>,
    /// Scanned processes of other runs (other nextest runners'), that the losses of the
    /// processes these tests start are compared with too.
    pub others: &'a [crate::judging::suite::SuiteProcessFile],
    /// How long each test took in the previous run.
    pub history: &'a crate::execution::history::History,
    /// Whether judged cases are recorded as golden cases.
    pub recorder: &'a Recorder,
}

/// What the check step found.
pub(crate) struct Checked {
    /// Every judged test, sorted, harness stacks moved to `timings`.
    pub tests: Vec<TestReport>,
    /// How the passes went.
    pub results: passes::PassResults,
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
        memo: setup.memo,
        history: setup.history,
    };
    let run_started = std::time::Instant::now();
    let results = passes::run(binaries, &run_config, setup.stacks_for_all)?;
    let run_seconds = run_started.elapsed().as_secs_f64();
    note_passes(binaries, &results, notes);
    let verdicts::Verdicts {
        reports: mut tests,
        notes: analysis_notes,
        mut timings,
    } = verdicts::of_all(
        binaries,
        &results,
        &settings,
        setup.jobs,
        setup.recorder,
        setup.others,
    );
    for n in analysis_notes {
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
    set_harness_stacks_aside(&mut tests, &mut timings);
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

/// What the passes left to say: binaries' collections not read, tests an interruption left
/// unjudged, binaries that could not list their tests.
fn note_passes(binaries: &[TestBinary], results: &passes::PassResults, notes: &mut Vec<String>) {
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
}

/// Which harness allocations are still live at a test's exit depends on timing (what
/// libtest's threads were doing, how many ran at once), so they stay out of report.json,
/// which must not change with `-j`; metrics.json keeps them for the curious.
fn set_harness_stacks_aside(tests: &mut [TestReport], timings: &mut Timings) {
    for t in tests {
        let (harness, own): (Vec<_>, Vec<_>) = std::mem::take(&mut t.stacks)
            .into_iter()
            .partition(|s| s.kind == StackKind::Harness);
        t.stacks = own;
        if !harness.is_empty() {
            timings.harness.insert(t.key(), harness);
        }
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    crate::model::count_of(n as u64, one, many)
}
