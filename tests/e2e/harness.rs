//! Running the tool on fixture copies, once per distinct set of arguments.

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Scratch space under the workspace's target dir, kept between runs so fixture builds
/// and the runtime build are cached.
pub fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("leakcheck-e2e")
}

/// The cache the tool builds its runtime into; shared by every run of the suite.
pub fn runtime_cache() -> PathBuf {
    scratch().join("runtime-cache")
}

/// A command for the tool under test, as cargo would run it.
pub fn tool() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cargo-leakcheck"));
    cmd.arg("leakcheck")
        .env("LEAKCHECK_CACHE_DIR", runtime_cache())
        .env_remove("LEAKCHECK_RUNTIME")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        // The suite may itself run in GitHub Actions; annotations are tested on purpose.
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    cmd
}

/// Copies a fixture to a stable place, keeping modification times so cargo's fingerprints
/// stay valid and repeated runs do not rebuild.
pub fn copy_fixture(fixture: &str) -> PathBuf {
    let src = repo_root().join(fixture);
    let dst = scratch().join("fixtures").join(fixture.replace('/', "_"));
    copy_tree(&src, &dst);
    dst
}

/// Copies a directory tree, keeping modification times.
pub fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" || name == "Cargo.lock" && !src.join("Cargo.lock").exists() {
            continue;
        }
        let from = entry.path();
        let to = dst.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&from, &to);
        } else {
            let meta = from.metadata().unwrap();
            let same = to
                .metadata()
                .is_ok_and(|m| m.len() == meta.len() && m.modified().ok() == meta.modified().ok());
            if !same {
                std::fs::copy(&from, &to).unwrap();
                let f = std::fs::File::options().write(true).open(&to).unwrap();
                f.set_modified(meta.modified().unwrap()).unwrap();
            }
        }
    }
}

/// What one run of the tool produced.
pub struct Run {
    /// Exit code.
    pub code: i32,
    /// Everything it printed on stderr.
    pub stderr: String,
    /// Everything it printed on stdout (annotations).
    pub stdout: String,
    /// `report.json`, when written.
    pub report: Option<Value>,
    /// The `leakcheck` output directory.
    pub out_dir: PathBuf,
}

impl Run {
    /// The report, which must exist.
    pub fn report(&self) -> &Value {
        self.report.as_ref().unwrap_or_else(|| {
            panic!(
                "no report.json; exit {}; stderr:\n{}",
                self.code, self.stderr
            )
        })
    }

    /// The report entry of a test.
    pub fn test(&self, binary: &str, name: &str) -> &Value {
        self.report()["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["binary"] == binary && t["name"] == name)
            .unwrap_or_else(|| {
                panic!(
                    "{binary} {name} is not in the report; stderr:\n{}",
                    self.stderr
                )
            })
    }
}

/// (binary, test) -> verdict, for every test of a report.
pub fn verdicts_of(report: &Value) -> std::collections::BTreeMap<(String, String), String> {
    report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                (
                    t["binary"].as_str().unwrap().to_string(),
                    t["name"].as_str().unwrap().to_string(),
                ),
                t["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

type RunKey = (String, Vec<String>);
/// Each distinct run is computed once; later callers wait for it and share it.
type RunCache = Mutex<HashMap<RunKey, Arc<OnceLock<Arc<Run>>>>>;

/// Runs the tool on a fixture with these arguments after `test`, once per process: later
/// callers with the same arguments get the same result. Each distinct argument list gets
/// its own target directory, so concurrent runs never share an output directory.
pub fn run_fixture(fixture: &str, args: &[&str]) -> Arc<Run> {
    static RUNS: OnceLock<RunCache> = OnceLock::new();
    let key: RunKey = (
        fixture.to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    );
    let cell = {
        let mut map = RUNS.get_or_init(Default::default).lock().unwrap();
        map.entry(key.clone()).or_default().clone()
    };
    cell.get_or_init(|| Arc::new(run_uncached(fixture, args)))
        .clone()
}

fn run_uncached(fixture: &str, args: &[&str]) -> Run {
    let variant: String = args
        .iter()
        .map(|a| {
            a.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("-");
    let target = scratch().join("targets").join(format!(
        "{}{}{}",
        fixture.replace('/', "_"),
        if variant.is_empty() { "" } else { "--" },
        variant
    ));
    run_in(fixture, args, &target)
}

/// Runs the tool on a fixture now, whatever ran before, with its own target directory
/// `name` (kept between calls, so only the first one builds). For checks that need
/// several runs of the same arguments.
pub fn run_fresh(fixture: &str, args: &[&str], name: &str) -> Run {
    run_in(fixture, args, &scratch().join("targets").join(name))
}

fn run_in(fixture: &str, args: &[&str], target: &Path) -> Run {
    run_command("test", fixture, args, target, &[])
}

/// As [`run_fresh`], with these variables in the environment the tool and the tests see.
pub fn run_fresh_with_env(fixture: &str, args: &[&str], name: &str, envs: &[(&str, &str)]) -> Run {
    run_command(
        "test",
        fixture,
        args,
        &scratch().join("targets").join(name),
        envs,
    )
}

/// Runs `cargo leakcheck nextest` on a fixture with its own target directory `name`; the
/// arguments go after the fixture's manifest path and target directory.
pub fn run_nextest(fixture: &str, args: &[&str], name: &str) -> Run {
    run_command(
        "nextest",
        fixture,
        args,
        &scratch().join("targets").join(name),
        &[],
    )
}

fn run_command(
    command: &str,
    fixture: &str,
    args: &[&str],
    target: &Path,
    envs: &[(&str, &str)],
) -> Run {
    let project = copy_fixture(fixture);
    // `nextest` takes its own options before nextest's: `[OWN…] -- [NEXTEST…]`.
    let (own, rest) = match (command, args.iter().position(|a| *a == "--")) {
        ("nextest", Some(split)) => (&args[..split], &args[split + 1..]),
        _ => (&[][..], args),
    };
    // A previous run's metrics.json is left in place: it orders the tests (longest first)
    // and must not change a verdict.
    let output = tool()
        .arg(command)
        .args(own)
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target)
        .args(rest)
        .envs(envs.iter().copied())
        .output()
        .expect("cargo-leakcheck runs");
    Run::of(&output, target)
}

impl Run {
    /// What a run of the tool with `--target-dir target` printed, exited with and wrote.
    pub fn of(output: &std::process::Output, target: &Path) -> Run {
        let out_dir = target.join("leakcheck");
        let report = std::fs::read_to_string(out_dir.join("report.json"))
            .ok()
            .map(|s| serde_json::from_str(&s).expect("report.json is valid JSON"));
        Run {
            code: output.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            report,
            out_dir,
        }
    }
}

/// Finds the `// leak-site: NAME` marker in a fixture's sources: (path relative to the
/// fixture, 1-based line).
pub fn leak_site(fixture: &str, name: &str) -> (String, u32) {
    marked_line(fixture, &format!("// leak-site: {name}"))
}

/// Finds the `// grows: NAME` marker in a fixture's sources (the line defining a
/// collection), as [`leak_site`] does.
pub fn grows_site(fixture: &str, name: &str) -> (String, u32) {
    marked_line(fixture, &format!("// grows: {name}"))
}

/// Finds the `// spawn-site: NAME` marker in a fixture's sources, as [`leak_site`] does.
pub fn spawn_site(fixture: &str, name: &str) -> (String, u32) {
    marked_line(fixture, &format!("// spawn-site: {name}"))
}

/// Finds the `// thread-spawn: NAME` marker in a fixture's sources, as [`leak_site`] does.
pub fn thread_spawn_site(fixture: &str, name: &str) -> (String, u32) {
    marked_line(fixture, &format!("// thread-spawn: {name}"))
}

/// Finds a line marked with `marker` (a comment of the fixture's) in a fixture's sources, as
/// [`leak_site`] does.
pub fn marked_line_of(fixture: &str, marker: &str) -> (String, u32) {
    marked_line(fixture, marker)
}

fn marked_line(fixture: &str, marker: &str) -> (String, u32) {
    let root = repo_root().join(fixture);
    let mut found = Vec::new();
    visit_rs(&root, &mut |path| {
        let text = std::fs::read_to_string(path).unwrap();
        for (i, line) in text.lines().enumerate() {
            // A line may carry two markers (`// spawn-site: a // leak-site: a`).
            let marked = line.match_indices(marker).any(|(i, _)| {
                line[i + marker.len()..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
            });
            if marked {
                let rel = path.strip_prefix(&root).unwrap().display().to_string();
                found.push((rel, i as u32 + 1));
            }
        }
    });
    assert_eq!(
        found.len(),
        1,
        "exactly one `{marker}` in {fixture}, found {found:?}"
    );
    found.pop().unwrap()
}

fn visit_rs(dir: &Path, f: &mut dyn FnMut(&Path)) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                visit_rs(&path, f);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            f(&path);
        }
    }
}
