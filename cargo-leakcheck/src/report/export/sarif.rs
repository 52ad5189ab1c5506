//! SARIF 2.1.0 (`--sarif FILE`, `[output] sarif`), which GitHub code scanning, GitLab and
//! editors read: one result per place the run fails at, at the allocating line in the
//! repository, with what grew there per run and who holds it. Only what fails the run is a
//! result (under `--fail-on new`, the base run's leaks are not), each with a fingerprint of
//! its test and line so that a code scanning alert follows the leak from run to run.

use super::{Export, Exporter, FileOutput};
use crate::analysis::frames::{in_repo, repo_line};
use crate::model::Verdict;
use crate::model::{human_bytes, GrowthReport, Report, StackReport, TestReport};
use crate::report::text::{held_phrase, unreachable_text};
use serde_json::{json, Value};
use std::path::Path;

/// SARIF 2.1.0 (see the module's documentation).
pub struct Sarif;

impl Exporter for Sarif {
    fn name(&self) -> &'static str {
        "sarif"
    }

    fn file(&self) -> Option<FileOutput> {
        Some(FileOutput {
            format: "SARIF 2.1.0",
            holds: "for GitHub code scanning, GitLab and editors, a result per leaking stack at its allocating line",
        })
    }

    fn render(&self, run: &Export) -> Option<String> {
        let mut text = serde_json::to_string_pretty(&document(run.report, &run.to.root)).ok()?;
        text.push('\n');
        Some(text)
    }
}

/// The rules a result can break, in `ruleIndex` order.
const RULES: &[(&str, &str, &str)] = &[
    (
        "leak",
        "MemoryLeak",
        "Memory allocated here by a test grows on every run of it and is never freed.",
    ),
    (
        "collection-growth",
        "CollectionGrowth",
        "A collection grows on every run of a test without its allocation growing.",
    ),
    (
        "service-growth",
        "MemoryGrowth",
        "Memory allocated here kept growing over the later half of a benchmark's or a service's run.",
    ),
    (
        "unsettled",
        "Unjudged",
        "A test could not be judged, and the configuration makes that fail the run.",
    ),
];

fn document(report: &Report, root: &Path) -> Value {
    let mut results = Vec::new();
    for t in report.tests.iter().filter(|t| report.fails(t)) {
        test_results(t, root, &mut results);
    }
    for b in report.benches.iter().filter(|b| b.verdict == Verdict::Leak) {
        bench_results(b, root, &mut results);
    }
    let rules: Vec<Value> = (RULES.iter())
        .map(|(id, name, text)| {
            json!({
                "id": id,
                "name": name,
                "shortDescription": {"text": text},
                "defaultConfiguration": {"level": "error"},
            })
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "cargo-leakcheck",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "originalUriBaseIds": {"SRCROOT": {"uri": directory_uri(root)}},
            "results": results,
        }],
    })
}

/// A failing test's results: each failing stack, each growing collection, or why it was
/// not judged.
fn test_results(t: &TestReport, root: &Path, out: &mut Vec<Value>) {
    let test = format!("{} {}", t.binary, t.name);
    if t.verdict == Verdict::Unsettled {
        let why = t.message.as_deref().unwrap_or("it could not be judged");
        let text =
            format!("`{test}` was not judged: {why}; `unsettled-fails` makes that fail the run");
        out.push(result("unsettled", &text, None, &test));
        return;
    }
    for st in t.shown_stacks(t.failing_stacks(), usize::MAX) {
        let text = format!(
            "{} in {} object(s) allocated here by `{test}` and never freed{}{}",
            human_bytes(st.bytes),
            st.objects,
            per_run(st),
            holder(st, root)
        );
        // Two stacks can start at one line: the fingerprint tells them apart by their frames.
        let stack: Vec<&str> = st.frames.iter().map(|f| f.function.as_str()).collect();
        let subject = format!("{test}\n{}", stack.join("\n"));
        out.push(result("leak", &text, repo_line(&st.frames, root), &subject));
    }
    for c in t.collections.iter().filter(|c| c.fails) {
        let at = (c.collection.file.as_deref()).zip(c.collection.line);
        let at = at.and_then(|(file, line)| in_repo(file, root).map(|f| (f, line)));
        let text = format!(
            "{} (in `{test}`)",
            crate::report::text::collection_text(c, root)
        );
        out.push(result("collection-growth", &text, at, &test));
    }
}

/// A growing bench's or service's results: each flagged stack and collection.
fn bench_results(b: &GrowthReport, root: &Path, out: &mut Vec<Value>) {
    for st in b.stacks.iter().filter(|s| s.flagged) {
        let held = (st.retained_by.as_ref())
            .map(|h| format!(", {}", held_phrase(h, root)))
            .unwrap_or_default();
        let text = format!(
            "memory allocated here grew by {} ({}/s) over the later half of {}'s run{held}",
            human_bytes(st.growth_bytes.max(0) as u64),
            human_bytes(st.growth_bytes_per_second.max(0.0) as u64),
            b.name
        );
        out.push(result(
            "service-growth",
            &text,
            repo_line(&st.frames, root),
            &b.name,
        ));
    }
    for c in b.collections.iter().filter(|c| c.flagged) {
        let at = (c.collection.file.as_deref()).zip(c.collection.line);
        let at = at.and_then(|(file, line)| in_repo(file, root).map(|f| (f, line)));
        out.push(result(
            "collection-growth",
            &crate::report::text::bench_collection_text(c, root),
            at,
            &b.name,
        ));
    }
}

/// `, +8.0 KiB per run`: what the stack grew by in the last run that counted.
fn per_run(st: &StackReport) -> String {
    match st.growth_per_run.last() {
        Some(g) if g.bytes > 0 => format!(", +{} per run", human_bytes(g.bytes as u64)),
        _ => String::new(),
    }
}

/// `; held by static `app::REGISTRY``, or how its objects are lost.
fn holder(st: &StackReport, root: &Path) -> String {
    let held = st.retained_by.as_ref().map(|h| held_phrase(h, root));
    match held.or_else(|| unreachable_text(st, root)) {
        Some(h) => format!("; {h}"),
        None => String::new(),
    }
}

/// One result of `rule`, at `at` when the place is in the repository; `subject` (the test
/// or service, and what grew there) and the place make its fingerprint.
fn result(rule: &str, text: &str, at: Option<(String, u32)>, subject: &str) -> Value {
    let index = RULES.iter().position(|(id, ..)| *id == rule).unwrap_or(0);
    let line = at.as_ref().map_or(0, |(_, line)| *line);
    let locations: Vec<Value> = (at.into_iter())
        .map(|(file, line)| {
            json!({"physicalLocation": {
                "artifactLocation": {"uri": file, "uriBaseId": "SRCROOT"},
                "region": {"startLine": line},
            }})
        })
        .collect();
    json!({
        "ruleId": rule,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": text},
        "locations": locations,
        "partialFingerprints": {
            "leakcheck/v1": format!("{:016x}", crate::fnv::Fnv::new().bytes(format!("{rule}\n{subject}\n{line}").as_bytes()).finish()),
        },
    })
}

/// `file:///path/to/root/`: the base the results' paths are relative to.
fn directory_uri(root: &Path) -> String {
    let mut uri = String::from("file://");
    for c in root.display().to_string().chars() {
        match c {
            ' ' => uri.push_str("%20"),
            '%' => uri.push_str("%25"),
            '#' => uri.push_str("%23"),
            '?' => uri.push_str("%3F"),
            c => uri.push(c),
        }
    }
    if !uri.ends_with('/') {
        uri.push('/');
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ReportSettings;
    use crate::report::export::{Destination, RunFacts};
    use std::path::PathBuf;

    fn testdata() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata")
    }

    /// A report of the golden cases' results (tests and services), every test failing.
    fn golden_report(cases: &[&str]) -> Report {
        let mut report = Report::new(ReportSettings::default());
        for case in cases {
            let text =
                std::fs::read_to_string(testdata().join("golden").join(case).join("expected.json"))
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
            if case.starts_with("service-") || case.starts_with("bench-") {
                report.benches.push(serde_json::from_str(&text).unwrap());
            } else {
                let mut t: TestReport = serde_json::from_str(&text).unwrap();
                t.unsettled_fails = true;
                report.tests.push(t);
            }
        }
        report
    }

    fn render(report: &Report, root: &str) -> Value {
        let to = Destination {
            out_dir: PathBuf::from("/out"),
            shown: PathBuf::from("out"),
            root: PathBuf::from(root),
        };
        let facts = RunFacts::default();
        let run = Export {
            report,
            to: &to,
            facts: &facts,
        };
        serde_json::from_str(&Sarif.render(&run).unwrap()).unwrap()
    }

    const CASES: &[&str] = &[
        "leak",
        "leak-held-by-static",
        "leak-collection",
        "leak-unreachable",
        "unsettled",
        "clean-settled",
        "service-growing-held",
        "service-collection-growing",
        "bench-growing",
    ];

    #[test]
    fn the_document_is_valid_sarif_2_1_0() {
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(testdata().join("sarif-schema-2.1.0.json")).unwrap(),
        )
        .unwrap();
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.enable_format_assertions();
        let at = "file:///sarif-schema-2.1.0.json";
        compiler.add_resource(at, schema).unwrap();
        let index = compiler.compile(at, &mut schemas).unwrap();
        // The fixtures' root, so that the golden stacks' files are in the repository.
        let root = golden_root();
        assert!(CASES.len() > 8);
        let document = render(&golden_report(CASES), &root);
        if let Err(e) = schemas.validate(&document, index) {
            panic!("not SARIF 2.1.0: {e:#}\n{document:#}");
        }
        // An empty run is a valid document too.
        let empty = render(&Report::new(ReportSettings::default()), "/ws");
        schemas.validate(&empty, index).unwrap();
        assert_eq!(empty["runs"][0]["results"], json!([]));
    }

    /// Where the golden cases' fixtures were when their evidence was captured.
    fn golden_root() -> String {
        "/tmp/gsrc".to_string()
    }

    #[test]
    fn each_leaking_stack_is_a_result_at_its_line_with_bytes_per_run_and_holder() {
        let document = render(
            &golden_report(&["leak", "leak-held-by-static"]),
            &golden_root(),
        );
        let results = document["runs"][0]["results"].as_array().unwrap();
        let leak = results
            .iter()
            .find(|r| {
                r["message"]["text"]
                    .as_str()
                    .unwrap()
                    .contains("tests::forget_vec")
            })
            .expect("forget_vec's stack");
        assert_eq!(leak["ruleId"], "leak");
        let place = &leak["locations"][0]["physicalLocation"];
        assert_eq!(place["artifactLocation"]["uri"], "leaky/src/lib.rs");
        assert_eq!(place["artifactLocation"]["uriBaseId"], "SRCROOT");
        assert!(place["region"]["startLine"].as_u64().unwrap() > 0);
        let text = leak["message"]["text"].as_str().unwrap();
        assert!(
            text.starts_with("8.0 KiB in 1 object(s) allocated here by `leaky tests::forget_vec`"),
            "{text}"
        );
        assert!(text.contains("+8.0 KiB per run"), "{text}");
        let held = results
            .iter()
            .map(|r| r["message"]["text"].as_str().unwrap())
            .find(|t| t.contains("registry_grows_on_every_run"))
            .expect("the registry's stack");
        assert!(held.contains("; held by static "), "{held}");
    }

    #[test]
    fn a_leak_the_base_run_had_is_no_result_under_fail_on_new() {
        let mut report = golden_report(&["leak"]);
        let base = report.clone();
        report.baseline = Some(crate::analysis::baseline::compare_tests(
            &base,
            &report,
            "base.json",
            true,
        ));
        let document = render(&report, &golden_root());
        assert_eq!(document["runs"][0]["results"], json!([]));
        report.baseline.as_mut().unwrap().fail_on_new = false;
        let document = render(&report, &golden_root());
        assert!(!document["runs"][0]["results"]
            .as_array()
            .unwrap()
            .is_empty());
    }
}
