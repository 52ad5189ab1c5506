//! The processes a test started, judged with it. A process of the build's own executables
//! (a binary under test, started through `CARGO_BIN_EXE_*`) is tracked and scanned at its
//! exit: what nothing reaches then can never be freed. What it still reaches is no leak (the
//! process is gone). A stack is a leak of the test when the processes of one executable lost
//! objects there in every run of the test that started one; it is reported under the test,
//! with the executable named. Processes of other executables are listed, never judged.

use crate::analysis::stacks::{self, Policy, Reach, RetainedStack};
use crate::evidence::normalized::FrameKey;
use crate::evidence::profile::Counts;
use crate::evidence::symbols::Symbols;
use crate::evidence::test_run::ChildEvidence;
use crate::evidence::unreached::Lost;
use crate::model::{ProcessReport, StackReport};
use std::collections::{BTreeMap, HashMap};

/// What the processes a test started add to its report.
#[derive(Debug, Default)]
pub struct Findings {
    /// Stacks lost in every run, judged (thresholds, suppressions).
    pub stacks: Vec<StackReport>,
    /// Every executable the test's processes ran, checked or not.
    pub processes: Vec<ProcessReport>,
}

/// Judges the processes a test started.
pub fn judge(children: &[ChildEvidence], symbols: &mut dyn Symbols, policy: &Policy) -> Findings {
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
        let retained = lost_every_run(&started);
        let held = HashMap::<Vec<FrameKey>, crate::evidence::paths::HeldPath>::new();
        let name = file_name(exe);
        for mut stack in stacks::judge_stacks(&retained, exe, symbols, policy, None, &held) {
            if stack.kind != crate::model::StackKind::Leak {
                continue;
            }
            stack.process = Some(name.to_string());
            stack.reason = Some(reason(name, scanned_runs(&started).len()));
            findings.stacks.push(stack);
        }
    }
    findings
}

/// Why a child's lost stack is a leak: lost in every run of the test that started the
/// executable (`runs` of them).
fn reason(name: &str, runs: usize) -> String {
    match runs {
        1 => format!("unreachable when the process `{name}` ended, in the one run of its test that started it"),
        n => format!("unreachable when the processes `{name}` ended, in each of the {n} runs of its test that started one"),
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
            "{unscanned} of them left no scan when they ended (crashed, or did not answer when asked for one before they were stopped): what {} left is not known",
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
        let found = judge(&children, &mut symbols, &policy);
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

    #[test]
    fn a_process_that_did_not_exit_is_said_and_counts_for_no_run() {
        let children = [child(0, Some(&[(0x10, 32, 1)])), child(1, None)];
        let effective = crate::config::Config::default()
            .effective("t", &crate::config::SettingsLayer::default());
        let mut symbols = Replay::new(Default::default());
        let found = judge(&children, &mut symbols, &Policy::threshold(&effective));
        // The one run scanned lost it.
        assert_eq!(found.stacks.len(), 1);
        assert!(found.processes[0]
            .not_checked
            .as_deref()
            .is_some_and(|w| w.starts_with("1 of them left no scan when they ended")));
        // Nothing lost: nothing to report.
        let clean = [child(0, Some(&[])), child(1, Some(&[]))];
        assert!(judge(&clean, &mut symbols, &Policy::threshold(&effective))
            .stacks
            .is_empty());
    }
}
