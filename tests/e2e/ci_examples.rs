//! The CI integration shipped in `ci/`: the composite GitHub Action and the example
//! pipelines in `ci/examples/`, each parsed as YAML and run for real on fixture crates by
//! the simulated runners of `ci_sim`, with their results checked against the table.

use crate::ci_sim::{entries, load_yaml, scalar, Job, Sim};
use crate::expected::{Expected, EXPECTED, IGNORED};
use crate::harness::{repo_root, verdicts_of};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DEMO: &str = "examples/demo";
const HEALTHY: &str = "tests/fixtures/healthy";

fn example(name: &str) -> PathBuf {
    repo_root().join("ci/examples").join(name)
}

/// (binary, test) -> verdict for every non-bench, non-ignored row of a fixture.
fn table(fixture: &str) -> BTreeMap<(String, String), String> {
    EXPECTED
        .iter()
        .filter(|e: &&Expected| e.fixture == fixture && !e.bench && e.verdict != IGNORED)
        .map(|e| {
            (
                (e.binary.to_string(), e.test.to_string()),
                e.verdict.to_string(),
            )
        })
        .collect()
}

fn read_report(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// Every `::error` annotation points at a file of the checked-out repository.
fn assert_annotations_in_repo(job: &Job) {
    let errors: Vec<&String> = job
        .commands
        .iter()
        .filter(|c| c.starts_with("::error "))
        .collect();
    assert!(!errors.is_empty(), "no annotations:\n{}", job.log);
    for e in errors {
        let file = e
            .split("file=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or_else(|| panic!("{e}"));
        assert!(
            job.workspace.join(file).is_file(),
            "{e} names no file of the repository"
        );
    }
}

/// The workflow's structure: triggers, jobs with a runner and steps, each step either
/// `run` or `uses` (pinned), ids referred to by `steps.<id>` defined.
fn assert_workflow_shape(path: &Path) {
    let doc = load_yaml(path);
    assert!(!doc["on"].is_badvalue(), "{}: no `on`", path.display());
    let jobs = entries(&doc["jobs"]);
    assert!(!jobs.is_empty());
    for (id, job) in jobs {
        assert!(job["runs-on"].as_str().is_some(), "{id}: runs-on");
        for step in job["steps"]
            .as_vec()
            .unwrap_or_else(|| panic!("{id}: steps"))
        {
            let uses = step["uses"].as_str();
            assert!(
                uses.is_some() != step["run"].as_str().is_some(),
                "{id}: {step:?}"
            );
            if let Some(u) = uses {
                assert!(u.contains('@'), "{id}: `{u}` is not pinned");
            }
        }
    }
}

/// Where an example pins the tool, it pins this version.
fn assert_pins_this_version(job: &Job) {
    for r in &job.action_refs {
        assert_eq!(
            r,
            concat!("v", env!("CARGO_PKG_VERSION")),
            "the example's @ref"
        );
    }
}

#[test]
fn the_action_is_a_composite_whose_steps_all_parse() {
    let action = load_yaml(&repo_root().join("ci/action.yml"));
    assert_eq!(action["runs"]["using"].as_str(), Some("composite"));
    let inputs: Vec<String> = entries(&action["inputs"])
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for want in [
        "command",
        "args",
        "version",
        "working-directory",
        "artifact-name",
        "upload",
    ] {
        assert!(inputs.iter().any(|i| i == want), "input `{want}`");
    }
    for (k, def) in entries(&action["inputs"]) {
        assert!(
            def["description"].as_str().is_some(),
            "input `{k}` is described"
        );
    }
    for step in action["runs"]["steps"].as_vec().unwrap() {
        if let Some(run) = step["run"].as_str() {
            assert_eq!(step["shell"].as_str(), Some("bash"), "{run}");
        }
    }
    for script in ["install.sh", "check.sh", "history.sh", "names.sh"] {
        let status = std::process::Command::new("bash")
            .arg("-n")
            .arg(repo_root().join("ci/action").join(script))
            .status()
            .unwrap();
        assert!(status.success(), "{script} is valid bash");
    }
}

#[test]
fn pull_request_example_annotates_leaks_uploads_the_report_and_fails() {
    let path = example("github-pull-request.yml");
    assert_workflow_shape(&path);
    let sim = Sim::new("pull-request-leaks");
    let job = sim.github_job(&path, "leakcheck", &[], DEMO);
    assert!(!job.ok, "leaks fail the job:\n{}", job.log);
    assert_pins_this_version(&job);
    let outputs = &job.action_outputs[0];
    assert_eq!(outputs["exit-code"], "3", "{}", job.log);
    assert_eq!(outputs["artifact-name"], "leakcheck-leakcheck");
    assert!(
        job.ran
            .iter()
            .any(|s| s == "Fail with cargo-leakcheck's exit code"),
        "{:?}",
        job.ran
    );
    // Installed already: the action does not install again.
    assert!(!sim.install_log.exists(), "{}", job.log);
    assert!(job.log.contains("is already installed"), "{}", job.log);
    // A fresh runner: the runtime comes out of the binary, nothing is built for it.
    assert!(
        !job.log.contains("Building the leakcheck runtime"),
        "{}",
        job.log
    );

    assert_annotations_in_repo(&job);
    assert!(
        job.summary.contains("| `"),
        "a table in the job summary:\n{}",
        job.summary
    );
    assert_eq!(job.uploaded, ["leakcheck-leakcheck"]);
    let artifact = sim.artifacts.join("leakcheck-leakcheck");
    let report = read_report(&artifact.join("report.json"));
    assert_eq!(verdicts_of(&report), table(DEMO));
    assert!(
        std::fs::read_dir(&artifact)
            .unwrap()
            .any(|e| e.unwrap().path().is_dir()),
        "the flame graphs are uploaded with the report"
    );
    assert_eq!(
        Path::new(&outputs["report"]),
        Path::new(&outputs["report-dir"]).join("report.json")
    );
    // The page is uploaded with the report, and the summary says where it is.
    assert!(artifact.join("index.html").is_file());
    assert!(job.summary.contains("index.html"), "{}", job.summary);
    assert_eq!(
        Path::new(&outputs["page"]),
        Path::new(&outputs["report-dir"]).join("index.html")
    );
}

#[test]
fn baseline_example_keeps_mains_report_and_fails_only_what_a_change_adds() {
    let path = example("github-baseline.yml");
    assert_workflow_shape(&path);
    let sim = Sim::new("baseline");
    let exit = |job: &crate::ci_sim::Job| job.action_outputs[0]["exit-code"].clone();
    // Before main ever ran there is no base: every leak fails.
    let first = sim.github_job_on("pull_request", &path, "leakcheck", &[], DEMO);
    assert!(!first.ok, "{}", first.log);
    assert_eq!(exit(&first), "3", "{}", first.log);
    assert!(first.log.contains("cache not found"), "{}", first.log);
    assert!(
        first
            .log
            .contains("cargo leakcheck test --annotations github --history "),
        "{}",
        first.log
    );
    // Main, with its known leaks: they fail it, and its report becomes the base.
    sim.next_run();
    let main = sim.github_job_on("push", &path, "leakcheck", &[], DEMO);
    assert_eq!(exit(&main), "3", "{}", main.log);
    // The action kept the first run's timings, and this run starts from them.
    assert!(
        main.log
            .contains("cache restored from key: leakcheck-history-Linux-leakcheck-leakcheck-"),
        "{}",
        main.log
    );
    assert!(
        main.ran.iter().any(|s| s == "Keep the report as the base"),
        "{:?}",
        main.ran
    );
    // A pull request that adds nothing: its leaks are main's, unchanged; it passes.
    sim.next_run();
    let pr = sim.github_job_on("pull_request", &path, "leakcheck", &[], DEMO);
    assert!(pr.ok, "{}", pr.log);
    assert_eq!(exit(&pr), "0", "{}", pr.log);
    assert!(
        pr.log.contains("0 new, 0 grown, 3 unchanged, 0 gone"),
        "{}",
        pr.log
    );
    assert!(
        pr.summary
            .contains("**Against the base run**: 0 new, 0 grown, 3 unchanged, 0 gone"),
        "{}",
        pr.summary
    );
    assert!(
        !pr.ran.iter().any(|s| s == "Keep the report as the base"),
        "a pull request keeps no base: {:?}",
        pr.ran
    );
    // The next push to main is judged against the base too, and keeps its own.
    sim.next_run();
    let next = sim.github_job_on("push", &path, "leakcheck", &[], DEMO);
    assert!(next.ok, "{}", next.log);
}

#[test]
fn pull_request_example_passes_a_healthy_suite_and_uploads_nothing() {
    let sim = Sim::new("pull-request-clean");
    let job = sim.github_job(
        &example("github-pull-request.yml"),
        "leakcheck",
        &[],
        HEALTHY,
    );
    assert!(job.ok, "{}", job.log);
    assert_eq!(job.action_outputs[0]["exit-code"], "0");
    assert!(job.uploaded.is_empty(), "{:?}", job.uploaded);
    assert!(
        !job.commands.iter().any(|c| c.starts_with("::error")),
        "{:?}",
        job.commands
    );
    let report = read_report(Path::new(&job.action_outputs[0]["report"]));
    assert_eq!(verdicts_of(&report), table(HEALTHY));
}

#[test]
fn sharded_example_merges_three_shards_into_the_whole_suites_verdict() {
    let path = example("github-sharded.yml");
    assert_workflow_shape(&path);
    let sim = Sim::new("sharded");
    let mut names = Vec::new();
    let mut tests = 0;
    for shard in ["1", "2", "3"] {
        let job = sim.github_job(&path, "leakcheck", &[("shard", shard)], DEMO);
        assert_pins_this_version(&job);
        let outputs = &job.action_outputs[0];
        let name = format!("leakcheck-leakcheck-shard-{shard}-of-3");
        assert_eq!(outputs["artifact-name"], name);
        // Every shard hands its report on, leaks or not.
        assert_eq!(job.uploaded, std::slice::from_ref(&name), "{}", job.log);
        let report = read_report(&sim.artifacts.join(&name).join("report.json"));
        assert_eq!(report["partition"], format!("hash:{shard}/3"));
        assert_eq!(job.ok, outputs["exit-code"] == "0", "{}", job.log);
        tests += report["tests"].as_array().unwrap().len();
        names.push(name);
    }
    assert_eq!(tests, table(DEMO).len(), "the shards cover the suite once");

    let merge = sim.github_job(&path, "merge", &[], DEMO);
    assert!(!merge.ok, "the suite leaks:\n{}", merge.log);
    assert_pins_this_version(&merge);
    let outputs = &merge.action_outputs[0];
    assert_eq!(outputs["exit-code"], "3", "{}", merge.log);
    assert_eq!(merge.uploaded, ["leakcheck-merged"]);
    let merged = sim.artifacts.join("leakcheck-merged");
    let report = read_report(&merged.join("report.json"));
    assert_eq!(verdicts_of(&report), table(DEMO));
    assert!(
        report.get("partition").is_none(),
        "all shards are in the merge"
    );
    let junit = std::fs::read_to_string(merged.join("junit.xml")).unwrap();
    assert_eq!(
        junit.matches("<testcase ").count(),
        table(DEMO).len(),
        "{junit}"
    );
    assert_eq!(
        junit.matches("<failure type=\"leak\"").count(),
        table(DEMO).values().filter(|v| *v == "leak").count()
    );
    assert_annotations_in_repo(&merge);
    assert!(merge.summary.contains("| `"), "{}", merge.summary);
}

#[test]
fn gitlab_example_publishes_junit_and_artifacts_when_leaks_fail_the_job() {
    let path = example("gitlab-ci.yml");
    let doc = load_yaml(&path);
    let job_def = &doc["leakcheck"];
    assert!(job_def["script"].as_vec().is_some_and(|s| !s.is_empty()));
    let junit_path = job_def["artifacts"]["reports"]["junit"]
        .as_str()
        .expect("a JUnit report");
    let sim = Sim::new("gitlab");
    let job = sim.gitlab_job(&path, "leakcheck", DEMO);
    assert_eq!(job.exit_code, Some(3), "{}", job.log);
    assert!(
        !job.log.contains("Building the leakcheck runtime"),
        "{}",
        job.log
    );
    // The install line pins this version.
    let installs = std::fs::read_to_string(&sim.install_log).unwrap();
    assert_eq!(
        installs.trim(),
        concat!(
            "cargo install cargo-leakcheck --locked --version ",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        job.uploaded,
        ["leakcheck"],
        "artifacts are kept when the job fails"
    );
    let kept = sim.artifacts.join("leakcheck");
    let report = read_report(&kept.join("target/leakcheck/report.json"));
    assert_eq!(verdicts_of(&report), table(DEMO));
    let junit = std::fs::read_to_string(job.workspace.join(junit_path)).unwrap();
    for ((_, test), verdict) in table(DEMO) {
        let case = junit
            .split("<testcase ")
            .find(|c| c.starts_with(&format!("name=\"{test}\"")))
            .unwrap_or_else(|| panic!("{test} in the JUnit report:\n{junit}"));
        assert_eq!(
            case.contains("<failure type=\"leak\""),
            verdict == "leak",
            "{case}"
        );
    }
    let variables: Vec<String> = entries(&job_def["variables"])
        .into_iter()
        .map(|(_, v)| scalar(v).unwrap())
        .collect();
    assert!(
        variables.iter().all(|v| !v.contains("${{")),
        "GitLab syntax only"
    );
}

/// Runs one of the action's scripts with the given environment; returns (exit code, output,
/// GITHUB_OUTPUT contents).
fn action_script(
    sim: &Sim,
    script: &str,
    env: &[(&str, &str)],
    path_first: Option<&Path>,
) -> (i32, String, String) {
    let output = sim.dir.join(format!("{script}.output"));
    std::fs::write(&output, "").unwrap();
    // Outside any cargo project, so a run that is meant to fail cannot find one.
    let cwd = std::env::temp_dir().join(format!("leakcheck-action-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(repo_root().join("ci/action").join(script))
        .current_dir(&cwd)
        .env("GITHUB_OUTPUT", &output)
        .env("GITHUB_JOB", "check")
        .env("GITHUB_RUN_ATTEMPT", "1")
        .env_remove("CARGO")
        .env("SIM_INSTALL_LOG", &sim.install_log)
        .env("SIM_LEAKCHECK", env!("CARGO_BIN_EXE_cargo-leakcheck"))
        .env("SIM_REAL_CARGO", crate::ci_sim::real_cargo());
    let mut path = sim.dir.join("bin").display().to_string();
    if let Some(first) = path_first {
        path = format!("{}:{path}", first.display());
    }
    cmd.env("PATH", format!("{path}:{}", std::env::var("PATH").unwrap()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (
        out.status.code().unwrap_or(-1),
        text,
        std::fs::read_to_string(&output).unwrap(),
    )
}

#[test]
fn the_action_installs_the_pinned_version_only_when_it_is_missing() {
    let sim = Sim::new("action-install");
    let source = repo_root().display().to_string();
    // This build is on PATH and is the source's version: nothing to do.
    let (code, out, _) = action_script(&sim, "install.sh", &[("LEAKCHECK_SOURCE", &source)], None);
    assert_eq!(code, 0, "{out}");
    assert!(!sim.install_log.exists(), "{out}");

    // Another version on PATH: installed from the action's source, or from crates.io at
    // the requested version.
    let old = sim.dir.join("old-bin");
    std::fs::create_dir_all(&old).unwrap();
    let fake = old.join("cargo-leakcheck");
    std::fs::write(&fake, "#!/bin/sh\necho 'cargo-leakcheck 0.0.1'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, _) = action_script(
        &sim,
        "install.sh",
        &[("LEAKCHECK_SOURCE", &source)],
        Some(&old),
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("replacing cargo-leakcheck 0.0.1"), "{out}");
    let (code, out, _) = action_script(
        &sim,
        "install.sh",
        &[
            ("LEAKCHECK_SOURCE", &source),
            ("LEAKCHECK_VERSION", "v9.9.9"),
        ],
        Some(&old),
    );
    assert_eq!(code, 0, "{out}");
    let calls = std::fs::read_to_string(&sim.install_log).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            format!("cargo install cargo-leakcheck --locked --path {source}/cargo-leakcheck"),
            "cargo install cargo-leakcheck --locked --version =9.9.9".to_string(),
        ]
    );

    // No source and no version: a clear error.
    let (code, out, _) = action_script(
        &sim,
        "install.sh",
        &[("LEAKCHECK_SOURCE", "/nonexistent")],
        Some(&old),
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("no cargo-leakcheck source at '/nonexistent'"),
        "{out}"
    );
}

#[test]
fn the_action_names_artifacts_per_shard_and_attempt_and_refuses_unknown_commands() {
    let sim = Sim::new("action-check");
    // A run that cannot start (exit 2) still leaves the step successful, with the code
    // recorded for the action's last step.
    let (code, out, outputs) = action_script(
        &sim,
        "check.sh",
        &[
            ("LEAKCHECK_COMMAND", "test"),
            (
                "LEAKCHECK_ARGS",
                "--partition=count:2/4 --manifest-path /nonexistent/Cargo.toml",
            ),
            ("GITHUB_RUN_ATTEMPT", "2"),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        outputs.contains("artifact-name=leakcheck-check-shard-2-of-4-attempt-2\n"),
        "{outputs}"
    );
    assert!(outputs.contains("exit-code=2\n"), "{outputs}");
    let (_, _, outputs) = action_script(
        &sim,
        "check.sh",
        &[(
            "LEAKCHECK_ARGS",
            "--partition hash:3/3 --manifest-path /nonexistent/Cargo.toml",
        )],
        None,
    );
    assert!(
        outputs.contains("artifact-name=leakcheck-check-shard-3-of-3\n"),
        "{outputs}"
    );
    let (_, _, outputs) = action_script(
        &sim,
        "check.sh",
        &[
            ("LEAKCHECK_ARTIFACT_NAME", "mine"),
            ("LEAKCHECK_ARGS", "--partition hash:3/3"),
        ],
        None,
    );
    assert!(outputs.starts_with("artifact-name=mine\n"), "{outputs}");

    // Quoted arguments stay whole: merge is told of one directory with a space in its name.
    let (_, out, _) = action_script(
        &sim,
        "check.sh",
        &[
            ("LEAKCHECK_COMMAND", "merge"),
            ("LEAKCHECK_ARGS", "'a dir/with space'"),
        ],
        None,
    );
    assert!(out.contains("`a dir/with space"), "{out}");

    // The timings kept between runs are for `test` only.
    let (_, out, _) = action_script(
        &sim,
        "check.sh",
        &[
            ("LEAKCHECK_COMMAND", "merge"),
            ("LEAKCHECK_ARGS", "shard-1"),
            ("LEAKCHECK_HISTORY", "/kept/metrics.json"),
        ],
        None,
    );
    assert!(
        out.contains("cargo leakcheck merge --annotations github shard-1\n"),
        "{out}"
    );

    // A base, when there is one: its flags go before the args (after `--` are filters).
    let base = sim.dir.join("a base");
    std::fs::create_dir_all(&base).unwrap();
    let (_, out, _) = action_script(
        &sim,
        "check.sh",
        &[
            ("LEAKCHECK_ARGS", "--lib -- some_filter"),
            ("LEAKCHECK_BASELINE", base.to_str().unwrap()),
            ("LEAKCHECK_FAIL_ON", "new"),
        ],
        None,
    );
    assert!(
        out.contains(&format!(
            "cargo leakcheck test --annotations github --baseline {} --fail-on new --lib -- some_filter",
            base.display()
        )),
        "{out}"
    );
    let (_, out, _) = action_script(
        &sim,
        "check.sh",
        &[
            ("LEAKCHECK_BASELINE", "no-base-yet"),
            ("LEAKCHECK_FAIL_ON", "new"),
        ],
        None,
    );
    assert!(
        out.contains("no base report at 'no-base-yet' yet")
            && out.contains("cargo leakcheck test --annotations github \n"),
        "{out}"
    );

    let (code, out, outputs) =
        action_script(&sim, "check.sh", &[("LEAKCHECK_COMMAND", "serve")], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("::error title=cargo-leakcheck::the action's command must be test, nextest, merge, bench or run, not 'serve'"), "{out}");
    assert_eq!(outputs, "exit-code=2\n");
}
