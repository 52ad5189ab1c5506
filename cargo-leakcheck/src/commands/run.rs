//! `cargo leakcheck run`: a service under load, judged on its heap's growth per stack.
//!
//! Steps: set up the session; build the program (or take `--command`); run it under the
//! runtime until ready, under the load, and stopped ([`crate::execution::service`]); judge
//! the snapshots taken between ready and the end of the load ([`crate::analysis::service`]);
//! write the report and the growth plots as `bench` does.

use crate::analysis::growth::BenchIdentity;
use crate::cli::RunArgs;
use crate::commands::session;
use crate::config;
use crate::errors::{Error, ExitCode};
use crate::evidence::load;
use crate::execution::binary_symbols::FromFiles;
use crate::execution::cargo::{self, Program};
use crate::execution::preload;
use crate::execution::service::{Micros, Ready, ServiceRun, ServiceSpec, Window};
use crate::execution::snapshots;
use crate::judging::capture;
use crate::model::{GrowthReport, MemoryExplained, Report, ReportSettings};
use crate::report::export::{Outputs, RunFacts};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Without `--exact`, a service's stacks are sampled as benchmarks' are: one per 4 KiB
/// allocated on average.
const LG_SAMPLE: u8 = crate::commands::bench::LG_SAMPLE;

/// Runs `cargo leakcheck run`; returns the exit code.
pub fn run(args: &RunArgs) -> Result<ExitCode, Error> {
    let (threshold_cli, ready) = check_arguments(args)?;
    let command = args.command.as_deref().map(split_words).transpose()?;
    let cwd = std::env::current_dir().map_err(|e| Error::io("read the current directory", e))?;
    let mut session = prepare(args, command.is_some(), &cwd)?;
    let outputs = session.outputs(&args.outputs);
    let service = program(&session, args, command)?;
    clear_earlier_run(&session);
    let ran = start_load_and_stop(&session, args, &service, &ready, &cwd);
    let mut notes = session.notes.clone();
    if !ran.left_running.is_empty() {
        notes.push(format!(
            "the service left {} running after it ended; they were killed",
            ran.left_running.join(", ")
        ));
    }
    for n in &notes {
        crate::info!("note: {n}");
    }
    let judged = verdict_of_service(
        &session,
        args,
        &service,
        &ran,
        &ready,
        threshold_cli,
        &mut notes,
    );
    finish(&session, &outputs, judged, notes)
}

/// The work directory's name for the service's files.
const KEY: &str = "service";

/// The growth threshold given on the command line and the readiness check, once the
/// arguments are checked.
fn check_arguments(args: &RunArgs) -> Result<(Option<u64>, Ready), Error> {
    let threshold_cli = args
        .growth_threshold
        .as_deref()
        .map(|t| {
            config::parse_size(t).map_err(|e| Error::Usage(format!("--growth-threshold: {e}")))
        })
        .transpose()?;
    let ready = readiness(args)?;
    if args.snapshot_interval == 0 {
        return Err(Error::Usage(
            "--snapshot-interval must be at least 1".into(),
        ));
    }
    Ok((threshold_cli, ready))
}

/// The session: of the cargo project, or, for a `--command` outside any, of `./target`.
fn prepare(args: &RunArgs, command: bool, cwd: &Path) -> Result<session::Session, Error> {
    // Any program can be run from anywhere: outside a cargo project, the outputs go to
    // `./target/leakcheck`.
    let bare = command && args.selection.manifest_path.is_none() && !session::in_cargo_project(cwd);
    let session = if bare {
        session::prepare_bare(
            args.selection.target_dir.as_deref(),
            args.config.as_deref(),
            args.verbose,
        )?
    } else {
        session::prepare(&args.selection, &[], args.config.as_deref(), args.verbose)?
    };
    Ok(session)
}

/// The program under check: its path, arguments, name and package, and its own jemalloc
/// when it has one.
struct Service {
    program: PathBuf,
    args: Vec<String>,
    name: String,
    package: String,
    own_allocator: Option<(u64, String)>,
    /// Its own collections (see [`crate::execution::collections`]).
    collections: std::sync::Arc<crate::evidence::CollectionTable>,
    /// Its build id, hexadecimal (empty: none).
    build_id: String,
}

/// The program `--command` names, or the one cargo builds.
fn program(
    session: &session::Session,
    args: &RunArgs,
    command: Option<Vec<String>>,
) -> Result<Service, Error> {
    let (program, program_args) = match command {
        Some(words) => {
            let program = find_program(&words[0])?;
            let mut rest = words[1..].to_vec();
            rest.extend(args.args.iter().cloned());
            (program, rest)
        }
        None => {
            let which = match (&args.bin, &args.example) {
                (Some(b), _) => Program::Bin(b),
                (_, Some(e)) => Program::Example(e),
                _ => Program::Default,
            };
            let exe = cargo::build_program(
                &args.selection,
                which,
                args.release,
                &session.selected(),
                args.verbose,
            )?;
            (exe, args.args.clone())
        }
    };
    let name = file_name(&program);
    let package = session
        .selected()
        .first()
        .map_or_else(|| name.clone(), |m| m.name.clone());
    let data = std::fs::read(&program).ok();
    let own_allocator = data
        .as_deref()
        .and_then(crate::execution::entry::own_allocator);
    let build_id = data
        .as_deref()
        .map(crate::execution::inspect::build_id)
        .unwrap_or_default();
    let cache = crate::execution::collections::cache::dir(&session.ws.target_dir);
    let collections = data.as_deref().map_or_else(Default::default, |d| {
        crate::execution::collections::cache::table(d, &build_id, Some(&cache))
    });
    Ok(Service {
        program,
        args: program_args,
        name,
        package,
        own_allocator,
        collections: std::sync::Arc::new(collections),
        build_id,
    })
}

/// What an earlier run left in the work directory is not this run's.
fn clear_earlier_run(session: &session::Session) {
    for stem in [preload::PRELOAD_STEM, preload::APP_STEM] {
        for old in preload::all_dumps(&session.work_dir, KEY, stem) {
            let _ = std::fs::remove_file(old);
        }
    }
    let _ = std::fs::remove_file(preload::timeline(&session.work_dir, KEY));
}

/// Starts the service under the runtime, waits until it is ready, loads it, stops it.
fn start_load_and_stop(
    session: &session::Session,
    args: &RunArgs,
    service: &Service,
    ready: &Ready,
    dir: &Path,
) -> ServiceRun {
    crate::info!(
        "{:>12} {} (a snapshot every {} ms)",
        "Starting",
        service.program.display(),
        args.snapshot_interval
    );
    let table = crate::execution::collections::table_file(&session.work_dir, 0);
    let has_table = !service.collections.collections.is_empty()
        && !service.build_id.is_empty()
        && std::fs::write(&table, service.collections.render(&service.build_id)).is_ok();
    let spec = ServiceSpec {
        collections: has_table.then_some(table),
        program: &service.program,
        args: &service.args,
        dir,
        runtime: &session.runtime,
        work_dir: &session.work_dir,
        key: KEY,
        snapshot_interval: Duration::from_millis(args.snapshot_interval),
        exact: args.exact,
        own_allocator: service.own_allocator.clone(),
        lg_sample: LG_SAMPLE,
        ready: ready.clone(),
        ready_timeout: Duration::from_secs(args.ready_timeout),
        load: args.load.as_deref(),
        load_timeout: Duration::from_secs(args.load_timeout),
        duration: Duration::from_secs(args.duration),
        settle: Duration::from_secs(args.settle),
        stop: args.stop.as_deref(),
        grace: Duration::from_secs(args.grace),
        verbose: args.verbose,
    };
    crate::execution::service::run(&spec)
}

/// Loads the service's snapshots and asks for its verdict (recording the case when the run
/// records cases), with its resident memory explained beside.
fn verdict_of_service(
    session: &session::Session,
    args: &RunArgs,
    service: &Service,
    ran: &ServiceRun,
    ready: &Ready,
    threshold_cli: Option<u64>,
    notes: &mut Vec<String>,
) -> GrowthReport {
    // Exact, every allocation's stack is in the snapshots.
    let period = if args.exact { 1 } else { 1 << LG_SAMPLE };
    let shots = snapshots::of_service(&session.work_dir, KEY, ran);
    let (threshold, source) = session.config.service_growth_threshold(threshold_cli);
    let exe = (service.program.canonicalize()).unwrap_or_else(|_| service.program.clone());
    let id = BenchIdentity {
        package: &service.package,
        binary: &service.name,
        name: &service.name,
        exe: &exe,
        criterion: false,
        whole_program: true,
    };
    if service.own_allocator.is_some() {
        notes.push(own_allocator_note(&shots.dumps));
    }
    let mut symbols = FromFiles::default();
    let after = shots.after.as_ref();
    let evidence = load::growth(
        &ran.stderr,
        &shots.dumps,
        &shots.timeline,
        after.map(|(dump, parts)| load::growth_after(parts, dump, &shots.timeline)),
        service.collections.clone(),
    );
    let case = capture::growth::GrowthCase {
        id: &id,
        ran: capture::growth::GrowthRan::Service {
            stage: ran.stage.clone(),
            ready: ready_text(ready, args),
        },
        threshold,
        period,
        dumps: &shots.dumps,
        timeline: &shots.timeline,
        stderr: &ran.stderr,
        after: after.map(|(dump, parts)| (parts.as_slice(), dump.as_path())),
    };
    let recorder = &session.recorder;
    let mut judged = capture::growth::verdict_of(&case, &evidence, &mut symbols, notes, recorder);
    judged.growth_threshold_source = source;
    notes.extend(symbols.code.warnings());
    with_resident_memory(session, ran, &shots, judged)
}

/// The service's RSS over the run and where it went, on the snapshots' time axis.
fn with_resident_memory(
    session: &session::Session,
    ran: &ServiceRun,
    shots: &snapshots::ServiceSnapshots,
    mut judged: GrowthReport,
) -> GrowthReport {
    let first = shots.dumps.first().and_then(|p| p.first());
    let t0 = first.and_then(|d| load::moment_of(&shots.marks, d));
    judged.rss = rss_series(&ran.rss, t0, ran.window);
    let budget = session.config.run_rss_growth_budget;
    let memory = explain_memory(&shots.timeline, t0, ran.window, budget);
    crate::analysis::memory::with_memory(judged, memory)
}

/// Writes the service's artifacts and every output; the run's exit code.
fn finish(
    session: &session::Session,
    outputs: &Outputs,
    judged: GrowthReport,
    notes: Vec<String>,
) -> Result<ExitCode, Error> {
    let sample_period = judged.sample_period;
    let mut report = Report {
        notes,
        benches: vec![judged],
        ..Report::new(ReportSettings {
            sample_period,
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

/// The one readiness check asked for (at most one), or none: ready once started.
fn readiness(args: &RunArgs) -> Result<Ready, Error> {
    let asked: Vec<Ready> = [
        args.ready_port.map(Ready::Port),
        args.ready_line.clone().map(Ready::Line),
        args.ready_command.clone().map(Ready::Command),
    ]
    .into_iter()
    .flatten()
    .collect();
    match asked.as_slice() {
        [] => Ok(Ready::Started),
        [one] => Ok(one.clone()),
        _ => Err(Error::Usage(
            "--ready-port, --ready-line and --ready are alternatives: give one".into(),
        )),
    }
}

fn ready_text(ready: &Ready, args: &RunArgs) -> String {
    let within = format!("within {} s (--ready-timeout)", args.ready_timeout);
    match ready {
        Ready::Port(p) => format!("nothing accepted connections on 127.0.0.1:{p} {within}"),
        Ready::Line(t) => format!("it printed no line containing `{t}` {within}"),
        Ready::Command(c) => format!("`{c}` did not succeed {within}"),
        Ready::Started => "it was not started".into(),
    }
}

/// What a run of a program with its own jemalloc (tikv-jemallocator) can say of it.
fn own_allocator_note(snapshots: &[Vec<PathBuf>]) -> String {
    if snapshots.iter().any(|parts| parts.len() > 1) {
        "the service allocates with its own jemalloc (tikv-jemallocator): its heap is read from that jemalloc's sampled dumps, one sample per 4 KiB even with --exact, and who holds its objects is not known (the scan sees what goes through malloc)".into()
    } else {
        "the service allocates with its own jemalloc (tikv-jemallocator), which wrote no dumps: its allocations are not seen (is it built without tikv-jemallocator's `profiling` feature? cargo-leakcheck turns it on when it builds the service; with --command, build it so)".into()
    }
}

/// Where the service's resident memory went from when it was ready (the last figures
/// before the load) to the end of the settle pause.
fn explain_memory(
    timeline: &Path,
    first: Option<Micros>,
    window: Option<Window>,
    budget: Option<u64>,
) -> Option<MemoryExplained> {
    let points = load::memory_points(
        timeline,
        first?,
        window.map(|w| w.ready),
        window.map(|w| w.settled),
    );
    crate::analysis::memory::explain(&points, budget)
}

/// The service's RSS readings as (seconds since the first judged snapshot, taken at
/// `first`, bytes), up to the end of the settle pause, on the time axis of the snapshots' own
/// series.
fn rss_series(
    readings: &[(Micros, u64)],
    first: Option<Micros>,
    window: Option<Window>,
) -> Vec<(f64, u64)> {
    let Some(t0) = first else {
        return Vec::new();
    };
    readings
        .iter()
        .filter(|(at, _)| window.is_none_or(|w| *at <= w.settled) && *at >= t0)
        .map(|(at, kib)| ((at - t0) as f64 / 1e6, kib * 1024))
        .collect()
}

/// `--command`'s words: split at whitespace, with '…' and "…" quoting and \ escapes; no
/// expansions.
fn split_words(text: &str) -> Result<Vec<String>, Error> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some('\\') if c == '"' => word.extend(chars.next()),
                        Some(other) => word.push(other),
                        None => {
                            return Err(Error::Usage(format!(
                                "--command: unterminated quote in `{text}`"
                            )))
                        }
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err(Error::Usage("--command is empty".into()));
    }
    Ok(words)
}

/// The program `--command` names: a path, or a name looked up in PATH.
fn find_program(word: &str) -> Result<PathBuf, Error> {
    let path = Path::new(word);
    let found = if word.contains('/') {
        path.is_file().then(|| path.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(word))
                .find(|p| p.is_file())
        })
    };
    found.ok_or_else(|| Error::Usage(format!("--command: `{word}` does not exist")))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words_are_split_as_a_shell_splits_them_without_expanding() {
        assert_eq!(
            split_words(r#"./srv --name 'a b' "c \"d\"" e\ f $HOME"#).unwrap(),
            ["./srv", "--name", "a b", "c \"d\"", "e f", "$HOME"]
        );
        assert!(split_words("srv 'open").is_err());
        assert!(split_words("   ").is_err());
    }
}
