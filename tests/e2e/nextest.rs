//! `cargo leakcheck nextest`: cargo-nextest runs the fixtures, each test through
//! cargo-leakcheck, and the verdicts are the table's, as under `cargo leakcheck test`.
//! nextest cannot list a `harness = false` target that does not speak libtest's
//! arguments (leaky's `no_harness`), so leaky runs its libtest targets only.

use crate::expected::{EXPECTED, IGNORED};
use crate::harness::{copy_fixture, run_nextest, scratch, tool, Run};
use std::collections::BTreeMap;

/// (binary, test) -> verdict of the table's rows for a fixture that nextest can run.
fn table(fixture: &str) -> BTreeMap<(String, String), String> {
    EXPECTED
        .iter()
        .filter(|e| e.fixture == fixture && !e.bench && e.verdict != IGNORED)
        .filter(|e| e.binary != "no_harness")
        .map(|e| {
            (
                (e.binary.to_string(), e.test.to_string()),
                e.verdict.to_string(),
            )
        })
        .collect()
}

fn verdicts(run: &Run) -> BTreeMap<(String, String), String> {
    crate::harness::verdicts_of(run.report())
}

/// Runs a fixture under nextest and checks verdicts, exit code and flame graphs. No
/// fail-fast flag: the leaks found must not stop nextest before every test ran.
fn check(fixture: &str, own: &[&str], nextest: &[&str], code: i32) -> Run {
    let mut args: Vec<&str> = own.to_vec();
    if !nextest.is_empty() {
        args.push("--");
    }
    args.extend_from_slice(nextest);
    let name = format!("{}--nextest", fixture.replace('/', "_"));
    let run = run_nextest(fixture, &args, &name);
    assert_eq!(verdicts(&run), table(fixture), "{fixture}:\n{}", run.stderr);
    // How each verdict was reached is the table's too: the extra runs made (which need
    // the test's entry point, found per binary under nextest) and the method.
    for row in EXPECTED.iter().filter(|e| e.fixture == fixture && !e.bench) {
        let Some(t) = run.report()["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["binary"] == row.binary && t["name"] == row.test)
        else {
            continue;
        };
        if let Some(status) = row.extra_runs {
            assert_eq!(
                t["extra_runs"]["status"], status,
                "{fixture} {}: {}",
                row.test, t["extra_runs"]
            );
        }
        if let Some(method) = row.method {
            assert_eq!(t["method"], method, "{fixture} {}", row.test);
        }
    }
    assert_eq!(run.code, code, "{fixture}: exit code\n{}", run.stderr);
    // nextest's own listing of the selection agrees with what was judged.
    assert!(
        run.report()["not_run"].is_null(),
        "{fixture}: {}",
        run.report()["not_run"]
    );
    for t in run.report()["tests"].as_array().unwrap() {
        if t["verdict"] == "leak" {
            let svg = t["artifacts"]["flamegraph"]
                .as_str()
                .expect("a flame graph");
            assert!(run.out_dir.join(svg).is_file(), "{svg}");
        }
    }
    run
}

#[test]
fn leaky_under_nextest_matches_the_table_and_junit_carries_the_leak() {
    // A nextest profile with JUnit output, as a user would configure it.
    let project = copy_fixture("tests/fixtures/leaky");
    std::fs::create_dir_all(project.join(".config")).unwrap();
    std::fs::write(
        project.join(".config/nextest.toml"),
        "[profile.ci.junit]\npath = \"junit.xml\"\n",
    )
    .unwrap();
    let run = check(
        "tests/fixtures/leaky",
        &[],
        &[
            "--profile",
            "ci",
            "--lib",
            "--test",
            "integration",
            "--test",
            "single_test",
        ],
        3,
    );
    // Each of the three binaries was listed and read once for the run, by the first test
    // process nextest started for it; the others took what it kept (and gave the verdicts
    // of the table, checked above).
    let kept = std::fs::read_dir(run.out_dir.join("nextest/binaries"))
        .expect("the runners kept what they read")
        .filter(|e| (e.as_ref().unwrap().path().extension()).is_some_and(|x| x == "json"))
        .count();
    assert_eq!(kept, 3, "one entry per binary");
    // nextest showed the leaking tests as failed, with the leak named on their stderr.
    assert!(
        run.stderr
            .contains("cargo-leakcheck: LEAK: `tests::forget_vec` retained 8.0 KiB"),
        "{}",
        run.stderr
    );
    let junit = std::fs::read_to_string(project.join("target/nextest/ci/junit.xml"))
        .expect("nextest wrote JUnit");
    let case = junit
        .split("<testcase ")
        .find(|c| c.contains("name=\"tests::forget_vec\""))
        .expect("the leaking test is in the JUnit report");
    assert!(case.contains("<failure"), "{case}");
    assert!(case.contains("cargo-leakcheck: LEAK"), "{case}");
    let clean = junit
        .split("<testcase ")
        .find(|c| c.contains("name=\"tests::plain_alloc_and_drop\""))
        .unwrap();
    assert!(!clean.contains("<failure"), "{clean}");
}

#[test]
fn threaded_and_allocator_fixtures_under_nextest_match_the_table() {
    check("tests/fixtures/lifetime", &[], &[], 3);
    check("tests/fixtures/jemalloc-global", &[], &[], 3);
    check("tests/fixtures/custom-alloc", &[], &[], 5);
    check("tests/fixtures/counting-alloc", &[], &[], 3);
    check("tests/fixtures/many-live", &[], &[], 3);
}

#[test]
fn other_fixtures_under_nextest_match_the_table() {
    check("tests/fixtures/token-macros", &[], &[], 3);
    check("tests/fixtures/names", &[], &[], 3);
    check("tests/fixtures/configured", &[], &[], 4);
    check("examples/demo", &[], &[], 3);
    // Each test process reads the binary's collections, walked once and kept with the build.
    check("tests/fixtures/collections", &[], &[], 3);
    // A harness of the target's own: the same trials, the same verdicts as under `test`.
    check("tests/fixtures/trials", &[], &[], 3);
    // The processes a test starts, checked as under `test`, and a program several tests
    // start compared across them: the tests whose processes lost memory are judged again
    // when nextest is done, against every process of those programs the run's tests started.
    // (`--success-output`: what the runner said of a test nextest saw pass.)
    let children = check(
        "tests/fixtures/children",
        &[],
        &["--success-output", "immediate"],
        3,
    );
    let waited = "what the processes it started lost is judged when the run ends";
    for test in ["serves_five_requests", "leaks_a_route_name_per_request"] {
        // nextest saw the test pass; the run's verdict is the table's (checked above).
        assert!(
            (children.stderr.lines()).any(|l| l.contains("PASS") && l.ends_with(test)),
            "{test}:\n{}",
            children.stderr
        );
        assert!(
            children.stderr.contains(&format!("`{test}`: {waited}")),
            "{test}:\n{}",
            children.stderr
        );
    }
    assert!(
        children
            .stderr
            .contains("Judging 9 tests whose processes lost memory"),
        "{}",
        children.stderr
    );
}

/// nextest does not run doc-tests: the run says so and points at `test --doc`, and judges
/// the rest as `test` does.
#[test]
fn doc_tests_under_nextest_are_said_not_checked() {
    let fixture = "tests/fixtures/doctests";
    let run = run_nextest(fixture, &["--workspace"], "doctests--nextest");
    let judged: Vec<(String, String)> = verdicts(&run).into_iter().map(|(k, v)| (k.1, v)).collect();
    assert_eq!(
        judged,
        [
            ("tests::doc2021_adds".to_string(), "clean".to_string()),
            ("tests::doc2024_adds".to_string(), "clean".to_string())
        ],
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "doc-tests are not checked here: nextest does not run them; `cargo leakcheck test --doc` checks them"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn failing_crashing_and_hanging_tests_under_nextest_match_the_table() {
    // One test writes 128 MiB to stderr; nextest need not show it again here.
    let run = check(
        "tests/fixtures/misbehaving",
        &["--timeout", "20"],
        &["--failure-output", "never"],
        4,
    );
    let seg = run.report()["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "tests::segfaults")
        .unwrap()
        .clone();
    assert!(seg["exit"].as_str().unwrap().contains("SIGSEGV"), "{seg}");
    // nextest saw the test die of the signal, as without cargo-leakcheck.
    assert!(run.stderr.contains("SIGSEGV"), "{}", run.stderr);
}

/// A target runner the user configured still runs the test binaries, inside.
#[test]
fn a_users_target_runner_still_runs_the_tests() {
    let dir = scratch().join("user-runner");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let _ = std::fs::remove_file(&log);
    let script = dir.join("runner.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let project = copy_fixture("tests/fixtures/leaky");
    let target = scratch().join("targets/tests_fixtures_leaky--nextest-runner");
    let output = tool()
        .arg("nextest")
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .args([
            "--lib",
            "-E",
            "test(=tests::forget_vec) | test(=tests::plain_alloc_and_drop)",
        ])
        .env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", &script)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("tests run under your target runner"),
        "{stderr}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("--list"),
        "listing went through the user's runner: {logged}"
    );
    assert!(
        logged.contains("--exact tests::forget_vec"),
        "the test ran through the user's runner: {logged}"
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(target.join("leakcheck/report.json")).unwrap(),
    )
    .unwrap();
    let verdict = |name: &str| {
        report["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["verdict"].clone())
    };
    assert_eq!(verdict("tests::forget_vec"), Some("leak".into()));
    assert_eq!(verdict("tests::plain_alloc_and_drop"), Some("clean".into()));
}

/// A build archived with `cargo nextest archive` and run with `--archive-file` is checked.
#[test]
fn an_archived_build_is_checked() {
    let project = copy_fixture("tests/fixtures/leaky");
    let target = scratch().join("targets/tests_fixtures_leaky--nextest-archive");
    let archive = scratch().join("leaky-archive.tar.zst");
    let _ = std::fs::remove_file(&archive);
    let built = std::process::Command::new(env!("CARGO"))
        .args(["nextest", "archive", "--lib", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .arg("--archive-file")
        .arg(&archive)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // As on another machine: only the archive and the sources (nextest refuses
    // --manifest-path and --target-dir beside --archive-file).
    let output = tool()
        .current_dir(scratch())
        .arg("nextest")
        .arg("--archive-file")
        .arg(&archive)
        .arg("--workspace-remap")
        .arg(&project)
        .args([
            "-E",
            "test(=tests::box_leak) | test(=tests::once_lock_init)",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("target/leakcheck/report.json")).unwrap(),
    )
    .unwrap();
    let got: Vec<(String, String)> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["verdict"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("tests::box_leak".to_string(), "leak".to_string()),
            ("tests::once_lock_init".to_string(), "clean".to_string())
        ],
        "{stderr}"
    );
}

/// Without cargo-nextest, or with arguments nextest refuses, the run stops with exit 2.
#[test]
fn nextest_failing_before_any_test_is_exit_2() {
    let project = copy_fixture("tests/fixtures/leaky");
    let output = tool()
        .arg("nextest")
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(scratch().join("targets/tests_fixtures_leaky--nextest-bad"))
        .arg("--no-such-nextest-flag")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("before any test ran"), "{stderr}");
}

/// With nextest's `--fail-fast` (the user's choice), the first leak stops the run: the tests
/// never started are counted, named and explained in report.json and the summary.
#[test]
fn tests_nextest_never_started_are_counted_and_named() {
    let run = run_nextest(
        "tests/fixtures/leaky",
        &["--lib", "--fail-fast", "-j", "1"],
        "tests_fixtures_leaky--nextest-fail-fast",
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    let lib: BTreeMap<String, String> = table("tests/fixtures/leaky")
        .into_iter()
        .filter(|((binary, _), _)| binary == "leaky")
        .map(|((_, name), verdict)| (name, verdict))
        .collect();
    let judged: Vec<String> = run.report()["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    let not_run = &run.report()["not_run"];
    let never: Vec<String> = not_run["tests"]
        .as_array()
        .unwrap_or_else(|| panic!("not_run is filled: {}", run.report()))
        .iter()
        .map(|t| {
            let t = t.as_str().unwrap();
            t.strip_prefix("leaky ")
                .unwrap_or_else(|| panic!("{t}"))
                .to_string()
        })
        .collect();
    assert!(!never.is_empty() && !judged.is_empty());
    assert_eq!(not_run["count"], never.len());
    assert!(
        not_run["why"].as_str().unwrap().contains("--fail-fast"),
        "{not_run}"
    );
    let mut all: Vec<String> = judged.iter().chain(&never).cloned().collect();
    all.sort();
    assert_eq!(
        all,
        lib.keys().cloned().collect::<Vec<_>>(),
        "every test once"
    );
    assert!(
        run.stderr.contains(&format!(
            " Not run {} tests selected, never judged: ",
            never.len()
        )),
        "{}",
        run.stderr
    );
}

/// Shards of nextest's own `--partition` record which shard they are and how many tests the
/// others hold, so a merge of some of them says which are missing.
#[test]
fn nextest_shards_record_their_partition_and_a_merge_names_the_missing() {
    let fixture = "tests/fixtures/lifetime";
    let whole = table(fixture);
    let mut dirs = Vec::new();
    let mut judged = 0;
    for k in 1..=2 {
        let partition = format!("hash:{k}/2");
        let run = run_nextest(
            fixture,
            &["--partition", &partition],
            &format!("tests_fixtures_lifetime--nextest-shard-{k}"),
        );
        let r = run.report();
        assert_eq!(r["partition"], partition.as_str(), "{}", run.stderr);
        let here = r["tests"].as_array().unwrap().len();
        assert_eq!(
            here + r["other_shards"].as_u64().unwrap_or(0) as usize,
            whole.len(),
            "{}",
            run.stderr
        );
        judged += here;
        dirs.push(run.out_dir.join("report.json"));
    }
    assert_eq!(judged, whole.len(), "the shards together judge every test");
    let merged = |inputs: &[&std::path::PathBuf], out: &str| {
        let out = scratch().join(out);
        let output = tool()
            .arg("merge")
            .args(inputs)
            .arg("--output-dir")
            .arg(&out)
            .output()
            .unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        (output, report)
    };
    let (_, part) = merged(&[&dirs[0]], "nextest-shards-merged-part");
    assert!(
        part["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("shard(s) 2 of hash:1/2 are not in this merge")),
        "{part}"
    );
    let (output, all) = merged(&[&dirs[0], &dirs[1]], "nextest-shards-merged-all");
    assert!(all["partition"].is_null(), "{all}");
    assert_eq!(crate::harness::verdicts_of(&all), whole);
    assert_eq!(output.status.code(), Some(3));
}

/// Runs `cargo leakcheck nextest` on a copy of leaky of its own (the JUnit file nextest
/// writes is the copy's) over `tests`, with `own` options; the run, the copy.
fn nextest_on_own_copy(copy: &str, own: &[&str], tests: &[&str]) -> (Run, std::path::PathBuf) {
    let project = crate::harness::scratch().join("fixtures").join(copy);
    crate::harness::copy_tree(
        &crate::harness::repo_root().join("tests/fixtures/leaky"),
        &project,
    );
    std::fs::create_dir_all(project.join(".config")).unwrap();
    std::fs::write(
        project.join(".config/nextest.toml"),
        "[profile.ci.junit]\npath = \"junit.xml\"\nstore-success-output = true\n",
    )
    .unwrap();
    let target = scratch().join("targets").join(copy);
    let output = tool()
        .arg("nextest")
        .args(own)
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .args(["--profile", "ci", "--lib", "-E"])
        .arg(
            tests
                .iter()
                .map(|t| format!("test(={t})"))
                .collect::<Vec<_>>()
                .join(" | "),
        )
        .output()
        .expect("cargo-leakcheck runs");
    let run = Run::of(&output, &target);
    (run, project)
}

/// The `<testcase>` of `name` in the JUnit file nextest wrote for `project`.
fn junit_case(project: &std::path::Path, name: &str) -> String {
    let junit = std::fs::read_to_string(project.join("target/nextest/ci/junit.xml"))
        .expect("nextest wrote JUnit");
    junit
        .split("<testcase ")
        .find(|c| c.contains(&format!("name=\"{name}\"")))
        .unwrap_or_else(|| panic!("{name} is in nextest's JUnit:\n{junit}"))
        .to_string()
}

#[test]
fn under_fail_on_new_nextest_fails_only_the_leaks_the_base_run_did_not_have() {
    let (known, new) = ("tests::forget_vec", "tests::tiny_leak");
    let (base, _) = nextest_on_own_copy("leaky-fail-on-new-base", &[], &[known]);
    assert_eq!(
        base.code, 3,
        "the base run has the known leak:\n{}",
        base.stderr
    );
    let base_report = base.out_dir.join("report.json");
    let against = [
        "--baseline",
        base_report.to_str().unwrap(),
        "--fail-on",
        "new",
    ];

    // One known and one new leak: nextest shows only the new one failed, and the run fails.
    let (run, project) = nextest_on_own_copy("leaky-fail-on-new-both", &against, &[known, new]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    let verdicts = verdicts(&run);
    assert_eq!(verdicts[&("leaky".into(), known.into())], "leak");
    assert_eq!(verdicts[&("leaky".into(), new.into())], "leak");
    let case = junit_case(&project, new);
    assert!(
        case.contains("<failure") && case.contains("cargo-leakcheck: LEAK"),
        "{case}"
    );
    let case = junit_case(&project, known);
    assert!(
        !case.contains("<failure"),
        "the known leak passes under nextest:\n{case}"
    );
    // Its output says why it passed.
    assert!(
        case.contains(&format!("cargo-leakcheck: KNOWN LEAK (the base run had it; --fail-on new lets it pass): `{known}`")),
        "{case}"
    );

    // Only the known leak: everything passes, under nextest and in the run.
    let (run, project) = nextest_on_own_copy("leaky-fail-on-new-known", &against, &[known]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!junit_case(&project, known).contains("<failure"));
    assert_eq!(
        run.report()["baseline"]["unchanged"],
        1,
        "{}",
        run.report()["baseline"]
    );
}
