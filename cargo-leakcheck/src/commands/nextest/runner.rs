//! The runner: what nextest executes in place of each test binary. It passes listing
//! through, and for a test run it judges the test as `cargo leakcheck test` would, writes the
//! verdict for the command that started nextest to gather, and ends as the test did.

use crate::analysis::frames;
use crate::cli::RunnerArgs;
use crate::commands::test::{self as test_command, CheckSetup};
use crate::config;
use crate::errors::{Error, ExitCode};
use crate::execution::cargo::{Harness, TestBinary, Workspace};
use crate::execution::entry::Layout;
use crate::execution::history::History;
use crate::execution::inspect::BinaryFacts;
use crate::execution::runner::{ProcessEnd, TestFilter};
use crate::model::{human_bytes, TestReport, Verdict};
use crate::report::flamegraph;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::handoff::{identify, unjudged, RunnerSession, RunnerVerdict, TestId, SESSION_ENV};

/// The exit code of a test process that leaked (as `cargo leakcheck test` exits).
const LEAK_EXIT: i32 = ExitCode::LeaksFound as i32;

/// The runner: what nextest executes in place of each test binary. Returns the exit code.
pub fn run_as_runner(args: &RunnerArgs) -> i32 {
    let Some((binary, rest)) = args.command.split_first() else {
        crate::say!("error: __nextest-runner needs the test binary to run");
        return ExitCode::CouldNotRun as i32;
    };
    let session: Option<RunnerSession> = std::env::var_os(SESSION_ENV)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(session) = session else {
        crate::say!(
            "warning: cargo-leakcheck runs `{}` unchecked: no session ({SESSION_ENV} unset or unreadable)",
            Path::new(binary).display()
        );
        return pass_through(&[], binary, rest);
    };
    let words: Vec<String> = rest
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let listing = words.iter().any(|a| a == "--list")
        || std::env::var("NEXTEST_TEST_PHASE").is_ok_and(|p| p == "list");
    let name = words
        .iter()
        .position(|a| a == "--exact")
        .and_then(|i| words.get(i + 1));
    let (Some(name), false) = (name, listing) else {
        return pass_through(&session.wrapper, binary, rest);
    };
    match check_test(&session, Path::new(binary), name, &words) {
        Ok(code) => code,
        // nextest stopped the test (a slow-timeout, Ctrl-C): end as asked, not run it again.
        Err(_) if crate::execution::interrupt::requested().is_some() => {
            crate::execution::interrupt::requested()
                .map_or(1, crate::execution::interrupt::exit_code)
        }
        Err(e) => {
            // The test still runs as nextest asked: a broken check never hides its result.
            crate::say!(
                "error: cargo-leakcheck could not check `{name}`: {e}; running it unchecked"
            );
            let (id, stem, attempt) = identity(Path::new(binary), name);
            let verdict = RunnerVerdict {
                attempt,
                report: TestReport {
                    message: Some(format!("cargo-leakcheck could not check it: {e}")),
                    exit: "not checked".into(),
                    ..unjudged(&id)
                },
                notes: Vec::new(),
                deferred: None,
            };
            let _ = write_verdict(&session, &stem, &verdict);
            pass_through(&session.wrapper, binary, rest)
        }
    }
}

/// Runs the binary as asked (through the user's runner), as if we were not there.
fn pass_through(wrapper: &[String], binary: &OsString, args: &[OsString]) -> i32 {
    use std::os::unix::process::CommandExt;
    let mut cmd = match wrapper {
        [] => Command::new(binary),
        [program, rest @ ..] => {
            let mut cmd = Command::new(program);
            cmd.args(rest).arg(binary);
            cmd
        }
    };
    let e = cmd.args(args).exec();
    crate::say!(
        "error: could not run `{}`: {e}",
        Path::new(binary).display()
    );
    127
}

/// Checks one test as `cargo leakcheck test` would, writes its verdict, forwards its
/// output, and returns the exit code the test process should end with.
/// The test nextest asked for, the file stem of its verdict and nextest's attempt number.
fn identity(exe: &Path, name: &str) -> (TestId, String, u32) {
    let binary_id = std::env::var("NEXTEST_BINARY_ID").unwrap_or_default();
    let attempt: u32 = std::env::var("NEXTEST_ATTEMPT")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let (package, kind, binary) = identify(&binary_id, exe);
    let stem = flamegraph::file_stem(&format!("{package}-{kind}-{binary}~{name}"));
    let id = TestId {
        package,
        kind,
        binary,
        name: name.to_string(),
    };
    (id, stem, attempt)
}

/// Writes a verdict where the command that started nextest gathers them (atomically).
fn write_verdict(
    session: &RunnerSession,
    stem: &str,
    verdict: &RunnerVerdict,
) -> Result<(), Error> {
    let path = session
        .dir
        .join("tests")
        .join(format!("{stem}~{}.json", verdict.attempt));
    let tmp = path.with_extension("json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_string(verdict).expect("verdicts serialize"),
    )
    .and_then(|()| std::fs::rename(&tmp, &path))
    .map_err(|e| Error::io(format!("write `{}`", path.display()), e))
}

/// Runs one test under the tool (its passes, in this process's stead) and has it judged;
/// the exit code nextest is to see.
fn check_test(
    session: &RunnerSession,
    exe: &Path,
    name: &str,
    args: &[String],
) -> Result<i32, Error> {
    let (id, stem, attempt) = identity(exe, name);
    let work_dir = start(session, &id, &stem, attempt)?;
    let (config, _warnings) = config::load(session.config.as_deref(), &session.root)?;
    let ws = workspace(session);
    let filter = filter(name, args);
    let mut binaries = vec![binary(&memo_dir(&session.dir), &id, exe)];
    let setup = CheckSetup {
        ws: &ws,
        runtime: &session.runtime,
        work_dir: &work_dir,
        config: &config,
        cli: &session.cli,
        jobs: 1,
        filter: &filter,
        wrapper: &session.wrapper,
        stacks_for_all: session.stacks_for_all,
        verbose: false,
        progress: false,
        known_layout: shared_layout(session, exe),
        memo: Some(&memo_dir(&session.dir)),
        others: &[],
        history: &History::default(),
        recorder: &crate::judging::capture::Recorder::from_env(),
    };
    let mut notes = Vec::new();
    let checked = test_command::check(&mut binaries, &setup, &mut notes)?;
    let proven = binaries[0]
        .facts
        .tests
        .as_ref()
        .and_then(|t| t.proven_layout);
    if let Some(layout) = proven {
        share_layout(session, layout);
    }
    let report = the_test(checked.tests, name, exe, &notes)?;
    forward_output(&checked.results, name);
    write_processes(session, &stem, attempt, &id, &checked.results);
    let deferred = waits_for_the_run(&report);
    let gate = say_what_failed(session, &report, deferred);
    let verdict = RunnerVerdict {
        attempt,
        report,
        notes,
        deferred: deferred.then(|| exe.to_path_buf()),
    };
    write_verdict(session, &stem, &verdict)?;
    let _ = std::fs::remove_dir_all(&work_dir);
    // Last: a crashed test's process ends by its signal, here.
    Ok(exit_code_for(gate, &verdict.report, &checked.results))
}

/// Says the test started (so a process nextest kills is still accounted for) and makes
/// its attempt's empty work directory.
fn start(session: &RunnerSession, id: &TestId, stem: &str, attempt: u32) -> Result<PathBuf, Error> {
    let started = session.dir.join("started").join(format!("{stem}.json"));
    std::fs::write(&started, serde_json::to_string(id).expect("ids serialize"))
        .map_err(|e| Error::io(format!("write `{}`", started.display()), e))?;
    let work_dir = session.dir.join("work").join(format!("{stem}~{attempt}"));
    let _ = std::fs::remove_dir_all(&work_dir);
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| Error::io(format!("create `{}`", work_dir.display()), e))?;
    Ok(work_dir)
}

/// The workspace as the runner sees it: nextest has set the test's directory and
/// environment already, nothing to add.
fn workspace(session: &RunnerSession) -> Workspace {
    Workspace {
        root: session.root.clone(),
        target_dir: match session.target_dir.as_os_str().is_empty() {
            true => session.dir.clone(),
            false => session.target_dir.clone(),
        },
        members: BTreeMap::new(),
        toolchain_libdir: None,
    }
}

/// The one test nextest asked for, with libtest's options for ignored tests.
fn filter(name: &str, args: &[String]) -> TestFilter {
    TestFilter {
        list_args: vec!["--exact".into(), name.to_string()],
        ignored_only: args.iter().any(|a| a == "--ignored"),
        include_ignored: args.iter().any(|a| a == "--include-ignored"),
        partition: None,
    }
}

/// What nextest is to make of the test (see [`gate`]), said on stderr when it leaked: the
/// leak, or that its verdict waits for the run's end (`deferred`; nextest sees the test
/// end as it ended).
fn say_what_failed(session: &RunnerSession, report: &TestReport, deferred: bool) -> ExitCode {
    if deferred {
        crate::say!(
            "cargo-leakcheck: `{}`: what the processes it started lost is judged when the run ends, against every process of those programs the run's tests started",
            report.name
        );
        return ExitCode::Success;
    }
    let gate = gate(session, report);
    if report.verdict == Verdict::Leak {
        let known = gate == ExitCode::Success;
        crate::say!("{}", leak_summary(report, &session.root, known));
    }
    gate
}

/// Whether a test's verdict waits for the run's end: it leaked, and only in processes of
/// programs it started. Whether such a loss is the program's once per process or grows
/// with its work is told by every process of the program the run's tests started (see
/// [`crate::analysis::children`]); the command that started nextest judges it again with
/// all of them.
fn waits_for_the_run(report: &TestReport) -> bool {
    let mut failing = report.failing_stacks().peekable();
    report.verdict == Verdict::Leak
        && failing.peek().is_some()
        && failing.all(|s| s.process.is_some())
        && !report.collections.iter().any(|c| c.fails)
}

/// Writes the scanned processes the test started (see [`crate::judging::suite`]), for the
/// tests whose verdicts wait for the run's end to be compared with.
fn write_processes(
    session: &RunnerSession,
    stem: &str,
    attempt: u32,
    id: &TestId,
    results: &crate::execution::passes::PassResults,
) {
    let suite = crate::judging::verdicts::suite_processes(results);
    let files = crate::judging::suite::files_of(&suite, &id.label());
    if files.is_empty() {
        return;
    }
    let path = super::handoff::processes_dir(&session.dir).join(format!("{stem}~{attempt}.json"));
    let text = serde_json::to_string(&files).expect("processes serialize");
    crate::execution::shared_file::write_whole(&path, &text);
}

/// Where this run's runners keep what they found reading its binaries.
pub(super) fn memo_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("binaries")
}

/// The test binary nextest runs, as `test` would have built it: nextest runs only binaries
/// that list their tests, libtest's or a harness of the target's own (as another runner of
/// this run found, or read now).
pub(super) fn binary(memo: &Path, id: &TestId, exe: &Path) -> TestBinary {
    let libtest = match crate::execution::memo::load(memo, exe) {
        Some(known) => known.harness == Harness::Libtest,
        None => std::fs::read(exe).is_ok_and(|data| links_libtest(&data)),
    };
    TestBinary {
        package: id.package.clone(),
        target: id.binary.clone(),
        kind: id.kind,
        path: exe.to_path_buf(),
        harness: match libtest {
            true => Harness::Libtest,
            false => Harness::Trials,
        },
        facts: BinaryFacts::default(),
        doc: None,
    }
}

/// The report of the test named `name`; a binary that does not list it is an error.
fn the_test(
    tests: Vec<TestReport>,
    name: &str,
    exe: &Path,
    notes: &[String],
) -> Result<TestReport, Error> {
    tests.into_iter().find(|t| t.name == name).ok_or_else(|| {
        Error::Usage(format!(
            "`{name}` is not among the tests `{}` lists{}",
            exe.display(),
            notes.first().map(|n| format!(" ({n})")).unwrap_or_default()
        ))
    })
}

/// The test's own output, for nextest to show and keep.
fn forward_output(results: &crate::execution::passes::PassResults, name: &str) {
    if let Some(outcome) = results.tests.iter().find(|t| t.case.name == name) {
        forward(&outcome.result.stdout, &mut std::io::stdout());
        forward(&outcome.result.stderr, &mut std::io::stderr());
    }
}

/// What the test makes of the run's exit code: the gate `cargo leakcheck nextest` asks of
/// the whole report, asked of this one test with the base run, so that nextest's own
/// output and JUnit fail exactly the tests that fail the run. A base that cannot be read
/// here (the command checked it before nextest started) leaves the test judged alone.
fn gate(session: &RunnerSession, report: &TestReport) -> ExitCode {
    let mut one = crate::model::Report {
        tests: vec![report.clone()],
        ..crate::model::Report::new(Default::default())
    };
    if let Some((path, fail_on_new)) = &session.baseline {
        if report.verdict == Verdict::Leak {
            if let Ok((_, base)) = crate::report::json::read(path) {
                let label = path.display().to_string();
                one.baseline = Some(crate::analysis::baseline::compare_tests(
                    &base,
                    &one,
                    &label,
                    *fail_on_new,
                ));
            }
        }
    }
    one.gate(&one.tests[0])
}

/// Where runners share the layout of libtest's table that one of them proved.
fn layout_file(session: &RunnerSession) -> PathBuf {
    session.dir.join("libtest-layout.json")
}

fn share_layout(session: &RunnerSession, layout: Layout) {
    let path = layout_file(session);
    if path.exists() {
        return;
    }
    let text = serde_json::to_string(&layout).expect("layouts serialize");
    crate::execution::shared_file::write_whole(&path, &text);
}

/// libtest's layout as another test binary of this build proved it. Each runner sees one
/// binary, and a binary with one test cannot prove it alone: the first runner that needs
/// it reads a sibling test binary (the newest few in the same directory that link
/// libtest) and shares what it proved. A layout only settles a binary it fits (see
/// [`crate::execution::entry::Inspection::settle`]).
fn shared_layout(session: &RunnerSession, exe: &Path) -> Option<Layout> {
    if let Some(layout) = std::fs::read_to_string(layout_file(session))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
    {
        return Some(layout);
    }
    for path in siblings(exe).into_iter().take(6) {
        if let Some(layout) = prove_layout(session, &path) {
            share_layout(session, layout);
            return Some(layout);
        }
    }
    None
}

/// The other test executables of `exe`'s directory (cargo names them `<crate>-<hash>`),
/// newest first.
fn siblings(exe: &Path) -> Vec<PathBuf> {
    let Some(entries) = exe.parent().and_then(|dir| std::fs::read_dir(dir).ok()) else {
        return Vec::new();
    };
    let mut siblings: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let meta = e.metadata().ok()?;
            use std::os::unix::fs::PermissionsExt;
            let executable = meta.is_file() && meta.permissions().mode() & 0o111 != 0;
            let hashed = path
                .file_name()?
                .to_str()?
                .rsplit_once('-')
                .is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()));
            let modified = meta.modified().ok()?;
            (executable && hashed && path != exe).then_some((modified, path))
        })
        .collect();
    siblings.sort_by_key(|s| std::cmp::Reverse(s.0));
    siblings.into_iter().map(|(_, path)| path).collect()
}

/// libtest's layout as a libtest harness with at least two tests proves it.
fn prove_layout(session: &RunnerSession, path: &Path) -> Option<Layout> {
    let data = std::fs::read(path).ok()?;
    // Only a libtest harness is asked to list its tests.
    if !links_libtest(&data) {
        return None;
    }
    let mut cmd = match session.wrapper.as_slice() {
        [] => Command::new(path),
        [program, rest @ ..] => {
            let mut cmd = Command::new(program);
            cmd.args(rest).arg(path);
            cmd
        }
    };
    cmd.args(["--list", "--format", "terse"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let out = crate::execution::interrupt::output(&mut cmd).ok()?;
    let listed = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .collect();
    if names.len() < 2 {
        return None;
    }
    // cargo names a test executable `<crate>-<hash>`.
    let krate = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.rsplit_once('-'))
        .map_or("", |(name, _)| name);
    crate::execution::entry::inspect(&data, &names, krate).proven_layout
}

/// Whether an executable contains libtest's entry point (a test harness).
fn links_libtest(data: &[u8]) -> bool {
    use object::{Object, ObjectSymbol};
    object::File::parse(data).is_ok_and(|f| {
        f.symbols()
            .any(|s| s.name().is_ok_and(|n| n.contains("test_main_static")))
    })
}

/// Copies a captured output file to ours.
fn forward(path: &Path, out: &mut dyn std::io::Write) {
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = std::io::copy(&mut f, out);
        let _ = out.flush();
    }
}

/// How the test process ends: as the test did when it failed; 3 when it leaked; 0 else.
fn exit_code_for(
    gate: ExitCode,
    report: &TestReport,
    results: &crate::execution::passes::PassResults,
) -> i32 {
    let name = report.name.as_str();
    match gate {
        ExitCode::LeaksFound => LEAK_EXIT,
        ExitCode::TestsFailed => {
            let end = results
                .tests
                .iter()
                .find(|t| t.case.name == name)
                .map(|t| crate::execution::passes::first_run_end(&t.result));
            match end {
                Some(ProcessEnd::Exited(c)) if c != 0 => c,
                Some(ProcessEnd::Signaled(sig)) => {
                    // Die of the same signal, so nextest reports it as the test's.
                    // SAFETY: resetting a handler and raising a signal in our own process.
                    unsafe {
                        libc::signal(sig, libc::SIG_DFL);
                        libc::raise(sig);
                    }
                    128 + sig
                }
                _ => 101,
            }
        }
        // A test the tool could not judge fails nextest's run only when asked to
        // (`unsettled-fails`); the report's exit code says the run is incomplete either way.
        ExitCode::Incomplete if report.unsettled_fails_the_run() => ExitCode::Incomplete as i32,
        _ => 0,
    }
}

/// A few lines on stderr for nextest's output and JUnit: what leaked and where, and
/// whether the base run had it already (`known`: it does not fail the run).
fn leak_summary(report: &TestReport, root: &Path, known: bool) -> String {
    let failing: Vec<_> = report.failing_stacks().collect();
    let what = match known {
        true => "KNOWN LEAK (the base run had it; --fail-on new lets it pass)",
        false => "LEAK",
    };
    let mut s = format!(
        "cargo-leakcheck: {what}: `{}` retained {} in {} object(s), {} stack(s) over the threshold of {} B",
        report.name,
        human_bytes(report.retained_bytes),
        report.retained_objects,
        failing.len(),
        report.stack_threshold
    );
    for st in failing.iter().take(3) {
        if let Some(f) = frames::identifying_frame(&st.frames, root) {
            let at = match (&f.file, f.line) {
                (Some(file), Some(line)) => format!(" ({file}:{line})"),
                _ => String::new(),
            };
            s.push_str(&format!(
                "\n  {} allocated at {}{at}",
                human_bytes(st.bytes),
                f.function
            ));
        }
    }
    for c in report.collections.iter().filter(|c| c.fails).take(3) {
        s.push_str(&format!(
            "\n  {}",
            crate::report::text::collection_text(c, root)
        ));
    }
    s.push_str("\n  the full report is written when `cargo leakcheck nextest` finishes");
    s
}
