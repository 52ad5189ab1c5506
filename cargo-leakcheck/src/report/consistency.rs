//! The report never contradicts itself: every golden test case is judged again from its
//! evidence (not from its `expected.json`, so a rule put back wrong is caught before any
//! blessing), and its report and every renderer's text of it are held to the rules below.

use crate::judging::capture::golden;
use crate::model::{Report, StackKind, TestReport, Unreachable, Verdict};
use crate::report::rendered::{renderers, CAPTURED_AT, ROOT};
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden")
}

/// The case's test judged again, its crate's files under [`ROOT`] as the renderers'
/// expected texts have them.
fn judged_again(dir: &Path) -> TestReport {
    let report = golden::replay(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut text = serde_json::to_string(&report).unwrap();
    for (then, now) in CAPTURED_AT {
        text = text.replace(&format!("\"{then}"), &format!("\"{now}"));
    }
    serde_json::from_str(&text).unwrap()
}

/// What the report says of its stacks, each fact once: the rules that do not need text.
fn report_rules(t: &TestReport) -> Vec<String> {
    let mut broken = Vec::new();
    let leaks: Vec<_> = t
        .stacks
        .iter()
        .filter(|s| s.kind == StackKind::Leak)
        .collect();
    if t.verdict == Verdict::Leak && !leaks.is_empty() && t.retained_bytes == 0 {
        broken.push("a leak of 0 B".to_owned());
    }
    for s in &leaks {
        if s.bytes == 0 || s.objects == 0 {
            broken.push(format!(
                "a leaked stack of {} B in {} objects",
                s.bytes, s.objects
            ));
        }
    }
    for s in &t.stacks {
        if s.unreachable.is_some() && s.retained_by.is_some() {
            broken.push("a stack both unreachable and held".to_owned());
        }
        let held = serde_json::to_string(&s.retained_by).unwrap();
        if held.contains("leakcheck_runtime") {
            broken.push(format!("a holder in the tool's runtime: {held}"));
        }
    }
    broken
}

/// Words that refer to a stack that explains them, and the words that stack is shown by.
const REFERENCES: &[(&str, &[&str])] = &[
    ("in the reference cycle above", &["a reference cycle of"]),
    ("shown for another stack", &["a reference cycle of"]),
    (
        "inside a lost structure",
        &["a reference cycle of", "no cycle: nothing points to"],
    ),
];

/// What a renderer's text refers to is in the same text: a cycle said to be above, or the
/// structure whose stack says how it was lost.
fn text_rules(text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for (referring, shown_by) in REFERENCES {
        let Some(at) = text.find(referring) else {
            continue;
        };
        let shown = shown_by.iter().any(|w| text.contains(w));
        let above =
            !referring.ends_with("above") || shown_by.iter().any(|w| text[..at].contains(w));
        if !shown || !above {
            broken.push(format!("\"{referring}\" with nothing it refers to"));
        }
    }
    if text.contains("leakcheck_runtime::") {
        broken.push("a frame of the tool's runtime".to_owned());
    }
    broken
}

#[test]
fn no_golden_case_contradicts_itself_in_its_report_or_any_renderer() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.json").is_file())
        .collect();
    cases.sort();
    assert!(cases.len() >= 20, "{cases:?}");
    let mut broken = Vec::new();
    for dir in &cases {
        let case = dir.file_name().unwrap().to_string_lossy().into_owned();
        let test = judged_again(dir);
        broken.extend(
            report_rules(&test)
                .into_iter()
                .map(|b| format!("{case}: {b}")),
        );
        let mut report = Report::example();
        report.settings.stack_threshold = test.stack_threshold;
        report.tests.push(test);
        for (renderer, _, render) in renderers() {
            let text = render(&report, Path::new(ROOT));
            broken.extend(
                text_rules(&text)
                    .into_iter()
                    .map(|b| format!("{case}, {renderer}: {b}")),
            );
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_rules_see_each_contradiction() {
    let mut t = TestReport::example();
    t.verdict = Verdict::Leak;
    let mut lost = crate::model::StackReport::example(StackKind::Leak, 0);
    lost.objects = 0;
    t.stacks = vec![lost];
    assert_eq!(report_rules(&t).len(), 2, "{:?}", report_rules(&t));
    let mut both = crate::model::StackReport::example(StackKind::Leak, 64);
    both.unreachable = Some(Unreachable::NoCycle);
    both.retained_by = Some(crate::model::RetainedBy {
        root_kind: crate::model::RootKind::Stack,
        root: "the stack of a thread".into(),
        symbol: Some("leakcheck_runtime::clock::futex_call".into()),
        thread: None,
        frame: None,
        definition: None,
        via: Vec::new(),
        skipped: 0,
        task: None,
        holder: None,
    });
    t.stacks = vec![both];
    t.retained_bytes = 64;
    assert_eq!(report_rules(&t).len(), 2, "{:?}", report_rules(&t));
    assert_eq!(
        text_rules("unreachable: only other lost objects point to these (inside a lost structure)\nunreachable: in the reference cycle above").len(),
        2
    );
    assert!(text_rules(
        "unreachable: a reference cycle of 2 objects …\nunreachable: in the reference cycle above"
    )
    .is_empty());
}
