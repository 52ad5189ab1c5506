//! `leakcheck.toml`: every key and precedence rule against the fixtures, the errors and
//! warnings users see, and the `--write-suppressions` round trip.

use crate::harness::{copy_fixture, repo_root, run_fixture, scratch, tool, Run};
use serde_json::Value;

fn config(name: &str) -> String {
    repo_root()
        .join("tests/e2e/configs")
        .join(name)
        .display()
        .to_string()
}

fn allowed(t: &Value) -> Vec<&Value> {
    t["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["allowed"].is_object())
        .collect()
}

fn verdict<'a>(run: &'a Run, name: &str) -> &'a str {
    run.test("leaky", name)["verdict"].as_str().unwrap()
}

#[test]
fn thresholds_one_time_and_precedence() {
    let file = config("thresholds.toml");
    let run = run_fixture("tests/fixtures/leaky", &["--lib", "--config", &file]);
    assert_eq!(run.report()["settings"]["config"], file.as_str());
    // [defaults] stack-threshold = 1KiB
    assert_eq!(verdict(&run, "tests::forget_vec"), "leak");
    let tiny = run.test("leaky", "tests::tiny_leak");
    assert_eq!(tiny["verdict"], "clean", "{tiny}");
    let rule = allowed(tiny)[0]["allowed"]["rule"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        rule.starts_with(
            "<= 65536 bytes (stack-threshold set by [[tests]] #1 (filter \"tests::*leak*\")"
        ),
        "{rule}"
    );
    // [[tests]] #1 allows box_leak; the later #2 holds inline_always_leak to 0B again.
    assert_eq!(verdict(&run, "tests::box_leak"), "clean");
    assert_eq!(
        run.test("leaky", "tests::box_leak")["stack_threshold"],
        65536
    );
    assert_eq!(verdict(&run, "tests::inline_always_leak"), "leak");
    // test-threshold: stacks under 1MiB each, 21.5 KiB in all.
    let registry = run.test("leaky", "tests::growing_global_registry");
    assert_eq!(registry["verdict"], "leak");
    assert_eq!(registry["test_threshold"], 4096);
    assert!(
        registry["message"]
            .as_str()
            .unwrap()
            .contains("over the test-threshold of 4096 bytes"),
        "{registry}"
    );
    // one-time-fails turns the OnceLock initialisation into a failure; elsewhere it is fine.
    assert_eq!(verdict(&run, "tests::once_lock_init"), "leak");
    assert_eq!(verdict(&run, "tests::lazy_lock_init"), "clean");
    assert!(
        run.stderr.contains("ALLOWED leaky tests::box_leak"),
        "{}",
        run.stderr
    );

    // Command-line flags win over every entry of the file.
    let cli = run_fixture(
        "tests/fixtures/leaky",
        &["--lib", "--config", &file, "--threshold", "0B"],
    );
    assert_eq!(verdict(&cli, "tests::tiny_leak"), "leak");
    assert_eq!(verdict(&cli, "tests::box_leak"), "leak");
    assert_eq!(cli.test("leaky", "tests::box_leak")["stack_threshold"], 0);
}

#[test]
fn suppressions_allow_with_reason_and_unused_ones_are_reported() {
    let file = config("suppress.toml");
    let run = run_fixture("tests/fixtures/leaky", &["--config", &file]);
    let rc = run.test("leaky", "tests::rc_cycle");
    assert_eq!(rc["verdict"], "clean", "{rc}");
    let stacks = allowed(rc);
    assert!(!stacks.is_empty());
    for s in &stacks {
        assert_eq!(s["allowed"]["by"], "suppression");
        assert_eq!(
            s["allowed"]["reason"],
            "the fixture's Rc cycle is deliberate"
        );
        assert!(s["allowed"]["rule"]
            .as_str()
            .unwrap()
            .starts_with("[[suppress]] #1 frame \"leaky::tests::rc_*\""));
        assert_eq!(s["fails"], false);
    }
    assert_eq!(
        rc["retained_bytes"], 1280,
        "suppressed stacks stay in the report"
    );
    assert_eq!(verdict(&run, "tests::c_malloc_without_free"), "clean");
    // The frame glob does not match the integration test's function.
    assert_eq!(
        run.test("integration", "rc_cycle_integration")["verdict"],
        "leak"
    );
    let unused = format!("{file}:11: [[suppress]] #3 (frame \"nothing::matches::this\") matched nothing in this run over the whole suite");
    assert!(
        run.stderr.contains(&format!("warning: {unused}")),
        "{}",
        run.stderr
    );
    assert!(run.report()["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == unused.as_str()));
    assert!(
        run.stderr.contains("allowed: 3 by suppressions"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_configured_fixture_shows_what_allowed_each_stack() {
    let run = run_fixture("tests/fixtures/configured", &[]);
    let pool = run.test("configured", "tests::pool_keeps_slabs");
    let s = allowed(pool)[0];
    assert_eq!(
        s["allowed"]["reason"],
        "the pool keeps its slabs for the process lifetime"
    );
    assert!(s["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"] == "configured::pool::new_slab"));
    let cache = run.test("configured", "tests::cache_warmed_on_purpose");
    assert!(allowed(cache)
        .iter()
        .all(|s| s["allowed"]["by"] == "stack-threshold"));
    assert!(
        run.stderr
            .contains("ALLOWED configured tests::pool_keeps_slabs"),
        "{}",
        run.stderr
    );
    assert!(run.report()["settings"]["config"]
        .as_str()
        .unwrap()
        .ends_with("configured/leakcheck.toml"));
    let hang = run.test("configured", "tests::hangs_forever");
    assert!(
        hang["message"]
            .as_str()
            .unwrap()
            .starts_with("killed after 2."),
        "{hang}"
    );
}

#[test]
fn unsettled_fails_the_run_only_where_the_configuration_asks() {
    // `unsettled-fails = true` for this one test in the fixture's leakcheck.toml. The exit
    // code, the summary, JUnit, the annotations and the page all say it fails the run.
    let junit = crate::harness::scratch().join("unsettled-fails.junit.xml");
    let strict = run_fixture(
        "tests/fixtures/configured",
        &[
            "--junit",
            junit.to_str().unwrap(),
            "--annotations",
            "github",
            "--",
            "tests::second_run_never_returns",
            "--exact",
        ],
    );
    assert_eq!(strict.code, 5, "{}", strict.stderr);
    let t = strict.test("configured", "tests::second_run_never_returns");
    assert_eq!(t["verdict"], "unsettled", "{t}");
    assert_eq!(t["unsettled_fails"], true, "{t}");
    assert!(
        strict
            .stderr
            .contains("tests::second_run_never_returns (fails the run: unsettled-fails)"),
        "{}",
        strict.stderr
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("failures=\"1\"") && xml.contains("<failure type=\"unsettled\""),
        "{xml}"
    );
    assert!(
        strict
            .stdout
            .contains("::error title=unsettled%3A tests%3A%3Asecond_run_never_returns::"),
        "{}",
        strict.stdout
    );
    let page = std::fs::read_to_string(strict.out_dir.join("index.html")).unwrap();
    assert!(
        page.contains("The run fails: exit code 5") && page.contains(">fails the run</span>"),
        "the page agrees"
    );
    // The same test under a configuration that does not ask for it: unsettled, exit 0.
    let file = config("typo.toml");
    let lenient = run_fixture(
        "tests/fixtures/configured",
        &[
            "--config",
            &file,
            "--",
            "tests::second_run_never_returns",
            "--exact",
        ],
    );
    assert_eq!(lenient.code, 0, "{}", lenient.stderr);
    let t = lenient.test("configured", "tests::second_run_never_returns");
    assert_eq!(t["verdict"], "unsettled", "{t}");
    assert!(t.get("unsettled_fails").is_none(), "{t}");
    let page = std::fs::read_to_string(lenient.out_dir.join("index.html")).unwrap();
    assert!(
        page.contains("The run passes: exit code 0") && !page.contains(">fails the run</span>"),
        "the page agrees"
    );
}

#[test]
fn invalid_config_fails_before_building_naming_file_key_and_line() {
    let project = copy_fixture("tests/fixtures/leaky");
    let file = config("invalid.toml");
    let out = tool()
        .args([
            "test",
            "--manifest-path",
            project.join("Cargo.toml").to_str().unwrap(),
            "--config",
            &file,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim(),
        format!(
            "error: invalid configuration `{file}` (2 errors)\n  {file}:2: `defaults.stack-threshold`: invalid size `lots`: expected a number and a unit such as `4KiB`\n  {file}:4: `suppress[1].reason`: required: why the leak is accepted"
        )
    );
    assert!(
        !err.contains("Compiling") && !err.contains("Building"),
        "nothing was built"
    );
}

#[test]
fn unknown_keys_warn_and_the_run_goes_on() {
    let file = config("typo.toml");
    let run = run_fixture(
        "tests/fixtures/leaky",
        &[
            "--lib",
            "--config",
            &file,
            "--",
            "tests::joined_thread",
            "--exact",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The known keys begin with the thresholds; a new per-test setting is added at the end.
    let warning = format!(
        "warning: {file}:2: `defaults.stack-treshold`: unknown key, ignored (known here: stack-threshold, test-threshold, one-time-fails, timeout, extra-runs, unsettled-fails"
    );
    assert!(run.stderr.contains(&warning), "{}", run.stderr);
}

#[test]
fn write_suppressions_round_trip() {
    let written = scratch().join("written-suppressions.toml");
    let _ = std::fs::remove_file(&written);
    let path = written.display().to_string();
    let first = run_fixture(
        "tests/fixtures/leaky",
        &["--lib", "--write-suppressions", &path],
    );
    assert_eq!(first.code, 3, "{}", first.stderr);
    let text = std::fs::read_to_string(&written).unwrap();
    let leaking = first.report()["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["verdict"] == "leak")
        .count();
    assert_eq!(leaking, 11);
    assert!(text.matches("[[suppress]]").count() >= leaking, "{text}");
    assert!(
        first.stderr.contains("Wrote ") && first.stderr.contains(&path),
        "{}",
        first.stderr
    );

    let second = run_fixture("tests/fixtures/leaky", &["--lib", "--config", &path]);
    assert_eq!(
        second.code, 0,
        "everything passes under the written file:\n{}",
        second.stderr
    );
    for t in second.report()["tests"].as_array().unwrap() {
        assert_eq!(t["verdict"], "clean", "{t}");
    }
    let forget = second.test("leaky", "tests::forget_vec");
    assert_eq!(
        forget["retained_bytes"], 8192,
        "the stacks are still in the report"
    );
    assert!(allowed(forget)
        .iter()
        .all(|s| s["allowed"]["by"] == "suppression"));
    assert!(
        second
            .stderr
            .contains("whose reason is still the placeholder"),
        "{}",
        second.stderr
    );
}
