//! Where a run's time went beyond the tests' own runs: the extra runs (and stack-profiling
//! runs) each test needed, for the summary's `Cost` line and `metrics.json`. Times depend on
//! the machine, so none of this is in `report.json`.

/// What one test cost beyond its own run.
#[derive(Clone, Debug, PartialEq)]
pub struct TestCost {
    /// Its test binary's target name (`tests/smoke.rs`: `smoke`).
    pub binary: String,
    /// The test's libtest name.
    pub name: String,
    /// Seconds its own (counted) run took.
    pub own_seconds: f64,
    /// Runs beyond its own: extra runs in its counting process, and its whole stacks
    /// process (a run from scratch plus its extra runs).
    pub extra_runs: u32,
    /// Seconds all those took.
    pub extra_seconds: f64,
}

/// The summary's line: the extra runs' total and the tests that cost most; None when no
/// test ran again.
pub fn line(costs: &[TestCost]) -> Option<String> {
    let mut costly: Vec<&TestCost> = costs.iter().filter(|c| c.extra_runs > 0).collect();
    if costly.is_empty() {
        return None;
    }
    costly.sort_by(|a, b| b.extra_seconds.total_cmp(&a.extra_seconds));
    let total: f64 = costly.iter().map(|c| c.extra_seconds).sum();
    let own: f64 = costs.iter().map(|c| c.own_seconds).sum();
    const SHOWN: usize = 3;
    // A short name two costly tests share (`basic::iter`, `basic_set::iter`) says which
    // only in full.
    let shared = |name: &str| {
        costly
            .iter()
            .filter(|o| short(&o.name) == short(name))
            .nth(1)
            .is_some()
    };
    // Integration tests of several binaries may share even their full names (`smoke`):
    // then the binary says which, as the summary's other lines name a test.
    let shared_in_full = |c: &TestCost| costly.iter().filter(|o| o.name == c.name).nth(1).is_some();
    let mut named: Vec<String> = costly
        .iter()
        .take(SHOWN)
        .map(|c| {
            let name = if shared_in_full(c) {
                format!("{} {}", c.binary, c.name)
            } else if shared(&c.name) {
                c.name.clone()
            } else {
                short(&c.name).to_string()
            };
            format!(
                "{name} {} × {}",
                c.extra_runs,
                seconds(c.extra_seconds / f64::from(c.extra_runs))
            )
        })
        .collect();
    if costly.len() > SHOWN {
        named.push("…".into());
    }
    Some(format!(
        "extra runs: {total:.1} s in {} ({}); the tests' own runs: {own:.1} s",
        crate::model::count_of(costly.len() as u64, "test", "tests"),
        named.join(", ")
    ))
}

/// A duration for people: milliseconds under a second.
fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.1} s")
    }
}

/// A test's name without its module path; a doc-test's whole (`src/tree.rs -
/// tree::Node::add (line 28)`), its file and line being what names it.
fn short(name: &str) -> &str {
    if name.contains(" - ") && name.ends_with(')') {
        return name;
    }
    name.rsplit("::").next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(name: &str, own: f64, runs: u32, extra: f64) -> TestCost {
        TestCost {
            binary: "lib".into(),
            name: name.into(),
            own_seconds: own,
            extra_runs: runs,
            extra_seconds: extra,
        }
    }

    #[test]
    fn the_costliest_tests_lead_with_their_runs() {
        let costs = [
            cost("join::test::sort", 0.1, 1, 0.1),
            cost("join::test::join_counter_overflow", 9.8, 2, 19.6),
            cost("scope::test::static_scope", 0.2, 0, 0.0),
            cost("broadcast::test::broadcast_global", 1.0, 1, 1.2),
            cost("spawn::test::fifo_order", 0.1, 1, 0.05),
        ];
        assert_eq!(
            line(&costs).unwrap(),
            "extra runs: 21.0 s in 4 tests (join_counter_overflow 2 × 9.8 s, broadcast_global 1 × 1.2 s, sort 1 × 100 ms, …); the tests' own runs: 11.2 s"
        );
    }

    #[test]
    fn tests_that_share_a_short_name_are_named_in_full() {
        let costs = [
            cost("basic::iter", 0.1, 1, 0.015),
            cost("basic_set::iter", 0.1, 1, 0.013),
            cost("basic::len", 0.1, 1, 0.010),
        ];
        assert_eq!(
            line(&costs).unwrap(),
            "extra runs: 0.0 s in 3 tests (basic::iter 1 × 15 ms, basic_set::iter 1 × 13 ms, len 1 × 10 ms); the tests' own runs: 0.3 s"
        );
    }

    #[test]
    fn tests_of_several_binaries_that_share_a_full_name_are_named_with_their_binary() {
        let in_binary = |binary: &str, extra: f64| TestCost {
            binary: binary.into(),
            ..cost("smoke", 0.1, 5, extra)
        };
        let costs = [in_binary("alpha", 0.02), in_binary("beta", 0.01)];
        assert_eq!(
            line(&costs).unwrap(),
            "extra runs: 0.0 s in 2 tests (alpha smoke 5 × 4 ms, beta smoke 5 × 2 ms); the tests' own runs: 0.2 s"
        );
    }

    #[test]
    fn a_doc_test_keeps_its_file_whether_its_item_has_a_path_or_not() {
        let line = line(&[
            cost("src/tree.rs - tree::Node::add_child (line 28)", 0.1, 2, 0.2),
            cost("src/lib.rs - add (line 10)", 0.1, 1, 0.1),
        ])
        .unwrap();
        assert!(
            line.contains("src/tree.rs - tree::Node::add_child (line 28) 2 × ")
                && line.contains("src/lib.rs - add (line 10) 1 × "),
            "{line}"
        );
    }

    #[test]
    fn no_extra_run_no_line() {
        assert_eq!(line(&[cost("a", 1.0, 0, 0.0)]), None);
    }
}
