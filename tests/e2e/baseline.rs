//! `--baseline` on the bundled demo, as on a pull request: a base run, then a change that
//! adds one leak and grows another, then a run against the base that says so, leads with
//! it, and with `--fail-on new` fails only for them; against a base that has both leaks at
//! their sizes, it passes. A base of another crate, or of another schema, is refused with
//! exit 2.

use crate::harness::{copy_tree, repo_root, run_fixture, scratch, tool};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A copy of the demo of its own (its sources are edited).
fn demo_copy() -> PathBuf {
    let dir = scratch().join("baseline").join("demo");
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&repo_root().join("examples/demo"), &dir);
    // Newer than the edited sources an earlier run built in the same target directory
    // (the copy keeps the originals' times), so cargo rebuilds.
    for entry in std::fs::read_dir(dir.join("src")).unwrap() {
        let file = std::fs::File::options()
            .write(true)
            .open(entry.unwrap().path())
            .unwrap();
        file.set_modified(std::time::SystemTime::now()).unwrap();
    }
    dir
}

fn check(project: &Path, extra: &[&str]) -> (Output, String) {
    let out = tool()
        .arg("test")
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(scratch().join("targets").join("baseline-demo"))
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

/// Keeps the run's report.json as `name` (the next run empties the output directory).
fn keep_report(name: &str) -> PathBuf {
    let from = scratch()
        .join("targets")
        .join("baseline-demo")
        .join("leakcheck")
        .join("report.json");
    let to = scratch().join("baseline").join(name);
    std::fs::copy(from, &to).unwrap();
    to
}

fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{}: no `{from}`", file.display());
    std::fs::write(file, text.replace(from, to)).unwrap();
}

#[test]
fn a_change_that_adds_a_leak_and_grows_another_is_told_apart_from_the_old_leaks() {
    let project = demo_copy();
    let (out, stderr) = check(&project, &[]);
    assert_eq!(out.status.code(), Some(3), "the demo leaks:\n{stderr}");
    let base = keep_report("base.json");

    // The change: `frame_round_trip` no longer releases its frame (a new leak), and
    // `frame_starts_with_length` forgets a larger buffer (a grown one).
    let frame = project.join("src/frame.rs");
    edit(
        &frame,
        "        release(frame);\n",
        "        drop(frame);\n",
    );
    edit(&frame, "encode(&[0x42; 2048])", "encode(&[0x42; 8192])");
    edit(&frame, "[0, 0, 8, 0]", "[0, 0, 32, 0]");
    // Its stack keeps the same functions: the same leak, larger.
    let base_text = base.to_str().unwrap();
    let (out, stderr) = check(&project, &["--baseline", base_text]);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    // What changed leads the output.
    let first = stderr
        .lines()
        .find(|l| l.contains("Baseline"))
        .unwrap_or_else(|| panic!("no baseline line:\n{stderr}"));
    assert!(
        first.contains("1 new, 1 grown, 2 unchanged, 0 gone"),
        "{first}\n{stderr}"
    );
    let new_at = stderr.find("     NEW leakcheck_demo frame::tests::frame_round_trip (was clean)");
    let grown_at =
        stderr.find("   GROWN leakcheck_demo frame::tests::frame_starts_with_length (retains");
    let first_leak = stderr.find("    LEAK ");
    assert!(
        new_at.is_some() && grown_at.is_some() && new_at < first_leak,
        "{stderr}"
    );
    let now = keep_report("now.json");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&now).unwrap()).unwrap();
    let b = &report["baseline"];
    assert_eq!(
        (
            b["new"].as_u64(),
            b["grown"].as_u64(),
            b["unchanged"].as_u64()
        ),
        (Some(1), Some(1), Some(2)),
        "{b}"
    );
    let page =
        std::fs::read_to_string(scratch().join("targets/baseline-demo/leakcheck/index.html"))
            .unwrap();
    assert!(
        page.contains("<b>1 new, 1 grown, 2 unchanged, 0 gone</b>"),
        "the page leads with the change"
    );

    // Only new and grown leaks fail.
    let (out, stderr) = check(&project, &["--baseline", base_text, "--fail-on", "new"]);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("only new and grown leaks fail"), "{stderr}");
    // Against a base that has both leaks at their current sizes: nothing new, exit 0.
    let (out, stderr) = check(
        &project,
        &["--baseline", now.to_str().unwrap(), "--fail-on", "new"],
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("0 new, 0 grown, 4 unchanged, 0 gone"),
        "{stderr}"
    );
    // Without --fail-on new, the same leaks fail as always.
    let (out, stderr) = check(&project, &["--baseline", now.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{stderr}");

    // A base of another crate, and one of another schema: exit 2, naming the file.
    let leaky = run_fixture("tests/fixtures/leaky", &[]);
    let other = leaky.out_dir.join("report.json");
    let (out, stderr) = check(&project, &["--baseline", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is a run of leaky, not of leakcheck-demo: no package in common"),
        "{stderr}"
    );
    let mut old: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    old["version"] = 0.into();
    let old_path = scratch().join("baseline").join("old.json");
    std::fs::write(&old_path, old.to_string()).unwrap();
    let (out, stderr) = check(&project, &["--baseline", old_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("has report schema version 0, but this cargo-leakcheck reads version 1"),
        "{stderr}"
    );
    // --fail-on new without a base to tell new from old.
    let (out, stderr) = check(&project, &["--fail-on", "new"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--fail-on new needs --baseline"),
        "{stderr}"
    );
}
