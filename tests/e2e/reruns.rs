//! Extra runs of a test in its own process: growth per run for leaks, process-lifetime
//! state settled without stacks, the reasons a test could not run again, release builds,
//! switching them off, and the same verdicts run after run.

use crate::expected::{Expected, EXPECTED};
use crate::harness::{run_fixture, run_fresh, Run};
use serde_json::Value;
use std::collections::BTreeMap;

const LIFETIME: &str = "tests/fixtures/lifetime";
const LEAKY: &str = "tests/fixtures/leaky";

fn rows(fixture: &str) -> Vec<&'static Expected> {
    EXPECTED
        .iter()
        .filter(|e| e.fixture == fixture && !e.bench)
        .collect()
}

/// (binary, test) -> verdict, for every test of a run.
fn verdicts(run: &Run) -> BTreeMap<(String, String), String> {
    crate::harness::verdicts_of(run.report())
}

fn table_verdicts(fixture: &str) -> BTreeMap<(String, String), String> {
    rows(fixture)
        .iter()
        .map(|r| {
            (
                (r.binary.to_string(), r.test.to_string()),
                r.verdict.to_string(),
            )
        })
        .collect()
}

fn leak_stacks(t: &Value) -> Vec<&Value> {
    t["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "leak")
        .collect()
}

#[test]
fn a_leak_grows_by_what_it_loses_on_every_extra_run() {
    let run = run_fixture(LEAKY, &[]);
    let t = run.test("leaky", "tests::forget_vec");
    assert_eq!(t["extra_runs"]["made"], 5, "{}", t["extra_runs"]);
    let stacks = leak_stacks(t);
    assert_eq!(stacks.len(), 1, "{t}");
    let growth = stacks[0]["growth_per_run"].as_array().unwrap();
    assert_eq!(growth.len(), 5);
    for g in growth {
        assert_eq!(
            (g["objects"].as_i64(), g["bytes"].as_i64()),
            (Some(1), Some(8192))
        );
    }
    assert_eq!(stacks[0]["bytes"], 8192, "what the test's own run retained");
    assert!(
        run.stderr
            .contains("8.0 KiB in 1 object, +8.0 KiB in each of 5 runs with stacks"),
        "{}",
        run.stderr
    );
    // A thread that never ends, one more per run: its buffer grows every time too.
    let detached = run.test("leaky", "tests::detached_thread_holds_memory");
    assert!(leak_stacks(detached).iter().any(|s| s["growth_per_run"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["bytes"] == 16384)));
}

#[test]
fn process_lifetime_state_is_settled_by_counting_without_stacks() {
    let run = run_fixture(LIFETIME, &[]);
    // Exact stack profiling ran only for the tests that really grow or cannot run again.
    let mut profiled: Vec<&str> = run.report()["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["method"] == "stacks")
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut leaking_or_single_run: Vec<&str> = rows(LIFETIME)
        .iter()
        .filter(|r| {
            r.verdict == "leak" || matches!(r.extra_runs, Some("panicked" | "should-panic"))
        })
        .map(|r| r.test)
        .collect();
    profiled.sort();
    leaking_or_single_run.sort();
    assert_eq!(profiled, leaking_or_single_run);
    // What a settled test retained is still reported (the pool and its workers' buffers, as
    // many of them as had started when the test ended), with how many runs settled it.
    let pool = run.test("lifetime", "tests::pool_sums_on_workers");
    assert!(
        pool["first_run_retained"]["bytes"].as_u64().unwrap() >= 8192,
        "{pool}"
    );
    assert!(pool["extra_runs"]["made"].as_u64().unwrap() >= 1);
    assert!(
        run.stderr.contains("kept for the process lifetime by"),
        "{}",
        run.stderr
    );
}

#[test]
fn tests_that_cannot_run_again_are_judged_by_what_is_still_reachable_and_say_why() {
    let run = run_fixture(LIFETIME, &[]);
    let stacks_of = |t: &Value| -> Vec<Value> { t["stacks"].as_array().unwrap().clone() };
    let sp = run.test("lifetime", "tests::should_panic_after_filling_a_buffer");
    assert_eq!(sp["extra_runs"]["made"], 0);
    assert!(
        sp["extra_runs"]["detail"]
            .as_str()
            .unwrap()
            .contains("#[should_panic]"),
        "{sp}"
    );
    let again = run.test("lifetime", "tests::panics_when_run_again");
    assert_eq!(
        again["extra_runs"]["detail"],
        "the 1st extra run panicked: runs once per process"
    );
    assert_eq!(again["exit"], "exit code 0", "the test's own run passed");
    // What they keep in a static (or on a live pool's workers) is still reachable at exit:
    // kept, not leaked, and the report says on what grounds.
    for t in [
        sp,
        again,
        run.test("lifetime", "tests::should_panic_with_the_pool_running"),
    ] {
        let kept: Vec<Value> = stacks_of(t)
            .into_iter()
            .filter(|s| {
                s["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("still reachable at exit"))
            })
            .collect();
        assert!(!kept.is_empty(), "{t}");
        assert!(
            kept.iter()
                .all(|s| s["kind"] == "process-lifetime" && s["growth_per_run"].is_null()),
            "{t}"
        );
        assert!(leak_stacks(t).is_empty(), "{t}");
    }
    // What nothing points to any more is lost: a leak, on the evidence of one run.
    for name in [
        "tests::should_panic_after_losing_a_buffer",
        "tests::runs_once_and_loses_a_box_on_a_thread",
    ] {
        let t = run.test("lifetime", name);
        let leaks = leak_stacks(t);
        assert_eq!(leaks.len(), 1, "{t}");
        assert!(
            leaks[0]["reason"]
                .as_str()
                .unwrap()
                .starts_with("unreachable at exit"),
            "{t}"
        );
        assert!(leaks[0]["growth_per_run"].is_null(), "{t}");
    }
    assert!(
        run.stderr
            .contains("judged on its own run: the 1st extra run panicked: runs once per process"),
        "{}",
        run.stderr
    );
    // The progress lines judge the test's own run: an extra run that aborts is not a crash.
    assert!(!run.stderr.contains("CRASH"), "{}", run.stderr);
}

#[test]
fn stack_profiling_every_test_finds_the_same_verdicts_and_names_the_kept_stacks() {
    let run = run_fixture(LIFETIME, &["--stacks-for-all"]);
    assert_eq!(verdicts(&run), table_verdicts(LIFETIME), "{}", run.stderr);
    // The pool's workers and their buffers are process-lifetime state, stack by stack.
    let pool = run.test("lifetime", "tests::pool_sums_on_workers");
    let kept: Vec<&Value> = pool["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "process-lifetime")
        .collect();
    assert!(!kept.is_empty(), "{pool}");
    assert!(kept.iter().all(|s| s["fails"] == false));
    // The epoch-style collector grows for a few runs, then frees as fast as it retires: its
    // garbage grew, but not on every run.
    let epoch = run.test("lifetime", "tests::deferred_frees_catch_up");
    assert!(leak_stacks(epoch).is_empty(), "{epoch}");
    assert!(
        epoch["stacks"].as_array().unwrap().iter().any(|s| {
            let growth = s["growth_per_run"].as_array().unwrap();
            s["kind"] == "process-lifetime"
                && growth.iter().any(|g| g["bytes"].as_i64() > Some(0))
                && growth.iter().any(|g| g["bytes"] == 0)
        }),
        "{epoch}"
    );
}

/// Release builds inline the test functions away; the entry points come from libtest's
/// table all the same, and the verdicts and extra runs are those of debug builds.
#[test]
fn release_builds_run_again_and_give_the_same_verdicts() {
    for fixture in [LIFETIME, LEAKY] {
        let run = run_fixture(fixture, &["--release"]);
        assert_eq!(verdicts(&run), table_verdicts(fixture), "{}", run.stderr);
        for row in rows(fixture) {
            let t = run.test(row.binary, row.test);
            if let Some(status) = row.extra_runs {
                assert_eq!(
                    t["extra_runs"]["status"], status,
                    "{}: {}",
                    row.test, t["extra_runs"]
                );
            }
        }
        assert_eq!(run.code, 3, "{}", run.stderr);
    }
}

#[test]
fn without_extra_runs_what_is_still_reachable_is_kept_and_what_is_lost_leaks() {
    let run = run_fixture(LIFETIME, &["--extra-runs", "0"]);
    for name in [
        "tests::static_buffer_refilled_to_same_size",
        "tests::table_installed_by_compare_and_swap",
    ] {
        let t = run.test("lifetime", name);
        assert_eq!(t["verdict"], "clean", "{t}");
        assert_eq!(t["extra_runs"]["status"], "off");
        assert!(
            t["stacks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["kind"] == "process-lifetime"
                    && s["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("still reachable at exit"))),
            "{t}"
        );
    }
    // The test's thread is gone: what it leaked on it is lost whatever ran before.
    let lost = run.test("lifetime", "tests::closures_in_the_body_leak_each_run");
    assert_eq!(lost["verdict"], "leak", "{lost}");
    assert!(leak_stacks(lost).iter().all(|s| s["reason"]
        .as_str()
        .unwrap()
        .starts_with("unreachable at exit")));
    assert_eq!(
        run.test("lifetime", "tests::joins_eight_threads")["verdict"],
        "clean",
        "glibc's thread cache is harness memory, with or without extra runs"
    );
}

#[test]
fn one_time_fails_makes_process_lifetime_state_fail_too() {
    let dir = crate::harness::scratch().join("configs");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lifetime-fails.toml");
    std::fs::write(&file, "[defaults]\none-time-fails = true\n").unwrap();
    let run = run_fixture(
        LIFETIME,
        &[
            "--config",
            file.to_str().unwrap(),
            "--",
            "tests::static_buffer_refilled_to_same_size",
        ],
    );
    let t = run.test("lifetime", "tests::static_buffer_refilled_to_same_size");
    assert_eq!(t["verdict"], "leak", "{t}");
    assert_eq!(
        t["method"], "stacks",
        "the stacks are shown, not settled by counts"
    );
    let failing: Vec<&Value> = t["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["fails"] == true)
        .collect();
    assert!(
        !failing.is_empty() && failing.iter().all(|s| s["kind"] == "process-lifetime"),
        "{t}"
    );
}

/// The failing stacks of a report, as (test, bytes, frames) text: what a verdict rests on.
fn failing_stacks(report: &str) -> Vec<String> {
    let report: serde_json::Value = serde_json::from_str(report).unwrap();
    let mut out = Vec::new();
    for t in report["tests"].as_array().unwrap() {
        for st in t["stacks"].as_array().unwrap() {
            if st["fails"] == true {
                out.push(format!("{} {} {}", t["name"], st["bytes"], st["frames"]));
            }
        }
    }
    out
}

/// Five runs with two jobs and one with a single job give the table's verdicts and the same
/// failing stacks every time, on the fixtures whose tests start threads. Where no test
/// leaves threads finishing after it returns (leaky), report.json is the same byte for
/// byte, retention paths through a running thread's stack included (a stack is read from
/// its outermost frame, so where the thread was stopped does not decide which frame holds a
/// pointer); lifetime's tests do leave threads, on purpose, so the size of what they keep
/// for the process lifetime may differ.
#[test]
fn reports_are_the_same_run_after_run_and_with_one_or_two_jobs() {
    for fixture in [LIFETIME, LEAKY] {
        let expected = table_verdicts(fixture);
        let name = format!("{}--repeated", fixture.replace('/', "_"));
        let mut args: Vec<Vec<&str>> = vec![vec!["-j", "2"]; 5];
        args.push(vec!["-j", "1"]);
        let mut first_report: Option<String> = None;
        for (i, a) in args.iter().enumerate() {
            let run = run_fresh(fixture, a, &name);
            assert_eq!(
                verdicts(&run),
                expected,
                "{fixture}, run {} with {a:?}:\n{}",
                i + 1,
                run.stderr
            );
            let report = std::fs::read_to_string(run.out_dir.join("report.json")).unwrap();
            match &first_report {
                None => first_report = Some(report),
                Some(first) => {
                    assert_eq!(
                        failing_stacks(first),
                        failing_stacks(&report),
                        "{fixture}: run {} with {a:?}",
                        i + 1
                    );
                    assert!(
                        fixture != LEAKY || *first == report,
                        "{fixture}: report.json of run {} with {a:?} differs from the first run's:\n{report}",
                        i + 1
                    );
                }
            }
        }
    }
}

/// Soak: a test whose 16 threads allocate and free at once, run 20 times (10 with two jobs
/// beside another threaded test, 10 alone), is clean every time.
#[test]
fn a_sixteen_thread_allocate_and_free_test_is_clean_every_time() {
    let name = "tests_fixtures_lifetime--soak";
    for i in 0..20 {
        let args: &[&str] = if i % 2 == 0 {
            &[
                "-j",
                "2",
                "--",
                "tests::sixteen_threads_allocate_and_free",
                "tests::joins_eight_threads",
            ]
        } else {
            &["--", "--exact", "tests::sixteen_threads_allocate_and_free"]
        };
        let run = run_fresh(LIFETIME, args, name);
        let t = run.test("lifetime", "tests::sixteen_threads_allocate_and_free");
        assert_eq!(t["verdict"], "clean", "run {}: {t}\n{}", i + 1, run.stderr);
        assert_eq!(run.code, 0, "run {}: {}", i + 1, run.stderr);
    }
}
