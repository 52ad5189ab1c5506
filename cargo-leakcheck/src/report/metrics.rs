//! `metrics.json`: what each process of a run cost (time, peak RSS, dumps, extra runs) and
//! how long each stage took, kept out of report.json so that stays deterministic. The next
//! run reads it back for its order and its expectations (see
//! [`crate::execution::history`]); people read it to see where the time went.

use crate::execution::cargo::TestBinary;
use crate::execution::history::History;
use crate::execution::passes::{self, Method};
use crate::execution::runner;
use crate::judging::verdicts::Timings;
use crate::model::TestKey;
use serde_json::{json, Value};

/// What each test cost beyond its own run (see [`crate::report::cost`]).
pub fn costs(
    binaries: &[TestBinary],
    results: &passes::PassResults,
) -> Vec<crate::report::cost::TestCost> {
    results
        .tests
        .iter()
        .map(|t| test_cost(&binaries[t.case.binary], t))
        .collect()
}

fn test_cost(binary: &TestBinary, t: &passes::TestOutcome) -> crate::report::cost::TestCost {
    let own_of = |r: &runner::ProcessResult| {
        r.record
            .as_ref()
            .and_then(|rec| rec.own_cost)
            .map_or(r.duration.as_secs_f64(), |(_, wall)| wall as f64 / 1000.0)
    };
    let (own_seconds, mut extra_seconds) = match &t.counted {
        Some(c) => {
            let own = own_of(c);
            (own, (c.duration.as_secs_f64() - own).max(0.0))
        }
        None => (own_of(&t.result), 0.0),
    };
    if t.method == Method::Stacks {
        extra_seconds += match &t.counted {
            // The stacks process ran the test from scratch: all of it is beyond the own run.
            Some(_) => t.result.duration.as_secs_f64(),
            None => (t.result.duration.as_secs_f64() - own_seconds).max(0.0),
        };
    }
    // The count the report gives (`extra_runs.in_all`), so the cost line and the report
    // never disagree.
    let counting = t.counted.as_ref().filter(|_| t.method == Method::Stacks);
    crate::report::cost::TestCost {
        binary: binary.target.clone(),
        name: t.case.name.clone(),
        own_seconds,
        extra_runs: crate::analysis::verdict::runs_in_all(t.method, counting, &t.result),
        extra_seconds,
    }
}

/// The metrics of a run: every process, the tests this run left out as the previous
/// metrics had them, and each binary's preparation.
pub fn json(
    binaries: &[TestBinary],
    results: &passes::PassResults,
    run_seconds: f64,
    timings: &Timings,
    history: &History,
) -> String {
    let tests: Vec<Value> = (results.tests.iter())
        .flat_map(|t| test_entries(&binaries[t.case.binary], t, timings, history))
        .collect();
    let ran: std::collections::HashSet<(String, String)> = (results.tests.iter())
        .map(|t| (binaries[t.case.binary].id(), t.case.name.clone()))
        .collect();
    let baselines: Vec<_> = (results.baselines.iter().enumerate())
        .filter_map(|(i, r)| r.as_ref().map(|r| process(&binaries[i], None, r)))
        .collect();
    let mut text = serde_json::to_string_pretty(&json!({
        "run_seconds": run_seconds,
        "tool_peak_rss_kib": own_peak_rss_kib(),
        "processes": tests.len() + baselines.len(),
        "tests": tests,
        // Tests this run left out, as the previous metrics had them: the next run starts
        // from them (see `crate::execution::history`).
        "history": history.carried_over(&ran),
        "baselines": baselines,
        "binary_preparation": timings.binaries.iter().map(|(b, s)| json!({"binary": b, "seconds": s})).collect::<Vec<_>>(),
    }))
    .expect("metrics serialize");
    text.push('\n');
    text
}

/// One process: how long it ran, its peak, how it ended, its dumps and extra runs.
fn process(b: &TestBinary, name: Option<&str>, r: &runner::ProcessResult) -> Value {
    json!({
        "binary": b.id(),
        "test": name,
        "seconds": r.duration.as_secs_f64(),
        "peak_rss_kib": r.peak_rss_kib,
        "exit": r.end.describe(),
        "executable": b.path,
        "dumps": r.preload_dumps.iter().chain(&r.app_dumps).collect::<Vec<_>>(),
        "own_seconds": r.record.as_ref().and_then(|rec| rec.own_cost).map(|(_, wall)| wall as f64 / 1000.0),
        "extra_runs": r.record.as_ref().map(|rec| json!({
            "made": rec.runs.len(),
            "end": rec.end.map(|e| e.word()),
            "dumps": r.run_dumps,
        })),
    })
}

/// What the next run expects of a test: its time and whether it runs alone.
struct Expectation {
    expected: Value,
    alone: Value,
}

fn expectation(b: &TestBinary, t: &passes::TestOutcome, history: &History) -> Expectation {
    let stacks = t.method == Method::Stacks;
    let took = t.counted.as_ref().map_or(0.0, |c| c.duration.as_secs_f64())
        + if stacks {
            t.result.duration.as_secs_f64()
        } else {
            0.0
        };
    let before = history.expected(&b.id(), &t.case.name);
    let expected = crate::execution::history::next_expectation(before, took);
    // Whether it runs alone next time (see `crate::execution::slots`).
    let alone = crate::execution::history::next_alone(
        history.alone(&b.id(), &t.case.name),
        t.wanted_every_core,
        crate::execution::history::collapsed(before, took),
    );
    Expectation {
        expected: expected.into(),
        alone: alone.into(),
    }
}

/// A test's processes: its counting process and its stacks process, each where it ran.
fn test_entries(
    b: &TestBinary,
    t: &passes::TestOutcome,
    timings: &Timings,
    history: &History,
) -> Vec<Value> {
    let cost = test_cost(b, t);
    let cost = json!({
        "own_seconds": cost.own_seconds,
        "extra_runs": cost.extra_runs,
        "extra_seconds": cost.extra_seconds,
    });
    let next = expectation(b, t, history);
    let mut entries = Vec::new();
    if let Some(c) = &t.counted {
        let mut e = process(b, Some(&t.case.name), c);
        e["pass"] = "count".into();
        e["alone"] = next.alone.clone();
        e["expected_seconds"] = next.expected.clone();
        e["cost"] = cost.clone();
        if let Some(beside) = t.ahead {
            e["stacks_beside"] = beside.came_to.word().into();
            e["stacks_beside_on"] = beside.on.word().into();
        }
        entries.push(e);
    }
    if t.method == Method::Stacks {
        let mut e = process(b, Some(&t.case.name), &t.result);
        e["pass"] = "stacks".into();
        if t.counted.is_none() {
            e["expected_seconds"] = next.expected;
            e["cost"] = cost;
            e["alone"] = next.alone;
        }
        stacks_entry(&mut e, b, t, timings);
        entries.push(e);
    }
    entries
}

/// A stacks process's own fields: what it was asked for and how long its analysis took.
fn stacks_entry(e: &mut Value, b: &TestBinary, t: &passes::TestOutcome, timings: &Timings) {
    // What the next run's stacks process, started beside the counting process, is asked
    // for (see `crate::execution::history`).
    if let Some(asked) = t.stacks_asked {
        e["asked"] = asked.map_or(
            Value::Null,
            |a| json!({"runs": a.runs, "grace_ms": a.grace_ms}),
        );
    }
    let key: TestKey = (
        b.package.clone(),
        b.kind,
        b.target.clone(),
        t.case.name.clone(),
    );
    e["analysis_seconds"] = timings.analysis.get(&key).copied().into();
    e["flamegraph_seconds"] = timings.flamegraph.get(&key).copied().into();
    if let Some(stacks) = timings.harness.get(&key) {
        e["harness_stacks"] = serde_json::to_value(stacks).unwrap_or_default();
    }
}

/// This process's peak resident set size so far, KiB: `VmHWM` of /proc/self/status.
/// Not getrusage's `ru_maxrss`, which Linux carries over `exec` and so includes whatever
/// the parent held when it forked us (a test harness holding captured output, say).
fn own_peak_rss_kib() -> Option<u64> {
    peak_from_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn peak_from_status(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_this_images_high_water_mark() {
        let status = "Name:\tcargo-leakcheck\nVmPeak:\t  300000 kB\nVmHWM:\t   91392 kB\nVmRSS:\t 80000 kB\n";
        assert_eq!(peak_from_status(status), Some(91392));
        assert_eq!(peak_from_status("Name:\tx\n"), None);
        let own = own_peak_rss_kib().expect("Linux has /proc/self/status");
        assert!(own > 0);
    }
}
