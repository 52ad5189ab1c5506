//! How long each test took last time, read from the previous run's `metrics.json`, so that
//! the longest tests start first and the run does not end waiting for one slow test that
//! happened to start last.

use std::collections::HashMap;
use std::path::Path;

/// Seconds each test's processes took in the previous run (every pass added up), by
/// binary id and test name. Empty when there was no previous run or it cannot be read: the
/// order then is the listing's.
#[derive(Clone, Debug, Default)]
pub struct History {
    seconds: HashMap<(String, String), f64>,
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
        let tests = value.get("tests").and_then(|t| t.as_array());
        for t in tests.into_iter().flatten() {
            let binary = t.get("binary").and_then(|b| b.as_str());
            let name = t.get("test").and_then(|n| n.as_str());
            let secs = t.get("seconds").and_then(|s| s.as_f64());
            if let (Some(binary), Some(name), Some(secs)) = (binary, name, secs) {
                let key = (binary.to_string(), name.to_string());
                *seconds.entry(key).or_default() += secs;
            }
        }
        History { seconds }
    }

    /// Seconds the test took last time, if it ran.
    pub fn expected(&self, binary_id: &str, test: &str) -> Option<f64> {
        self.seconds
            .get(&(binary_id.to_string(), test.to_string()))
            .copied()
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
