//! Golden cases: one test's evidence, captured from a real run into a directory of its own
//! (its record, dumps, scan files and captured output, copied; the symbols its verdict asked
//! for; its settings), and judged again from that directory alone by the same loader and
//! verdict stage a run uses.
//!
//! `LEAKCHECK_CAPTURE=DIR cargo leakcheck test …` writes `DIR/<case>/case.json` and the
//! files beside it, and the report the run gave as `expected.json`. The corpus under
//! `cargo-leakcheck/testdata/golden` is judged by `cargo test` (see the `golden` tests);
//! `LEAKCHECK_BLESS=1` rewrites each case's `expected.json` with what it now gives. Benches
//! and services are captured the same way by `cargo leakcheck bench` and `run` ([`growth`]).

use crate::evidence::identity::TestIdentity;
use crate::evidence::symbols::Captured;
use crate::judging::suite::SuiteProcessFile;

use crate::config::SettingsLayer;
use crate::evidence::{ProcessEnd, ProcessResult};
use crate::execution::passes::TestOutcome;
use crate::model::{ExtraRunsStatus, Method, TargetKind, TestReport};
use std::path::{Path, PathBuf};

/// The environment variable that asks a run to capture every judged test.
pub const CAPTURE_VAR: &str = "LEAKCHECK_CAPTURE";

/// Whether a run records the cases it judges, and where: chosen once, when a command
/// starts, from [`CAPTURE_VAR`].
#[derive(Clone, Debug, Default)]
pub struct Recorder(Option<PathBuf>);

impl Recorder {
    /// The recorder the environment asks for (off unless [`CAPTURE_VAR`] names a directory).
    pub fn from_env() -> Recorder {
        Recorder(std::env::var_os(CAPTURE_VAR).map(PathBuf::from))
    }

    /// Where cases go, when recording.
    pub fn root(&self) -> Option<&Path> {
        self.0.as_deref()
    }
}

/// A case's description, `case.json`; file names are relative to its directory.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CaseFile {
    pub package: String,
    pub binary: String,
    pub kind: TargetKind,
    pub name: String,
    pub method: Method,
    /// The executable's path in the run it was captured from (frames name it).
    pub exe: String,
    pub custom_allocator: bool,
    /// The process the verdict is drawn from.
    pub own: ProcessFile,
    /// Its counting-pass process, when it had one apart from `own`.
    pub counting: Option<ProcessFile>,
    /// Its binary's harness-only baseline, when it had one.
    pub baseline: Option<ProcessFile>,
    pub extra_runs_made: u32,
    pub extra_runs: ExtraRunsStatus,
    /// `(address, file offset of its first byte, of the byte after its last)`.
    pub entry: Option<(u64, u64, u64)>,
    /// The command line's settings.
    pub cli: SettingsLayer,
    /// The text of `leakcheck.toml`, when the run had one.
    pub config: Option<String>,
    /// What its verdict asked of the binary's symbols.
    pub symbols: Captured,
    /// Its binary's collections, when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collections: Option<crate::evidence::CollectionTable>,
    /// The run's scanned processes of the executables the test's processes started, which
    /// its children's losses were compared with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suite: Vec<SuiteProcessFile>,
}

/// The run's processes of every executable a captured test's processes started.
fn suite_files(c: &Capture) -> Vec<SuiteProcessFile> {
    let mut exes: Vec<&str> = [Some(&c.test.result), c.test.counted.as_ref()]
        .into_iter()
        .flatten()
        .flat_map(|r| r.children.iter())
        .filter(|child| child.checked)
        .map(|child| child.exe.as_str())
        .collect();
    exes.sort_unstable();
    exes.dedup();
    let mut out = Vec::new();
    for exe in exes {
        for p in c.suite.of(exe) {
            out.push(crate::judging::suite::file_of(exe, &p.test, &p.lost));
        }
    }
    out
}

/// One process's evidence in a case.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ProcessFile {
    /// `exit N`, `signal N`, `timeout`, `interrupted` or `spawn-failed: WHY`.
    pub end: String,
    pub timeout_ms: u64,
    pub left_running: Vec<String>,
    pub record: Option<String>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub preload_dumps: Vec<String>,
    pub app_dumps: Vec<String>,
    pub run_dumps: Vec<Vec<String>>,
    /// The processes it started.
    #[serde(default)]
    pub children: Vec<ChildFile>,
}

/// A process a captured process started: its record, and its exit dump (with its scan's
/// files beside it) when it left one.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ChildFile {
    pub exe: String,
    pub run: u32,
    pub checked: bool,
    pub dump: Option<String>,
}

fn end_word(end: &ProcessEnd) -> String {
    match end {
        ProcessEnd::Exited(c) => format!("exit {c}"),
        ProcessEnd::Signaled(s) => format!("signal {s}"),
        ProcessEnd::TimedOut => "timeout".into(),
        ProcessEnd::Interrupted => "interrupted".into(),
        ProcessEnd::SpawnFailed(why) => format!("spawn-failed: {why}"),
    }
}

/// What a run knows of one judged test, to capture.
pub struct Capture<'a> {
    pub id: &'a TestIdentity<'a>,
    pub test: &'a TestOutcome,
    pub exe: &'a str,
    pub custom_allocator: bool,
    pub baseline: Option<&'a ProcessResult>,
    pub cli: &'a SettingsLayer,
    pub config_file: Option<&'a Path>,
    pub symbols: Captured,
    pub report: &'a TestReport,
    pub collections: &'a crate::evidence::CollectionTable,
    pub suite: &'a crate::evidence::test_run::SuiteProcesses,
}

/// Writes a case under `root`, in a directory named after the test; returns it.
pub fn write(root: &Path, c: &Capture) -> std::io::Result<PathBuf> {
    let stem = case_stem(&[c.id.package, c.id.binary, c.id.name]);
    let dir = root.join(stem);
    std::fs::create_dir_all(&dir)?;
    let t = c.test;
    let case = CaseFile {
        package: c.id.package.into(),
        binary: c.id.binary.into(),
        kind: c.id.kind,
        name: c.id.name.into(),
        method: t.method,
        exe: c.exe.into(),
        custom_allocator: c.custom_allocator,
        own: copy_process(&t.result, &dir, "own")?,
        counting: match &t.counted {
            Some(r) if t.method != Method::Counters => Some(copy_process(r, &dir, "counting")?),
            _ => None,
        },
        baseline: match c.baseline {
            Some(r) if t.method != Method::Counters => Some(copy_process(r, &dir, "baseline")?),
            _ => None,
        },
        extra_runs_made: t.extra_runs.made,
        extra_runs: t.extra_runs.status.clone(),
        entry: t.entry.map(|e| (e.address, e.file_range.0, e.file_range.1)),
        cli: c.cli.clone(),
        config: c.config_file.and_then(|p| std::fs::read_to_string(p).ok()),
        symbols: c.symbols.clone(),
        collections: (!c.collections.collections.is_empty()).then(|| c.collections.clone()),
        suite: suite_files(c),
    };
    write_json(&dir.join("case.json"), &case)?;
    write_json(&dir.join("expected.json"), c.report)?;
    Ok(dir)
}

/// A case's directory name: its parts joined by `-`, anything but letters, digits, `-` and
/// `_` made `_`.
fn case_stem(parts: &[&str]) -> String {
    parts
        .join("-")
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

/// Copies a dump to `to`, with the scan's `.paths`, `.unreached` and `.cycles` files and
/// the collections' sites beside it when `with_scan` (those a dump has not are not an
/// error).
fn copy_with_scan(from: &Path, to: &Path, with_scan: bool) -> std::io::Result<()> {
    if with_scan {
        for side in [
            crate::evidence::paths::paths_file,
            crate::evidence::unreached::unreached_path,
            crate::evidence::cycles::cycles_file,
            crate::evidence::load::sites_file,
        ] {
            if let Err(e) = std::fs::copy(side(from), side(to)) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(e);
                }
            }
        }
    }
    std::fs::copy(from, to).map(|_| ())
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(path, text)
}

/// Copies a process's files into `dir` as `<prefix>.*`, with the scan's files beside each
/// dump under the dump's new name.
fn copy_process(r: &ProcessResult, dir: &Path, prefix: &str) -> std::io::Result<ProcessFile> {
    let copy = |from: &Path, name: String| -> std::io::Result<Option<String>> {
        match std::fs::copy(from, dir.join(&name)) {
            Ok(_) => Ok(Some(name)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    };
    let copy_dump = |from: &Path, name: String| -> std::io::Result<String> {
        copy_with_scan(from, &dir.join(&name), true)?;
        Ok(name)
    };
    Ok(ProcessFile {
        end: end_word(&r.end),
        timeout_ms: r.timeout.as_millis() as u64,
        left_running: r.left_running.clone(),
        record: match &r.record_file {
            Some(f) => {
                // Where an extra run died, beside the record it belongs to.
                let died = crate::evidence::died::died_file(Path::new(&format!("{prefix}.record")));
                copy(
                    &crate::evidence::died::died_file(f),
                    died.display().to_string(),
                )?;
                copy(f, format!("{prefix}.record"))?
            }
            None => None,
        },
        stdout: copy(&r.stdout, format!("{prefix}.stdout"))?,
        stderr: copy(&r.stderr, format!("{prefix}.stderr"))?,
        preload_dumps: r
            .preload_dumps
            .iter()
            .enumerate()
            .map(|(i, d)| copy_dump(d, format!("{prefix}.preload.{i}.heap")))
            .collect::<Result<_, _>>()?,
        app_dumps: r
            .app_dumps
            .iter()
            .enumerate()
            .map(|(i, d)| copy_dump(d, format!("{prefix}.app.{i}.heap")))
            .collect::<Result<_, _>>()?,
        run_dumps: r
            .run_dumps
            .iter()
            .enumerate()
            .map(|(k, dumps)| {
                dumps
                    .iter()
                    .enumerate()
                    .map(|(i, d)| copy_dump(d, format!("{prefix}.run{}.{i}.heap", k + 1)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?,
        children: r
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Ok(ChildFile {
                    exe: c.exe.clone(),
                    run: c.run,
                    checked: c.checked,
                    dump: match &c.dump {
                        Some(d) => Some(copy_dump(d, format!("{prefix}.child{i}.heap"))?),
                        None => None,
                    },
                })
            })
            .collect::<std::io::Result<_>>()?,
    })
}

#[cfg(test)]
pub(crate) mod golden;
pub mod growth;
