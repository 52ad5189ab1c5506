//! The steps every command shares: before the work (workspace and selected packages, the
//! configuration and its warnings, the locked output directory, the runtime) and after it
//! (report.json and the summary, paths shown relative to where the user is).

use crate::cli::Selection;
use crate::config::{self, Config};
use crate::errors::Error;
use crate::execution::cargo::{self, Member, Workspace};
use crate::execution::history::History;
use crate::execution::lock::FileLock;
use crate::execution::runtime;
use crate::model::Report;
use crate::report::json;
use std::path::{Path, PathBuf};

/// What a command works with once set up.
pub struct Session {
    /// The workspace.
    pub ws: Workspace,
    /// Names of the selected members (see [`Session::selected`]).
    selected: Vec<String>,
    /// The configuration in force.
    pub config: Config,
    /// Run-wide notes so far (the configuration's warnings, already printed).
    pub notes: Vec<String>,
    /// `<target>/leakcheck`: report, flame graphs, metrics.
    pub out_dir: PathBuf,
    /// `<target>/leakcheck/dumps`: per-process files.
    pub work_dir: PathBuf,
    /// The profiling runtime.
    pub runtime: PathBuf,
    /// `--annotations`, when given (see [`crate::report::github::enabled`]).
    pub annotations: Option<String>,
    /// How long each test took in the previous run on this target directory.
    pub history: History,
    /// How long each test's process ran in this run, for the page (`test`, `nextest`).
    pub durations: crate::report::junit::Durations,
    /// Held for the whole command: a second run on the same target directory waits.
    _lock: FileLock,
}

impl Session {
    /// The selected workspace members.
    pub fn selected(&self) -> Vec<&Member> {
        self.selected
            .iter()
            .filter_map(|n| self.ws.members.get(n))
            .collect()
    }
}

/// Sets a command up: reads the workspace, checks the selection (`test_targets`: the
/// `--test` names) and the configuration before anything is built, then takes the output
/// directory and finds (or builds) the runtime.
pub fn prepare(
    selection: &Selection,
    test_targets: &[String],
    config_path: Option<&Path>,
    verbose: bool,
) -> Result<Session, Error> {
    let ws = cargo::load_workspace(selection)?;
    let current = cargo::current_package(&ws, selection.manifest_path.as_deref());
    let selected: Vec<String> =
        cargo::selected_members(&ws, selection, test_targets, current.as_deref())?
            .into_iter()
            .map(|m| m.name.clone())
            .collect();
    open(ws, selected, config_path, verbose)
}

/// Reads the configuration, takes and clears the output directory, finds the runtime.
fn open(
    ws: Workspace,
    selected: Vec<String>,
    config_path: Option<&Path>,
    verbose: bool,
) -> Result<Session, Error> {
    let (config, warnings) = config::load(config_path, &ws.root)?;
    for w in &warnings {
        crate::say!("warning: {w}");
    }
    // The output directory before the long work, so a bad path fails fast.
    let (out_dir, work_dir, lock, history) = prepare_output(&ws.target_dir)?;
    let runtime = runtime::locate(verbose)?;
    Ok(Session {
        ws,
        selected,
        config,
        notes: warnings,
        out_dir,
        work_dir,
        runtime,
        annotations: None,
        history,
        durations: Default::default(),
        _lock: lock,
    })
}

/// A session outside any cargo project (`run --command` in a directory without a
/// `Cargo.toml` above it): the current directory stands for the workspace root, its
/// outputs go to `<target_dir>/leakcheck` (default `./target`), and the configuration is
/// looked for there as in a workspace.
pub fn prepare_bare(
    target_dir: Option<&Path>,
    config_path: Option<&Path>,
    verbose: bool,
) -> Result<Session, Error> {
    let root = std::env::current_dir().map_err(|e| Error::io("read the current directory", e))?;
    let ws = Workspace {
        target_dir: target_dir.map_or_else(|| root.join("target"), |t| root.join(t)),
        root,
        members: Default::default(),
        toolchain_libdir: None,
    };
    open(ws, Vec::new(), config_path, verbose)
}

/// Whether `dir` or a directory above it holds a `Cargo.toml` (cargo would find a project).
pub fn in_cargo_project(dir: &Path) -> bool {
    dir.ancestors().any(|d| d.join("Cargo.toml").is_file())
}

/// Takes `<target>/leakcheck.lock` (waiting for another run that holds it), reads how long
/// the previous run's tests took, then empties `<target>/leakcheck` (a stale artifact must
/// never pass for a new one) and creates its `dumps` directory.
fn prepare_output(target_dir: &Path) -> Result<(PathBuf, PathBuf, FileLock, History), Error> {
    let lock = crate::execution::lock::exclusive(
        &target_dir.join("leakcheck.lock"),
        "another cargo-leakcheck run on this target directory",
    )?;
    let out_dir = target_dir.join("leakcheck");
    let history = History::read(&out_dir.join("metrics.json"));
    if out_dir.exists() {
        std::fs::remove_dir_all(&out_dir)
            .map_err(|e| Error::io(format!("clear `{}`", out_dir.display()), e))?;
    }
    let work_dir = out_dir.join("dumps");
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| Error::io(format!("create `{}`", work_dir.display()), e))?;
    Ok((out_dir, work_dir, lock, history))
}

/// Writes report.json and prints the summary `render` makes of it, with the output
/// directory shown relative to the current directory when it is below it.
pub fn finish(
    session: &Session,
    report: &Report,
    render: impl FnOnce(&Report, &Path, &Path) -> String,
) -> Result<(), Error> {
    json::write(report, &session.out_dir.join("report.json"))?;
    write_page(
        report,
        &session.durations,
        &session.out_dir,
        &session.ws.root,
    );
    let shown = std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            session
                .out_dir
                .strip_prefix(cwd)
                .ok()
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| session.out_dir.clone());
    let text = render(report, &session.ws.root, &shown);
    // Quiet: the totals only (from the summary line on).
    let text = match crate::console::level() {
        crate::console::Level::Quiet => text
            .find("\n Summary")
            .map_or(text.as_str(), |i| &text[i + 1..]),
        _ => text.as_str(),
    };
    crate::say_raw!("{text}");
    if crate::report::github::enabled(session.annotations.as_deref()) {
        crate::report::github::emit(report, &session.ws.root, &shown);
    }
    Ok(())
}

/// Writes the JUnit XML of a bench or service report where `--junit` (or `[output] junit` in
/// leakcheck.toml) asks for it.
pub fn write_bench_junit(
    session: &Session,
    report: &Report,
    outputs: &crate::cli::CiOutputs,
) -> Result<(), Error> {
    let path = outputs.junit.clone().or_else(|| {
        session
            .config
            .junit
            .as_ref()
            .map(|p| session.ws.root.join(p))
    });
    if let Some(path) = path {
        let xml = crate::report::junit::render(
            report,
            &Default::default(),
            &[],
            &session.out_dir,
            &session.ws.root,
        );
        write_file(&path, &xml)?;
        crate::info!("       Wrote JUnit XML to `{}`", path.display());
    }
    Ok(())
}

/// Writes an output file, creating its directory.
pub fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create `{}`", dir.display()), e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(format!("write `{}`", path.display()), e))
}

/// Checks `--baseline`/`--fail-on` before the long work: a base that is missing, not a
/// report or of another schema fails now, with exit 2. The base report, when given.
pub fn read_baseline(against: &crate::cli::Against) -> Result<Option<Report>, Error> {
    let fail_on_new = against.fail_on == Some(crate::cli::FailOn::New);
    let Some(path) = &against.baseline else {
        if fail_on_new {
            return Err(Error::Usage(
                "--fail-on new needs --baseline: the base run to tell new leaks from old".into(),
            ));
        }
        return Ok(None);
    };
    let (_, base) = json::read(path).map_err(|e| match e {
        crate::errors::MergeError::Version { path, found, .. } => Error::Usage(format!(
            "--baseline `{}` has report schema version {found}, but this cargo-leakcheck reads version {}: make the base run with this version",
            path.display(),
            crate::model::REPORT_VERSION
        )),
        other => Error::Usage(format!("--baseline: {other}")),
    })?;
    Ok(Some(base))
}

/// Marks `report`'s leaks against the base run read by [`read_baseline`].
pub fn compare_with_baseline(
    report: &mut Report,
    base: Option<&Report>,
    against: &crate::cli::Against,
) -> Result<(), Error> {
    let (Some(base), Some(path)) = (base, &against.baseline) else {
        return Ok(());
    };
    let fail_on_new = against.fail_on == Some(crate::cli::FailOn::New);
    let compared =
        crate::analysis::baseline::compare(base, report, &path.display().to_string(), fail_on_new)
            .map_err(|e| Error::Usage(format!("--baseline `{}`: {e}", path.display())))?;
    report.baseline = Some(compared);
    Ok(())
}

/// Writes `index.html` beside the report; a page that cannot be written is a warning, never
/// a lost result (report.json is written already).
pub fn write_page(
    report: &Report,
    durations: &crate::report::junit::Durations,
    out_dir: &Path,
    root: &Path,
) {
    let page = crate::report::html::Page {
        command: &command_line(),
        date: crate::report::html::utc_text(std::time::SystemTime::now()),
        durations,
    };
    if let Err(e) = crate::report::html::write(report, &page, out_dir, root) {
        crate::say!(
            "warning: could not write `{}`: {e}",
            out_dir.join(crate::model::PAGE_FILE).display()
        );
    }
}

/// The command line as typed: `cargo leakcheck …` (cargo passes `leakcheck` first).
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match args.first().map(String::as_str) {
        Some("leakcheck") => &args[1..],
        _ => &args[..],
    };
    let mut line = String::from("cargo leakcheck");
    for a in args {
        line.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            line.push_str(&format!("'{}'", a.replace('\'', "'\\''")));
        } else {
            line.push_str(a);
        }
    }
    line
}

/// The settings given on the command line (`--threshold`, `--test-threshold`,
/// `--timeout`, `--extra-runs`), which win over the configuration file's.
pub fn cli_settings(flags: &crate::cli::Checking) -> Result<config::SettingsLayer, Error> {
    let size = |flag: &str, v: &Option<String>| -> Result<Option<u64>, Error> {
        v.as_deref()
            .map(|t| config::parse_size(t).map_err(|e| Error::Usage(format!("{flag}: {e}"))))
            .transpose()
    };
    if flags.full_repetition {
        eprintln!(
            "warning: --full-repetition has no effect any more: every test that retained memory is run again as often as its evidence needs, whatever the runs cost"
        );
    }
    if flags.timeout == Some(0) {
        return Err(Error::Usage("--timeout must be at least 1 second".into()));
    }
    Ok(config::SettingsLayer {
        stack_threshold: size("--threshold", &flags.threshold)?,
        test_threshold: size("--test-threshold", &flags.test_threshold)?,
        one_time_fails: None,
        timeout: flags.timeout,
        extra_runs: flags.extra_runs,
        unsettled_fails: None,
    })
}

/// Why an interruption left tests unjudged: "interrupted by SIGINT".
pub fn interrupted_why() -> String {
    let signal =
        crate::execution::interrupt::requested().map_or("a signal", crate::evidence::signal_name);
    format!("interrupted by {signal}")
}

/// The note a report gets when an interruption left `n` items unjudged.
pub fn interrupted_note(n: usize, one: &str, many: &str) -> String {
    format!(
        "{}: {} did not finish and {} not in this report",
        interrupted_why(),
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        },
        if n == 1 { "is" } else { "are" }
    )
}
