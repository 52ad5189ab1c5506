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
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(report(&target)["tests"].as_array().unwrap().len(), 2);
}
