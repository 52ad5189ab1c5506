//! A suite split with `--partition` and merged back with `cargo leakcheck merge`: every
//! test is checked by exactly one shard, the merged report is the unsplit run's, and inputs
//! that are not one run are refused with exit 2.

use crate::expected::{Expected, EXPECTED};
use crate::harness::{copy_fixture, copy_tree, run_fixture, run_fresh, scratch, tool, Run};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

const LEAKY: &str = "tests/fixtures/leaky";
const LIFETIME: &str = "tests/fixtures/lifetime";

/// (binary, test) of every test in a report.
fn names(report: &Value) -> BTreeSet<(String, String)> {
    crate::harness::verdicts_of(report).into_keys().collect()
}

/// Runs every shard of `split` (e.g. `slice` and 2) on a fixture, one after another in
/// one target directory, keeping each shard's output directory: `<scratch>/shards/…/<m>`.
fn run_shards(fixture: &str, kind: &str, total: u32) -> Vec<(Run, PathBuf)> {
    let tag = format!("{}--{kind}-{total}", fixture.replace('/', "_"));
    (1..=total)
        .map(|m| {
            let partition = format!("{kind}:{m}/{total}");
            let run = run_fresh(
                fixture,
                &["--partition", &partition],
                &format!("{tag}-shards"),
            );
            let kept = scratch().join("shards").join(&tag).join(m.to_string());
            let _ = std::fs::remove_dir_all(&kept);
            copy_tree(&run.out_dir, &kept);
            (run, kept)
        })
        .collect()
}

fn merge(inputs: &[&Path], output: &Path) -> Output {
    merge_with(inputs, output, &[])
}

fn merge_with(inputs: &[&Path], output: &Path, extra: &[&str]) -> Output {
    tool()
        .arg("merge")
        .args(inputs)
        .arg("--output-dir")
        .arg(output)
        .args(extra)
        .output()
        .expect("cargo-leakcheck runs")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every test is in one shard, the counts add up, and the merged report.json is the
/// unsplit run's byte for byte (leaky's report is deterministic), flame graphs included.
#[test]
fn two_shards_merged_back_equal_the_unsplit_run() {
    let whole = run_fixture(LEAKY, &[]);
    let whole_text = std::fs::read_to_string(whole.out_dir.join("report.json")).unwrap();
    for kind in ["slice", "hash"] {
        let shards = run_shards(LEAKY, kind, 2);
        let mut seen = BTreeSet::new();
        for (m, (run, _)) in shards.iter().enumerate() {
            let report = run.report();
            assert_eq!(
                report["partition"],
                format!("{kind}:{}/2", m + 1),
                "{}",
                run.stderr
            );
            let mine = names(report);
            assert!(seen.is_disjoint(&mine), "{kind}: a test ran in two shards");
            seen.extend(mine);
            let own = report["tests"].as_array().unwrap().len() as u64
                + report["ignored"].as_u64().unwrap();
            let other = report["other_shards"].as_u64().unwrap_or(0);
            let all = whole.report()["tests"].as_array().unwrap().len() as u64
                + whole.report()["ignored"].as_u64().unwrap();
            assert_eq!(own + other, all, "{kind} shard {}", m + 1);
            assert!(
                run.stderr
                    .contains(&format!("Partition {kind}:{}/2: ", m + 1)),
                "{}",
                run.stderr
            );
        }
        assert_eq!(
            seen,
            names(whole.report()),
            "{kind}: the shards cover the suite"
        );

        let output = scratch().join("merged").join(kind);
        let _ = std::fs::remove_dir_all(&output);
        let dirs: Vec<&Path> = shards.iter().map(|(_, d)| d.as_path()).collect();
        let junit = scratch().join("merged").join(format!("{kind}-junit.xml"));
        let merged = merge_with(&dirs, &output, &["--junit", junit.to_str().unwrap()]);
        assert_eq!(merged.status.code(), Some(whole.code), "{}", text(&merged));
        // The merged JUnit has a testcase per test, leaks as failures.
        let xml = std::fs::read_to_string(&junit).unwrap();
        let leaks = whole.report()["tests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["verdict"] == "leak")
            .count();
        assert_eq!(
            xml.matches("<testcase ").count(),
            names(whole.report()).len()
        );
        assert_eq!(xml.matches("<failure type=\"leak\"").count(), leaks);
        let merged_text = std::fs::read_to_string(output.join("report.json")).unwrap();
        assert!(
            merged_text == whole_text,
            "{kind}: the merged report differs from the unsplit run's:\n{merged_text}"
        );
        let report: Value = serde_json::from_str(&merged_text).unwrap();
        for t in report["tests"].as_array().unwrap() {
            for artifact in ["flamegraph", "folded"] {
                if let Some(path) = t["artifacts"][artifact].as_str() {
                    assert!(output.join(path).is_file(), "{path} is not in the merge");
                }
            }
        }
        let summary = text(&merged);
        assert!(
            summary.contains("Merged 2 report(s)") && summary.contains(" Summary "),
            "{summary}"
        );
        // The page, merged where CI merges (in the checkout), is the unsplit run's.
        let in_checkout = tool()
            .arg("merge")
            .args(&dirs)
            .arg("--output-dir")
            .arg(&output)
            .current_dir(copy_fixture(LEAKY))
            .output()
            .unwrap();
        assert_eq!(
            in_checkout.status.code(),
            Some(whole.code),
            "{}",
            text(&in_checkout)
        );
        let page =
            |dir: &Path| same_content(&std::fs::read_to_string(dir.join("index.html")).unwrap());
        assert!(
            page(&output) == page(&whole.out_dir),
            "{kind}: the merged page differs from the unsplit run's"
        );
    }
}

/// A page without what differs between two runs of the same code: the header's date and
/// command, and the tests' times.
fn same_content(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(i) = rest
        .find("<p id=\"meta\">")
        .or_else(|| rest.find("<td class=\"num time\">"))
    {
        out.push_str(&rest[..i]);
        let close = if rest[i..].starts_with("<p") {
            "</p>"
        } else {
            "</td>"
        };
        let end = rest[i..].find(close).unwrap() + close.len();
        rest = &rest[i + end..];
    }
    out.push_str(rest);
    out
}

/// On a fixture with process-lifetime state and threads, three hashed shards merged give
/// the table's verdicts, and a merge of two of them says a shard is missing.
#[test]
fn three_shards_of_a_threaded_suite_give_the_table_verdicts() {
    let expected: BTreeSet<(String, String, String)> = EXPECTED
        .iter()
        .filter(|e: &&Expected| e.fixture == LIFETIME && !e.bench)
        .filter(|e| e.verdict != crate::expected::IGNORED)
        .map(|e| {
            (
                e.binary.to_string(),
                e.test.to_string(),
                e.verdict.to_string(),
            )
        })
        .collect();
    let shards = run_shards(LIFETIME, "hash", 3);
    let output = scratch().join("merged").join("lifetime-hash");
    let _ = std::fs::remove_dir_all(&output);
    let dirs: Vec<&Path> = shards.iter().map(|(_, d)| d.as_path()).collect();
    let merged = merge(&dirs, &output);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("report.json")).unwrap())
            .unwrap();
    let got: BTreeSet<(String, String, String)> = crate::harness::verdicts_of(&report)
        .into_iter()
        .map(|((binary, name), verdict)| (binary, name, verdict))
        .collect();
    assert_eq!(got, expected, "{}", text(&merged));
    assert!(report.get("partition").is_none());

    let partial = scratch().join("merged").join("lifetime-partial");
    let _ = std::fs::remove_dir_all(&partial);
    let merged = merge(&dirs[..2], &partial);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(partial.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["partition"], "hash:1+2/3", "{}", text(&merged));
    let third = shards[2].0.report();
    assert_eq!(
        report["other_shards"].as_u64().unwrap_or(0),
        third["tests"].as_array().unwrap().len() as u64 + third["ignored"].as_u64().unwrap(),
        "the missing shard's tests are counted"
    );
    assert!(text(&merged).contains("shard(s) 3 of hash:1+2/3 are not in this merge"));
}

/// Writes a report.json into a directory of its own under the scratch space.
fn report_dir(name: &str, report: &Value) -> PathBuf {
    let dir = scratch().join("bad-merges").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(report).unwrap(),
    )
    .unwrap();
    dir
}

/// Inputs that are not one run are refused with exit 2 and a message naming them.
#[test]
fn a_bad_merge_input_is_refused_with_exit_2() {
    let whole = run_fixture(LEAKY, &[]);
    let good = report_dir("good", whole.report());
    let out = scratch().join("bad-merges").join("out");

    let mut flipped = whole.report().clone();
    let t = &mut flipped["tests"][0];
    let name = t["name"].as_str().unwrap().to_string();
    t["verdict"] = if t["verdict"] == "leak" {
        "clean"
    } else {
        "leak"
    }
    .into();
    let flipped = report_dir("flipped", &flipped);
    let refused = merge(&[&good, &flipped], &out);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains(&name) && text(&refused).contains("different verdicts"),
        "{}",
        text(&refused)
    );
    assert!(
        !out.join("report.json").exists(),
        "nothing is written on a refusal"
    );

    let mut newer = whole.report().clone();
    newer["version"] = 2.into();
    let newer = report_dir("newer", &newer);
    let refused = merge(&[&good, &newer], &out);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("schema version 2"),
        "{}",
        text(&refused)
    );

    let mut other = whole.report().clone();
    other["settings"]["stack_threshold"] = 4096.into();
    let other = report_dir("settings", &other);
    let refused = merge(&[&good, &other], &out);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("stack threshold 4096 bytes"),
        "{}",
        text(&refused)
    );

    let missing = scratch().join("bad-merges").join("missing");
    let refused = merge(&[&good, &missing], &out);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("cannot read the report"),
        "{}",
        text(&refused)
    );

    // The output directory may not be an input's, nor hold other files.
    let refused = merge(&[&good], &good);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("holds one of the reports"),
        "{}",
        text(&refused)
    );
    let busy = scratch().join("bad-merges").join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), "mine").unwrap();
    let refused = merge(&[&good], &busy);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("is not empty"),
        "{}",
        text(&refused)
    );
    assert!(
        busy.join("notes.txt").is_file(),
        "the user's files are left alone"
    );

    // A bad partition is refused before anything is built.
    let run = run_fresh(LEAKY, &["--partition", "slice:3/2"], "leaky--bad-partition");
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("invalid partition `slice:3/2`"),
        "{}",
        run.stderr
    );
}
