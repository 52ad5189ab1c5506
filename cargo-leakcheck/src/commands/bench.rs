//! `cargo leakcheck bench`: runs each benchmark with sampled heap profiling and periodic
//! heap snapshots, and reports the allocation stacks that keep growing after warm-up
//! (the rule is in [`crate::analysis::growth`]).
//!
//! Criterion benches (the package depends on criterion) are listed with `--list` and each
//! benchmark runs in its own process in criterion's profiling mode (`--profile-time`), so
//! its growth is its own. Any other bench target runs once, as `cargo bench` runs it, and is
//! stopped at the time cap: the snapshots taken until then are what is judged.

use crate::analysis::growth;
use crate::cli::BenchArgs;
use crate::commands::session;
use crate::config;
use crate::errors::{Error, ExitCode};
use crate::evidence::load;
use crate::execution::binary_symbols::FromFiles;
use crate::execution::cargo::{self, TestBinary};
use crate::execution::preload::{self, ProfileMode, ProfileSettings};
use crate::execution::runner::{self, ProcessEnd, ProcessSpec, RunConfig, TestFilter};
use crate::execution::snapshots;
use crate::judging::capture;
use crate::model::{GrowthReport, Report, ReportSettings};
use crate::report::export::{Outputs, RunFacts};
use std::time::Duration;

/// Benchmarks are profiled with one sample per 4 KiB allocated on average: growth
/// accumulates over thousands of iterations, so sampling sees it, at a fraction of the cost
/// of exact profiling.
pub const LG_SAMPLE: u8 = 12;

struct BenchCase {
    binary: usize,
    name: String,
    criterion: bool,
}

/// Runs `cargo leakcheck bench`; returns the exit code.
pub fn run(args: &BenchArgs) -> Result<ExitCode, Error> {
    let growth_cli = check_arguments(args)?;
    let mut session = session::prepare(&args.selection, &[], args.config.as_deref(), args.verbose)?;
    let outputs = session.outputs(&args.outputs);
    let binaries = build(&session, args)?;
    let mut notes = session.notes.clone();
    let cases = list_cases(&binaries, &session.ws, &args.filters, &mut notes);
    let benches = run_benches(&session, args, &binaries, &cases, growth_cli, &mut notes);
    finish(&session, &outputs, benches, notes)
}

/// The growth threshold given on the command line, once the arguments are checked.
fn check_arguments(args: &BenchArgs) -> Result<Option<u64>, Error> {
    if args.bench_time == 0 || args.snapshot_interval == 0 {
        return Err(Error::Usage(
            "--bench-time and --snapshot-interval must be at least 1".into(),
        ));
    }
    args.growth_threshold
        .as_deref()
        .map(|t| {
            config::parse_size(t).map_err(|e| Error::Usage(format!("--growth-threshold: {e}")))
        })
        .transpose()
}

/// The bench targets, built as `cargo bench` builds them, with their symbols read.
fn build(session: &session::Session, args: &BenchArgs) -> Result<Vec<TestBinary>, Error> {
    let targets = cargo::Targets {
        benches: &args.benches,
        ..cargo::Targets::default()
    };
    let mut binaries = cargo::build_benches(
        &session.ws,
        &args.selection,
        &targets,
        &session.selected(),
        args.verbose,
    )?;
    // Benches need no entry points: the step reads their symbols only.
    crate::execution::inspect::binaries(
        &mut binaries,
        &[],
        None,
        Some(&crate::execution::collections::cache::dir(
            &session.ws.target_dir,
        )),
    );
    Ok(binaries)
}

/// What every bench runs under: once, for as long as it is given, judged on its growth
/// alone (no extra runs, no configuration's test settings).
struct BenchRuns {
    filter: TestFilter,
    settings: crate::config::SettingsLayer,
    config: crate::config::Config,
    history: crate::execution::history::History,
}

impl BenchRuns {
    fn new(args: &BenchArgs) -> BenchRuns {
        BenchRuns {
            filter: TestFilter::default(),
            settings: crate::config::SettingsLayer {
                timeout: Some(args.bench_time),
                extra_runs: Some(0),
                one_time_fails: Some(false),
                ..Default::default()
            },
            config: crate::config::Config::default(),
            history: Default::default(),
        }
    }

    fn run_config<'a>(&'a self, session: &'a session::Session, args: &BenchArgs) -> RunConfig<'a> {
        RunConfig {
            workspace: &session.ws,
            runtime: &session.runtime,
            work_dir: &session.work_dir,
            jobs: 1,
            timeout: Some(Duration::from_secs(args.bench_time)),
            settings: crate::config::Layers {
                config: &self.config,
                cli: &self.settings,
            },
            filter: &self.filter,
            wrapper: &[],
            verbose: args.verbose,
            progress: true,
            known_layout: None,
            memo: None,
            history: &self.history,
        }
    }
}

/// Each binary's own jemalloc, when its global allocator is tikv-jemallocator: that
/// jemalloc's `_rjem_mallctl`.
fn own_allocators(binaries: &[TestBinary]) -> Vec<Option<(u64, String)>> {
    (binaries.iter())
        .map(|b| {
            std::fs::read(&b.path)
                .ok()
                .and_then(|data| crate::execution::entry::own_allocator(&data))
        })
        .collect()
}

/// Runs every bench in turn and asks for its verdict as soon as it ended; stops at an
/// interrupt, saying how many did not run.
fn run_benches(
    session: &session::Session,
    args: &BenchArgs,
    binaries: &[TestBinary],
    cases: &[BenchCase],
    growth_cli: Option<u64>,
    notes: &mut Vec<String>,
) -> Vec<GrowthReport> {
    let runs = BenchRuns::new(args);
    let run_config = runs.run_config(session, args);
    let mut symbolizers: Vec<Option<FromFiles>> = binaries.iter().map(|_| None).collect();
    let own_allocators = own_allocators(binaries);
    let mut benches = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let binary = &binaries[case.binary];
        announce(args, i, cases.len(), binary, case);
        let key = format!("bench{i}");
        let own_allocator = own_allocators[case.binary].as_ref();
        let result = run_one(
            session,
            args,
            &run_config,
            binary,
            case,
            &key,
            own_allocator,
        );
        if result.end == ProcessEnd::Interrupted {
            notes.push(session::interrupted_note(
                cases.len() - i,
                "bench",
                "benches",
            ));
            break;
        }
        let symbols = symbolizers[case.binary].get_or_insert_with(FromFiles::default);
        let ran = BenchRun {
            session,
            binary,
            case,
            key: &key,
            own_allocator: own_allocator.is_some(),
            growth_cli,
        };
        benches.push(verdict_of_bench(&ran, &result, symbols, notes));
    }
    benches
}

fn announce(args: &BenchArgs, i: usize, of: usize, binary: &TestBinary, case: &BenchCase) {
    crate::say!(
        "{:>12} [{}/{}] {} {} (up to {}s, a snapshot every {} ms)",
        "Benchmarking",
        i + 1,
        of,
        binary.target,
        case.name,
        args.bench_time,
        args.snapshot_interval
    );
}

/// One bench's process, with periodic snapshots.
fn run_one(
    session: &session::Session,
    args: &BenchArgs,
    run_config: &RunConfig,
    binary: &TestBinary,
    case: &BenchCase,
    key: &str,
    own_allocator: Option<&(u64, String)>,
) -> crate::evidence::ProcessResult {
    let cap = Duration::from_secs(args.bench_time);
    let bench_args: Vec<String> = if case.criterion {
        let mut a = vec![
            "--bench".into(),
            "--profile-time".into(),
            args.bench_time.to_string(),
        ];
        a.extend(["--exact".into(), case.name.clone()]);
        a
    } else {
        vec!["--bench".into()]
    };
    let spec = ProcessSpec {
        args: &bench_args,
        program_env: &[],
        settings: ProfileSettings {
            mode: ProfileMode::Periodic,
            lg_sample: LG_SAMPLE,
        },
        quiet_backtraces: false,
        // Criterion stops itself after --profile-time; give it room to start and finish.
        timeout: Some(if case.criterion {
            cap + Duration::from_secs(60)
        } else {
            cap
        }),
        extra_env: &bench_env(
            own_allocator,
            &session.work_dir,
            key,
            args.snapshot_interval,
            (!binary.facts.collections.collections.is_empty())
                .then(|| crate::execution::collections::table_file(&session.work_dir, case.binary)),
        ),
        place: None,
        cancel: None,
    };
    runner::run_process(binary, key, run_config, &spec)
}

/// Which bench a result is of.
struct BenchRun<'a> {
    session: &'a session::Session,
    binary: &'a TestBinary,
    case: &'a BenchCase,
    key: &'a str,
    /// Its global allocator is its own jemalloc (its dumps are paired with this runtime's).
    own_allocator: bool,
    growth_cli: Option<u64>,
}

/// Loads what one bench's process left and asks for its verdict (recording the case when
/// the run records cases).
fn verdict_of_bench(
    j: &BenchRun,
    result: &crate::evidence::ProcessResult,
    symbols: &mut FromFiles,
    notes: &mut Vec<String>,
) -> GrowthReport {
    let (session, binary, case) = (j.session, j.binary, j.case);
    let (threshold, source) = session.config.growth_threshold(&case.name, j.growth_cli);
    let dumps = snapshots::of_bench(&session.work_dir, j.key, j.own_allocator);
    let exe = binary
        .path
        .canonicalize()
        .unwrap_or_else(|_| binary.path.clone());
    let id = growth::BenchIdentity {
        package: &binary.package,
        binary: &binary.target,
        name: &case.name,
        exe: &exe,
        criterion: case.criterion,
        whole_program: false,
    };
    let timeline = preload::timeline(&session.work_dir, j.key);
    let evidence = load::growth(
        &result.stderr,
        &dumps,
        &timeline,
        None,
        binary.facts.collections.clone(),
    );
    let growth_case = capture::growth::GrowthCase {
        id: &id,
        ran: capture::growth::GrowthRan::Bench(result.end.clone()),
        threshold,
        period: 1 << LG_SAMPLE,
        dumps: &dumps,
        timeline: &timeline,
        stderr: &result.stderr,
        after: None,
    };
    let recorder = &session.recorder;
    let mut report = capture::growth::verdict_of(&growth_case, &evidence, symbols, notes, recorder);
    report.growth_threshold_source = source;
    report.memory = explain_memory(&timeline, &dumps);
    let settings = session.config.effective(&case.name, &Default::default());
    report.unsettled_fails = settings.unsettled_fails;
    report
}

/// Where its resident memory went over the run, on the snapshots' time axis.
fn explain_memory(
    timeline: &std::path::Path,
    dumps: &[Vec<std::path::PathBuf>],
) -> Option<crate::model::MemoryExplained> {
    let marks = load::timeline_marks(timeline);
    let t0 = (dumps.first())
        .and_then(|parts| parts.first())
        .and_then(|d| load::moment_of(&marks, d))?;
    let points = load::memory_points(timeline, t0, None, None);
    crate::analysis::memory::explain(&points, None)
}

/// Writes the benches' artifacts and every output; the run's exit code.
fn finish(
    session: &session::Session,
    outputs: &Outputs,
    mut benches: Vec<GrowthReport>,
    notes: Vec<String>,
) -> Result<ExitCode, Error> {
    benches.sort_by(|a, b| (&a.package, &a.binary, &a.name).cmp(&(&b.package, &b.binary, &b.name)));
    let mut report = Report {
        benches,
        notes,
        ..Report::new(ReportSettings {
            sample_period: 1 << LG_SAMPLE,
            stack_threshold: 0,
            config: session
                .config
                .path
                .as_ref()
                .map(|p| p.display().to_string()),
        })
    };
    let to = session.destination();
    session::draw(&mut report, &to);
    session::finish(&report, &to, RunFacts::default(), outputs)
}

fn list_cases(
    binaries: &[TestBinary],
    ws: &cargo::Workspace,
    filters: &[String],
    notes: &mut Vec<String>,
) -> Vec<BenchCase> {
    let mut cases = Vec::new();
    for (i, b) in binaries.iter().enumerate() {
        // Per binary: a package that depends on criterion may also have plain benches, and
        // asking a plain `main` for `--list` would just run it.
        let criterion = ws.members.get(&b.package).is_some_and(|m| m.uses_criterion)
            && b.facts.symbols.links_criterion;
        if !criterion {
            cases.push(BenchCase {
                binary: i,
                name: b.target.clone(),
                criterion: false,
            });
            continue;
        }
        let listed = crate::execution::interrupt::output(
            std::process::Command::new(&b.path)
                .args(["--bench", "--list"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .current_dir(
                    ws.members
                        .get(&b.package)
                        .map(|m| m.dir.clone())
                        .unwrap_or_default(),
                ),
        );
        match listed {
            Ok(out) if out.status.success() => {
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    if let Some(name) = line.strip_suffix(": benchmark") {
                        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
                            cases.push(BenchCase {
                                binary: i,
                                name: name.to_string(),
                                criterion: true,
                            });
                        }
                    }
                }
            }
            Ok(out) => notes.push(format!(
                "could not list the benchmarks of `{}` ({}): {}",
                b.id(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => notes.push(format!("could not run `{}`: {e}", b.path.display())),
        }
    }
    cases
}

/// A bench process's variables: the snapshot interval, and, for a bench whose global
/// allocator is tikv-jemallocator, where that jemalloc is (its allocations bypass malloc;
/// the runtime asks it for a dump beside each of its own).
fn bench_env(
    own_allocator: Option<&(u64, String)>,
    work_dir: &std::path::Path,
    key: &str,
    interval_ms: u64,
    collections: Option<std::path::PathBuf>,
) -> Vec<(leakcheck_protocol::env::Var, String)> {
    use leakcheck_protocol::env;
    let mut vars = vec![(env::DUMP_INTERVAL_MS, interval_ms.to_string())];
    if let Some(own) = own_allocator {
        vars.extend(preload::own_allocator_env(own, work_dir, key));
    }
    if let Some(table) = collections {
        vars.push((env::COLLECTIONS, table.display().to_string()));
    }
    vars
}
