//! A run against a base run's report (`--baseline`, e.g. the last run on `main`): which
//! leaks are new, grown, unchanged or gone, and which tests changed for the worse without
//! leaking. Pure: both reports are read already.
//!
//! Tests are matched by package, target and name; a test's failing stacks by the functions
//! of their frames (lines move when code is edited above them, functions do not). A leak
//! has grown when a failing stack is new to the test, or retains more than the base's by
//! over [`GROWTH_TOLERANCE_PERCENT`] percent and [`GROWTH_TOLERANCE_BYTES`] bytes (the
//! counts are exact, but a test with threads can vary by a few objects from run to run).

use crate::model::{
    Baseline, Change, Report, StackKind, StackReport, TestChange, TestReport, Verdict,
};
use std::collections::{HashMap, HashSet};

/// A stack retaining this much more than in the base, in percent (and
/// [`GROWTH_TOLERANCE_BYTES`]), has grown.
pub const GROWTH_TOLERANCE_PERCENT: u64 = 10;
/// See [`GROWTH_TOLERANCE_PERCENT`].
pub const GROWTH_TOLERANCE_BYTES: u64 = 64;

/// Why a base report cannot be compared with this run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BaselineError {
    /// No package in common: the base is another crate's run.
    #[error("the baseline is a run of {base}, not of {now}: no package in common")]
    OtherCrate { base: String, now: String },
}

type Key<'a> = (&'a str, &'a str, &'a str);

fn key(t: &TestReport) -> Key<'_> {
    (&t.package, &t.binary, &t.name)
}

/// A stack as it is matched across runs: its frames' functions.
fn stack_key(s: &StackReport) -> Vec<&str> {
    s.frames.iter().map(|f| f.function.as_str()).collect()
}

fn grew(now: u64, base: u64) -> bool {
    now > base
        && now - base > GROWTH_TOLERANCE_BYTES
        && (now - base) * 100 > base * GROWTH_TOLERANCE_PERCENT
}

/// Compares `now` with `base`, read from `path`.
pub fn compare(
    base: &Report,
    now: &Report,
    path: &str,
    fail_on_new: bool,
) -> Result<Baseline, BaselineError> {
    let packages = |r: &Report| -> Vec<String> {
        let mut p: Vec<String> = r.tests.iter().map(|t| t.package.clone()).collect();
        p.sort();
        p.dedup();
        p
    };
    let (base_packages, now_packages) = (packages(base), packages(now));
    if !base_packages.is_empty()
        && !now_packages.is_empty()
        && !now_packages.iter().any(|p| base_packages.contains(p))
    {
        return Err(BaselineError::OtherCrate {
            base: base_packages.join(", "),
            now: now_packages.join(", "),
        });
    }
    Ok(compare_tests(base, now, path, fail_on_new))
}

/// Compares the tests of `now` with the same tests of `base`, whatever crates each holds
/// (the nextest runner has one test of one crate to compare).
pub fn compare_tests(base: &Report, now: &Report, path: &str, fail_on_new: bool) -> Baseline {
    let before: HashMap<Key, &TestReport> = base.tests.iter().map(|t| (key(t), t)).collect();
    let mut out = Baseline {
        path: path.to_string(),
        fail_on_new,
        new: 0,
        grown: 0,
        unchanged: 0,
        gone: Vec::new(),
        tests: Vec::new(),
    };
    for t in &now.tests {
        let was = before.get(&key(t)).copied();
        let Some(change) = compare_test(t, was) else {
            continue;
        };
        match change.change {
            Change::New => out.new += 1,
            Change::Grown => out.grown += 1,
            Change::Unchanged => out.unchanged += 1,
            Change::Changed => {}
        }
        out.tests.push(change);
    }
    let leaking_now: HashSet<Key> = now
        .tests
        .iter()
        .filter(|t| t.verdict == Verdict::Leak)
        .map(key)
        .collect();
    out.gone = base
        .tests
        .iter()
        .filter(|t| t.verdict == Verdict::Leak && !leaking_now.contains(&key(t)))
        .map(|t| format!("{} {}", t.binary, t.name))
        .collect();
    out
}

/// A test against its base run (`was`, when it ran there): None when there is nothing to
/// say (not a leak, and no worse than it was).
fn compare_test(t: &TestReport, was: Option<&TestReport>) -> Option<TestChange> {
    let change = |change: Change, detail: String, stacks: Vec<(usize, Change)>| TestChange {
        package: t.package.clone(),
        binary: t.binary.clone(),
        name: t.name.clone(),
        change,
        detail,
        stacks,
    };
    if t.verdict != Verdict::Leak {
        let was = was?;
        if t.verdict != was.verdict && t.verdict != Verdict::Clean {
            return Some(change(
                Change::Changed,
                format!("{}, was {}", t.verdict, was.verdict),
                Vec::new(),
            ));
        }
        let lifetime = |r: &TestReport| -> HashSet<Vec<String>> {
            r.stacks
                .iter()
                .filter(|s| matches!(s.kind, StackKind::OneTime | StackKind::ProcessLifetime))
                .map(|s| stack_key(s).into_iter().map(str::to_owned).collect())
                .collect()
        };
        let (now_kept, was_kept) = (lifetime(t), lifetime(was));
        let added = now_kept.difference(&was_kept).count();
        return (added > 0).then(|| {
            change(
                Change::Changed,
                format!(
                    "now keeps memory for the process lifetime in {} it did not",
                    crate::model::count_of(added as u64, "stack", "stacks")
                ),
                Vec::new(),
            )
        });
    }
    let Some(was) = was.filter(|w| w.verdict == Verdict::Leak) else {
        let detail = match was {
            Some(w) => format!("was {}", w.verdict),
            None => "not in the base run".to_string(),
        };
        let stacks = failing(t).map(|(i, _)| (i, Change::New)).collect();
        return Some(change(Change::New, detail, stacks));
    };
    let base_stacks: HashMap<Vec<&str>, u64> = {
        let mut m: HashMap<Vec<&str>, u64> = HashMap::new();
        for (_, s) in failing(was) {
            *m.entry(stack_key(s)).or_default() += s.bytes;
        }
        m
    };
    let stacks: Vec<(usize, Change)> = failing(t)
        .map(|(i, s)| {
            let c = match base_stacks.get(&stack_key(s)) {
                None => Change::New,
                Some(&base) if grew(s.bytes, base) => Change::Grown,
                Some(_) => Change::Unchanged,
            };
            (i, c)
        })
        .collect();
    let stack_grew = stacks.iter().any(|(_, c)| *c != Change::Unchanged);
    let total_grew = grew(t.retained_bytes, was.retained_bytes);
    let detail = format!(
        "retains {}, was {}",
        crate::model::human_bytes(t.retained_bytes),
        crate::model::human_bytes(was.retained_bytes)
    );
    let test_change = if stack_grew || total_grew {
        Change::Grown
    } else {
        Change::Unchanged
    };
    Some(change(test_change, detail, stacks))
}

/// A test's failing stacks, with their index.
fn failing(t: &TestReport) -> impl Iterator<Item = (usize, &StackReport)> {
    t.stacks.iter().enumerate().filter(|(_, s)| s.fails)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FrameReport;

    fn leak(name: &str, stacks: &[(&str, u64)]) -> TestReport {
        TestReport {
            name: name.into(),
            verdict: Verdict::Leak,
            retained_bytes: stacks.iter().map(|s| s.1).sum(),
            stacks: stacks
                .iter()
                .map(|(f, bytes)| StackReport {
                    frames: vec![FrameReport::at(f, "/ws/src/lib.rs", 1)],
                    ..StackReport::example(StackKind::Leak, *bytes)
                })
                .collect(),
            ..TestReport::example()
        }
    }

    fn clean(name: &str) -> TestReport {
        TestReport {
            name: name.into(),
            ..TestReport::example()
        }
    }

    fn report(tests: Vec<TestReport>) -> Report {
        Report {
            tests,
            ..Report::example()
        }
    }

    #[test]
    fn leaks_are_new_grown_unchanged_or_gone() {
        let base = report(vec![
            leak("same", &[("p::a", 1000)]),
            leak("grows", &[("p::b", 1000)]),
            leak("new_stack", &[("p::c", 1000)]),
            clean("now_leaks"),
            leak("fixed", &[("p::d", 1000)]),
            leak("removed", &[("p::e", 1000)]),
            leak("noise", &[("p::f", 1000)]),
        ]);
        let now = report(vec![
            leak("same", &[("p::a", 1000)]),
            leak("grows", &[("p::b", 2000)]),
            leak("new_stack", &[("p::c", 1000), ("p::c2", 8)]),
            leak("now_leaks", &[("p::g", 8)]),
            clean("fixed"),
            // Within the tolerance: the same leak.
            leak("noise", &[("p::f", 1050)]),
            leak("added", &[("p::h", 8)]),
        ]);
        let b = compare(&base, &now, "base.json", true).unwrap();
        let of = |name: &str| {
            b.tests
                .iter()
                .find(|c| c.name == name)
                .map(|c| (c.change, c.stacks.clone()))
        };
        assert_eq!(
            of("same"),
            Some((Change::Unchanged, vec![(0, Change::Unchanged)]))
        );
        assert_eq!(of("grows"), Some((Change::Grown, vec![(0, Change::Grown)])));
        assert_eq!(
            of("new_stack"),
            Some((
                Change::Grown,
                vec![(0, Change::Unchanged), (1, Change::New)]
            ))
        );
        assert_eq!(of("now_leaks"), Some((Change::New, vec![(0, Change::New)])));
        assert_eq!(of("added").map(|c| c.0), Some(Change::New));
        assert_eq!(of("noise").map(|c| c.0), Some(Change::Unchanged));
        assert_eq!(of("fixed"), None);
        assert_eq!((b.new, b.grown, b.unchanged), (2, 2, 2));
        assert_eq!(b.gone, ["p fixed", "p removed"]);
    }

    #[test]
    fn a_test_worse_without_leaking_is_changed() {
        let mut kept = clean("keeps");
        kept.stacks = vec![StackReport {
            frames: vec![FrameReport::named("p::pool")],
            ..StackReport::example(StackKind::ProcessLifetime, 4096)
        }];
        let unsettled = TestReport {
            verdict: Verdict::Unsettled,
            ..clean("unsettled")
        };
        let base = report(vec![clean("keeps"), clean("unsettled"), clean("same")]);
        let now = report(vec![kept, unsettled, clean("same")]);
        let b = compare(&base, &now, "base.json", false).unwrap();
        let changed: Vec<(&str, &str)> = b
            .tests
            .iter()
            .map(|c| (c.name.as_str(), c.detail.as_str()))
            .collect();
        assert_eq!(
            changed,
            [
                (
                    "keeps",
                    "now keeps memory for the process lifetime in 1 stack it did not"
                ),
                ("unsettled", "unsettled, was clean")
            ]
        );
        assert_eq!((b.new, b.grown, b.unchanged), (0, 0, 0));
    }

    #[test]
    fn a_base_of_another_crate_is_refused() {
        let mut other = clean("t");
        other.package = "other".into();
        let e = compare(&report(vec![other]), &report(vec![clean("t")]), "b", false);
        assert_eq!(
            e.unwrap_err().to_string(),
            "the baseline is a run of other, not of p: no package in common"
        );
    }

    #[test]
    fn only_new_and_grown_leaks_fail_with_fail_on_new() {
        let base = report(vec![leak("old", &[("p::a", 100)])]);
        let mut now = report(vec![leak("old", &[("p::a", 100)])]);
        now.baseline = Some(compare(&base, &now, "b", true).unwrap());
        assert_eq!(now.exit_code(), crate::errors::ExitCode::Success);
        now.baseline.as_mut().unwrap().fail_on_new = false;
        assert_eq!(now.exit_code(), crate::errors::ExitCode::LeaksFound);
        let mut grown = report(vec![leak("old", &[("p::a", 400)])]);
        grown.baseline = Some(compare(&base, &grown, "b", true).unwrap());
        assert_eq!(grown.exit_code(), crate::errors::ExitCode::LeaksFound);
    }
}
