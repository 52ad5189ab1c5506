//! Every fixture test's verdict, allocation site and one-time listing against the table,
//! plus exit codes, the report schema and the flame graph artifacts.

use crate::expected::{Expected, EXPECTED, IGNORED};
use crate::harness::{
    grows_site, leak_site, marked_line_of, run_fixture, spawn_site, thread_spawn_site, Run,
};
use serde_json::Value;
use std::collections::BTreeSet;

/// Arguments each fixture is run with, and the exit code that run must end with.
fn scenario(fixture: &str) -> (&'static [&'static str], i32) {
    match fixture {
        // Leaks found.
        "tests/fixtures/leaky"
        | "tests/fixtures/lifetime"
        | "tests/fixtures/jemalloc-global"
        | "tests/fixtures/token-macros"
        | "tests/fixtures/names"
        | "tests/fixtures/counting-alloc"
        | "tests/fixtures/many-live"
        | "tests/fixtures/retention"
        | "tests/fixtures/teardown"
        | "tests/fixtures/cycles"
        | "tests/fixtures/slow"
        | "tests/fixtures/tasks"
        | "tests/fixtures/history"
        | "tests/fixtures/collections"
        | "tests/fixtures/mappings"
        | "tests/fixtures/trials"
        | "examples/demo" => (&[], 3),
        // A binary run by its integration tests leaks.
        "tests/fixtures/children" => (&[], 3),
        // A workspace of two libraries whose doc-tests leak.
        "tests/fixtures/doctests" => (&["--workspace"], 3),
        // A healthy suite: nothing leaked, the run passes.
        "tests/fixtures/healthy" => (&[], 0),
        // Nothing leaked or failed, but nothing could be analysed.
        "tests/fixtures/custom-alloc" => (&[], 5),
        // The same, but one test's leak shows in a collection's length: leaks found.
        "tests/fixtures/pool-alloc" => (&[], 3),
        // Failing, crashing and hanging tests: "tests failed" wins over "leaks found".
        "tests/fixtures/misbehaving" => (&["--timeout", "20"], 4),
        // Its own leakcheck.toml gives one test a 2-second timeout, which it hits.
        "tests/fixtures/configured" => (&[], 4),
        other => panic!("no scenario for fixture {other}"),
    }
}

fn frames_text(stack: &Value) -> String {
    stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{} {}:{}", f["function"], f["file"], f["line"]))
        .collect::<Vec<_>>()
        .join("\n    ")
}

/// Whether the report shows what a test kept for the process lifetime: as one-time or
/// process-lifetime stacks, or as what its run retained, settled by completed extra runs.
fn shows_kept_memory(t: &Value) -> bool {
    let stacks = t["stacks"].as_array().unwrap();
    let by_stacks = stacks
        .iter()
        .any(|s| s["kind"] == "one-time" || s["kind"] == "process-lifetime");
    let by_counting = t["method"] == "counters"
        && t["extra_runs"]["status"] == "completed"
        && t["extra_runs"]["made"].as_u64() >= Some(1)
        && t["first_run_retained"]["bytes"].as_u64() > Some(0);
    by_stacks || by_counting
}

/// A test whose every run left threads: its counting process stopped after two runs
/// (`threads-left`) and its stacks process made the other three of the default five.
fn check_threads_left(run: &Run, row: &Expected, t: &Value, who: &str) -> Vec<String> {
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(run.out_dir.join("metrics.json")).unwrap())
            .unwrap();
    // A library's binary is named after its package, a test target as `package::target`.
    let named = |b: &str| b == row.package || b.ends_with(&format!("::{}", row.binary));
    let counting = metrics["tests"].as_array().unwrap().iter().find(|m| {
        m["binary"].as_str().is_some_and(named) && m["test"] == row.test && m["pass"] == "count"
    });
    let mut problems = Vec::new();
    match counting {
        Some(m) if m["extra_runs"]["end"] == "threads-left" && m["extra_runs"]["made"] == 2 => {}
        other => problems.push(format!(
            "{who}: counting runs did not stop at two with threads left: {}",
            other.map_or("no counting process".into(), |m| m["extra_runs"]
                .to_string())
        )),
    }
    if t["extra_runs"]["made"] != 3 {
        problems.push(format!(
            "{who}: the stacks process made {} extra runs (expected the other 3 of 5)",
            t["extra_runs"]["made"]
        ));
    }
    problems
}

/// Checks one table row against the report; returns what is wrong.
pub(crate) fn check_row(run: &Run, row: &Expected) -> Vec<String> {
    let mut problems = Vec::new();
    let t = run.test(row.binary, row.test);
    let who = format!("{} {} {}", row.fixture, row.binary, row.test);
    if t["verdict"] != row.verdict {
        problems.push(format!(
            "{who}: verdict {} (expected {}); message: {}; stacks: {}",
            t["verdict"],
            row.verdict,
            t["message"],
            serde_json::to_string_pretty(&t["stacks"]).unwrap()
        ));
    }
    let stacks = t["stacks"].as_array().unwrap();
    if let Some(site) = row.site {
        let (file, line) = leak_site(row.fixture, site);
        // The marked line (markers are unique within a fixture, and every test has a
        // process of its own). It need not be under the test function: a pool's worker
        // may make the leak.
        // And what it holds: heap objects, or the program's own mappings.
        let memory = row.memory.unwrap_or("heap");
        let hit = stacks.iter().filter(|s| s["kind"] == "leak").any(|s| {
            s["memory"].as_str().unwrap_or("heap") == memory
                && s["frames"].as_array().unwrap().iter().any(|f| {
                    f["file"].as_str().is_some_and(|p| p.ends_with(&file))
                        && f["line"].as_u64() == Some(line as u64)
                })
        });
        if !hit {
            let shown: Vec<String> = stacks
                .iter()
                .map(|s| format!("[{}] {}", s["memory"], frames_text(s)))
                .collect();
            problems.push(format!(
                "{who}: no leak stack of {memory} at {file}:{line}; stacks:\n    {}",
                shown.join("\n  --\n    ")
            ));
        }
    }
    if row.kept && !shows_kept_memory(t) {
        problems.push(format!(
            "{who}: memory kept for the process lifetime is not shown: {}",
            serde_json::to_string(&(&t["method"], &t["extra_runs"], &t["first_run_retained"]))
                .unwrap()
        ));
    }
    if let Some(status) = row.extra_runs {
        if t["extra_runs"]["status"] != status {
            problems.push(format!(
                "{who}: extra runs {} (expected status {status})",
                t["extra_runs"]
            ));
        }
    }
    if row.drained {
        let drained = &t["drained"];
        if drained["runtime"] != "crossbeam-epoch" || drained["objects"].as_u64().unwrap_or(0) == 0
        {
            problems.push(format!(
                "{who}: the report does not say what was drained: {drained}"
            ));
        }
    }
    if row.threads_left {
        problems.extend(check_threads_left(run, row, t, &who));
    }
    if let Some(method) = row.method {
        if t["method"] != method {
            problems.push(format!("{who}: method {} (expected {method})", t["method"]));
        }
    }
    if let Some((root, function)) = row.held_by {
        let held = stacks
            .iter()
            .filter(|s| s["kind"] == "leak" || s["kind"] == "process-lifetime")
            .filter_map(|s| s.get("retained_by"))
            .any(|h| {
                let named = |f: &Value| {
                    function
                        .is_none_or(|name| f["function"].as_str().is_some_and(|n| n.contains(name)))
                };
                h["root"].as_str().is_some_and(|r| r.contains(root))
                    && (function.is_none()
                        || named(&h["frame"])
                        || h["via"].as_array().unwrap().iter().any(named))
            });
        if !held {
            let shown: Vec<&Value> = stacks.iter().filter_map(|s| s.get("retained_by")).collect();
            problems.push(format!(
                "{who}: no stack held by {root} (through {function:?}); held by: {}",
                serde_json::to_string_pretty(&shown).unwrap()
            ));
        }
    }
    if let Some((runtime, name)) = row.spawns_tasks {
        problems.extend(check_tasks(row, t, runtime, name, &who));
    }
    if let Some((name, state)) = row.thread_holder {
        problems.extend(check_thread_holder(run, row, t, name, state, &who));
    }
    // A failed test with no leak site leaks nothing: what it keeps reachable is kept
    // memory, as for a test that passes.
    if row.verdict == "failed" && row.site.is_none() && stacks.iter().any(|s| s["kind"] == "leak") {
        let shown: Vec<String> = stacks
            .iter()
            .filter(|s| s["kind"] == "leak")
            .map(frames_text)
            .collect();
        problems.push(format!(
            "{who}: failed, and a stack is typed leak:\n    {}",
            shown.join("\n  --\n    ")
        ));
    }
    if row.verdict == "clean" && stacks.iter().any(|s| s["fails"] == true) {
        problems.push(format!("{who}: clean, yet a stack is marked failing"));
    }
    let collections = t["collections"].as_array().cloned().unwrap_or_default();
    if let Some((name, entries)) = row.grows {
        problems.extend(check_grows(row, &collections, name, entries, &who));
    } else if row.verdict == "clean" && collections.iter().any(|c| c["fails"] == true) {
        problems.push(format!(
            "{who}: a collection is marked failing: {}",
            serde_json::to_string_pretty(&collections).unwrap()
        ));
    }
    problems
}

/// A collection defined on the line marked `// grows: name` that fails the test, `entries`
/// longer after every extra run, and that the human summary names with its entries per run.
fn check_grows(
    row: &Expected,
    collections: &[Value],
    name: &str,
    entries: i64,
    who: &str,
) -> Vec<String> {
    let (file, line) = grows_site(row.fixture, name);
    // Reached from the marked static, or from another that shares it.
    let at = |c: &Value| {
        c["file"].as_str().is_some_and(|f| f.ends_with(&file))
            && c["line"].as_u64() == Some(line as u64)
    };
    let found = collections.iter().find(|c| {
        at(c)
            || c["also_held_by"]
                .as_array()
                .is_some_and(|a| a.iter().any(at))
    });
    let Some(c) = found else {
        return vec![format!(
            "{who}: no collection defined at {file}:{line}; collections: {}",
            serde_json::to_string_pretty(collections).unwrap()
        )];
    };
    let mut problems = Vec::new();
    let growth: Vec<i64> = c["growth_per_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_i64().unwrap())
        .collect();
    let failing = collections.iter().filter(|c| c["fails"] == true).count();
    if failing != 1 {
        problems.push(format!(
            "{who}: {failing} collections fail where one grows: {}",
            serde_json::to_string_pretty(collections).unwrap()
        ));
    }
    if c["kind"] != "leak"
        || c["fails"] != true
        || growth.is_empty()
        || growth.iter().any(|&g| g != entries)
    {
        problems.push(format!(
            "{who}: the collection at {file}:{line} does not fail by {entries} more on every run: {c}"
        ));
    }
    problems
}

/// The task checks of a row (see [`Expected::spawns_tasks`]): a leak stack of task cells
/// spawned at the marked line, one more alive after every extra run; and, when the row says
/// so, another leak stack held by such a task.
/// A leak stack held by a thread that never named itself: named by the line that spawned
/// it and what it was doing, in report.json and in the summary.
fn check_thread_holder(
    run: &Run,
    row: &Expected,
    t: &Value,
    name: &str,
    state: &str,
    who: &str,
) -> Vec<String> {
    let (file, line) = thread_spawn_site(row.fixture, name);
    let stacks = t["stacks"].as_array().unwrap();
    let held = stacks
        .iter()
        .filter(|s| s["kind"] == "leak")
        .filter_map(|s| s.get("retained_by")?.get("holder"))
        .any(|h| {
            h["spawned_at"]["file"]
                .as_str()
                .is_some_and(|p| p.ends_with(&file))
                && h["spawned_at"]["line"].as_u64() == Some(u64::from(line))
                && h.get("name").is_none()
                && h["state"].as_str().is_some_and(|s| s.contains(state))
        });
    let mut problems = Vec::new();
    if !held {
        let shown: Vec<&Value> = stacks.iter().filter_map(|s| s.get("retained_by")).collect();
        problems.push(format!(
            "{who}: no leak held by an unnamed thread spawned at {file}:{line}, {state}; held by: {}",
            serde_json::to_string_pretty(&shown).unwrap()
        ));
    }
    let said = format!("held by a thread spawned at {file}:{line} (`");
    if !run.stderr.contains(&said) || run.stderr.contains(" of thread `") {
        problems.push(format!(
            "{who}: the summary does not say `{said}…`:\n{}",
            run.stderr
        ));
    }
    problems
}

fn check_tasks(row: &Expected, t: &Value, runtime: &str, name: &str, who: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (file, line) = spawn_site(row.fixture, name);
    let stacks = t["stacks"].as_array().unwrap();
    // Every task of the fixtures waits for something that never comes: not finished, as
    // tokio's state word says (async-task's is not read). Waiting to be woken, or, for the
    // newest task when a loaded machine's workers have not polled it yet, scheduled.
    let state: &[Value] = if runtime == "tokio" {
        &[Value::from("pending"), Value::from("scheduled")][..]
    } else {
        &[Value::Null][..]
    };
    let at_site = |task: &Value| {
        task["runtime"] == runtime
            && task["spawned_at"]["file"]
                .as_str()
                .is_some_and(|p| p.ends_with(&file))
            && task["spawned_at"]["line"].as_u64() == Some(u64::from(line))
            && state.contains(&task["state"])
    };
    let cells = stacks.iter().filter(|s| s["kind"] == "leak").any(|s| {
        at_site(&s["task"])
            && s["growth_per_run"].as_array().is_some_and(|g| {
                !g.is_empty() && g.iter().all(|g| g["objects"].as_i64() >= Some(1))
            })
    });
    if !cells {
        problems.push(format!(
            "{who}: no leak stack of {runtime} tasks ({state:?}) spawned at {file}:{line}, +1 per run; stacks: {}",
            serde_json::to_string_pretty(stacks).unwrap()
        ));
    }
    if row.held_by_task {
        // A task on a process-wide runtime or executor: the runtime's structures keep it.
        let held = stacks
            .iter()
            .filter(|s| s["kind"] == "leak" && s.get("task").is_none())
            .map(|s| &s["retained_by"]["task"])
            .any(|t| {
                at_site(t)
                    && t["kept_by"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("its runtime's own structures"))
            });
        if !held {
            let shown: Vec<&Value> = stacks.iter().filter_map(|s| s.get("retained_by")).collect();
            problems.push(format!(
                "{who}: no leak held by a {runtime} task ({state:?}) spawned at {file}:{line}; held by: {}",
                serde_json::to_string_pretty(&shown).unwrap()
            ));
        }
    }
    problems
}

/// Fails with every mismatch of a run against the table, and its stderr.
fn no_mismatches(problems: &[String], run: &Run) {
    assert!(
        problems.is_empty(),
        "{} mismatches:\n{}\n\nstderr:\n{}",
        problems.len(),
        problems.join("\n\n"),
        run.stderr
    );
}

fn check_fixture(fixture: &str) -> std::sync::Arc<Run> {
    let (args, code) = scenario(fixture);
    let run = run_fixture(fixture, args);
    let (ignored, rows): (Vec<&Expected>, Vec<&Expected>) = EXPECTED
        .iter()
        .filter(|e| e.fixture == fixture && !e.bench)
        .partition(|e| e.verdict == IGNORED);
    assert!(!rows.is_empty(), "the table has rows for {fixture}");
    let report = run.report();
    assert_eq!(
        report["ignored"].as_u64(),
        Some(ignored.len() as u64),
        "{fixture}: ignored tests counted"
    );
    if !ignored.is_empty() {
        assert!(
            run.stderr
                .contains(&format!("; {} ignored (not run", ignored.len())),
            "{}",
            run.stderr
        );
    }
    let reported: BTreeSet<(String, String)> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["binary"].as_str().unwrap().to_string(),
                t["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String)> = rows
        .iter()
        .map(|r| (r.binary.to_string(), r.test.to_string()))
        .collect();
    assert_eq!(
        reported, expected,
        "the report's tests are exactly the table's for {fixture}; stderr:\n{}",
        run.stderr
    );
    let problems: Vec<String> = rows.iter().flat_map(|r| check_row(&run, r)).collect();
    no_mismatches(&problems, &run);
    assert_eq!(
        run.code, code,
        "exit code for {fixture}; stderr:\n{}",
        run.stderr
    );
    check_artifacts(&run);
    run
}

/// An SVG and folded file exist for every leaking test and for no clean one.
fn check_artifacts(run: &Run) {
    for t in run.report()["tests"].as_array().unwrap() {
        let svg = t["artifacts"]["flamegraph"].as_str();
        match t["verdict"].as_str().unwrap() {
            "leak" => {
                let svg =
                    svg.unwrap_or_else(|| panic!("leaking test {} has no flame graph", t["name"]));
                let text = std::fs::read_to_string(run.out_dir.join(svg)).unwrap();
                assert!(
                    text.starts_with("<?xml") && text.contains("<svg"),
                    "{svg} is an SVG"
                );
                let name = t["name"].as_str().unwrap();
                assert!(
                    text.contains(name),
                    "{svg} is titled with the test name {name}"
                );
                let folded = t["artifacts"]["folded"]
                    .as_str()
                    .expect("folded stacks beside the SVG");
                let folded = std::fs::read_to_string(run.out_dir.join(folded)).unwrap();
                assert!(folded.lines().all(|l| l
                    .rsplit_once(' ')
                    .is_some_and(|(_, n)| n.parse::<u64>().is_ok())));
                // The graph starts at the test: libtest's frames below it are cut.
                assert!(
                    !folded.contains("test::run_test"),
                    "{svg}: libtest frames in the graph:\n{folded}"
                );
            }
            "clean" => assert!(svg.is_none(), "clean test {} has no flame graph", t["name"]),
            _ => {}
        }
    }
    // Nothing else lies around: every SVG in the output belongs to a leaking test.
    let mut svgs = 0;
    for entry in walk(&run.out_dir) {
        if entry.extension().is_some_and(|e| e == "svg") {
            svgs += 1;
        }
    }
    let with_svg = run.report()["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["artifacts"]["flamegraph"].is_string())
        .count();
    assert_eq!(
        svgs, with_svg,
        "one SVG per test that has one in the report"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn leaky_fixture_matches_the_table() {
    check_fixture("tests/fixtures/leaky");
}

#[test]
fn async_tasks_are_named_by_their_spawn_site() {
    check_fixture("tests/fixtures/tasks");
}

/// The same table in a release build with line tables only (the fixture's release profile):
/// inlined frames carry short names there, and tasks are still named at their spawn lines.
#[test]
fn async_tasks_are_named_in_a_release_build_with_line_tables_only() {
    const TASKS: &str = "tests/fixtures/tasks";
    let run = run_fixture(TASKS, &["--release"]);
    let problems: Vec<String> = EXPECTED
        .iter()
        .filter(|e| e.fixture == TASKS)
        .flat_map(|row| check_row(&run, row))
        .collect();
    no_mismatches(&problems, &run);
    assert_eq!(run.code, 3, "{}", run.stderr);
}

/// The page shows a task that holds a leak by its spawn line, linked to the source.
#[test]
fn the_page_links_a_task_to_its_spawn_line() {
    const TASKS: &str = "tests/fixtures/tasks";
    let run = run_fixture(TASKS, &[]);
    let page = std::fs::read_to_string(run.out_dir.join("index.html")).unwrap();
    let (file, line) = spawn_site(TASKS, "task_per_call_waits_forever");
    let link = format!("{file}#L{line}\"><code>tasks::subscribe ({file}:{line})</code></a>");
    let block = page
        .split("<div class=\"task\">")
        .skip(1)
        .find(|b| {
            b.starts_with("held by a tokio task spawned at <a href=\"file://") && b.contains(&link)
        })
        .unwrap_or_else(|| panic!("no task block linking {file}:{line}:\n{page}"));
    assert!(
        block.contains("<pre class=\"src\">    RT.spawn(task); // spawn-site: task_per_call_waits_forever</pre>"),
        "the spawn line beside it: {block}"
    );
}

/// Doc-tests, on edition 2021 (an executable each) and 2024 (merged), are tests like any
/// other: named as rustdoc names them, leaks at their lines (in the doc comment, or in the
/// library a doc-test calls), the one that should panic passing by panicking; `--no-doc`
/// leaves them out and `--doc` runs them alone.
#[test]
fn doc_tests_are_judged_like_any_test() {
    const FIXTURE: &str = "tests/fixtures/doctests";
    check_fixture(FIXTURE);
    let run = run_fixture(FIXTURE, &["--workspace"]);
    assert!(
        run.stderr
            .contains("2 doc-tests only compiled, never run (`no_run`, `compile_fail`)"),
        "{}",
        run.stderr
    );
    // One that passes by panicking cannot run again and its own run is on the main thread,
    // which no count includes: it is judged in one process, with stacks, and makes no
    // extra run (none is on the cost line).
    for name in [
        "doc2021/src/lib.rs - explode (line 45)",
        "doc2024/src/lib.rs - explode (line 45)",
    ] {
        let report = run.report();
        let test = report["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("`{name}` is in the report"));
        assert_eq!(test["extra_runs"]["in_all"], 0, "{name}: {test}");
        assert_eq!(test["method"], "stacks", "{name}: {test}");
        assert!(
            !run.stderr.contains(&format!("{name} 1 ×")),
            "{}",
            run.stderr
        );
    }
    let kinds = |run: &Run| -> Vec<String> {
        let tests = run.report()["tests"].as_array().unwrap().clone();
        tests
            .iter()
            .map(|t| t["kind"].as_str().unwrap().to_string())
            .collect()
    };
    let without = run_fixture(FIXTURE, &["--workspace", "--no-doc"]);
    assert_eq!(kinds(&without), ["lib", "lib"], "{}", without.stderr);
    assert_eq!(without.code, 0, "{}", without.stderr);
    let only = run_fixture(FIXTURE, &["--workspace", "--doc"]);
    assert_eq!(kinds(&only), vec!["doc"; 21], "{}", only.stderr);
    assert_eq!(only.code, 3, "{}", only.stderr);
}

/// A relative `--manifest-path` and `--target-dir` are read from where the tool started,
/// for the doc-tests too (cargo collects those from the workspace's root).
#[test]
fn doc_tests_take_relative_paths_from_where_the_tool_started() {
    let project = crate::harness::copy_fixture("tests/fixtures/doctests");
    let parent = project.parent().unwrap();
    let name = project.file_name().unwrap().to_str().unwrap();
    let target = format!("{name}--relative-target");
    let out = crate::harness::tool()
        .current_dir(parent)
        .args(["test", "--doc", "--workspace", "--manifest-path"])
        .arg(format!("{name}/Cargo.toml"))
        .args(["--target-dir", &target])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!stderr.contains("are not checked"), "{stderr}");
    let report = parent.join(&target).join("leakcheck").join("report.json");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let docs = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "doc")
        .count();
    assert_eq!(docs, 21, "{stderr}");
}

/// The processes a test starts are judged with it: those of the build's executables checked
/// at their exit (a leak there is the test's, named by the process), the others listed as
/// not checked, one left running reported.
#[test]
fn child_processes_are_judged_with_their_test() {
    const FIXTURE: &str = "tests/fixtures/children";
    check_fixture(FIXTURE);
    let run = run_fixture(FIXTURE, &[]);
    let report = run.report();
    let test = |name: &str| {
        report["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in the report"))
            .clone()
    };
    let leak = test("counts_and_keeps_lines");
    let stack = &leak["stacks"].as_array().unwrap()[0];
    assert_eq!(stack["process"], "wc2", "{stack}");
    assert_eq!(stack["objects"], 200, "{stack}");
    let processes = |t: &Value| -> Vec<(String, bool, u64)> {
        t["processes"]
            .as_array()
            .unwrap_or_else(|| panic!("{} lists the processes it started: {t}", t["name"]))
            .iter()
            .map(|p| {
                let name = p["name"].as_str().unwrap().to_string();
                (
                    name,
                    p["checked"].as_bool().unwrap(),
                    p["scanned"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(processes(&leak), [("wc2".to_string(), true, 1)]);
    assert_eq!(
        processes(&test("counts_words")),
        [("wc2".to_string(), true, 1)]
    );
    // `sh` on this machine may be `dash` or `bash`: whatever it is, it is not the build's.
    let shell = processes(&test("runs_a_shell"));
    assert!(
        shell.len() == 1 && !shell[0].1 && shell[0].2 == 0,
        "{shell:?}"
    );
    let sleeper = test("leaves_a_sleeper");
    assert_eq!(processes(&sleeper), [("sleeper".to_string(), true, 1)]);
    // A server its test kills is asked for its scan first: its lost requests are a leak.
    let killed = test("serves_and_is_killed");
    let stack = &killed["stacks"].as_array().unwrap()[0];
    assert_eq!(stack["process"], "server", "{stack}");
    assert!(stack["objects"].as_u64() >= Some(49), "{stack}");
    assert!(
        sleeper["left_processes"].as_array().unwrap()[0]
            .as_str()
            .unwrap()
            .ends_with("(sleeper)"),
        "{sleeper}"
    );
    // A loss the same in every process of `router` and of `guard`, which several tests
    // started for different work: reported under each test as one-time memory of the process.
    for (name, process, objects) in [
        ("serves_one_request", "router", 3),
        ("serves_twenty_requests", "router", 3),
        ("counts_nine_lines", "guard", 1),
    ] {
        let t = test(name);
        let stacks = t["stacks"].as_array().unwrap();
        let once = stacks
            .iter()
            .find(|s| s["process"] == process)
            .unwrap_or_else(|| panic!("{name}: a stack of `{process}`: {t}"));
        assert_eq!(once["kind"], "one-time", "{once}");
        assert_eq!(once["objects"], objects, "{once}");
        assert_eq!(once["fails"], false, "{once}");
        assert!(
            once["reason"].as_str().is_some_and(
                |r| r.starts_with(&format!("lost once by every process of `{process}`"))
            ),
            "{once}"
        );
    }
    for line in [
        "lost by the child process `wc2`: unreachable when",
        "(not executables of the build)",
    ] {
        assert!(run.stderr.contains(line), "{line}\n{}", run.stderr);
    }
}

/// A `harness = false` target on libtest-mimic: each trial is a test of its own.
#[test]
fn custom_harness_trials_are_tests_of_their_own() {
    check_fixture("tests/fixtures/trials");
}

#[test]
fn collections_fixture_matches_the_table() {
    check_fixture("tests/fixtures/collections");
}

#[test]
fn mappings_fixture_matches_the_table() {
    check_fixture("tests/fixtures/mappings");
}

#[test]
fn lifetime_fixture_matches_the_table() {
    check_fixture("tests/fixtures/lifetime");
}

#[test]
fn retention_fixture_matches_the_table_and_names_who_holds_what() {
    check_fixture("tests/fixtures/retention");
}

/// A library that frees its state in an ELF destructor or an `atexit` handler, and aborts
/// when used after that: the extra runs are made before, and complete.
#[test]
fn extra_runs_come_before_the_program_s_clean_up() {
    let run = check_fixture("tests/fixtures/teardown");
    // A run that dies anyway says which one, of which signal, and in which frame.
    let device = run.test("teardown", "tests::opens_the_device_once_per_process");
    let (file, line) = marked_line_of("tests/fixtures/teardown", "// dies-here: open_device");
    let said = format!(
        "the process died in the 1st extra run: signal 6 (SIGABRT) in `teardown::open_device` ({file}:{line})"
    );
    assert_eq!(device["extra_runs"]["detail"], said.as_str(), "{device:#}");
    assert!(run.stderr.contains(&said), "{}", run.stderr);
}

#[test]
fn cycles_fixture_matches_the_table_and_names_each_cycle() {
    check_fixture("tests/fixtures/cycles");
    let run = run_fixture("tests/fixtures/cycles", &[]);
    let lost = |test: &str| -> Vec<Value> {
        run.test("cycles", test)["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "leak")
            .map(|s| s["unreachable"].clone())
            .collect()
    };
    // The cache's cycle: the cell, the cache and its callback, one cycle per run.
    let cache = lost("tests::cache_callback_cycle_grows_on_every_run");
    let cycle = cache
        .iter()
        .find(|u| u["kind"] == "cycle")
        .unwrap_or_else(|| panic!("no cycle named: {cache:#?}"));
    let (file, line) = leak_site(
        "tests/fixtures/cycles",
        "cache_callback_cycle_grows_on_every_run",
    );
    let members = cycle["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{cycle:#}");
    assert!(
        members.iter().any(|m| m["site"]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with(&file))
            && m["site"]["line"].as_u64() == Some(line as u64)
            && m["container"] == "Arc"),
        "the cache's Arc is a member: {cycle:#}"
    );
    assert!(members.iter().any(|m| m["container"] == "Box"), "{cycle:#}");
    assert!(
        cycle["cycles"].as_u64() >= Some(2),
        "one cycle per run: {cycle:#}"
    );
    // The parent/child cycle: the parent's Rc, the children's buffer, the child's Rc.
    let tree = lost("tests::parent_child_rc_cycle_grows_on_every_run");
    let cycle = tree
        .iter()
        .find(|u| u["kind"] == "cycle")
        .unwrap_or_else(|| panic!("no cycle named: {tree:#?}"));
    let containers: Vec<&str> = cycle["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["container"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        containers,
        ["Rc", "Vec", "Rc"],
        "the parent first: {cycle:#}"
    );
    assert_eq!(cycle["members"][0]["strong"], 1, "{cycle:#}");
    // A Box::leak: nothing points to it.
    let leaked = lost("tests::box_leak_per_call");
    assert!(
        leaked.iter().any(|u| u["kind"] == "no-cycle"),
        "{leaked:#?}"
    );
    // The summary says it, with the pointer to make Weak.
    let summary = &run.stderr;
    assert!(
        summary.contains("unreachable: a reference cycle of 3 objects — an `Rc` (src/lib.rs:"),
        "{summary}"
    );
    assert!(
        summary.contains("one of these pointers should be `Weak`: likely an `Rc`'s"),
        "{summary}"
    );
    assert!(
        summary.contains("unreachable, no cycle: nothing points to these objects"),
        "{summary}"
    );
    // A record's parts are inside the lost record, and the record itself is shown to say
    // how it was lost, though smaller than the stacks shown before it.
    let record = lost("tests::record_and_its_parts_lost_per_call");
    let kinds: Vec<&str> = record.iter().map(|u| u["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "inside-lost",
            "inside-lost",
            "inside-lost",
            "inside-lost",
            "no-cycle"
        ],
        "{record:#?}"
    );
    let said = summary
        .split("LEAK cycles tests::record_and_its_parts_lost_per_call")
        .nth(1)
        .and_then(|rest| rest.split("flame graph").next())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(!said.contains("cycle above"), "no cycle is shown: {said}");
    assert!(said.contains("unreachable, no cycle"), "{said}");
    // What grew is lost; the keeper of the last run's buffer is not said of it too.
    let keeper = run.test("cycles", "tests::buffer_lost_once_its_keeper_ends");
    let stack = keeper["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "leak")
        .unwrap_or_else(|| panic!("{keeper:#}"));
    assert_eq!(stack["unreachable"]["kind"], "no-cycle", "{stack:#}");
    assert!(stack.get("retained_by").is_none(), "{stack:#}");
}

#[test]
fn slow_wide_and_large_tests_are_all_judged() {
    check_fixture("tests/fixtures/slow");
}

#[test]
fn history_fixture_matches_the_table() {
    check_fixture("tests/fixtures/history");
}

#[test]
fn healthy_fixture_passes_and_matches_the_table() {
    check_fixture("tests/fixtures/healthy");
}

#[test]
fn jemalloc_global_allocator_fixture_matches_the_table() {
    check_fixture("tests/fixtures/jemalloc-global");
}

#[test]
fn proc_macro_crate_tests_run_and_match_the_table() {
    // Its test binary needs the toolchain's libstd-*.so on the loader path.
    check_fixture("tests/fixtures/token-macros");
}

#[test]
fn every_failing_test_gets_flame_graph_files_of_its_own() {
    check_fixture("tests/fixtures/names");
    let run = run_fixture("tests/fixtures/names", &[]);
    let tests = run.report()["tests"].as_array().unwrap();
    let mut svgs = BTreeSet::new();
    for t in tests.iter().filter(|t| t["verdict"] == "leak") {
        let svg = t["artifacts"]["flamegraph"].as_str().unwrap_or_else(|| {
            panic!(
                "{} has no flame graph: {:?}",
                t["name"],
                run.report()["notes"]
            )
        });
        assert!(svgs.insert(svg.to_string()), "{svg} is shared");
        let path = run.out_dir.join(svg);
        let text = std::fs::read_to_string(&path).unwrap();
        // Each file is the test's own: its title names it.
        let name = t["name"].as_str().unwrap();
        let binary = t["binary"].as_str().unwrap();
        assert!(
            text.contains(&format!("{binary} {name}")),
            "{svg} is not {name}'s"
        );
        assert!(run
            .out_dir
            .join(t["artifacts"]["folded"].as_str().unwrap())
            .is_file());
    }
    assert_eq!(svgs.len(), 7);
}

#[test]
fn a_target_selected_alone_still_finds_its_tests_entry_points() {
    // No other binary of the build is inspected: a target of one test, and a target whose
    // test is named like the target and `module_path!()`, prove their own layout.
    for (target, test) in [("lone", "lone_test_grows_a_list"), ("names", "names")] {
        let run = run_fixture("tests/fixtures/names", &["--test", target]);
        assert_eq!(run.code, 3, "{}", run.stderr);
        let t = run.test(target, test);
        assert_eq!(t["verdict"], "leak", "{t}");
        assert_eq!(t["extra_runs"]["status"], "completed", "{t}");
    }
}

#[test]
fn a_forwarding_global_allocator_is_not_named_as_the_site() {
    check_fixture("tests/fixtures/counting-alloc");
    let run = run_fixture("tests/fixtures/counting-alloc", &[]);
    let t = run.test("counting_alloc", "tests::forgets_a_buffer");
    let stack = t["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["fails"] == true)
        .unwrap();
    for f in stack["frames"].as_array().unwrap() {
        let name = f["function"].as_str().unwrap_or("");
        assert!(
            !name.contains("GlobalAlloc>::")
                && !name.contains("__rust_alloc")
                && !name.contains("record_and_forward"),
            "allocator frames are trimmed, its helpers too: {name}"
        );
    }
    assert!(
        run.stderr
            .contains("at counting_alloc::tests::forgets_a_buffer (src/lib.rs:"),
        "{}",
        run.stderr
    );
}

/// Peak RSS (KiB) of running `exe` with `args` in `dir`, without profiling.
// The child is reaped with wait4, for its resource usage, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn plain_peak_rss_kib(exe: &str, args: &[&str], dir: &std::path::Path) -> u64 {
    let child = std::process::Command::new(exe)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 on our own child with valid out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    usage.ru_maxrss as u64
}

#[test]
fn stack_profiling_costs_tens_of_bytes_per_live_allocation_not_a_page() {
    check_fixture("tests/fixtures/many-live");
    let run = run_fixture("tests/fixtures/many-live", &[]);
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(run.out_dir.join("metrics.json")).unwrap())
            .unwrap();
    let name = "tests::holds_many_boxes_then_leaks_a_byte";
    let profiled = metrics["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["test"] == name && t["pass"] == "stacks")
        .expect("the leaking test was stack-profiled");
    let exe = profiled["executable"].as_str().unwrap();
    let project = crate::harness::copy_fixture("tests/fixtures/many-live");
    let plain = plain_peak_rss_kib(exe, &["--exact", name], &project);
    let peak = profiled["peak_rss_kib"].as_u64().unwrap();
    // 100,000 boxes live at the peak: a page each would be 400 MB. The bound: twice the
    // plain run, 64 bytes per live allocation, and 16 MiB for the runtime itself.
    let bound = 2 * plain + 100_000 * 64 / 1024 + 16 * 1024;
    assert!(
        peak <= bound,
        "profiled peak {peak} KiB, plain {plain} KiB, bound {bound} KiB"
    );
}

/// Every test of an allocator fixture matches the table and its message gives the reason,
/// which contains `reason`.
fn check_allocator_fixture(fixture: &str, reason: &str) {
    check_fixture(fixture);
    let run = run_fixture(fixture, &[]);
    for t in run.report()["tests"].as_array().unwrap() {
        assert!(
            t["message"].as_str().is_some_and(|m| m.contains(reason)),
            "the reason is given: {}",
            t["message"]
        );
    }
}

#[test]
fn an_allocator_serving_small_blocks_itself_is_unanalysable_never_clean() {
    check_allocator_fixture("tests/fixtures/pool-alloc", "serves some blocks itself");
}

#[test]
fn custom_allocator_fixture_is_unanalysable_never_clean() {
    check_allocator_fixture("tests/fixtures/custom-alloc", "global_allocator");
}

#[test]
fn misbehaving_fixture_matches_the_table() {
    check_fixture("tests/fixtures/misbehaving");
    let run = run_fixture(
        "tests/fixtures/misbehaving",
        scenario("tests/fixtures/misbehaving").0,
    );
    let seg = run.test("misbehaving", "tests::segfaults");
    assert!(
        seg["exit"].as_str().unwrap().contains("SIGSEGV"),
        "{}",
        seg["exit"]
    );
    let abort = run.test("misbehaving", "tests::aborts");
    assert!(
        abort["exit"].as_str().unwrap().contains("SIGABRT"),
        "{}",
        abort["exit"]
    );
    let hang = run.test("misbehaving", "tests::hangs");
    assert_eq!(hang["exit"], "timed out");
    // A failure only under profiling is told apart from a plain one.
    let flaky = run.test("misbehaving", "tests::fails_only_when_profiled");
    assert_eq!(flaky["passed_without_profiling"], true);
    let message = flaky["message"].as_str().unwrap();
    assert!(
        message.starts_with("passed without profiling, failed when profiled")
            && message.contains("the fairness assertion failed"),
        "{message}"
    );
    let plain = run.test("misbehaving", "tests::fails_after_leaking");
    assert!(plain.get("passed_without_profiling").is_none(), "{plain}");
    // A failure message shows what the test wrote, decoded lossily.
    let raw = run.test("misbehaving", "tests::fails_with_bytes_that_are_not_utf8");
    let message = raw["message"].as_str().unwrap();
    assert!(
        message.contains("raw bytes: \u{fffd}\u{fffd}\u{fffd}")
            && message.contains("failed after writing raw bytes"),
        "{message}"
    );
    // Only the end of a huge capture is read: the message has the panic, and the tool
    // itself stayed smaller than what the test wrote (128 MiB, twice: counted, then
    // profiled). Reading a capture whole would take at least that much; the rest of the
    // tool's peak is symbolizing stacks (more of them when RUST_BACKTRACE is set).
    let big = run.test("misbehaving", "tests::fails_after_writing_a_lot");
    let message = big["message"].as_str().unwrap();
    assert!(
        message.contains("failed after writing 128 MiB"),
        "{message}"
    );
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.out_dir.join("metrics.json")).unwrap())
            .unwrap();
    let rss = metrics["tool_peak_rss_kib"].as_u64().unwrap();
    assert!(rss < 128 * 1024, "the tool peaked at {rss} KiB");
    // A child left waiting forever is ended with its test's process, and named.
    let leaving = run.test("misbehaving", "tests::leaves_a_child_running");
    let left = leaving["left_processes"].as_array().expect("named");
    assert!(!left.is_empty(), "{leaving}");
    for p in left {
        let pid: u32 = p.as_str().unwrap()["pid ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.contains(") Z "),
            "pid {pid} still runs: {state}"
        );
    }
    assert!(
        run.stderr.contains("Leftover ")
            && run
                .stderr
                .contains("misbehaving tests::leaves_a_child_running: pid "),
        "{}",
        run.stderr
    );
    // No other test of the fixture leaves a process (forked children that end are waited
    // for by their tests).
    for t in run.report()["tests"].as_array().unwrap() {
        if t["name"] != "tests::leaves_a_child_running" {
            assert!(t.get("left_processes").is_none(), "{t}");
        }
    }
    // A leak held by threads that never end says so.
    let held = run.test("misbehaving", "tests::thread_holds_memory_for_an_hour");
    assert!(
        held["message"]
            .as_str()
            .is_some_and(|m| m.contains("the extra runs started were still running")),
        "{held}"
    );
}

#[test]
fn configured_fixture_matches_the_table_under_its_own_config() {
    check_fixture("tests/fixtures/configured");
}

#[test]
fn bundled_example_matches_the_table() {
    check_fixture("examples/demo");
}

/// Whether a demangled name still carries rustc's `::h<16 hex digits>` suffix.
fn has_symbol_hash(name: &str) -> bool {
    name.match_indices("::h").any(|(i, _)| {
        let rest = &name[i + 3..];
        rest.len() >= 16 && rest[..16].chars().all(|c| c.is_ascii_hexdigit())
    })
}

#[test]
fn report_schema_is_complete_and_sorted() {
    let run = run_fixture("tests/fixtures/leaky", &[]);
    let r = run.report();
    assert_eq!(r["version"], 1);
    assert_eq!(
        r["settings"]["sample_period"], 1,
        "exact profiling by default"
    );
    assert_eq!(r["settings"]["stack_threshold"], 0);
    let verdicts = [
        "leak",
        "clean",
        "failed",
        "crashed",
        "timeout",
        "error",
        "unanalysable",
        "unsettled",
    ];
    let kinds = ["leak", "one-time", "process-lifetime", "harness"];
    let statuses = [
        "completed",
        "not-needed",
        "off",
        "test-failed",
        "should-panic",
        "no-harness",
        "no-entry-point",
        "panicked",
        "crashed",
        "timed-out",
        "failed",
        "unavailable",
    ];
    let tests = r["tests"].as_array().unwrap();
    let keys: Vec<(String, String, String, String)> = tests
        .iter()
        .map(|t| {
            for field in ["package", "binary", "kind", "name", "exit"] {
                assert!(t[field].is_string(), "{field} is a string in {t}");
            }
            assert!(verdicts.contains(&t["verdict"].as_str().unwrap()));
            assert!(t["retained_bytes"].is_u64() && t["retained_objects"].is_u64());
            assert!(
                ["counters", "stacks", "count-run"].contains(&t["method"].as_str().unwrap()),
                "{}",
                t["method"]
            );
            if t["method"] == "counters" {
                assert_eq!(
                    t["verdict"], "clean",
                    "the counting pass only ever proves a test clean"
                );
                assert!(t["stacks"].as_array().unwrap().is_empty());
                assert!(
                    t["first_run_retained"]["objects"].is_u64()
                        && t["first_run_retained"]["bytes"].is_u64(),
                    "what the run retained is given: {t}"
                );
            }
            let runs = &t["extra_runs"];
            assert!(runs["made"].is_u64(), "{t}");
            assert!(
                statuses.contains(&runs["status"].as_str().unwrap()),
                "{}",
                runs["status"]
            );
            if !["completed", "not-needed", "test-failed"]
                .contains(&runs["status"].as_str().unwrap())
            {
                assert!(runs["detail"].is_string(), "a reason in words: {runs}");
            }
            let stacks = t["stacks"].as_array().unwrap();
            let sizes: Vec<u64> = stacks
                .iter()
                .map(|s| s["bytes"].as_u64().unwrap())
                .collect();
            assert!(
                sizes.windows(2).all(|w| w[0] >= w[1]),
                "stacks largest first: {sizes:?}"
            );
            let leaked: u64 = stacks
                .iter()
                .filter(|s| s["kind"] == "leak")
                .map(|s| s["bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(
                t["retained_bytes"].as_u64().unwrap(),
                leaked,
                "retained_bytes sums the leak stacks"
            );
            if t["verdict"] == "leak" && stacks.iter().any(|s| s["kind"] == "leak") {
                assert!(leaked > 0, "a leak is never of 0 B: {t}");
            }
            for s in stacks {
                assert!(
                    kinds.contains(&s["kind"].as_str().unwrap()),
                    "{}",
                    s["kind"]
                );
                assert!(s["fails"].is_boolean());
                if let Some(growth) = s["growth_per_run"].as_array() {
                    assert_eq!(
                        growth.len() as u64,
                        runs["made"].as_u64().unwrap(),
                        "one growth entry per extra run: {s}"
                    );
                    assert!(growth
                        .iter()
                        .all(|g| g["bytes"].is_i64() && g["objects"].is_i64()));
                } else {
                    assert!(s["objects"].as_u64().unwrap() >= 1);
                }
                for f in s["frames"].as_array().unwrap() {
                    assert!(f["function"].as_str().is_some_and(|n| !n.is_empty()));
                    let name = f["function"].as_str().unwrap();
                    assert!(!has_symbol_hash(name), "no hashes: {name}");
                }
            }
            (
                t["package"].as_str().unwrap().to_string(),
                t["kind"].as_str().unwrap().to_string(),
                t["binary"].as_str().unwrap().to_string(),
                t["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "tests are sorted");
    // Unit tests and integration tests are both covered.
    assert!(tests.iter().any(|t| t["kind"] == "lib"));
    assert!(tests.iter().any(|t| t["kind"] == "test"));
}

#[test]
fn human_summary_names_leaks_with_file_and_line() {
    let run = run_fixture("tests/fixtures/leaky", &[]);
    let (file, line) = leak_site("tests/fixtures/leaky", "forget_vec");
    assert!(run.stderr.contains("LEAK"), "{}", run.stderr);
    assert!(run.stderr.contains("tests::forget_vec"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("{file}:{line}")),
        "site {file}:{line} in:\n{}",
        run.stderr
    );
    assert!(run.stderr.contains("report.json"), "{}", run.stderr);
    assert!(run.stderr.contains("Summary"), "{}", run.stderr);
}

#[test]
fn threshold_lets_small_leaks_pass() {
    let run = run_fixture("tests/fixtures/leaky", &["--lib", "--threshold", "1KiB"]);
    assert_eq!(run.report()["settings"]["stack_threshold"], 1024);
    let tiny = run.test("leaky", "tests::tiny_leak");
    assert_eq!(tiny["verdict"], "clean", "4 bytes are under 1KiB");
    assert!(
        tiny["retained_bytes"].as_u64().unwrap() > 0,
        "but still reported"
    );
    assert!(tiny["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "leak" && s["fails"] == false));
}

#[test]
fn clean_selection_exits_zero_and_results_do_not_depend_on_jobs() {
    let args = [
        "--lib",
        "-j",
        "1",
        "--",
        "tests::joined_thread",
        "tests::once_lock_init",
        "tests::forget_vec",
    ];
    let one = run_fixture("tests/fixtures/leaky", &args);
    let all = run_fixture("tests/fixtures/leaky", &[]);
    for name in [
        "tests::joined_thread",
        "tests::once_lock_init",
        "tests::forget_vec",
    ] {
        let a = one.test("leaky", name);
        let b = all.test("leaky", name);
        assert_eq!(a["verdict"], b["verdict"], "{name}");
        assert_eq!(a["retained_bytes"], b["retained_bytes"], "{name}");
    }
    let clean = run_fixture(
        "tests/fixtures/leaky",
        &["--lib", "--", "tests::joined_thread", "--exact"],
    );
    assert_eq!(clean.report()["tests"].as_array().unwrap().len(), 1);
    assert_eq!(clean.code, 0, "{}", clean.stderr);
}

#[test]
fn release_build_without_debug_info_warns_and_still_reports() {
    let args = [
        "--release",
        "--lib",
        "--",
        "tests::box_leak",
        "tests::forget_vec",
        "tests::joined_thread",
    ];
    let run = run_fixture("tests/fixtures/leaky", &args);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("no debug info in `") && run.stderr.contains("/release/deps/leaky-"),
        "warns about the test binary's missing debug info: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "the program's own collections were not read in `leaky`: no type information"
        ),
        "says once that collections could not be read, and why: {}",
        run.stderr
    );
    for name in ["tests::box_leak", "tests::forget_vec"] {
        let t = run.test("leaky", name);
        assert_eq!(t["verdict"], "leak", "{name}: {t}");
        let fn_name = format!("leaky::{name}");
        let stack = &t["stacks"][0];
        assert!(
            stack["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["function"] == fn_name.as_str()),
            "{name}: the symbol table still names the function: {stack}"
        );
    }
    assert_eq!(
        run.test("leaky", "tests::joined_thread")["verdict"],
        "clean"
    );
}

#[test]
fn counting_pass_changes_no_verdict_and_skips_clean_tests() {
    let default = run_fixture("tests/fixtures/leaky", &[]);
    let all = run_fixture("tests/fixtures/leaky", &["--stacks-for-all"]);
    let strip = |run: &Run| -> Vec<(String, String, String, u64)> {
        run.report()["tests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["binary"].as_str().unwrap().to_string(),
                    t["name"].as_str().unwrap().to_string(),
                    t["verdict"].as_str().unwrap().to_string(),
                    t["retained_bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        strip(&default),
        strip(&all),
        "same verdicts and retained bytes either way"
    );
    assert!(all.report()["tests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["method"] == "stacks"));
    // Tests that retain nothing are settled by counting alone; every leak is profiled.
    assert_eq!(
        default.test("leaky", "tests::heavy_churn")["method"],
        "counters"
    );
    assert_eq!(
        default.test("leaky", "tests::prints_stdout")["method"],
        "counters"
    );
    for row in EXPECTED
        .iter()
        .filter(|r| r.fixture == "tests/fixtures/leaky" && r.verdict == "leak")
    {
        assert_eq!(
            default.test(row.binary, row.test)["method"],
            "stacks",
            "{}",
            row.test
        );
    }
}

/// `--target-dir` relative to where the tool runs, as cargo reads it: the tests, which run in
/// their package's directory, still write their dumps where the tool reads them.
#[test]
fn a_relative_target_dir_is_the_current_directorys_as_for_cargo() {
    let project = crate::harness::copy_fixture("tests/fixtures/healthy");
    let cwd = crate::harness::scratch().join("relative-target");
    let _ = std::fs::remove_dir_all(&cwd);
    std::fs::create_dir_all(&cwd).unwrap();
    let out = crate::harness::tool()
        .arg("test")
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .args(["--target-dir", "rel-target"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cwd.join("rel-target/leakcheck/report.json")).unwrap(),
    )
    .unwrap();
    for t in report["tests"].as_array().unwrap() {
        assert_eq!(t["verdict"], "clean", "{t}");
    }
}
