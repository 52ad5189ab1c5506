//! `cargo leakcheck nextest [ARGS…]`: cargo-nextest runs the suite, and every test process
//! it starts goes through cargo-leakcheck, which gives the test what `cargo leakcheck test`
//! gives it (counting pass, extra runs, exact stacks where needed) and adds its verdict.
//!
//! The route is cargo's target runner, which nextest honours for listing and for running:
//! for the run, `CARGO_TARGET_<HOST>_RUNNER` names this executable's hidden
//! `__nextest-runner` command. Listing passes straight through (the binary is executed as
//! asked). A test run is judged in that process, its verdict written to
//! `<target>/leakcheck/nextest/tests/`, its output forwarded, and the process ends as the
//! test did, or with exit 3 and a short leak summary on stderr when it leaked, so nextest
//! (and its JUnit output) show the test as failed. A target runner the user configured
//! (an emulator, a sandbox) keeps running the binary, inside. When nextest is done, the
//! verdicts are gathered into the same report.json, flame graphs and summary as `test`,
//! and `cargo nextest list` with the run's filters says which selected tests never ran
//! (nextest stopped early) and, for a `--partition` shard, how many the other shards hold.

mod deferred;
mod handoff;
mod runner;

use crate::cli::{NextestArgs, Selection};
use crate::commands::session;
use crate::errors::{Error, ExitCode};
use crate::execution::cargo;
use crate::execution::nextest_list;
use crate::model::{NotRun, Report, ReportSettings, TestReport};
use crate::report::export::RunFacts;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use handoff::{unjudged, RunnerSession, RunnerVerdict, TestId, SESSION_ENV};
pub use runner::run_as_runner;

/// Runs `cargo leakcheck nextest`.
pub fn run(args: &NextestArgs) -> Result<ExitCode, Error> {
    let cli = session::cli_settings(&args.checking)?;
    let exe_text = own_path()?;
    check_nextest_installed()?;
    let mut session = session::prepare(&selection(args), &[], args.config.as_deref(), false)?;
    let outputs = session.outputs(&args.outputs);
    let base = session::read_baseline(&args.checking.against)?;
    let launch = launch(&session, args, &cli, &exe_text)?;
    let ran = run_nextest(&launch.nextest_args, &launch.envs)?;
    let mut notes = session.notes.clone();
    if session.selected().iter().any(|m| m.has_doctests) {
        notes.push(
            "doc-tests are not checked here: nextest does not run them; `cargo leakcheck test --doc` checks them"
                .into(),
        );
    }
    let RunnerFiles {
        mut tests,
        deferred: waiting,
        selection,
    } = gather_verdicts(&launch, &ran, &mut notes)?;
    let judging = deferred::Judging {
        session: &session,
        cli: &cli,
        wrapper: &launch.wrapper,
        dir: &launch.dir,
        stacks_for_all: args.checking.stacks_for_all,
    };
    judging.judge(waiting, &mut tests, &mut notes);
    let mut report = assemble(&session, &cli, tests, selection, notes);
    session::compare_with_baseline(&mut report, base.as_ref(), &args.checking.against)?;
    fail_as_nextest_did(&mut report, ran.status.code());
    write_metrics(&session, &ran);
    let to = session.destination();
    session::draw(&mut report, &to);
    session::finish(&report, &to, RunFacts::default(), &outputs)
}

/// How nextest is started: the session its runners read, its arguments, and the
/// environment that makes this tool the target runner.
struct Launch {
    dir: PathBuf,
    nextest_args: Vec<String>,
    envs: [(String, String); 2],
    /// The user's own target runner, program first (empty: none).
    wrapper: Vec<String>,
}

fn launch(
    session: &session::Session,
    args: &NextestArgs,
    cli: &crate::config::SettingsLayer,
    exe_text: &str,
) -> Result<Launch, Error> {
    let host = cargo::host_triple()?;
    let runner_var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace(['-', '.'], "_")
    );
    let wrapper = user_runner(&runner_var, &host, &session.ws.root);
    let dir = session.out_dir.join("nextest");
    let session_path = write_runner_session(session, args, cli, &dir, &wrapper)?;
    let envs = [
        (runner_var, format!("{exe_text} leakcheck __nextest-runner")),
        (SESSION_ENV.to_string(), session_path.display().to_string()),
    ];
    Ok(Launch {
        dir,
        nextest_args: nextest_arguments(session, args),
        envs,
        wrapper,
    })
}

/// The verdicts the runners wrote, what nextest selected beside them, and the tests whose
/// verdicts wait for the run's end. nextest's own failures: 100 means tests failed (ours
/// among them), 4 that no test ran; anything else with nothing judged means nothing ran
/// (a build failure).
fn gather_verdicts(
    launch: &Launch,
    ran: &NextestRun,
    notes: &mut Vec<String>,
) -> Result<RunnerFiles, Error> {
    let interrupted = crate::execution::interrupt::requested().is_some();
    let gathered = gather(&launch.dir, notes, !interrupted);
    let tests = &gathered.tests;
    let code = ran.status.code();
    if tests.is_empty() && !matches!(code, Some(0 | 4 | 100)) {
        return Err(Error::Nextest {
            command: ran.command_text.clone(),
            status: ran.status.to_string(),
            code,
        });
    }
    if !matches!(code, Some(0 | 4 | 100)) && !interrupted {
        notes.push(format!(
            "`cargo nextest run` ended with {}: not every selected test may have run",
            ran.status
        ));
    }
    if interrupted {
        return Ok(RunnerFiles {
            deferred: Vec::new(),
            ..gathered
        });
    }
    let program = cargo::cargo_program();
    let (args, envs) = (&launch.nextest_args, &launch.envs);
    let selection = selected(&program, args, envs, tests, &ran.status, notes);
    Ok(RunnerFiles {
        selection,
        ..gathered
    })
}

/// The run's report: the verdicts and what nextest selected and did not run.
fn assemble(
    session: &session::Session,
    cli: &crate::config::SettingsLayer,
    tests: Vec<TestReport>,
    selection: Chosen,
    notes: Vec<String>,
) -> Report {
    Report {
        tests,
        ignored: selection.ignored,
        partition: selection.partition,
        other_shards: selection.other_shards,
        not_run: selection.not_run,
        notes,
        ..Report::new(ReportSettings {
            sample_period: 1,
            stack_threshold: session.config.global(cli).stack_threshold,
            config: (session.config.path.as_ref()).map(|p| p.display().to_string()),
        })
    }
}

/// nextest saw a failure no verdict here explains (a runner that could not judge): the
/// run fails as nextest's did.
fn fail_as_nextest_did(report: &mut Report, nextest_code: Option<i32>) {
    if nextest_code == Some(100) && report.exit_code() < ExitCode::LeaksFound {
        let why = "`cargo nextest run` reported a failing test that no verdict here explains (its output says which)";
        report.notes.push(why.into());
        report.runner_failed = Some(why.into());
    }
}

/// metrics.json: nextest's time and exit; `test`'s timings, read from the file this
/// replaces, stay for its next run.
fn write_metrics(session: &session::Session, ran: &NextestRun) {
    let metrics = serde_json::json!({
        "nextest_seconds": ran.seconds,
        "nextest_exit": ran.status.code(),
        "history": session.history.carried_over(&Default::default()),
    });
    let _ = std::fs::write(session.out_dir.join("metrics.json"), metrics.to_string());
}

/// The path of this executable, as cargo's runner setting will name it.
fn own_path() -> Result<String, Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("find the path of cargo-leakcheck itself", e))?;
    let exe_text = exe.to_string_lossy().into_owned();
    if exe_text.chars().any(char::is_whitespace) {
        return Err(Error::Usage(format!(
            "cargo-leakcheck is installed at `{exe_text}`, whose whitespace cargo's runner setting cannot hold; install it in a directory without spaces"
        )));
    }
    Ok(exe_text)
}

/// The workspace nextest's own arguments name. An archive run names it with
/// --workspace-remap (nextest refuses --manifest-path and --target-dir then): the report
/// goes to that workspace's target.
fn selection(args: &NextestArgs) -> Selection {
    let manifest_path = option_value(&args.args, "--manifest-path")
        .map(PathBuf::from)
        .or_else(|| {
            option_value(&args.args, "--workspace-remap")
                .map(|d| PathBuf::from(d).join("Cargo.toml"))
        });
    Selection {
        manifest_path,
        target_dir: option_value(&args.args, "--target-dir").map(PathBuf::from),
        ..Selection::default()
    }
}

/// Writes what each runner process needs (`session.json` under `dir`, with the directories
/// its verdicts go to); its path.
fn write_runner_session(
    session: &session::Session,
    args: &NextestArgs,
    cli: &crate::config::SettingsLayer,
    dir: &Path,
    wrapper: &[String],
) -> Result<PathBuf, Error> {
    let runner_session = RunnerSession {
        runtime: session.runtime.clone(),
        dir: dir.to_path_buf(),
        root: session.ws.root.clone(),
        target_dir: session.ws.target_dir.clone(),
        config: session.config.path.clone(),
        cli: cli.clone(),
        stacks_for_all: args.checking.stacks_for_all,
        wrapper: wrapper.to_vec(),
        baseline: (args.checking.against.baseline.clone()).map(|path| {
            let fail_on_new = args.checking.against.fail_on == Some(crate::cli::FailOn::New);
            (std::path::absolute(&path).unwrap_or(path), fail_on_new)
        }),
    };
    std::fs::create_dir_all(dir.join("tests"))
        .and_then(|()| std::fs::create_dir_all(dir.join("started")))
        .map_err(|e| Error::io(format!("create `{}`", dir.display()), e))?;
    let session_path = dir.join("session.json");
    std::fs::write(
        &session_path,
        serde_json::to_string_pretty(&runner_session).expect("the session serializes"),
    )
    .map_err(|e| Error::io(format!("write `{}`", session_path.display()), e))?;
    if !wrapper.is_empty() {
        crate::say!(
            "     Runner tests run under your target runner `{}`",
            wrapper.join(" ")
        );
    }
    Ok(session_path)
}

/// nextest's arguments: the user's, after what a leak check needs.
fn nextest_arguments(session: &session::Session, args: &NextestArgs) -> Vec<String> {
    // As `test` builds: a crate whose global allocator is tikv-jemallocator gets that
    // jemalloc's profiling turned on (an archive was built already, as it was built).
    let mut nextest_args: Vec<String> = Vec::new();
    let archived = option_value(&args.args, "--archive-file").is_some();
    if !archived && session.selected().iter().any(|m| m.uses_tikv_jemallocator) {
        nextest_args.extend([
            "--features".into(),
            crate::execution::cargo::JEMALLOC_PROFILING.into(),
        ]);
    }
    // A leak check looks at every test: nextest's default stops at the first failure, and a
    // leak is one. The user's own choice stands.
    if !fail_fast_chosen(&args.args) {
        nextest_args.push("--no-fail-fast".into());
    }
    nextest_args.extend(args.args.iter().cloned());
    nextest_args
}

/// How `cargo nextest run` went.
struct NextestRun {
    status: std::process::ExitStatus,
    seconds: f64,
    command_text: String,
}

/// Runs `cargo nextest run` with this tool as the target runner, in a process group of its
/// own that an interrupt stops.
fn run_nextest(nextest_args: &[String], envs: &[(String, String)]) -> Result<NextestRun, Error> {
    let program = cargo::cargo_program();
    let mut cmd = Command::new(&program);
    cmd.arg("nextest")
        .arg("run")
        .args(nextest_args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    let command_text = format!(
        "{} nextest run {}",
        program.display(),
        nextest_args.join(" ")
    );
    crate::say!("     Running `{command_text}` with heap profiling");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let started = std::time::Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("run `{command_text}`"), e))?;
    let registration =
        crate::execution::interrupt::register(child.id() as libc::pid_t, libc::SIGTERM);
    crate::execution::interrupt::wait_ended(child.id() as libc::pid_t);
    drop(registration);
    let status = child
        .wait()
        .map_err(|e| Error::io(format!("wait for `{command_text}`"), e))?;
    Ok(NextestRun {
        status,
        seconds: started.elapsed().as_secs_f64(),
        command_text,
    })
}

/// What nextest's own listing says about the run's selection.
#[derive(Default)]
struct Chosen {
    ignored: usize,
    partition: Option<String>,
    other_shards: usize,
    not_run: Option<NotRun>,
}

/// Lists what the run selected (see [`nextest_list`]) and compares it with what was judged.
/// A listing that fails costs only the comparison: a note says so.
fn selected(
    program: &Path,
    nextest_args: &[String],
    envs: &[(String, String)],
    tests: &[TestReport],
    status: &std::process::ExitStatus,
    notes: &mut Vec<String>,
) -> Chosen {
    let listing = match nextest_list::list_args(nextest_args) {
        Some(args) => nextest_list::list(program, &args, envs),
        None => Err(nextest_list::NextestListError::NotListed(
            "the run picked its tests from a recording (--rerun) or ran none",
        )),
    };
    let listing = match listing {
        Ok(l) => l,
        Err(e) => {
            notes.push(format!("whether every selected test ran is not known: {e}"));
            return Chosen::default();
        }
    };
    let partition = option_value(nextest_args, "--partition");
    let judged: std::collections::BTreeSet<String> = tests
        .iter()
        .map(|t| format!("{} {}", t.binary_id(), t.name))
        .collect();
    let missing: Vec<String> = listing.selected.difference(&judged).cloned().collect();
    Chosen {
        // nextest leaves ignored tests out before it splits the rest into shards, so every
        // shard would count all of them: a shard counts none, as merging expects.
        ignored: if partition.is_some() {
            0
        } else {
            listing.ignored
        },
        other_shards: listing.other_shards,
        partition,
        not_run: NotRun::of(missing, not_run_why(nextest_args, status)),
    }
}

/// Why nextest did not start every selected test.
fn not_run_why(args: &[String], status: &std::process::ExitStatus) -> String {
    let options = || args.iter().take_while(|a| *a != "--");
    if let Some(n) = option_value(args, "--max-fail") {
        format!("nextest stopped after {n} failing test(s) (--max-fail {n})")
    } else if options().any(|a| a == "--fail-fast") {
        "nextest stopped at the first failing test (--fail-fast; a leak fails a test)".into()
    } else {
        format!("`cargo nextest run` ended ({status}) without running them")
    }
}

/// Whether nextest's arguments say how to treat failures (`--fail-fast`, `--no-fail-fast`,
/// `--max-fail N`); what comes after `--` goes to the test binaries, not to nextest.
fn fail_fast_chosen(args: &[String]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        matches!(a.as_str(), "--fail-fast" | "--no-fail-fast" | "--max-fail")
            || a.starts_with("--max-fail=")
    })
}

/// `--flag VALUE` or `--flag=VALUE` among nextest's arguments.
fn option_value(args: &[String], flag: &str) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            return None;
        }
        if a == flag {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_string());
        }
    }
    None
}

fn check_nextest_installed() -> Result<(), Error> {
    let ok = Command::new(cargo::cargo_program())
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(Error::MissingTool(
            "cargo-nextest is not installed (`cargo nextest --version` failed); install it with `cargo install cargo-nextest --locked`".into(),
        ))
    }
}

/// The target runner the user configured for the host, which must keep running the
/// binaries: `CARGO_TARGET_<HOST>_RUNNER`, else `target.<host>.runner` in cargo's
/// configuration files (the project's, up the directory tree, then `$CARGO_HOME`'s).
fn user_runner(var: &str, host: &str, root: &Path) -> Vec<String> {
    let ours = |words: &[String]| words.iter().any(|w| w == "__nextest-runner");
    if let Ok(value) = std::env::var(var) {
        let words: Vec<String> = value.split_whitespace().map(str::to_string).collect();
        return if ours(&words) { Vec::new() } else { words };
    }
    let mut files = Vec::new();
    let start = std::env::current_dir().unwrap_or_else(|_| root.to_path_buf());
    for dir in start.ancestors() {
        files.push(dir.join(".cargo/config.toml"));
        files.push(dir.join(".cargo/config"));
    }
    if let Some(home) = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
    {
        files.push(home.join("config.toml"));
        files.push(home.join("config"));
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(table) = text.parse::<toml::Table>() else {
            continue;
        };
        let runner = table
            .get("target")
            .and_then(|t| t.get(host))
            .and_then(|t| t.get("runner"));
        let words: Vec<String> = match runner {
            Some(toml::Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
            Some(toml::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => continue,
        };
        if !words.is_empty() && !ours(&words) {
            return words;
        }
    }
    Vec::new()
}

/// Reads the verdicts the runners wrote, the last attempt of each test; a test that
/// started and left no verdict (nextest killed it, or its runner crashed) is an `error`.
fn gather(dir: &Path, notes: &mut Vec<String>, keep_unjudged: bool) -> RunnerFiles {
    let read_all = |sub: &str| read_json_files(&dir.join(sub));
    let mut judged: BTreeMap<TestId, (u32, TestReport)> = BTreeMap::new();
    let mut deferred: BTreeMap<TestId, (u32, Option<PathBuf>)> = BTreeMap::new();
    for (path, text) in read_all("tests") {
        match serde_json::from_str::<RunnerVerdict>(&text) {
            Ok(v) => {
                let id = TestId {
                    package: v.report.package.clone(),
                    kind: v.report.kind,
                    binary: v.report.binary.clone(),
                    name: v.report.name.clone(),
                };
                for note in v.notes {
                    if !notes.contains(&note) {
                        notes.push(note);
                    }
                }
                if judged.get(&id).is_none_or(|(a, _)| *a <= v.attempt) {
                    deferred.insert(id.clone(), (v.attempt, v.deferred));
                    judged.insert(id, (v.attempt, v.report));
                }
            }
            Err(e) => notes.push(format!(
                "a verdict file could not be read, so its test is missing: `{}`: {e}",
                path.display()
            )),
        }
    }
    // After an interruption, what did not finish is left out and counted, as `test` does.
    let mut unfinished = 0;
    for (_, text) in read_all("started") {
        let Ok(id) = serde_json::from_str::<TestId>(&text) else {
            continue;
        };
        if judged.contains_key(&id) {
            continue;
        }
        if keep_unjudged {
            judged.insert(id.clone(), (0, unjudged(&id)));
        } else {
            unfinished += 1;
        }
    }
    if unfinished > 0 {
        notes.push(session::interrupted_note(unfinished, "test", "tests"));
    }
    RunnerFiles {
        deferred: waiting(deferred),
        tests: judged.into_values().map(|(_, r)| r).collect(),
        selection: Chosen::default(),
    }
}

/// The `.json` files of `dir`, with their text, in name order.
fn read_json_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(PathBuf, String)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect();
    files.sort();
    files
}

/// The tests whose last attempt's verdict waits for the run's end, with their executables.
fn waiting(last: BTreeMap<TestId, (u32, Option<PathBuf>)>) -> Vec<(TestId, PathBuf)> {
    (last.into_iter())
        .filter_map(|(id, (_, exe))| Some((id, exe?)))
        .collect()
}

/// The verdicts the runners wrote, the tests whose verdicts wait for the run's end (with
/// their executables), and what nextest selected.
struct RunnerFiles {
    tests: Vec<TestReport>,
    deferred: Vec<(TestId, PathBuf)>,
    selection: Chosen,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TargetKind, Verdict};

    #[test]
    fn nextest_runs_every_test_unless_told_how_to_treat_failures() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(!fail_fast_chosen(&args(&[])));
        assert!(!fail_fast_chosen(&args(&[
            "-E",
            "test(a)",
            "--",
            "--fail-fast"
        ])));
        assert!(fail_fast_chosen(&args(&["--fail-fast"])));
        assert!(fail_fast_chosen(&args(&["--no-fail-fast"])));
        assert!(fail_fast_chosen(&args(&["--max-fail", "3"])));
        assert!(fail_fast_chosen(&args(&["-p", "x", "--max-fail=3"])));
    }

    #[test]
    fn nextest_options_we_need_are_found_in_any_spelling() {
        let args: Vec<String> = [
            "-E",
            "test(x)",
            "--target-dir",
            "/t",
            "--manifest-path=/m/Cargo.toml",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(option_value(&args, "--target-dir").as_deref(), Some("/t"));
        assert_eq!(
            option_value(&args, "--manifest-path").as_deref(),
            Some("/m/Cargo.toml")
        );
        let after: Vec<String> = ["--", "--target-dir", "/x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(option_value(&after, "--target-dir"), None);
    }

    #[test]
    fn the_last_attempt_wins_and_a_killed_test_is_not_lost() {
        let dir = std::env::temp_dir().join(format!("leakcheck-nextest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::create_dir_all(dir.join("started")).unwrap();
        let verdict = |attempt, v| RunnerVerdict {
            attempt,
            report: TestReport {
                verdict: v,
                ..TestReport::example()
            },
            notes: vec!["a note".into()],
            deferred: None,
        };
        for (file, attempt, v) in [("a~1", 1, Verdict::Failed), ("a~2", 2, Verdict::Clean)] {
            std::fs::write(
                dir.join("tests").join(format!("{file}.json")),
                serde_json::to_string(&verdict(attempt, v)).unwrap(),
            )
            .unwrap();
        }
        let killed = TestId {
            package: "p".into(),
            kind: TargetKind::Lib,
            binary: "p".into(),
            name: "tests::hangs".into(),
        };
        std::fs::write(
            dir.join("started/k.json"),
            serde_json::to_string(&killed).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join("tests/broken.json"), "{").unwrap();
        let mut notes = Vec::new();
        let tests = gather(&dir, &mut notes, true).tests;
        let got: Vec<(&str, Verdict)> =
            tests.iter().map(|t| (t.name.as_str(), t.verdict)).collect();
        assert_eq!(
            got,
            [
                ("tests::hangs", Verdict::Error),
                ("tests::t", Verdict::Clean)
            ]
        );
        assert_eq!(notes.iter().filter(|n| *n == "a note").count(), 1);
        assert!(notes.iter().any(|n| n.contains("broken.json")), "{notes:?}");
        // After an interruption, what did not finish is counted, not reported as an error.
        let mut notes = Vec::new();
        let tests = gather(&dir, &mut notes, false).tests;
        assert_eq!(tests.len(), 1);
        assert!(
            notes.iter().any(|n| n.contains("1 test did not finish")),
            "{notes:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
