//! Bad luck: output that cannot be written, interruption, concurrent runs, damaged caches,
//! odd test output and names. Nothing may be lost, nothing left running.

use crate::harness::{copy_fixture, scratch, tool};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tool on a copy of a fixture, with its own target directory.
fn command(fixture: &str, target: &str, args: &[&str]) -> (Command, PathBuf) {
    let project = copy_fixture(fixture);
    let target = scratch().join("targets").join(target);
    let mut cmd = tool();
    cmd.arg("test")
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .args(args);
    (cmd, target)
}

fn report(target: &Path) -> Value {
    let text = std::fs::read_to_string(target.join("leakcheck/report.json"))
        .unwrap_or_else(|e| panic!("report.json in {}: {e}", target.display()));
    serde_json::from_str(&text).unwrap()
}

const SMALL_LEAKY: &[&str] = &["--lib", "--", "tests::forget_vec", "tests::joined_thread"];

#[test]
fn an_unwritable_stderr_loses_neither_the_report_nor_the_exit_code() {
    // A full disk.
    let (mut cmd, target) = command("tests/fixtures/leaky", "faults-full-stderr", SMALL_LEAKY);
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let status = cmd.stderr(full).stdout(Stdio::null()).status().unwrap();
    assert_eq!(status.code(), Some(3), "leaks found, whatever stderr does");
    assert_eq!(report(&target)["tests"].as_array().unwrap().len(), 2);

    // A reader that went away (`| head`).
    let (mut cmd, target) = command("tests/fixtures/leaky", "faults-closed-stderr", SMALL_LEAKY);
    let (mut child, stderr) = spawn_with_stderr(&mut cmd);
    drop(stderr);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(report(&target)["tests"].as_array().unwrap().len(), 2);
}

/// Starts the tool with its stderr piped to the test, stdout discarded.
fn spawn_with_stderr(
    cmd: &mut Command,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
) {
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    (child, stderr)
}

/// Reads stderr line by line until a line contains `needle`; everything read so far. The
/// run ending first fails the test.
fn read_until(stderr: &mut impl std::io::BufRead, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("the run ended before printing `{needle}`:\n{seen}");
        }
        seen.push_str(&line);
        if line.contains(needle) {
            return seen;
        }
    }
}

/// Holds `path` locked as another run would.
fn hold_lock(path: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    f
}

#[test]
fn a_run_waits_for_another_run_on_the_same_target_dir_and_leaves_its_files_alone() {
    let (mut cmd, target) = command("tests/fixtures/leaky", "faults-locked", SMALL_LEAKY);
    // The output of the run that holds the lock; the waiting run must not touch it.
    let theirs = target.join("leakcheck/report.json");
    std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
    std::fs::write(&theirs, "the other run's report").unwrap();
    let held = hold_lock(&target.join("leakcheck.lock"));
    let (mut child, mut stderr) = spawn_with_stderr(&mut cmd);
    let seen = read_until(
        &mut stderr,
        "Blocking waiting for another cargo-leakcheck run",
    );
    assert!(seen.contains("leakcheck.lock"), "{seen}");
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "the other run's report"
    );
    drop(held);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{seen}{rest}");
    assert_eq!(report(&target)["tests"].as_array().unwrap().len(), 2);
}

#[test]
fn two_runs_started_together_on_one_target_dir_both_get_every_result() {
    let spawn = || {
        let (mut cmd, target) = command("tests/fixtures/leaky", "faults-together", SMALL_LEAKY);
        let child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        (child, target)
    };
    let (a, target) = spawn();
    let (b, _) = spawn();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains("2 tests: 1 clean, 1 leak") && !stderr.contains("error"),
            "{stderr}"
        );
    }
    let report = report(&target);
    let tests = report["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 2);
    let verdict = |name: &str| tests.iter().find(|t| t["name"] == name).unwrap()["verdict"].clone();
    assert_eq!(verdict("tests::forget_vec"), "leak");
    assert_eq!(verdict("tests::joined_thread"), "clean");
}

/// The child processes of `parent` whose command line contains `needle`.
fn children_running(parent: u32, needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[test]
fn an_interrupted_run_stops_its_tests_and_reports_what_finished() {
    for (signal, code, name) in [
        (libc::SIGTERM, 143, "SIGTERM"),
        (libc::SIGINT, 130, "SIGINT"),
    ] {
        let (mut cmd, target) = command(
            "tests/fixtures/misbehaving",
            &format!("faults-interrupted-{name}"),
            &[
                "--timeout",
                "600",
                "-j",
                "2",
                "--",
                "tests::hangs",
                "tests::passes_clean",
            ],
        );
        let (mut child, mut stderr) = spawn_with_stderr(&mut cmd);
        // The clean test has finished...
        let seen = read_until(&mut stderr, "Counting 1/2 tests done");
        // ...and the hanging one is running (it may start a moment later).
        let started = std::time::Instant::now();
        let hanging = loop {
            if let Some(&pid) = children_running(child.id(), "tests::hangs").first() {
                break pid;
            }
            assert!(
                started.elapsed().as_secs() < 60,
                "the hanging test never started"
            );
            std::thread::yield_now();
        };
        // SAFETY: signalling the child we spawned.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{seen}{rest}");
        assert!(!alive(hanging), "the test process outlived the run");
        assert!(rest.contains(&format!("Interrupted by {name}")), "{rest}");
        let report = report(&target);
        let tests = report["tests"].as_array().unwrap();
        assert_eq!(tests.len(), 1, "{tests:?}");
        assert_eq!(tests[0]["name"], "tests::passes_clean");
        assert_eq!(tests[0]["verdict"], "clean");
        let note =
            format!("interrupted by {name}: 1 test did not finish and is not in this report");
        assert!(
            report["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == note.as_str()),
            "{:?}",
            report["notes"]
        );
    }
}

/// The runtime library the tool uses with the suite's shared cache (built by then).
fn cached_runtime() -> PathBuf {
    let (mut cmd, _) = command(
        "tests/fixtures/leaky",
        "faults-runtime-path",
        &["-v", "--lib", "--", "tests::joined_thread"],
    );
    let out = cmd.stdout(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Runtime `"))
        .unwrap_or_else(|| panic!("-v names the runtime:\n{stderr}"));
    PathBuf::from(line.trim_end_matches('`'))
}

/// A cache directory holding the runtime's directory with its library truncated.
fn damaged_cache(name: &str) -> (PathBuf, PathBuf) {
    let lib = cached_runtime();
    let runtime_dir = lib.parent().unwrap();
    let cache = scratch().join(name);
    let _ = std::fs::remove_dir_all(&cache);
    let copy = cache.join(runtime_dir.file_name().unwrap());
    std::fs::create_dir_all(&copy).unwrap();
    let data = std::fs::read(&lib).unwrap();
    std::fs::write(copy.join(lib.file_name().unwrap()), &data[..data.len() / 3]).unwrap();
    (cache, copy.join(lib.file_name().unwrap()))
}

#[test]
fn a_damaged_cached_runtime_is_replaced_not_used() {
    let original = std::fs::read(cached_runtime()).unwrap();
    let (cache, lib) = damaged_cache("damaged-runtime-cache");
    let (mut cmd, target) = command(
        "tests/fixtures/leaky",
        "faults-damaged-runtime",
        SMALL_LEAKY,
    );
    let out = cmd
        .env("LEAKCHECK_CACHE_DIR", &cache)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the cached runtime `{}` is damaged",
            lib.display()
        )),
        "{stderr}"
    );
    assert!(std::fs::read(&lib).unwrap() == original, "restored whole");
    let report = report(&target);
    let verdicts: Vec<&str> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["leak", "clean"]);
}

#[test]
fn a_first_run_builds_nothing_but_the_tests() {
    // An empty cache, as on a fresh machine or CI runner, and a cargo that logs each call.
    let cache = scratch().join("first-run-cache");
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    let log = cache.join("cargo-calls.log");
    let wrapper = scratch().join("logging-cargo");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\necho \"$*\" >> \"$CARGO_CALL_LOG\"\nexec \"$REAL_CARGO\" \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mut cmd, target) = command("tests/fixtures/leaky", "faults-first-run", SMALL_LEAKY);
    let out = cmd
        .env("LEAKCHECK_CACHE_DIR", &cache)
        .env("CARGO_CALL_LOG", &log)
        .env(
            "REAL_CARGO",
            std::env::var_os("CARGO").unwrap_or("cargo".into()),
        )
        .env("CARGO", &wrapper)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(report(&target)["tests"].as_array().unwrap().len(), 2);
    // Only the project's own metadata and test build; nothing else is compiled.
    let calls = std::fs::read_to_string(&log).unwrap();
    for call in calls.lines() {
        assert!(
            call.starts_with("metadata ") || call.starts_with("test "),
            "an unexpected cargo call on a first run: {call}\n{calls}"
        );
        assert!(!call.contains("runtime"), "{call}");
    }
    assert!(calls.lines().any(|c| c.starts_with("test ")), "{calls}");
    assert!(
        !stderr.contains("Building the leakcheck runtime"),
        "{stderr}"
    );
    let written: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let lib = written[0].join("libleakcheck_runtime.so");
    assert_eq!(
        std::fs::read(&lib).unwrap(),
        std::fs::read(cached_runtime()).unwrap(),
        "the runtime written out is the one every run uses"
    );
}

#[test]
fn an_unwritable_runtime_cache_stops_the_run_naming_it() {
    // A file where the cache directory should be.
    let blocker = scratch().join("cache-is-a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let (mut cmd, _) = command(
        "tests/fixtures/leaky",
        "faults-unwritable-cache",
        SMALL_LEAKY,
    );
    let out = cmd
        .env("LEAKCHECK_CACHE_DIR", &blocker)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not write the runtime to `{}/runtime-",
            blocker.display()
        )),
        "{stderr}"
    );
}
