//! `cargo leakcheck bench`: runs each benchmark with sampled heap profiling and periodic
//! heap snapshots, and reports the allocation stacks that keep growing after warm-up
//! (the rule is in [`crate::analysis::growth`]).
//!
//! Criterion benches (the package depends on criterion) are listed with `--list` and each
//! benchmark runs in its own process in criterion's profiling mode (`--profile-time`), so
//! its growth is its own. Any other bench target runs once, as `cargo bench` runs it, and is
//! stopped at the time cap: the snapshots taken until then are what is judged.

use crate::analysis::analyze::{self, stderr_tail};
use crate::analysis::classify;
use crate::analysis::diff;
use crate::analysis::growth::{self, Snapshot};
use crate::analysis::profile;
use crate::analysis::symbolize::Symbolizer;
use crate::cli::BenchArgs;
use crate::commands::session;
use crate::config;
use crate::errors::{Error, ExitCode};
use crate::execution::cargo::{self, TestBinary};
use crate::execution::protocol::{self, Mode, ProfileSettings};
use crate::execution::runner::{self, ProcessEnd, ProcessSpec, RunConfig, TestFilter};
use crate::model::{
    BenchArtifacts, BenchReport, BenchStack, FrameReport, Report, ReportSettings, StackKind,
    Verdict, REPORT_VERSION,
};
use crate::report::{flamegraph, human::human_bytes, plot, pprof};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Benchmarks are profiled with one sample per 4 KiB allocated on average: growth
/// accumulates over thousands of iterations, so sampling sees it, at a fraction of the cost
/// of exact profiling.
pub const LG_SAMPLE: u8 = 12;

/// How many stacks a bench's report entry lists (flagged ones first).
const STACKS_LISTED: usize = 10;
/// How many stacks its plot draws.
const STACKS_PLOTTED: usize = 5;

struct Case {
    binary: usize,
    name: String,
    criterion: bool,
}

/// Runs `cargo leakcheck bench`; returns the exit code.
pub fn run(args: &BenchArgs) -> Result<ExitCode, Error> {
    let growth_cli = args
        .growth_threshold
        .as_deref()
        .map(|t| {
            config::parse_size(t).map_err(|e| Error::Usage(format!("--growth-threshold: {e}")))
        })
        .transpose()?;
    if args.bench_time == 0 || args.snapshot_interval == 0 {
        return Err(Error::Usage(
            "--bench-time and --snapshot-interval must be at least 1".into(),
        ));
    }
    let session = session::prepare(&args.selection, &[], args.config.as_deref(), args.verbose)?;
    let (ws, config, out_dir) = (&session.ws, &session.config, &session.out_dir);
    let targets = cargo::Targets {
        benches: &args.benches,
        ..cargo::Targets::default()
    };
    let mut binaries = cargo::build_benches(
        ws,
        &args.selection,
        &targets,
        &session.selected(),
        args.verbose,
    )?;
    // Benches need no entry points: the step reads their symbols only.
    crate::execution::inspect::binaries(&mut binaries, &[], None);
    let binaries = binaries;

    let filter = TestFilter::default();
    let cap = Duration::from_secs(args.bench_time);
    let no_timeout = |_: &str| cap;
    let no_extra_runs = |_: &str| 0;
    let never = |_: &str| false;
    let run_config = RunConfig {
        workspace: ws,
        runtime: &session.runtime,
        work_dir: &session.work_dir,
        jobs: 1,
        timeout: cap,
        timeouts: &no_timeout,
        extra_runs: &no_extra_runs,
        budgeted: &never,
        lifetime_fails: &never,
        filter: &filter,
        wrapper: &[],
        verbose: args.verbose,
        progress: true,
        known_layout: None,
        history: &crate::execution::history::History::default(),
    };
    let mut notes = session.notes.clone();
    let cases = list_cases(&binaries, ws, &args.filters, &mut notes);
    let settings = ProfileSettings {
        mode: Mode::Periodic,
        lg_sample: LG_SAMPLE,
    };
    let period = 1u64 << LG_SAMPLE;
    let mut symbolizers: Vec<Option<Symbolizer>> = binaries.iter().map(|_| None).collect();
    let mut benches = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let binary = &binaries[case.binary];
        crate::say!(
            "{:>12} [{}/{}] {} {} (up to {}s, a snapshot every {} ms)",
            "Benchmarking",
            i + 1,
            cases.len(),
            binary.target,
            case.name,
            args.bench_time,
            args.snapshot_interval
        );
        let key = format!("bench{i}");
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
            settings,
            quiet_backtraces: false,
            // Criterion stops itself after --profile-time; give it room to start and finish.
            timeout: if case.criterion {
                cap + Duration::from_secs(60)
            } else {
                cap
            },
            extra_env: &[(protocol::INTERVAL_ENV, args.snapshot_interval.to_string())],
            place: None,
        };
        let result = runner::run_process(binary, &key, &run_config, &spec);
        if result.end == ProcessEnd::Interrupted {
            notes.push(session::interrupted_note(
                cases.len() - i,
                "bench",
                "benches",
            ));
            break;
        }
        let (threshold, source) = config.growth_threshold(&case.name, growth_cli);
        let symbolizer = symbolizers[case.binary].get_or_insert_with(Symbolizer::new);
        let dumps = protocol::all_dumps(&session.work_dir, &key, protocol::PRELOAD_STEM);
        let mut report = judge(binary, case, &result, &dumps, symbolizer, threshold, period);
        report.growth_threshold_source = source;
        benches.push(report);
    }
    benches.sort_by(|a, b| (&a.package, &a.binary, &a.name).cmp(&(&b.package, &b.binary, &b.name)));
    for b in &mut benches {
        write_artifacts(b, out_dir, &ws.root, &mut notes);
    }
    let report = Report {
        version: REPORT_VERSION,
        settings: ReportSettings {
            sample_period: period,
            stack_threshold: 0,
            config: config.path.as_ref().map(|p| p.display().to_string()),
        },
        tests: Vec::new(),
        ignored: 0,
        partition: None,
        other_shards: 0,
        unlisted: Vec::new(),
        not_run: None,
        benches,
        notes,
    };
    session::finish(&session, &report, render)?;
    Ok(report.exit_code())
}

fn list_cases(
    binaries: &[TestBinary],
    ws: &cargo::Workspace,
    filters: &[String],
    notes: &mut Vec<String>,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, b) in binaries.iter().enumerate() {
        // Per binary: a package that depends on criterion may also have plain benches, and
        // asking a plain `main` for `--list` would just run it.
        let criterion = ws.members.get(&b.package).is_some_and(|m| m.uses_criterion)
            && b.facts.symbols.links_criterion;
        if !criterion {
            cases.push(Case {
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
                            cases.push(Case {
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

/// Reads a bench's snapshots, applies the growth rule, symbolizes the stacks worth listing.
fn judge(
    binary: &TestBinary,
    case: &Case,
    result: &runner::ProcessResult,
    dumps: &[PathBuf],
    symbolizer: &mut Symbolizer,
    threshold: u64,
    period: u64,
) -> BenchReport {
    let stopped_at_cap = result.end == ProcessEnd::TimedOut && !case.criterion;
    let mut report = BenchReport {
        package: binary.package.clone(),
        binary: binary.target.clone(),
        name: case.name.clone(),
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
        artifacts: BenchArtifacts::default(),
    };
    match &result.end {
        ProcessEnd::Exited(0) => {}
        ProcessEnd::TimedOut if stopped_at_cap => {}
        ProcessEnd::Exited(_) => {
            report.verdict = Verdict::Failed;
            report.message = Some(format!(
                "the bench failed ({}){}",
                result.end.describe(),
                stderr_tail(&result.stderr)
            ));
        }
        ProcessEnd::TimedOut => {
            report.verdict = Verdict::Failed;
            report.message =
                Some("criterion did not finish within the time cap plus a minute".into());
        }
        ProcessEnd::Signaled(_) => {
            report.verdict = Verdict::Crashed;
            report.message = Some(format!(
                "killed by {}{}",
                result.end.describe(),
                stderr_tail(&result.stderr)
            ));
        }
        ProcessEnd::SpawnFailed(_) | ProcessEnd::Interrupted => {
            report.verdict = Verdict::Error;
            report.message = analyze::never_ran(&result.end, "bench");
            return report;
        }
    }
    let mut snapshots = Vec::new();
    let mut first = None;
    for path in dumps {
        let parsed = match profile::read_heap_profile(path) {
            Ok(p) => p,
            // A dump cut short by the kill at the time cap: the others still count.
            Err(_) if path == dumps.last().expect("non-empty") => continue,
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
            profile: diff::normalize(&parsed.unbiased()),
        });
    }
    report.snapshots = snapshots.len();
    report.duration_seconds = snapshots.last().map(|s| s.seconds).unwrap_or(0.0);
    let stacks = match growth::analyze(&snapshots, threshold) {
        Ok(s) => s,
        Err(e) => {
            if report.verdict == Verdict::Clean {
                report.verdict = Verdict::Error;
            }
            report.message.get_or_insert(e);
            return report;
        }
    };
    let exe = binary
        .path
        .canonicalize()
        .unwrap_or_else(|_| binary.path.clone())
        .display()
        .to_string();
    for g in stacks.into_iter().take(STACKS_LISTED) {
        let trimmed = analyze::resolve_stack(&g.frames, symbolizer);
        let (kind, _) = classify::classify(&trimmed, &exe);
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
            frames: trimmed.iter().map(analyze::frame_report).collect(),
            series: g.series,
        });
    }
    if report.verdict == Verdict::Clean && report.stacks.iter().any(|s| s.flagged) {
        report.verdict = Verdict::Leak;
    }
    report
}

fn write_artifacts(b: &mut BenchReport, out_dir: &Path, root: &Path, notes: &mut Vec<String>) {
    if b.verdict != Verdict::Leak {
        return;
    }
    let dir_name = flamegraph::file_stem(&format!("{}-bench-{}", b.package, b.binary));
    let stem = flamegraph::file_stem(&b.name);
    let rel = |ext: &str| PathBuf::from(&dir_name).join(format!("{stem}.{ext}"));
    let mut folded: Vec<String> = b
        .stacks
        .iter()
        .filter(|s| s.flagged && s.growth_bytes > 0)
        .map(|s| flamegraph::folded_line(&s.frames, s.growth_bytes as u64))
        .collect();
    folded.sort();
    let series: Vec<(String, Vec<(f64, u64)>)> = b
        .stacks
        .iter()
        .take(STACKS_PLOTTED)
        .map(|s| (stack_label(&s.frames, s.flagged, root), s.series.clone()))
        .collect();
    let title = format!("{} {}: retained bytes over time", b.binary, b.name);
    let result = std::fs::create_dir_all(out_dir.join(&dir_name))
        .and_then(|_| std::fs::write(out_dir.join(rel("folded")), folded.join("\n") + "\n"))
        .and_then(|_| {
            std::fs::write(
                out_dir.join(rel("plot.svg")),
                plot::line_chart(&title, &series),
            )
        })
        .and_then(|_| {
            let file = std::fs::File::create(out_dir.join(rel("svg")))?;
            flamegraph::svg_titled(
                &format!("{} {}: growth", b.binary, b.name),
                "memory that kept growing over the later half of the run, by allocation stack",
                &folded,
                std::io::BufWriter::new(file),
            )
        })
        .and_then(|_| {
            // The growth, as a profile: objects are not counted per snapshot, so 0.
            let samples: Vec<pprof::Sample> = b
                .stacks
                .iter()
                .filter(|s| s.flagged && s.growth_bytes > 0)
                .map(|s| pprof::Sample {
                    frames: &s.frames,
                    objects: 0,
                    bytes: s.growth_bytes as u64,
                })
                .collect();
            let profile = pprof::encode(
                &samples,
                &b.binary,
                &format!("memory {} kept growing by (cargo-leakcheck bench)", b.name),
            );
            pprof::write_gz(&out_dir.join(rel("pb.gz")), &profile)
        });
    match result {
        Ok(()) => {
            b.artifacts = BenchArtifacts {
                flamegraph: Some(rel("svg").display().to_string()),
                folded: Some(rel("folded").display().to_string()),
                plot: Some(rel("plot.svg").display().to_string()),
                pprof: Some(rel("pb.gz").display().to_string()),
            };
        }
        Err(e) => notes.push(format!(
            "could not write the artifacts of bench `{}`: {e}",
            b.name
        )),
    }
}

/// A stack's legend label: its first frame outside std (with file:line when known), and
/// the innermost frame when that is a different one, since several stacks often pass
/// through the same function (`handle_request`, and the `Vec` it grows).
fn stack_label(frames: &[FrameReport], flagged: bool, root: &Path) -> String {
    let text = |f: &FrameReport| match (&f.file, f.line) {
        (Some(file), Some(line)) => format!(
            "{} ({}:{line})",
            f.function,
            file.rsplit('/').next().unwrap_or(file)
        ),
        _ => f.function.clone(),
    };
    let mut label = match crate::analysis::suppressions::identifying_frame(frames, root) {
        Some(f) => text(f),
        None => "[unknown]".into(),
    };
    if let Some(first) = frames.first() {
        if !label.starts_with(&first.function) {
            let mut inner: String = first.function.chars().take(60).collect();
            if inner.len() < first.function.len() {
                inner.push('…');
            }
            label = format!("{label}, allocating in {inner}");
        }
    }
    format!("{}{label}", if flagged { "GROWS: " } else { "" })
}

/// The human summary of a bench run.
pub fn render(report: &Report, root: &Path, out_dir: &Path) -> String {
    let mut s = String::new();
    for b in &report.benches {
        match b.verdict {
            Verdict::Leak => {
                let flagged: Vec<&BenchStack> = b.stacks.iter().filter(|st| st.flagged).collect();
                let growth: i64 = flagged.iter().map(|st| st.growth_bytes).sum();
                let rate: f64 = flagged.iter().map(|st| st.growth_bytes_per_second).sum();
                let _ = writeln!(
                    s,
                    "   GROWS {} {}: +{} ({}/s) over the later half of {:.1}s, in {} stack(s)",
                    b.binary,
                    b.name,
                    human_bytes(growth.max(0) as u64),
                    human_bytes(rate.max(0.0) as u64),
                    b.duration_seconds,
                    flagged.len()
                );
                for st in flagged.iter().take(3) {
                    if let Some(f) =
                        crate::analysis::suppressions::identifying_frame(&st.frames, root)
                    {
                        let at = match (&f.file, f.line) {
                            (Some(file), Some(line)) => {
                                let p = Path::new(file);
                                format!(" ({}:{line})", p.strip_prefix(root).unwrap_or(p).display())
                            }
                            _ => String::new(),
                        };
                        let _ = writeln!(
                            s,
                            "           +{} at {}{at}",
                            human_bytes(st.growth_bytes.max(0) as u64),
                            f.function
                        );
                    }
                }
                if let (Some(p), Some(f)) = (&b.artifacts.plot, &b.artifacts.flamegraph) {
                    let _ = writeln!(
                        s,
                        "           plot: {}\n           flame graph: {}",
                        out_dir.join(p).display(),
                        out_dir.join(f).display()
                    );
                }
            }
            Verdict::Clean => {}
            other => {
                let _ = writeln!(
                    s,
                    "{:>8} {} {}",
                    other.as_str().to_uppercase(),
                    b.binary,
                    b.name
                );
                if let Some(m) = &b.message {
                    for line in m.lines().take(15) {
                        let _ = writeln!(s, "           | {line}");
                    }
                }
            }
        }
    }
    let count = |v: Verdict| report.benches.iter().filter(|b| b.verdict == v).count();
    let _ = writeln!(
        s,
        "\n Summary {} benches: {} clean, {} growing, {} other; sampled at one sample per {} allocated (growth under ~{} over a run is not reliably seen)",
        report.benches.len(),
        count(Verdict::Clean),
        count(Verdict::Leak),
        report.benches.len() - count(Verdict::Clean) - count(Verdict::Leak),
        human_bytes(report.settings.sample_period),
        human_bytes(16 * report.settings.sample_period)
    );
    for n in &report.notes {
        let _ = writeln!(s, "    note {n}");
    }
    let _ = writeln!(s, "  Report {}", out_dir.join("report.json").display());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str) -> FrameReport {
        FrameReport {
            function: name.into(),
            file: None,
            line: None,
            inlined: false,
        }
    }

    #[test]
    fn labels_tell_stacks_through_the_same_function_apart() {
        let direct = [frame("grows::handle_request"), frame("grows::main")];
        let via_vec = [
            frame("alloc::raw_vec::RawVec<T,A>::grow_one"),
            frame("grows::handle_request"),
        ];
        let root = Path::new("/ws");
        assert_eq!(
            stack_label(&direct, true, root),
            "GROWS: grows::handle_request"
        );
        assert_eq!(
            stack_label(&via_vec, false, root),
            "grows::handle_request, allocating in alloc::raw_vec::RawVec<T,A>::grow_one"
        );
    }

    #[test]
    fn labels_name_the_workspace_s_code_not_std_s() {
        let at = |name: &str, file: &str| FrameReport {
            file: Some(file.into()),
            line: Some(7),
            ..frame(name)
        };
        // Both frames have absolute paths; only one is under the workspace.
        let frames = [
            at(
                "<hashbrown::raw::RawTable<T>>::reserve_rehash",
                "/cargo/registry/src/hashbrown-0.15/src/raw/mod.rs",
            ),
            at("grows::Cache::insert", "/ws/src/lib.rs"),
        ];
        assert_eq!(
            stack_label(&frames, true, Path::new("/ws")),
            "GROWS: grows::Cache::insert (lib.rs:7), allocating in <hashbrown::raw::RawTable<T>>::reserve_rehash"
        );
    }

    #[test]
    fn the_bench_summary() {
        let at = |name: &str, file: &str| FrameReport {
            file: Some(file.into()),
            line: Some(12),
            ..frame(name)
        };
        let bench = |name: &str, verdict: Verdict| BenchReport {
            package: "benches".into(),
            binary: "grows".into(),
            name: name.into(),
            verdict,
            exit: "exit code 0".into(),
            message: None,
            sample_period: 1 << LG_SAMPLE,
            growth_threshold: 64 << 10,
            growth_threshold_source: "built-in default".into(),
            snapshots: 40,
            duration_seconds: 10.0,
            stacks: Vec::new(),
            artifacts: BenchArtifacts::default(),
        };
        let mut grows = bench("grows", Verdict::Leak);
        grows.stacks = vec![BenchStack {
            bytes: 3 << 20,
            growth_bytes: 2 << 20,
            growth_bytes_per_second: 409_600.0,
            flagged: true,
            kind: StackKind::Leak,
            frames: vec![
                at(
                    "alloc::vec::Vec<T>::push",
                    "/rustc/x/library/alloc/src/vec/mod.rs",
                ),
                at("grows::handle_request", "/ws/benches/grows.rs"),
            ],
            series: vec![(0.0, 1 << 20), (10.0, 3 << 20)],
        }];
        grows.artifacts = BenchArtifacts {
            flamegraph: Some("benches-bench-grows/grows.svg".into()),
            folded: Some("benches-bench-grows/grows.folded".into()),
            plot: Some("benches-bench-grows/grows.plot.svg".into()),
            pprof: Some("benches-bench-grows/grows.pb.gz".into()),
        };
        let mut failed = bench("crashes", Verdict::Crashed);
        failed.message = Some("killed by signal 11 (SIGSEGV)".into());
        let report = Report {
            version: 1,
            settings: crate::model::ReportSettings {
                sample_period: 1 << LG_SAMPLE,
                stack_threshold: 0,
                config: None,
            },
            tests: Vec::new(),
            ignored: 0,
            partition: None,
            other_shards: 0,
            unlisted: Vec::new(),
            not_run: None,
            benches: vec![grows, failed, bench("plateau", Verdict::Clean)],
            notes: vec!["a note".into()],
        };
        let text = render(&report, Path::new("/ws"), Path::new("target/leakcheck"));
        crate::report::snapshot::assert_snapshot("bench-summary", &text);
    }
}
