//! How each test was judged, in words, and why when the way needs a reason: the summary's
//! `Judged` line, the page's row and JUnit's `system-out` say it the same way, and the
//! numbers of runs they give are the report's (`extra_runs.made` and `extra_runs.in_all`).

use crate::model::{ExtraRunsStatus as Status, Method, Report, TestReport, Verdict};

/// The ways a test that ran to the end is judged, in the order the summary lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Way {
    /// Its own run retained nothing.
    RetainedNothing,
    /// Its extra runs in the counting process added nothing.
    Settled,
    /// It could not run again; what its one run retained was judged.
    OwnRun,
    /// Its stacks over extra runs.
    Stacks,
    /// A collection's length over extra runs, whatever its stacks did.
    Lengths,
    /// Reachability at exit after one run: its extra runs could not be made.
    Reachability,
    /// Not run again enough to tell.
    Unsettled,
    /// A leak in what the processes it started lost at their exit.
    Children,
}

impl Way {
    /// Every way, in order.
    pub const ALL: [Way; 8] = [
        Way::RetainedNothing,
        Way::Settled,
        Way::OwnRun,
        Way::Stacks,
        Way::Lengths,
        Way::Reachability,
        Way::Unsettled,
        Way::Children,
    ];

    /// The summary's words after a count of tests.
    pub fn summary_words(self) -> &'static str {
        match self {
            Way::RetainedNothing => "retained nothing",
            Way::Settled => "settled by running again",
            Way::OwnRun => "by their own run alone (they could not run again)",
            Way::Stacks => "by their stacks over extra runs",
            Way::Lengths => "by their collections' lengths over extra runs",
            Way::Reachability => "by reachability after one run",
            Way::Unsettled => "not run again enough to tell",
            Way::Children => "by what the processes they started lost at their exit",
        }
    }

    /// Whether a test judged this way was judged on one run, for a reason worth saying.
    pub fn on_one_run(self) -> bool {
        matches!(self, Way::OwnRun | Way::Reachability | Way::Unsettled)
    }
}

/// How `t` was judged; None for a test that did not run to a verdict on memory (failed,
/// crashed, timed out, not run).
pub fn way(t: &TestReport) -> Option<Way> {
    let retained = t.first_run_retained.as_ref().map_or(0, |r| r.bytes);
    let runs = t.extra_runs.made;
    let own_stacks_fail = t.stacks.iter().any(|s| s.fails && s.process.is_none());
    let children_fail = t.stacks.iter().any(|s| s.fails && s.process.is_some());
    Some(match (t.verdict, t.method, &t.extra_runs.status) {
        (Verdict::Unsettled, ..) => Way::Unsettled,
        (Verdict::Leak, ..)
            if children_fail && !own_stacks_fail && !t.collections.iter().any(|c| c.fails) =>
        {
            Way::Children
        }
        (Verdict::Clean | Verdict::Leak, _, _) => match (t.method, &t.extra_runs.status) {
            (Method::Counters, Status::NotNeeded) => Way::RetainedNothing,
            // No extra run was made (a `#[should_panic]` test cannot run again).
            (Method::Counters, _) if runs == 0 && retained == 0 => Way::RetainedNothing,
            (Method::Counters, _) if runs == 0 => Way::OwnRun,
            (Method::Counters, _) => Way::Settled,
            (Method::Stacks, _)
                if runs > 0
                    && t.collections.iter().any(|c| c.fails)
                    && !t.stacks.iter().any(|s| s.fails) =>
            {
                Way::Lengths
            }
            (Method::Stacks, _) if runs > 0 => Way::Stacks,
            (Method::Stacks, _) => Way::Reachability,
            (Method::CountRunOnly, _) => return None,
        },
        _ => return None,
    })
}

/// Why a test was judged on one run: what its extra runs' status says (`the 1st extra run
/// panicked: …`); None when it was not, or nothing more is known.
pub fn one_run_reason(t: &TestReport) -> Option<&str> {
    match t.extra_runs.status {
        Status::Completed | Status::NotNeeded | Status::TestFailed => None,
        _ => t.extra_runs.detail.as_deref(),
    }
}

/// The runs a test was judged on, counted as the report counts them: `its own run and 16
/// extra runs: 10 counted, then 1 from scratch and 5 with stacks`.
pub fn runs_text(t: &TestReport) -> String {
    let all = t.extra_runs.in_all;
    let measured = t.extra_runs.made;
    if all == 0 {
        return "its own run only".into();
    }
    let extra = crate::model::count_of(u64::from(all), "extra run", "extra runs");
    let how = match t.method {
        // The stacks were taken in a process of their own, which ran the test from scratch.
        Method::Stacks if all > measured => {
            let counted = all - measured - 1;
            let mut parts = Vec::new();
            if counted > 0 {
                parts.push(format!("{counted} counted"));
            }
            parts.push("1 from scratch".into());
            if measured > 0 {
                parts.push(format!("{measured} with stacks"));
            }
            let last = parts.pop().unwrap_or_default();
            match parts.is_empty() {
                true => format!(": {last}, with stacks"),
                false => format!(": {}, then {last}", parts.join(", then ")),
            }
        }
        Method::Stacks => ", with stacks".into(),
        _ => ", counted".into(),
    };
    format!("its own run and {extra}{how}")
}

/// One sentence for a test's judgement: the way, the runs, and the reason when it was
/// judged on one run (`by reachability after one run: the 1st extra run panicked: …`).
pub fn sentence(t: &TestReport) -> Option<String> {
    let way = way(t)?;
    let words = match way {
        Way::RetainedNothing => "retained nothing".to_string(),
        Way::Settled => format!("settled by running again ({})", runs_text(t)),
        Way::OwnRun => "judged by its own run alone".into(),
        Way::Stacks => format!("judged by its stacks over {}", runs_text(t)),
        Way::Lengths => format!("judged by its collections' lengths over {}", runs_text(t)),
        Way::Reachability => "judged by reachability after one run".into(),
        Way::Unsettled => "not run again enough to tell".into(),
        Way::Children => "judged by what the processes it started lost at their exit".into(),
    };
    Some(match (way.on_one_run(), one_run_reason(t)) {
        (true, Some(why)) => format!("{words}: {why}"),
        _ => words,
    })
}

/// How the tests that passed were judged, for the summary: what each way costs and how
/// sure it is differ, and a user should see which their suite got.
pub fn judged_line(report: &Report) -> Option<String> {
    let ways: Vec<Way> = report.tests.iter().filter_map(way).collect();
    let parts: Vec<String> = Way::ALL
        .iter()
        .map(|w| (ways.iter().filter(|x| *x == w).count(), w.summary_words()))
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Why tests were judged on one run, one line per reason (the first test with it named):
/// `2 tests: the 1st extra run panicked: duplicate metric (`registry::a`, …)`.
pub fn one_run_lines(report: &Report) -> Vec<String> {
    const SHOWN: usize = 4;
    // Grouped by the whole reason: a reason quotes the test's own panic message.
    let mut by_reason: Vec<(String, Vec<&str>)> = Vec::new();
    for t in &report.tests {
        if !way(t).is_some_and(|w| w.on_one_run()) {
            continue;
        }
        let Some(why) = one_run_reason(t) else {
            continue;
        };
        match by_reason.iter_mut().find(|(r, _)| r == why) {
            Some((_, names)) => names.push(&t.name),
            None => by_reason.push((why.to_string(), vec![&t.name])),
        }
    }
    let more = by_reason.len().saturating_sub(SHOWN);
    let mut lines: Vec<String> = by_reason
        .iter()
        .take(SHOWN)
        .map(|(why, names)| {
            let which = match names.len() {
                1 => format!("`{}`", names[0]),
                n => format!("`{}` and {} more", names[0], n - 1),
            };
            format!(
                "one run: {} ({which}): {why}",
                crate::model::count_of(names.len() as u64, "test", "tests")
            )
        })
        .collect();
    if more > 0 {
        lines.push(format!("one run: {more} other reasons (see report.json)"));
    }
    lines
}

/// What the summary says of the processes the tests started: how many were checked, and
/// which were not and why (another executable than the build's; one that did not end through
/// `exit`). None when no test started one.
pub fn processes_lines(report: &Report) -> Vec<String> {
    use std::collections::BTreeMap;
    // By executable name: (started, checked, scanned).
    let mut by_name: BTreeMap<&str, (u64, bool, u64)> = BTreeMap::new();
    for p in report.tests.iter().flat_map(|t| &t.processes) {
        let e = by_name.entry(&p.name).or_default();
        e.0 += p.started;
        e.1 |= p.checked;
        e.2 += p.scanned;
    }
    if by_name.is_empty() {
        return Vec::new();
    }
    let list = |items: Vec<String>| {
        const SHOWN: usize = 6;
        let more = items.len().saturating_sub(SHOWN);
        let mut text = items.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more (report.json `processes`)"));
        }
        text
    };
    let scanned: u64 = by_name.values().map(|v| v.2).sum();
    let checked = list(
        (by_name.iter().filter(|(_, v)| v.2 > 0))
            .map(|(n, v)| format!("`{n}` ×{}", v.2))
            .collect(),
    );
    let mut lines = Vec::new();
    if scanned > 0 {
        lines.push(format!(
            "processes the tests started: {} checked when they ended ({checked})",
            scanned
        ));
    }
    let others: Vec<String> = (by_name.iter().filter(|(_, v)| !v.1))
        .map(|(n, v)| format!("`{n}` ×{}", v.0))
        .collect();
    if !others.is_empty() {
        lines.push(format!(
            "not checked: {} (not executables of the build)",
            list(others)
        ));
    }
    let unscanned: Vec<String> = (by_name.iter().filter(|(_, v)| v.1 && v.0 > v.2))
        .map(|(n, v)| format!("`{n}` ×{}", v.0 - v.2))
        .collect();
    if !unscanned.is_empty() {
        lines.push(format!(
            "not checked: {} (no scan when they ended: killed by a signal they were not asked to scan before, such as `SIGHUP`; crashed; or did not answer when asked for one)",
            list(unscanned)
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Report;
    use std::path::Path;

    /// Every golden case's report whose test ran again: the reports `report.json` holds.
    fn golden_reports() -> Vec<TestReport> {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
        let mut reports = Vec::new();
        for entry in std::fs::read_dir(corpus).unwrap() {
            let dir = entry.unwrap().path();
            if !dir.join("case.json").is_file() {
                continue; // a bench's or a service's case
            }
            let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
            reports.push(serde_json::from_str(&text).unwrap());
        }
        assert!(reports.len() > 10, "the golden cases are where they were");
        reports
    }

    /// The numbers that follow `before` in `text`, each up to the next non-digit.
    fn numbers_after(text: &str, before: &str) -> Vec<u32> {
        text.match_indices(before)
            .filter_map(|(at, _)| {
                let rest = &text[at + before.len()..];
                let end = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                rest[..end].parse().ok()
            })
            .collect()
    }

    #[test]
    fn every_count_of_runs_agrees_with_the_report_in_the_summary_page_and_junit() {
        let reports = golden_reports();
        let mut leaks_with_stacks = 0;
        for t in &reports {
            let report = Report {
                tests: vec![t.clone()],
                ..Report::example()
            };
            let root = Path::new("/ws");
            let summary = crate::report::human::render(&report, root, Path::new("target/lc"));
            let durations = Default::default();
            let page = crate::report::html::render(
                &report,
                &crate::report::html::Page {
                    command: "cargo leakcheck test",
                    date: String::new(),
                    durations: &durations,
                },
                root,
            );
            let junit = crate::report::junit::render(
                &report,
                &durations,
                &[],
                Path::new("target/lc"),
                root,
            );
            let all = t.extra_runs.in_all;
            let made = t.extra_runs.made;
            let name = &t.name;
            // The summary's count of all runs, and of the runs each stack grew in.
            for n in numbers_after(&summary, "its own run and ") {
                assert_eq!(n, all, "{name}: the summary's runs in all\n{summary}");
            }
            for n in numbers_after(&summary, "in each of ") {
                assert_eq!(n, made, "{name}: the runs a stack grew in\n{summary}");
            }
            for stack in t
                .stacks
                .iter()
                .filter(|s| s.fails && !s.growth_per_run.is_empty())
            {
                assert_eq!(stack.growth_per_run.len() as u32, made, "{name}");
            }
            // The page's: `stacks, 16 extra runs (5 with stacks)`.
            for n in numbers_after(&page, "stacks, ") {
                assert_eq!(n, all, "{name}: the page's runs in all");
            }
            for n in numbers_after(&page, "extra runs (") {
                assert_eq!(n, made, "{name}: the page's runs with stacks");
            }
            for n in numbers_after(&junit, "its own run and ") {
                assert_eq!(n, all, "{name}: JUnit's runs in all\n{junit}");
            }
            if t.verdict == Verdict::Leak && t.method == Method::Stacks && made > 0 {
                leaks_with_stacks += 1;
                assert!(
                    summary.contains(&format!("its own run and {all} extra runs")),
                    "{name}: a leak says its runs\n{summary}"
                );
                assert!(
                    page.contains(&format!("stacks, {all} extra runs")),
                    "{name}"
                );
            }
        }
        assert!(
            leaks_with_stacks >= 3,
            "the golden cases have leaks judged by stacks"
        );
    }

    #[test]
    fn a_test_judged_on_one_run_says_why() {
        let reports = golden_reports();
        let panicked = reports
            .iter()
            .find(|t| matches!(t.extra_runs.status, Status::Panicked(_)))
            .expect("a golden case whose extra run panicked");
        assert_eq!(way(panicked), Some(Way::Reachability));
        let said = sentence(panicked).unwrap();
        assert!(
            said.starts_with("judged by reachability after one run: the 1st extra run panicked: "),
            "{said}"
        );
        let settled = reports
            .iter()
            .find(|t| way(t) == Some(Way::Settled))
            .expect("a golden case settled by counting");
        assert!(sentence(settled)
            .unwrap()
            .starts_with("settled by running again (its own run and "));
    }
}
