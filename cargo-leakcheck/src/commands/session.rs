//! The steps every command shares: before the work (workspace and selected packages, the
//! configuration and its warnings, the locked output directory, the runtime) and after it
//! (report.json and the summary, paths shown relative to where the user is).

use crate::cli::Selection;
use crate::config::{self, Config};
use crate::errors::Error;
use crate::errors::ExitCode;
use crate::execution::cargo::{self, Member, Workspace};
use crate::execution::history::History;
use crate::execution::lock::FileLock;
use crate::execution::runtime;
use crate::judging::capture::Recorder;
use crate::model::Report;
use crate::model::TestKey;
use crate::report::artifacts;
use crate::report::export::{self, Destination, Export, Outputs, RunFacts};
use crate::report::json;
use std::collections::HashMap;
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
    /// How long each test took in the previous run on this target directory.
    pub history: History,
    /// Whether judged cases are recorded as golden cases (chosen once, here).
    pub recorder: Recorder,
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

    /// Where the run's outputs go.
    pub fn destination(&self) -> Destination {
        Destination::new(self.out_dir.clone(), self.ws.root.clone())
    }

    /// The outputs the command line and the configuration ask for; the configuration's
    /// unknown outputs are warned about and noted.
    pub fn outputs(&mut self, asked: &crate::cli::OutputArgs) -> Outputs {
        let (outputs, warnings) = export::choose(&asked.0, &self.config, &self.ws.root);
        for w in warnings {
            crate::say!("warning: {w}");
            self.notes.push(w);
        }
        outputs
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
        history,
        recorder: Recorder::from_env(),
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

/// Draws the flame graphs, profiles and plots of what failed (see
/// [`crate::report::artifacts`]); seconds spent per test.
pub fn draw(report: &mut Report, to: &Destination) -> HashMap<TestKey, f64> {
    artifacts::write(report, &to.out_dir, &to.root)
}

/// The end every command shares: writes every output the run asks for (report.json first,
/// the summary last) and returns the exit code the gate gives the report.
pub fn finish(
    report: &Report,
    to: &Destination,
    facts: RunFacts,
    outputs: &Outputs,
) -> Result<ExitCode, Error> {
    let facts = RunFacts {
        command: command_line(),
        date: crate::report::html::utc_text(std::time::SystemTime::now()),
        ..facts
    };
    let run = Export {
        report,
        to,
        facts: &facts,
    };
    export::write_all(&run, outputs)?;
    Ok(report.exit_code())
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

/// The settings given on the command line (`cli::SettingFlags`: `--threshold`,
/// `--test-threshold`, `--timeout`, `--extra-runs`), which win over the configuration file's.
pub fn cli_settings(flags: &crate::cli::Checking) -> Result<config::SettingsLayer, Error> {
    if flags.full_repetition {
        eprintln!(
            "warning: --full-repetition has no effect any more: every test that retained memory is run again as often as its evidence needs, whatever the runs cost"
        );
    }
    flags.settings.layer().map_err(Error::Usage)
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
