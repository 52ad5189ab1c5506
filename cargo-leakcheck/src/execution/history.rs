//! How long each test is expected to take, read from the previous run's `metrics.json`, so
//! that the longest tests start first and the run does not end waiting for one slow test
//! that happened to start last.
//!
//! The expectation is not simply last time's duration: a test that spins while it waits
//! for another thread (a producer and a consumer on a lock-free queue) collapses when it
//! shares the cores with another such test (crossbeam-queue's `drops` took 0.2 s alone and
//! 60 s beside `mpmc`), and starting the longest first would then put the two side by side
//! again on every later run. So a duration may raise the expectation only to twice the
//! previous one (at least by half a second), while a shorter one lowers it at once: a
//! test that really became slower is started first within a few runs, and one bad pairing
//! is not repeated.
//!
//! It also remembers which tests wanted every core and collapsed: those run alone (see
//! [`crate::execution::slots`] and [`next_alone`]); and which tests had a stacks process
//! after their counting process, with the extra runs it was asked for: that stacks process
//! starts beside the counting process next time (see [`crate::execution::passes`]). None
//! of it decides a verdict: it only says what to start first.

use std::collections::HashMap;
use std::path::Path;

/// Seconds each test is expected to take (every pass added up), by binary id and test name. Empty when there was no previous run or it cannot be read: the
/// order then is the listing's.
#[derive(Clone, Debug, Default)]
pub struct History {
    seconds: HashMap<(String, String), f64>,
    /// Tests that wanted every core in the run recorded: they run alone.
    alone: std::collections::HashSet<(String, String)>,
    /// Tests whose counting process was followed by a stacks process, with what that was
    /// asked for.
    stacks: HashMap<(String, String), Option<StacksAsked>>,
    /// Every test entry read, as read, to carry over those of tests a run leaves out.
    entries: Vec<serde_json::Value>,
}

/// The extra runs a stacks process that followed a counting process was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StacksAsked {
    /// Extra runs.
    pub runs: u32,
    /// The wait for the runs' threads after the last one, in milliseconds.
    pub grace_ms: u64,
}

/// Whether a test runs alone next time (see [`crate::execution::slots`]): it wanted every
/// core and collapsed this time, or it wanted every core (or was too short to tell,
/// `wanted` None) and ran alone already. A pool that merely keeps every core busy (rayon's
/// workers spin a while before they sleep) does not collapse beside another test, and
/// running it alone would only keep the other tests waiting.
pub fn next_alone(before: bool, wanted: Option<bool>, collapsed: bool) -> bool {
    match wanted {
        Some(true) => before || collapsed,
        Some(false) => false,
        None => before,
    }
}

/// Whether a test that took `took` seconds collapsed: more than twice what it was expected
/// to take, and half a second more at least (see [`next_expectation`]).
pub fn collapsed(expected: Option<f64>, took: f64) -> bool {
    expected.is_some_and(|e| took > (e * 2.0).max(e + 0.5))
}

impl History {
    /// Reads `metrics.json`; a missing or unreadable file is an empty history (nothing to
    /// go by is no error).
    pub fn read(metrics: &Path) -> History {
        std::fs::read_to_string(metrics)
            .ok()
            .map(|text| History::parse(&text))
            .unwrap_or_default()
    }

    fn parse(text: &str) -> History {
        let mut seconds: HashMap<(String, String), f64> = HashMap::new();
        let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
            return History::default();
        };
        // A run that left tests out (a filter, a package) carried their entries over under
        // `history`, so that one run of one test does not make the next full run start blind.
        let tests: Vec<&serde_json::Value> = ["tests", "history"]
            .iter()
            .filter_map(|k| value.get(k).and_then(|t| t.as_array()))
            .flatten()
            .collect();
        let entries: Vec<serde_json::Value> = tests.iter().map(|t| (*t).clone()).collect();
        let mut expected: HashMap<(String, String), f64> = HashMap::new();
        let mut alone = std::collections::HashSet::new();
        let mut stacks = HashMap::new();
        for t in tests {
            let binary = t.get("binary").and_then(|b| b.as_str());
            let name = t.get("test").and_then(|n| n.as_str());
            let (Some(binary), Some(name)) = (binary, name) else {
                continue;
            };
            let key = (binary.to_string(), name.to_string());
            if let Some(secs) = t.get("seconds").and_then(|s| s.as_f64()) {
                *seconds.entry(key.clone()).or_default() += secs;
            }
            if t.get("alone").and_then(|a| a.as_bool()) == Some(true) {
                alone.insert(key.clone());
            }
            if let Some(asked) = t.get("asked") {
                let runs = asked.get("runs").and_then(|r| r.as_u64());
                let grace_ms = asked.get("grace_ms").and_then(|g| g.as_u64());
                let asked = match (asked.is_null(), runs, grace_ms) {
                    (true, ..) => Some(None),
                    (false, Some(runs), Some(grace_ms)) => u32::try_from(runs)
                        .ok()
                        .map(|runs| Some(StacksAsked { runs, grace_ms })),
                    _ => None,
                };
                if let Some(asked) = asked {
                    stacks.insert(key.clone(), asked);
                }
            }
            if let Some(e) = t.get("expected_seconds").and_then(|s| s.as_f64()) {
                expected.insert(key, e);
            }
        }
        // A file written before expectations were recorded: its durations are all there is.
        seconds.extend(expected);
        History {
            seconds,
            alone,
            stacks,
            entries,
        }
    }

    /// The entries read of tests not in `ran` (binary id, test name): what the next run
    /// still needs of a test this run left out.
    pub fn carried_over(
        &self,
        ran: &std::collections::HashSet<(String, String)>,
    ) -> Vec<serde_json::Value> {
        self.entries
            .iter()
            .filter(|t| {
                let key = (
                    t.get("binary").and_then(|b| b.as_str()).unwrap_or_default(),
                    t.get("test").and_then(|n| n.as_str()).unwrap_or_default(),
                );
                !ran.contains(&(key.0.to_string(), key.1.to_string()))
            })
            .cloned()
            .collect()
    }

    /// What the test's stacks process was asked for, when one followed its counting process
    /// in the run recorded (the inner None: no extra runs).
    pub fn stacks_after_counting(
        &self,
        binary_id: &str,
        test: &str,
    ) -> Option<Option<StacksAsked>> {
        self.stacks
            .get(&(binary_id.to_string(), test.to_string()))
            .copied()
    }

    /// Whether the test wanted every core in the run recorded.
    pub fn alone(&self, binary_id: &str, test: &str) -> bool {
        self.alone
            .contains(&(binary_id.to_string(), test.to_string()))
    }

    /// Seconds the test took last time, if it ran.
    pub fn expected(&self, binary_id: &str, test: &str) -> Option<f64> {
        self.seconds
            .get(&(binary_id.to_string(), test.to_string()))
            .copied()
    }
}

/// What to expect of a test next time, having taken `took` seconds now: see the module's
/// documentation.
pub fn next_expectation(previous: Option<f64>, took: f64) -> f64 {
    match previous {
        Some(p) => took.min((p * 2.0).max(p + 0.5)),
        None => took,
    }
}

/// The order to start jobs in: tests never seen before first (nothing says they are short),
/// then the longest last time first; equal ones keep their order.
pub fn longest_first(expected: &[Option<f64>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..expected.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| expected[i].unwrap_or(f64::INFINITY);
        key(b).total_cmp(&key(a))
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_of_a_test_adds_up_and_baselines_are_left_out() {
        let h = History::parse(
            r#"{"tests": [
                {"binary": "p", "test": "slow", "seconds": 2.0, "pass": "count", "own_seconds": 1.0},
                {"binary": "p", "test": "slow", "seconds": 3.5, "pass": "stacks"},
                {"binary": "p::it", "test": "slow", "seconds": 0.1, "pass": "count"}
            ], "baselines": [{"binary": "p", "test": null, "seconds": 9.0}]}"#,
        );
        assert_eq!(h.expected("p", "slow"), Some(5.5));
        assert_eq!(h.expected("p::it", "slow"), Some(0.1));
        assert_eq!(h.expected("p", "other"), None);
    }

    #[test]
    fn a_recorded_expectation_wins_over_the_durations() {
        let h = History::parse(
            r#"{"tests": [
                {"binary": "p", "test": "spins", "seconds": 60.0, "pass": "count", "expected_seconds": 0.7},
                {"binary": "p", "test": "spins", "seconds": 3.0, "pass": "stacks"}
            ]}"#,
        );
        assert_eq!(h.expected("p", "spins"), Some(0.7));
    }

    #[test]
    fn one_slow_run_raises_the_expectation_a_little_and_a_fast_one_lowers_it_at_once() {
        assert_eq!(next_expectation(None, 60.0), 60.0);
        // Collapsed beside another spinning test: 0.2 s becomes 0.7 s, not 60 s.
        assert_eq!(next_expectation(Some(0.2), 60.0), 0.7);
        assert_eq!(next_expectation(Some(0.7), 0.2), 0.2);
        // A test that really became slow is expected so within a few runs.
        let mut e = Some(1.0);
        for _ in 0..4 {
            e = Some(next_expectation(e, 12.0));
        }
        assert_eq!(e, Some(12.0));
    }

    #[test]
    fn a_test_that_wanted_every_core_runs_alone_until_a_run_says_otherwise() {
        let h = History::parse(
            r#"{"tests": [
                {"binary": "q", "test": "drops", "seconds": 0.2, "pass": "count", "alone": true},
                {"binary": "q", "test": "push", "seconds": 9.0, "pass": "count", "alone": false}
            ]}"#,
        );
        assert!(h.alone("q", "drops"));
        assert!(!h.alone("q", "push"));
        assert!(!h.alone("q", "other"));
        // Alone, it finished before it could be read often enough: it stays alone.
        assert!(next_alone(true, None, false));
        assert!(!next_alone(true, Some(false), false));
        // Spinning threads beside another test: 0.2 s became 20 s.
        assert!(collapsed(Some(0.2), 20.0));
        assert!(next_alone(false, Some(true), true));
        // A pool that keeps every core busy and took what it takes shares the machine.
        assert!(!collapsed(Some(11.0), 11.8));
        assert!(!next_alone(false, Some(true), false));
        assert!(!collapsed(None, 60.0));
    }

    #[test]
    fn a_stacks_process_after_counting_is_remembered_with_what_it_was_asked_for() {
        let h = History::parse(
            r#"{"tests": [
                {"binary": "p", "test": "leaks", "seconds": 32.0, "pass": "count"},
                {"binary": "p", "test": "leaks", "seconds": 40.0, "pass": "stacks",
                 "asked": {"runs": 3, "grace_ms": 0}},
                {"binary": "p", "test": "panics", "seconds": 0.1, "pass": "count"},
                {"binary": "p", "test": "panics", "seconds": 0.1, "pass": "stacks", "asked": null},
                {"binary": "p", "test": "custom", "seconds": 0.1, "pass": "stacks"},
                {"binary": "p", "test": "odd", "seconds": 0.1, "pass": "stacks", "asked": {"runs": -1}}
            ]}"#,
        );
        assert_eq!(
            h.stacks_after_counting("p", "leaks"),
            Some(Some(StacksAsked {
                runs: 3,
                grace_ms: 0
            }))
        );
        assert_eq!(h.stacks_after_counting("p", "panics"), Some(None));
        assert_eq!(
            h.stacks_after_counting("p", "custom"),
            None,
            "no counting process"
        );
        assert_eq!(
            h.stacks_after_counting("p", "odd"),
            None,
            "unreadable is nothing"
        );
        assert_eq!(h.stacks_after_counting("p", "other"), None);
    }

    #[test]
    fn a_run_that_left_tests_out_carries_their_entries_over() {
        let before = History::parse(
            r#"{"tests": [
                {"binary": "p", "test": "slow", "seconds": 32.0, "pass": "count", "expected_seconds": 72.0},
                {"binary": "p", "test": "slow", "seconds": 40.0, "pass": "stacks", "asked": {"runs": 3, "grace_ms": 0}},
                {"binary": "p", "test": "quick", "seconds": 0.1, "pass": "count"}
            ]}"#,
        );
        // The next run ran `quick` alone: `slow`'s entries go on under `history`.
        let ran = [("p".to_string(), "quick".to_string())]
            .into_iter()
            .collect();
        let carried = before.carried_over(&ran);
        assert_eq!(carried.len(), 2);
        let written = serde_json::json!({
            "tests": [{"binary": "p", "test": "quick", "seconds": 0.2, "pass": "count"}],
            "history": carried,
        });
        let after = History::parse(&written.to_string());
        assert_eq!(after.expected("p", "slow"), Some(72.0));
        assert!(after.stacks_after_counting("p", "slow").is_some());
        assert_eq!(after.expected("p", "quick"), Some(0.2));
    }

    #[test]
    fn a_damaged_file_is_no_history() {
        assert_eq!(History::parse("{not json").expected("p", "t"), None);
        assert_eq!(
            History::read(Path::new("/nonexistent/metrics.json")).expected("p", "t"),
            None
        );
    }

    #[test]
    fn new_tests_then_the_longest_start_first_and_ties_keep_their_order() {
        let order = longest_first(&[Some(0.1), None, Some(9.0), Some(0.1), Some(3.0), None]);
        assert_eq!(order, vec![1, 5, 2, 4, 0, 3]);
    }
}
