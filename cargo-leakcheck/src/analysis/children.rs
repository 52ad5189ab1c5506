//! The processes a test started, judged with it. A process of the build's own executables
//! (a binary under test, started through `CARGO_BIN_EXE_*`) is tracked and scanned at its
//! exit: what nothing reaches then can never be freed. What it still reaches is no leak (the
//! process is gone). Processes of other executables are listed, never judged.
//!
//! For a program a test starts, "does it lose memory every time it runs?" is "does it lose
//! memory with its work?": a server that leaks each route's name once as it builds its routes,
//! or a command-line tool that forgets its logger's guard at start-up, loses the same every
//! time it starts, whatever it is asked to do, and that is no leak. So a stack the processes
//! of one executable lost objects at in every run of the test that started one is compared
//! with every scanned process of that executable in the whole run: lost the same number of
//! times in each of them, and those processes started by two tests or more (each asking its
//! own of the program), it is the program's loss once per process, reported as one-time
//! memory. Otherwise (the loss differs from process to process, or one test alone started
//! them all, so nothing tells a loss per process from a loss per unit of the same work) it is
//! a leak of the test, reported under the test with the executable named.

use crate::analysis::stacks::{self, Policy, Reach, RetainedStack};
use crate::evidence::normalized::FrameKey;
use crate::evidence::profile::Counts;
use crate::evidence::symbols::Symbols;
use crate::evidence::test_run::{ChildEvidence, SuiteProcesses};
use crate::evidence::unreached::Lost;
use crate::model::{ProcessReport, StackReport};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the processes a test started add to its report.
#[derive(Debug, Default)]
pub struct Findings {
    /// Stacks lost in every run, judged (thresholds, suppressions).
    pub stacks: Vec<StackReport>,
    /// Every executable the test's processes ran, checked or not.
    pub processes: Vec<ProcessReport>,
}

/// Judges the processes a test started, against the run's processes (`suite`).
pub fn judge(
    children: &[ChildEvidence],
    suite: &SuiteProcesses,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) -> Findings {
    let mut by_exe: BTreeMap<&str, Vec<&ChildEvidence>> = BTreeMap::new();
    for c in children {
        by_exe.entry(c.exe.as_str()).or_default().push(c);
    }
    let mut findings = Findings::default();
    for (exe, started) in by_exe {
        findings.processes.push(summary(exe, &started));
        if !started.iter().any(|c| c.checked) {
            continue;
        }
        let name = file_name(exe);
        let runs = scanned_runs(&started).len();
        // Stacks that compare alike across the processes are judged together, so that
        // those that symbolize the same merge as in any report.
        let mut groups: Vec<(PerProcess, Vec<RetainedStack>)> = Vec::new();
        for r in lost_every_run(&started) {
            let compared = per_process(exe, &r.frames, &started, suite);
            match groups.iter_mut().find(|(p, _)| *p == compared) {
                Some((_, group)) => group.push(r),
                None => groups.push((compared, vec![r])),
            }
        }
        let held = HashMap::<Vec<FrameKey>, crate::evidence::paths::HeldPath>::new();
        for (compared, retained) in groups {
            for mut stack in stacks::judge_stacks(&retained, exe, symbols, policy, None, &held) {
                if stack.kind != crate::model::StackKind::Leak {
                    continue;
                }
                stack.process = Some(name.to_string());
                stack.reason = Some(match compared {
                    PerProcess::OnceEach {
                        objects,
                        processes,
                        tests,
                    } => {
                        stack.kind = crate::model::StackKind::OneTime;
                        stack.fails = stack.fails && policy.effective.one_time_fails;
                        once_each(name, objects, processes, tests)
                    }
                    PerProcess::SameFromOneTest { objects, processes } => {
                        format!("{}; {}", reason(runs), alone(objects, processes))
                    }
                    PerProcess::Differs => reason(runs),
                });
                findings.stacks.push(stack);
            }
        }
    }
    findings
}

/// How a stack's loss compares across the processes of its executable.
#[derive(Debug, PartialEq, Eq)]
enum PerProcess {
    /// The same objects lost in every scanned process of the run, which two tests or more
    /// started: once per process.
    OnceEach {
        objects: u64,
        processes: usize,
        tests: usize,
    },
    /// The same in every process, but one test started them all.
    SameFromOneTest { objects: u64, processes: usize },
    /// More in some processes than in others: it grows with their work.
    Differs,
}

/// How many objects each process of `exe` lost at `frames`: the run's scanned processes
/// (`suite`), or, with none known (a golden case's replay), the test's own.
fn per_process(
    exe: &str,
    frames: &[FrameKey],
    started: &[&ChildEvidence],
    suite: &SuiteProcesses,
) -> PerProcess {
    let objects = |lost: &Lost| lost.of(frames).iter().map(|&(_, n)| n).sum::<u64>();
    let of_run = suite.of(exe);
    let (counts, tests): (Vec<u64>, BTreeSet<&str>) = if of_run.is_empty() {
        let own = started.iter().filter_map(|c| c.lost.as_ref());
        (own.map(objects).collect(), BTreeSet::from(["this test"]))
    } else {
        (
            of_run.iter().map(|p| objects(&p.lost)).collect(),
            of_run.iter().map(|p| p.test.as_str()).collect(),
        )
    };
    let Some(&first) = counts.first() else {
        return PerProcess::Differs;
    };
    if first == 0 || counts.iter().any(|&n| n != first) {
        return PerProcess::Differs;
    }
    match tests.len() {
        0 | 1 => PerProcess::SameFromOneTest {
            objects: first,
            processes: counts.len(),
        },
        tests => PerProcess::OnceEach {
            objects: first,
            processes: counts.len(),
            tests,
        },
    }
}

/// Why a child's lost stack is not a leak: the same loss in every process.
fn once_each(name: &str, objects: u64, processes: usize, tests: usize) -> String {
    format!(
        "lost once by every process of `{name}`, whatever it was asked: {} in each of the {processes} processes that {tests} tests started, not more with more work (a loss at its start-up)",
        objects_in_words(objects)
    )
}

/// Why a loss the same in every process of one test is still a leak.
fn alone(objects: u64, processes: usize) -> String {
    match processes {
        1 => "one process, started by this test alone: a loss once per process cannot be told from one that grows with its work".to_string(),
        n => format!(
            "the same {} in each of the {n} processes, all started by this test: a loss once per process cannot be told from one that grows with the same work",
            objects_in_words(objects)
        ),
    }
}

fn objects_in_words(n: u64) -> String {
    crate::model::count_of(n, "object", "objects")
}

/// Why a child's lost stack is a leak: lost in every run of the test that started the
/// executable (`runs` of them).
fn reason(runs: usize) -> String {
    match runs {
        1 => "unreachable when it ended, in the one run of its test that started it".to_string(),
        n => format!(
            "unreachable when they ended, in each of the {n} runs of its test that started one"
        ),
    }
}

/// The runs (pass, run) in which processes of one executable ended and were scanned, each
/// with what they lost together.
fn scanned_runs(started: &[&ChildEvidence]) -> BTreeMap<(u32, u32), Lost> {
    let mut runs: BTreeMap<(u32, u32), Lost> = BTreeMap::new();
    for c in started.iter().filter(|c| c.checked) {
        let Some(lost) = &c.lost else { continue };
        let run = runs.entry((c.pass, c.run)).or_default();
        for (frames, sizes) in &lost.stacks {
            run.stacks
                .entry(frames.clone())
                .or_default()
                .extend(sizes.iter().copied());
        }
    }
    runs
}

/// The stacks every scanned run lost objects at, with what the first run lost there. A
/// process that left no scan counts for nothing either way.
fn lost_every_run(started: &[&ChildEvidence]) -> Vec<RetainedStack> {
    let runs = scanned_runs(started);
    let Some((_, first)) = runs.iter().next() else {
        return Vec::new();
    };
    let mut retained: Vec<RetainedStack> = first
        .stacks
        .iter()
        .filter(|(frames, _)| runs.values().all(|r| r.stacks.contains_key(*frames)))
        .map(|(frames, sizes)| RetainedStack {
            frames: frames.clone(),
            live: sizes
                .iter()
                .fold(Counts::default(), |c, &(size, n)| Counts {
                    objects: c.objects + n,
                    bytes: c.bytes + size * n,
                }),
            growth: None,
            reach: Some(Reach::Lost),
        })
        .collect();
    retained.sort_by(|a, b| {
        b.live
            .bytes
            .cmp(&a.live.bytes)
            .then(a.frames.cmp(&b.frames))
    });
    retained
}

/// What the report says of one executable's processes.
fn summary(exe: &str, started: &[&ChildEvidence]) -> ProcessReport {
    let checked = started.iter().any(|c| c.checked);
    let unscanned = started
        .iter()
        .filter(|c| c.checked && c.lost.is_none())
        .count();
    let why_not = if !checked {
        Some("not an executable of the build".to_string())
    } else if unscanned > 0 {
        Some(format!(
            "{unscanned} of them left no scan when they ended (killed by a signal the tool does not ask them to scan before, such as `SIGHUP` when their terminal closed; crashed; or did not answer when asked for one before they were stopped): what {} left is not known",
            if unscanned == 1 { "it" } else { "they" }
        ))
    } else {
        None
    };
    ProcessReport {
        name: file_name(exe).to_string(),
        exe: exe.to_string(),
        started: started.len() as u64,
        checked,
        scanned: started
            .iter()
            .filter(|c| c.checked && c.lost.is_some())
            .count() as u64,
        not_checked: why_not,
    }
}

/// The file name of an executable's path.
fn file_name(exe: &str) -> &str {
    exe.rsplit('/').next().unwrap_or(exe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::symbols::Replay;

    fn key(offset: u64) -> Vec<FrameKey> {
        vec![FrameKey {
            object: "/w/target/debug/wc2".into(),
            file_offset: offset,
        }]
    }

    fn child(run: u32, lost: Option<&[(u64, u64, u64)]>) -> ChildEvidence {
        ChildEvidence {
            exe: "/w/target/debug/wc2".into(),
            run,
            pass: 0,
            checked: true,
            lost: lost.map(|stacks| Lost {
                stacks: stacks
                    .iter()
                    .map(|&(at, size, n)| (key(at), vec![(size, n)]))
                    .collect(),
            }),
        }
    }

    #[test]
    fn a_stack_lost_in_every_run_is_a_leak_of_the_test_named_by_its_process() {
        // Run 0 loses 200 objects at 0x10 and one at 0x20; run 1 loses 200 at 0x10 only.
        let children = [
            child(0, Some(&[(0x10, 32, 200), (0x20, 64, 1)])),
            child(1, Some(&[(0x10, 32, 200)])),
            ChildEvidence {
                exe: "/bin/sh".into(),
                run: 0,
                pass: 0,
                checked: false,
                lost: None,
            },
        ];
        let retained = lost_every_run(&children.iter().take(2).collect::<Vec<_>>());
        assert_eq!(retained.len(), 1);
        assert_eq!(retained[0].frames, key(0x10));
        assert_eq!(
            retained[0].live,
            Counts {
                objects: 200,
                bytes: 6400
            }
        );
        let effective = crate::config::Config::default()
            .effective("t", &crate::config::SettingsLayer::default());
        let policy = Policy::threshold(&effective);
        let mut symbols = Replay::new(Default::default());
        let found = judge(&children, SuiteProcesses::none(), &mut symbols, &policy);
        assert_eq!(found.stacks.len(), 1);
        let stack = &found.stacks[0];
        assert_eq!(stack.process.as_deref(), Some("wc2"));
        assert_eq!((stack.objects, stack.bytes), (200, 6400));
        assert!(stack.fails);
        let names: Vec<(&str, bool, u64)> = found
            .processes
            .iter()
            .map(|p| (p.name.as_str(), p.checked, p.started))
            .collect();
        assert_eq!(names, [("sh", false, 1), ("wc2", true, 2)]);
        assert_eq!(
            found.processes[0].not_checked.as_deref(),
            Some("not an executable of the build")
        );
        assert_eq!(found.processes[1].not_checked, None);
    }

    /// A run's processes of `wc2`, each test's losing `n` objects at 0x10 in each of its
    /// two runs.
    fn run_of(tests: &[(&str, u64)]) -> SuiteProcesses {
        let mut suite = SuiteProcesses::default();
        for &(test, n) in tests {
            suite.add(
                test,
                vec![
                    child(0, Some(&[(0x10, 32, n)])),
                    child(1, Some(&[(0x10, 32, n)])),
                ],
            );
        }
        suite
    }

    fn judged(own: u64, suite: &SuiteProcesses, one_time_fails: bool) -> StackReport {
        let mut effective = crate::config::Config::default()
            .effective("t", &crate::config::SettingsLayer::default());
        effective.one_time_fails = one_time_fails;
        let children = [
            child(0, Some(&[(0x10, 32, own)])),
            child(1, Some(&[(0x10, 32, own)])),
        ];
        let mut symbols = Replay::new(Default::default());
        let found = judge(
            &children,
            suite,
            &mut symbols,
            &Policy::threshold(&effective),
        );
        assert_eq!(found.stacks.len(), 1, "{:?}", found.stacks);
        found.stacks.into_iter().next().unwrap()
    }

    #[test]
    fn a_loss_the_same_in_every_process_that_several_tests_started_is_once_per_process() {
        let suite = run_of(&[("a", 8), ("b", 8), ("c", 8)]);
        let stack = judged(8, &suite, false);
        assert_eq!(stack.kind, crate::model::StackKind::OneTime);
        assert!(!stack.fails);
        assert_eq!(
            stack.reason.as_deref(),
            Some("lost once by every process of `wc2`, whatever it was asked: 8 objects in each of the 6 processes that 3 tests started, not more with more work (a loss at its start-up)")
        );
        // Listed, and failing only when one-time memory is asked to fail.
        assert!(judged(8, &suite, true).fails);
    }

    #[test]
    fn a_loss_that_differs_from_process_to_process_is_a_leak() {
        // More requests, more lost: the same test's processes, or another test's, lost more.
        let suite = run_of(&[("a", 1), ("b", 5), ("c", 20)]);
        let stack = judged(5, &suite, false);
        assert_eq!(stack.kind, crate::model::StackKind::Leak);
        assert!(stack.fails);
        assert_eq!(
            stack.reason.as_deref(),
            Some("unreachable when they ended, in each of the 2 runs of its test that started one")
        );
        // A process that lost nothing there is a process whose loss differs too.
        assert_eq!(
            judged(200, &run_of(&[("keeps", 200), ("counts", 0)]), false).kind,
            crate::model::StackKind::Leak
        );
    }

    #[test]
    fn a_loss_the_same_in_every_process_of_one_test_cannot_be_told_from_growth() {
        for suite in [run_of(&[("only", 50)]), SuiteProcesses::default()] {
            let stack = judged(50, &suite, false);
            assert_eq!(stack.kind, crate::model::StackKind::Leak);
            assert!(stack.fails);
            assert!(
                stack.reason.as_deref().is_some_and(|r| r.ends_with(
                    "; the same 50 objects in each of the 2 processes, all started by this test: a loss once per process cannot be told from one that grows with the same work"
                )),
                "{:?}",
                stack.reason
            );
        }
    }

    #[test]
    fn a_process_that_did_not_exit_is_said_and_counts_for_no_run() {
        let children = [child(0, Some(&[(0x10, 32, 1)])), child(1, None)];
        let effective = crate::config::Config::default()
            .effective("t", &crate::config::SettingsLayer::default());
        let mut symbols = Replay::new(Default::default());
        let found = judge(
            &children,
            SuiteProcesses::none(),
            &mut symbols,
            &Policy::threshold(&effective),
        );
        // The one run scanned lost it.
        assert_eq!(found.stacks.len(), 1);
        assert!(found.processes[0]
            .not_checked
            .as_deref()
            .is_some_and(|w| w.starts_with("1 of them left no scan when they ended")));
        // Nothing lost: nothing to report.
        let clean = [child(0, Some(&[])), child(1, Some(&[]))];
        assert!(judge(
            &clean,
            SuiteProcesses::none(),
            &mut symbols,
            &Policy::threshold(&effective)
        )
        .stacks
        .is_empty());
    }
}
