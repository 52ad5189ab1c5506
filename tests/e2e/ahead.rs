//! A test whose previous run needed a stacks process after its counting process gets it
//! beside its counting process from the start; what it is judged by is still only what this
//! run's evidence asks for.

use crate::harness::{run_fresh_with_env, run_nextest, verdicts_of, Run};
use serde_json::Value;

const HISTORY: &str = "tests/fixtures/history";
const NAME: &str = "tests_fixtures_history--ahead";

/// The test's counting process's entry in `metrics.json`.
fn counting_entry(run: &Run, test: &str) -> Value {
    let text = std::fs::read_to_string(run.out_dir.join("metrics.json")).unwrap();
    let metrics: Value = serde_json::from_str(&text).unwrap();
    metrics["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["test"] == test && t["pass"] == "count")
        .unwrap_or_else(|| panic!("{test} has no counting process in metrics.json:\n{text}"))
        .clone()
}

/// The fixture's report writer and thread starter wait, in an extra run of their counting
/// processes, for their stacks processes to start: five places, so that both stacks
/// processes find one free while both counting processes wait, however slowly a loaded
/// machine runs the processes that hold the others.
const WAIT: (&str, &str) = ("HISTORY_FIXTURE_WAIT_FOR_STACKS", "1");

/// Removes the marker files the fixture's tests leave beside its test executable, named
/// after the tool's process id: a later run whose id is reused must not find them.
fn clear_markers() {
    let deps = crate::harness::scratch()
        .join("targets")
        .join(NAME)
        .join("debug")
        .join("deps");
    let Ok(entries) = std::fs::read_dir(deps) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if [".stacks-started-", ".failed-beside-", ".lost-the-lock-"]
            .iter()
            .any(|m| name.contains(m))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn run(envs: &[(&str, &str)]) -> Run {
    clear_markers();
    let mut all = vec![WAIT];
    all.extend_from_slice(envs);
    run_fresh_with_env(HISTORY, &["-j", "5"], NAME, &all)
}

/// `run` gave every test the verdict `before` gave it.
fn assert_same_verdicts(run: &Run, before: &Run) {
    assert_eq!(
        verdicts_of(run.report()),
        verdicts_of(before.report()),
        "{}",
        run.stderr
    );
}

/// Why the test's stacks process was started beside its counting process, if one was.
fn beside_on(run: &Run, test: &str) -> Option<String> {
    counting_entry(run, test)
        .get("stacks_beside_on")
        .and_then(|v| v.as_str().map(String::from))
}

#[test]
fn a_stacks_process_started_beside_counting_is_used_only_when_this_run_asks_for_it() {
    // No history: nothing is started on a previous run's word. A counting process that goes
    // on to a third extra run gets its stacks process beside it then: the report writer's
    // waits there until it has started.
    let target = crate::harness::scratch().join("targets").join(NAME);
    let _ = std::fs::remove_dir_all(target.join("leakcheck"));
    let first = run(&[]);
    assert_eq!(first.code, 3, "{}", first.stderr);
    let leak = "tests::leaks_until_fixed";
    let lock = "tests::holds_a_lock_while_it_leaks";
    let writer = "tests::leaks_while_its_stacks_start";
    for test in [leak, lock, writer] {
        assert_eq!(first.test("history", test)["verdict"], "leak");
        let on = beside_on(&first, test);
        assert!(
            on.is_none() || on.as_deref() == Some("counting-headed"),
            "nothing to go by on a first run: {on:?}"
        );
    }
    assert_eq!(counting_entry(&first, writer)["stacks_beside"], "kept");
    let t = first.test("history", writer);
    assert_eq!(t["method"], "stacks", "{t}");
    assert_eq!(t["extra_runs"]["made"], 5, "{t}");
    // A thread per call that never ends: after one extra run that grew and left its thread
    // running, its stacks process starts, asked for the runs a series stopped by its
    // threads leaves (three), with no second wait for threads.
    let waiter = "tests::leaks_a_waiting_thread_per_call";
    assert_eq!(first.test("history", waiter)["verdict"], "leak");
    assert_eq!(counting_entry(&first, waiter)["stacks_beside"], "kept");
    assert_eq!(
        beside_on(&first, waiter).as_deref(),
        Some("counting-headed")
    );
    let t = first.test("history", waiter);
    assert_eq!(t["extra_runs"]["made"], 3, "{t}");
    assert_eq!(t["extra_runs"]["in_all"], 6, "two counted, then four: {t}");

    // A run of one other test in between leaves the others' entries in metrics.json.
    let one = run_fresh_with_env(
        HISTORY,
        &["--", "--exact", "tests::answers_without_keeping_anything"],
        NAME,
        &[],
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(one.report()["tests"].as_array().unwrap().len(), 1);

    // The previous run's word: both leaks' stacks processes start beside their counting
    // processes. The one whose two processes cannot run side by side (one fails to take the
    // lock the other holds for its life) is not judged by the failure: here its stacks
    // process takes the lock first, so its counting process's own run fails; that stacks
    // process is called off and the counting process runs again, alone.
    let second = run(&[("HISTORY_FIXTURE_LOCK_STACKS_FIRST", "1")]);
    assert_eq!(second.code, 3, "{}", second.stderr);
    assert_same_verdicts(&second, &first);
    assert_eq!(counting_entry(&second, leak)["stacks_beside"], "kept");
    assert_eq!(beside_on(&second, leak).as_deref(), Some("previous-run"));
    assert_eq!(
        counting_entry(&second, lock)["stacks_beside"],
        "called-off",
        "the lock's two processes collide, so neither side-by-side result stands"
    );
    assert_eq!(
        counting_entry(&second, lock)["exit"],
        "exit code 0",
        "the counting process that ran again, alone"
    );
    for test in [leak, lock] {
        let t = second.test("history", test);
        assert_eq!(t["method"], "stacks", "{t}");
        assert_eq!(t["extra_runs"]["made"], 5, "{t}");
        assert!(t["exit"].as_str().unwrap().contains("exit code 0"), "{t}");
    }

    // The leak is fixed: its counting process settles it, and the stacks process started
    // beside it on the previous run's word is called off, not read.
    let fixed = run(&[("HISTORY_FIXTURE_FIXED", "1")]);
    assert_eq!(fixed.code, 3, "the other leak remains: {}", fixed.stderr);
    let t = fixed.test("history", leak);
    assert_eq!(t["verdict"], "clean", "{t}\n{}", fixed.stderr);
    assert_eq!(t["method"], "counters", "{t}");
    assert_eq!(counting_entry(&fixed, leak)["stacks_beside"], "called-off");
    assert_eq!(beside_on(&fixed, leak).as_deref(), Some("previous-run"));
    assert_eq!(fixed.test("history", lock)["verdict"], "leak");

    // `--history FILE`, as a CI cache uses it. No FILE yet: the target directory's timings
    // (the fixed run's: the leak's counting process settled it, so nothing is started
    // beside it); this run's go to FILE.
    let cache = crate::harness::scratch().join("history-cache").join(NAME);
    let _ = std::fs::remove_dir_all(&cache);
    let kept = cache.join("metrics.json");
    let kept_arg = kept.to_str().unwrap();
    clear_markers();
    let cached = run_fresh_with_env(HISTORY, &["-j", "5", "--history", kept_arg], NAME, &[WAIT]);
    assert_eq!(cached.code, 3, "{}", cached.stderr);
    assert_ne!(
        beside_on(&cached, leak).as_deref(),
        Some("previous-run"),
        "the target directory's timings were read"
    );
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        std::fs::read_to_string(cached.out_dir.join("metrics.json")).unwrap()
    );
    // A fresh machine: no target directory left, only the cached FILE, which says the leak
    // needed its stacks process.
    std::fs::remove_dir_all(target.join("leakcheck")).unwrap();
    clear_markers();
    let restored = run_fresh_with_env(HISTORY, &["-j", "5", "--history", kept_arg], NAME, &[WAIT]);
    assert_eq!(restored.code, 3, "{}", restored.stderr);
    assert_eq!(counting_entry(&restored, leak)["stacks_beside"], "kept");
    assert_eq!(beside_on(&restored, leak).as_deref(), Some("previous-run"));
    assert_same_verdicts(&restored, &cached);

    // A counting process whose extra run fails beside its stacks process (the report
    // writer's third run fails once, as a run that met the other over a port would) runs
    // again alone; the stacks process started beside it is called off, and one runs after.
    std::fs::remove_dir_all(target.join("leakcheck")).unwrap();
    let met = run(&[("HISTORY_FIXTURE_FAIL_BESIDE", "1")]);
    assert_eq!(met.code, 3, "{}", met.stderr);
    assert_same_verdicts(&met, &first);
    assert_eq!(counting_entry(&met, writer)["stacks_beside"], "called-off");
    assert_eq!(beside_on(&met, writer).as_deref(), Some("counting-headed"));
    let t = met.test("history", writer);
    assert_eq!(t["method"], "stacks", "{t}");
    assert_eq!(t["extra_runs"]["made"], 5, "{t}");
    assert_eq!(
        t["extra_runs"]["in_all"], 16,
        "ten counted alone, then six: {t}"
    );

    // `cargo leakcheck nextest` on the same target directory keeps `test`'s timings for
    // its next run.
    let nextest = run_nextest(HISTORY, &[], NAME);
    assert_eq!(nextest.code, 3, "{}", nextest.stderr);
    let after = run(&[]);
    assert_eq!(counting_entry(&after, leak)["stacks_beside"], "kept");
}
