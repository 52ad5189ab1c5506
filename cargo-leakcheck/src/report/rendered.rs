//! Every text renderer's output for every golden case (`testdata/golden/<case>`), compared
//! with `testdata/rendered/<renderer>/<case>.<ext>`; `LEAKCHECK_BLESS=1` rewrites them
//! (then review the diff). Each case's `expected.json` is put in a report of its own, its
//! crate's files moved under one workspace root that exists on no machine, so that no
//! renderer reads a source line here and every path is the same wherever the test runs.
//! A new renderer is one more row of [`renderers`].

use crate::model::{GrowthReport, Report, TestReport};
use crate::report::{bench, expected_text, export, github, html};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The workspace root every case is rendered from.
pub(super) const ROOT: &str = "/ws";

/// The output directory, as the summary shows it.
const OUT_DIR: &str = "target/leakcheck";

/// Where the cases' crates were when they were captured, and where they are under [`ROOT`];
/// the dependencies' sources move to a cargo home that exists on no machine either, so that
/// whether the capturing machine's registry cache still holds them changes nothing.
pub(super) const CAPTURED_AT: &[(&str, &str)] = &[
    ("/root/.cargo/registry/", "/ws-cargo-home/registry/"),
    ("/tmp/gsrc/", "/ws/"),
    ("/work/main/tests/fixtures/", "/ws/"),
    ("/tmp/wa/", "/ws/webapp/"),
    ("/tmp/wfx/", "/ws/webapp/"),
];

/// A renderer of the whole report as text, from the workspace root.
pub(super) type Render = Box<dyn Fn(&Report, &Path) -> String>;

/// Every text renderer: its name (the directory of its expected texts), their extension, and
/// the renderer. The summary and the outputs written to a file the user names (JUnit,
/// SARIF) are rendered by their exporters, every file exporter, so a new format is covered
/// by being registered.
pub(super) fn renderers() -> Vec<(&'static str, &'static str, Render)> {
    let summary = (export::EXPORTERS.iter().copied())
        .find(|e| e.name() == "summary")
        .unwrap();
    let mut all: Vec<(&'static str, &'static str, Render)> = vec![
        (
            "summary",
            "txt",
            Box::new(move |r, root| exported(summary, r, root)),
        ),
        (
            "github-annotations",
            "txt",
            Box::new(github::annotations_text),
        ),
        ("github-summary", "md", Box::new(step_summary)),
        ("page-main", "html", Box::new(page_main)),
    ];
    for e in export::file_exporters() {
        let ext = match e.name() {
            "junit" => "xml",
            _ => "json",
        };
        all.push((e.name(), ext, Box::new(move |r, root| exported(e, r, root))));
    }
    all
}

/// What an exporter writes for the report, nothing skipped, no durations, no cost line.
fn exported(e: &dyn export::Exporter, report: &Report, root: &Path) -> String {
    let to = export::Destination {
        out_dir: PathBuf::from(OUT_DIR),
        shown: PathBuf::from(OUT_DIR),
        root: root.to_path_buf(),
    };
    let facts = export::RunFacts::default();
    let run = export::Export {
        report,
        to: &to,
        facts: &facts,
    };
    e.render(&run).unwrap_or_default()
}

/// The job summary appended to `$GITHUB_STEP_SUMMARY`.
fn step_summary(report: &Report, root: &Path) -> String {
    github::summary(report, root, Path::new(OUT_DIR))
}

/// The page's `<main>`, no durations (the command and the date are outside it).
fn page_main(report: &Report, root: &Path) -> String {
    let page = html::Page {
        command: "cargo leakcheck test",
        date: "2025-01-01 00:00 UTC".into(),
        durations: &HashMap::new(),
    };
    html::main_element(report, &page, root)
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden")
}

/// Every golden case's name, sorted.
fn cases() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A report holding the case's one test, bench or service, its crate's files under
/// [`ROOT`]; a bench's or service's artifacts are written (to `artifacts`) as a run writes
/// them, so that the renderers name them.
fn report_of(case: &str, artifacts: &Path) -> Report {
    let dir = corpus().join(case);
    let mut text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    for (then, now) in CAPTURED_AT {
        text = text.replace(&format!("\"{then}"), &format!("\"{now}"));
    }
    let mut report = Report::example();
    if dir.join("growth.json").is_file() {
        let mut bench: GrowthReport = serde_json::from_str(&text).unwrap();
        bench::write_artifacts(&mut bench, artifacts, Path::new(ROOT), &mut report.notes);
        report.benches.push(bench);
    } else {
        let test: TestReport = serde_json::from_str(&text).unwrap();
        report.settings.stack_threshold = test.stack_threshold;
        report.tests.push(test);
    }
    report
}

#[test]
fn every_renderer_shows_every_golden_case_as_expected() {
    assert!(
        !Path::new(ROOT).exists(),
        "{ROOT} must not exist: the renderers would read source lines from it"
    );
    assert!(!Path::new("/ws-cargo-home").exists());
    let cases = cases();
    assert!(cases.len() >= 20, "{cases:?}");
    let artifacts = std::env::temp_dir().join(format!("leakcheck-rendered-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut compared = 0;
    for case in &cases {
        let report = report_of(case, &artifacts);
        for (renderer, ext, render) in renderers() {
            let text = render(&report, Path::new(ROOT));
            assert!(
                !text.contains("/tmp/") && !text.contains("/work/"),
                "{renderer} of {case} shows a path of the machine it was captured on:\n{text}"
            );
            compared += 1;
            if let Err(e) = expected_text::check(&format!("{renderer}/{case}.{ext}"), &text) {
                failures.push(e);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&artifacts);
    assert!(
        failures.is_empty(),
        "{} of {compared} rendered texts differ:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_expected_text_of_a_renderer_is_of_a_golden_case() {
    let cases: BTreeSet<String> = cases().into_iter().collect();
    let mut strays = Vec::new();
    for (renderer, ext, _) in renderers() {
        let Ok(files) = std::fs::read_dir(expected_text::dir().join(renderer)) else {
            continue;
        };
        for path in files.map(|e| e.unwrap().path()) {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let case = name.strip_suffix(&format!(".{ext}"));
            if case.is_some_and(|c| cases.contains(c)) {
                continue;
            }
            match expected_text::blessing() {
                true => std::fs::remove_file(&path).unwrap(),
                false => strays.push(path.display().to_string()),
            }
        }
    }
    assert!(
        strays.is_empty(),
        "expected texts of no golden case (a case renamed or removed? LEAKCHECK_BLESS=1 deletes them):\n{}",
        strays.join("\n")
    );
}
