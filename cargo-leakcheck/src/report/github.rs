//! GitHub Actions: an `::error` workflow command per allocating line of failing stacks
//! of the user's code (GitHub shows it on the pull request's diff), and a Markdown job
//! summary appended to `$GITHUB_STEP_SUMMARY`. On when `GITHUB_ACTIONS=true`, or asked for.

use crate::analysis::frames::{identifying_frame, repo_line};
use crate::model::{human_bytes, Change, Report, Verdict};
use std::fmt::Write;
use std::path::Path;

/// GitHub displays at most this many error annotations of a step; more are dropped.
pub const MAX_ANNOTATIONS: usize = 10;

/// Rows of the job summary's table at most (the summary must stay well under GitHub's
/// 1 MiB per step).
const MAX_SUMMARY_ROWS: usize = 200;

/// Whether to write GitHub's annotations and summary: `--annotations github|none`, else
/// when running in GitHub Actions.
pub fn enabled(flag: Option<&str>) -> bool {
    match flag {
        Some(mode) => mode == "github",
        None => std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true"),
    }
}

/// An allocating line of the repository that failing stacks start from.
struct Site {
    file: String,
    line: u32,
    /// The tests that leaked there (`binary name`), in the order met.
    tests: Vec<String>,
    bytes: u64,
    objects: u64,
    /// How its objects are lost (a reference cycle, nothing pointing to them).
    lost: Option<String>,
}

/// The workflow commands: one `::error` per allocating line in the repository (`repo_root`;
/// paths are relative to it) that failing stacks of leaking tests start from, naming every
/// test that leaked there and the total, at most [`MAX_ANNOTATIONS`], then a `::notice` with
/// how many were left out. One per line, because GitHub shows only ten per step and a line
/// several tests or stacks leak through is one place to fix.
pub fn annotations(report: &Report, repo_root: &Path) -> Vec<String> {
    let mut all: Vec<String> = leak_sites(report, repo_root)
        .iter()
        .map(site_annotation)
        .collect();
    all.extend(collection_annotations(report, repo_root));
    all.extend(bench_annotations(report, repo_root));
    all.extend(unsettled_annotations(report));
    let left_out = all.len().saturating_sub(MAX_ANNOTATIONS);
    all.truncate(MAX_ANNOTATIONS);
    if left_out > 0 {
        all.push(format!(
            "::notice title=cargo-leakcheck::{}",
            data(&format!(
                "{left_out} more leaking allocation site(s) or unjudged tests are not annotated (GitHub shows {MAX_ANNOTATIONS}); see the job summary and report.json"
            ))
        ));
    }
    all
}

/// The repository's lines that the failing stacks of tests whose leak fails the run start
/// from, in the order met, each with every test and stack through it.
fn leak_sites(report: &Report, repo_root: &Path) -> Vec<Site> {
    let mut sites: Vec<Site> = Vec::new();
    // Under `--fail-on new`, the base run's unchanged leaks are not this change's.
    let failing = |t: &&crate::model::TestReport| t.verdict == Verdict::Leak && report.fails(t);
    for t in report.tests.iter().filter(failing) {
        for st in t.shown_stacks(t.failing_stacks(), usize::MAX) {
            let Some((file, line)) = repo_line(&st.frames, repo_root) else {
                continue;
            };
            let test = format!("{} {}", t.binary, t.name);
            let at = sites.iter().position(|s| s.file == file && s.line == line);
            let site = match at {
                Some(i) => &mut sites[i],
                None => {
                    sites.push(Site {
                        file,
                        line,
                        tests: Vec::new(),
                        bytes: 0,
                        objects: 0,
                        lost: None,
                    });
                    sites.last_mut().expect("just pushed")
                }
            };
            site.bytes = site.bytes.saturating_add(st.bytes);
            site.objects = site.objects.saturating_add(st.objects);
            if site.lost.is_none() {
                site.lost = crate::report::text::unreachable_text(st, repo_root);
            }
            if !site.tests.contains(&test) {
                site.tests.push(test);
            }
        }
    }
    sites
}

/// A leaking line's `::error`: what was allocated there by which tests, and how it is lost.
fn site_annotation(s: &Site) -> String {
    let first = s.tests[0].split_once(' ').map_or("", |(_, name)| name);
    let title = match s.tests.len() {
        1 => format!("leak in {first}"),
        n => format!("leak in {first} and {} more", n - 1),
    };
    let by = match s.tests.len() {
        1 => s.tests[0].clone(),
        n => format!("{n} tests: {}", s.tests.join(", ")),
    };
    let lost = s
        .lost
        .as_ref()
        .map(|l| format!("; {l}"))
        .unwrap_or_default();
    format!(
        "::error file={},line={},title={}::{}",
        property(&s.file),
        s.line,
        property(&title),
        data(&format!(
            "{} in {} object(s) allocated here by {by} and never freed{lost} (cargo-leakcheck)",
            human_bytes(s.bytes),
            s.objects,
        ))
    )
}

/// A test that could not be judged has no line to point at; when the configuration makes
/// that fail the run, the run's page must still say which test and why.
fn unsettled_annotations(report: &Report) -> Vec<String> {
    report
        .tests
        .iter()
        .filter(|t| t.verdict == Verdict::Unsettled && report.fails(t))
        .map(|t| {
            let why = t.message.as_deref().unwrap_or("it could not be judged");
            format!(
                "::error title={}::{}",
                property(&format!("unsettled: {}", t.name)),
                data(&format!(
                    "{} {} was not judged: {why}; `unsettled-fails` in leakcheck.toml makes that fail the run (cargo-leakcheck)",
                    t.binary, t.name
                ))
            )
        })
        .collect()
}

/// One `::error` per definition in the repository of a collection that grew on every run
/// of a failing test, naming the tests.
fn collection_annotations(report: &Report, repo_root: &Path) -> Vec<String> {
    let mut sites: Vec<(String, u32, String, Vec<String>)> = Vec::new();
    let failing = |t: &&crate::model::TestReport| t.verdict == Verdict::Leak && report.fails(t);
    for t in report.tests.iter().filter(failing) {
        for c in t.collections.iter().filter(|c| c.fails) {
            let (Some(file), Some(line)) = (&c.collection.file, c.collection.line) else {
                continue;
            };
            let Ok(relative) = Path::new(file).strip_prefix(repo_root) else {
                continue;
            };
            let file = relative.display().to_string();
            let test = format!("{} {}", t.binary, t.name);
            match sites.iter_mut().find(|s| s.0 == file && s.1 == line) {
                Some(site) => site.3.push(test),
                None => sites.push((
                    file,
                    line,
                    crate::report::text::collection_text(c, repo_root),
                    vec![test],
                )),
            }
        }
    }
    sites
        .into_iter()
        .map(|(file, line, what, tests)| {
            let first = tests[0].split_once(' ').map_or("", |(_, name)| name);
            let title = match tests.len() {
                1 => format!("collection grows in {first}"),
                n => format!("collection grows in {first} and {} more", n - 1),
            };
            format!(
                "::error file={},line={line},title={}::{}",
                property(&file),
                property(&title),
                data(&format!(
                    "{what}: longer on every run of {} (cargo-leakcheck)",
                    tests.join(", ")
                ))
            )
        })
        .collect()
}

/// One `::error` per allocating line in the repository that a growing stack of a bench or
/// service starts from (`bench`, `run`).
fn bench_annotations(report: &Report, repo_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for b in report.benches.iter().filter(|b| b.verdict == Verdict::Leak) {
        for st in b.stacks.iter().filter(|s| s.flagged) {
            let Some((file, line)) = repo_line(&st.frames, repo_root) else {
                continue;
            };
            let held = st
                .retained_by
                .as_ref()
                .map(|h| format!(", {}", crate::report::text::held_phrase(h, repo_root)))
                .unwrap_or_default();
            out.push(format!(
                "::error file={},line={line},title={}::{}",
                property(&file),
                property(&format!("memory grows in {}", b.name)),
                data(&format!(
                    "memory allocated here grew by {} ({}/s) over the later half of {}'s run{held} (cargo-leakcheck)",
                    human_bytes(st.growth_bytes.max(0) as u64),
                    human_bytes(st.growth_bytes_per_second.max(0.0) as u64),
                    b.name
                ))
            ));
        }
        for c in b.collections.iter().filter(|c| c.flagged) {
            let (Some(file), Some(line)) = (&c.collection.file, c.collection.line) else {
                continue;
            };
            let Ok(file) = Path::new(file).strip_prefix(repo_root) else {
                continue;
            };
            out.push(format!(
                "::error file={},line={line},title={}::{}",
                property(&file.display().to_string()),
                property(&format!("collection grows in {}", b.name)),
                data(&format!(
                    "{} (cargo-leakcheck)",
                    crate::report::text::bench_collection_text(c, repo_root)
                ))
            ));
        }
    }
    out
}

/// The job summary: the tests that leaked or failed, with size, allocation site and flame
/// graph, and the totals; then the benches and services, when there are any.
pub fn summary(report: &Report, repo_root: &Path, out_dir: &Path) -> String {
    let mut s = String::from("## cargo-leakcheck\n\n");
    if let Some(b) = &report.baseline {
        let _ = writeln!(
            s,
            "**Against the base run**: {}{}\n",
            crate::report::text::baseline_counts(b),
            if b.fail_on_new {
                " (only new and grown leaks fail)"
            } else {
                ""
            }
        );
        for c in b
            .tests
            .iter()
            .filter(|c| matches!(c.change, Change::New | Change::Grown | Change::Changed))
        {
            let _ = writeln!(
                s,
                "- **{}** `{} {}`: {}",
                c.change.as_str(),
                cell(&c.binary),
                cell(&c.name),
                cell(&c.detail)
            );
        }
        s.push('\n');
    }
    if !report.tests.is_empty() || report.benches.is_empty() {
        tests_summary(&mut s, report, repo_root, out_dir);
    }
    if !report.benches.is_empty() {
        benches_summary(&mut s, report, repo_root, out_dir);
    }
    // Where there is something to look at (the action uploads the directory then).
    let to_look_at = report.tests.iter().any(|t| t.verdict != Verdict::Clean)
        || report.benches.iter().any(|b| b.verdict != Verdict::Clean);
    if to_look_at {
        let _ = writeln!(
            s,
            "\nThe whole report, one page: `{}` in the uploaded report directory (open it from the downloaded artifact).",
            out_dir.join(crate::model::PAGE_FILE).display()
        );
    }
    s
}

/// The benches and services: totals, and a row per one that grew or did not end well.
fn benches_summary(s: &mut String, report: &Report, repo_root: &Path, out_dir: &Path) {
    let count = |v: Verdict| report.benches.iter().filter(|b| b.verdict == v).count();
    let n = report.benches.len();
    let _ = writeln!(
        s,
        "{}: {} clean, {} growing, {} other\n",
        crate::model::count_of(n as u64, "bench or service", "benches or services"),
        count(Verdict::Clean),
        count(Verdict::Leak),
        n - count(Verdict::Clean) - count(Verdict::Leak)
    );
    let bad: Vec<_> = report
        .benches
        .iter()
        .filter(|b| b.verdict != Verdict::Clean)
        .collect();
    if bad.is_empty() {
        s.push_str("Nothing grew.\n");
        return;
    }
    s.push_str(
        "| verdict | bench | growth | allocated at | flame graph |\n|---|---|---|---|---|\n",
    );
    for b in bad.iter().take(MAX_SUMMARY_ROWS) {
        let flagged: Vec<_> = b.stacks.iter().filter(|st| st.flagged).collect();
        let first = flagged.first();
        let mut site = first
            .and_then(|st| identifying_frame(&st.frames, repo_root))
            .map(|f| site_text(f, repo_root))
            .unwrap_or_else(|| b.message.clone().unwrap_or_default());
        if let Some(held) = first.and_then(|st| st.retained_by.as_ref()) {
            let lines = crate::report::text::held_text(held, repo_root);
            let _ = write!(site, "<br>{}", lines.join("<br>"));
        }
        for c in b.collections.iter().filter(|c| c.flagged) {
            if !site.is_empty() {
                site.push_str("<br>");
            }
            site.push_str(&crate::report::text::bench_collection_text(c, repo_root));
        }
        let growth = match b.verdict {
            Verdict::Leak => {
                let bytes: i64 = flagged.iter().map(|st| st.growth_bytes).sum();
                let rate: f64 = flagged.iter().map(|st| st.growth_bytes_per_second).sum();
                format!(
                    "+{} ({}/s)",
                    human_bytes(bytes.max(0) as u64),
                    human_bytes(rate.max(0.0) as u64)
                )
            }
            _ => String::new(),
        };
        let row = Row {
            verdict: b.verdict,
            binary: &b.binary,
            name: &b.name,
            amount: growth,
            site,
            flamegraph: b.artifacts.flamegraph.as_deref(),
        };
        row.write(s, out_dir);
    }
}

/// A row of the summary's table: verdict, test or bench, size, where, flame graph.
struct Row<'a> {
    verdict: Verdict,
    binary: &'a str,
    name: &'a str,
    amount: String,
    site: String,
    flamegraph: Option<&'a str>,
}

impl Row<'_> {
    fn write(&self, s: &mut String, out_dir: &Path) {
        let graph = self
            .flamegraph
            .map(|g| format!("`{}`", out_dir.join(g).display()))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {} | `{} {}` | {} | {} | {graph} |",
            self.verdict.as_str(),
            cell(self.binary),
            cell(self.name),
            self.amount,
            cell(&self.site)
        );
    }
}

/// `` `function` (file:line) ``, the file relative to the repository.
fn site_text(f: &crate::model::FrameReport, repo_root: &Path) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => {
            let file = Path::new(file);
            let shown = file.strip_prefix(repo_root).unwrap_or(file);
            format!("`{}` ({}:{line})", f.function, shown.display())
        }
        _ => format!("`{}`", f.function),
    }
}

/// The tests' part of the job summary.
fn tests_summary(s: &mut String, report: &Report, repo_root: &Path, out_dir: &Path) {
    let count = |v: Verdict| report.tests.iter().filter(|t| t.verdict == v).count();
    let unsettled = match count(Verdict::Unsettled) {
        0 => String::new(),
        n => format!(", {n} unsettled"),
    };
    let not_run = match &report.not_run {
        None => String::new(),
        Some(n) => format!("; {} selected but never run: {}", n.count, n.why),
    };
    let _ = writeln!(
        s,
        "{} tests: {} clean, {} leak, {} failed, {} crashed, {} timed out, {} not analysed{unsettled}{not_run}\n",
        report.tests.len(),
        count(Verdict::Clean),
        count(Verdict::Leak),
        count(Verdict::Failed),
        count(Verdict::Crashed),
        count(Verdict::Timeout),
        count(Verdict::Error) + count(Verdict::Unanalysable)
    );
    let bad: Vec<_> = report
        .tests
        .iter()
        .filter(|t| t.verdict != Verdict::Clean)
        .collect();
    if bad.is_empty() {
        s.push_str(if report.not_run.is_some() {
            "Nothing leaked in the tests that ran.\n"
        } else {
            "Nothing leaked.\n"
        });
        return;
    }
    s.push_str(
        "| verdict | test | retained | allocated at | flame graph |\n|---|---|---|---|---|\n",
    );
    for t in bad.iter().take(MAX_SUMMARY_ROWS) {
        let first = t.failing_stacks().next();
        let mut site = first
            .and_then(|st| identifying_frame(&st.frames, repo_root))
            .map(|f| site_text(f, repo_root))
            .unwrap_or_default();
        if let Some(held) = first.and_then(|st| st.retained_by.as_ref()) {
            let lines = crate::report::text::held_text(held, repo_root);
            let _ = write!(site, "<br>{}", lines.join("<br>"));
        }
        if let Some(lost) =
            first.and_then(|st| crate::report::text::unreachable_text(st, repo_root))
        {
            let _ = write!(site, "<br>{lost}");
        }
        // The stack that says how the first one's structure or cycle was lost, with it.
        for st in t.shown_stacks(first, 1).into_iter().skip(1) {
            let at = identifying_frame(&st.frames, repo_root).map(|f| site_text(f, repo_root));
            let lost = crate::report::text::unreachable_text(st, repo_root);
            if let (Some(at), Some(lost)) = (at, lost) {
                let _ = write!(site, "<br>{at}: {lost}");
            }
        }
        for c in t.collections.iter().filter(|c| c.fails) {
            if !site.is_empty() {
                site.push_str("<br>");
            }
            site.push_str(&crate::report::text::collection_text(c, repo_root));
        }
        let retained = match (t.verdict, &t.first_run_retained) {
            (Verdict::Leak, _) => human_bytes(t.retained_bytes),
            (Verdict::Unsettled, Some(r)) => human_bytes(r.bytes),
            _ => String::new(),
        };
        if let Some(c) = report.change_of(t) {
            let _ = write!(site, "<br>{}: {}", c.change.as_str(), c.detail);
        }
        let row = Row {
            verdict: t.verdict,
            binary: &t.binary,
            name: &t.name,
            amount: retained,
            site,
            flamegraph: t.artifacts.flamegraph.as_deref(),
        };
        row.write(s, out_dir);
    }
    if bad.len() > MAX_SUMMARY_ROWS {
        let _ = writeln!(
            s,
            "\n… and {} more in report.json.",
            bad.len() - MAX_SUMMARY_ROWS
        );
    }
    let leaked = report.leaked_bytes();
    let _ = writeln!(
        s,
        "\n{} retained by leaking tests. The flame graphs are in the run's `target/leakcheck` directory (upload it as an artifact to keep them).",
        human_bytes(leaked)
    );
}

/// The [`annotations`] as written to stdout: one workflow command a line.
pub fn annotations_text(report: &Report, repo_root: &Path) -> String {
    annotations(report, repo_root)
        .into_iter()
        .map(|line| line + "\n")
        .collect()
}

/// The step outputs a workflow can use after the run: where the report and its artifacts are
/// (`steps.<id>.outputs.report-dir`, for an artifact upload), as absolute paths.
pub fn step_outputs(out_dir: &Path) -> String {
    let dir = std::env::current_dir()
        .map(|cwd| cwd.join(out_dir))
        .unwrap_or_else(|_| out_dir.to_path_buf());
    format!(
        "report-dir={}\nreport={}\npage={}\n",
        dir.display(),
        dir.join("report.json").display(),
        dir.join(crate::model::PAGE_FILE).display()
    )
}

/// Writes the annotations to stdout (where the runner reads workflow commands), appends
/// the summary to `$GITHUB_STEP_SUMMARY` and the report's location to `$GITHUB_OUTPUT` when
/// they are set. Nothing here fails the run.
pub fn emit(report: &Report, workspace_root: &Path, out_dir: &Path) {
    let repo_root = std::env::var_os("GITHUB_WORKSPACE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| workspace_root.to_path_buf());
    let repo_root = repo_root.canonicalize().unwrap_or(repo_root);
    let _ = std::io::Write::write_all(
        &mut std::io::stdout().lock(),
        annotations_text(report, &repo_root).as_bytes(),
    );
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") {
        append(
            &path,
            &summary(report, &repo_root, out_dir),
            "the job summary",
        );
    }
    if let Some(path) = std::env::var_os("GITHUB_OUTPUT") {
        append(&path, &step_outputs(out_dir), "the step outputs");
    }
}

fn append(path: &std::ffi::OsStr, text: &str, what: &str) {
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
    if let Err(e) = appended {
        crate::say!(
            "warning: could not append {what} to `{}`: {e}",
            Path::new(path).display()
        );
    }
}

/// A workflow command's message: `%`, CR and LF escaped.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as data, and `:` and `,` too.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

/// A Markdown table cell: no `|` or line break.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FrameReport, StackKind, StackReport, TestReport};

    fn leak(name: &str, stacks: usize) -> TestReport {
        let frame = |line| FrameReport::at("p::tests::leaks", "/repo/src/lib.rs", line);
        let std_frame = FrameReport::at(
            "alloc::raw_vec::RawVec::grow",
            "/rustc/abc/library/alloc/src/raw_vec.rs",
            9,
        );
        TestReport {
            name: name.into(),
            verdict: Verdict::Leak,
            retained_bytes: 100 * stacks as u64,
            stacks: (0..stacks)
                .map(|i| StackReport {
                    frames: vec![std_frame.clone(), frame(10 + i as u32)],
                    ..StackReport::example(StackKind::Leak, 100)
                })
                .collect(),
            ..TestReport::example()
        }
    }

    #[test]
    fn a_growing_bench_or_service_is_annotated_at_its_line_with_its_holder_and_summarised() {
        use crate::model::GrowthReport;
        let report = Report {
            benches: vec![
                GrowthReport::example("grows", Verdict::Leak),
                GrowthReport::example("plateau", Verdict::Clean),
            ],
            ..Report::example()
        };
        let lines = annotations(&report, Path::new("/ws"));
        assert_eq!(
            lines,
            ["::error file=benches/grows.rs,line=12,title=memory grows in grows::memory allocated here grew by 2.0 MiB (400.0 KiB/s) over the later half of grows's run, held by static `grows::SEEN` (cargo-leakcheck)"]
        );
        let text = summary(&report, Path::new("/ws"), Path::new("target/leakcheck"));
        // No tests: the benches' part only.
        assert!(!text.contains("tests:"), "{text}");
        assert!(
            text.contains("2 benches or services: 1 clean, 1 growing, 0 other"),
            "{text}"
        );
        assert!(
            text.contains("| leak | `grows grows` | +2.0 MiB (400.0 KiB/s) | `grows::handle_request` (benches/grows.rs:12)<br>held by static `grows::SEEN` | `target/leakcheck/benches-bench-grows/grows.svg` |"),
            "{text}"
        );
        assert!(!text.contains("plateau"), "{text}");
    }

    #[test]
    fn one_error_per_failing_stack_at_the_users_line_capped_with_a_notice() {
        let report = Report {
            tests: vec![leak("tests::a, b: c", 1), TestReport::example()],
            ..Report::example()
        };
        let lines = annotations(&report, Path::new("/repo"));
        assert_eq!(
            lines,
            ["::error file=src/lib.rs,line=10,title=leak in tests%3A%3Aa%2C b%3A c::100 B in 1 object(s) allocated here by p tests::a, b: c and never freed (cargo-leakcheck)"]
        );
        let many = Report {
            tests: vec![leak("tests::many", 13)],
            ..Report::example()
        };
        let lines = annotations(&many, Path::new("/repo"));
        assert_eq!(lines.len(), MAX_ANNOTATIONS + 1);
        assert!(lines[MAX_ANNOTATIONS]
            .starts_with("::notice title=cargo-leakcheck::3 more leaking allocation site(s)"));
        // A site outside the repository is not annotated.
        assert!(annotations(&report, Path::new("/elsewhere")).is_empty());
    }

    #[test]
    fn an_unsettled_test_that_fails_the_run_is_annotated_with_its_reason() {
        let unsettled = |fails: bool| TestReport {
            name: "tests::slow".into(),
            verdict: Verdict::Unsettled,
            message: Some("the 2nd extra run did not finish in time".into()),
            unsettled_fails: fails,
            ..TestReport::example()
        };
        let report = Report {
            tests: vec![unsettled(false)],
            ..Report::example()
        };
        assert!(annotations(&report, Path::new("/repo")).is_empty());
        let report = Report {
            tests: vec![leak("tests::a", 1), unsettled(true)],
            ..Report::example()
        };
        let lines = annotations(&report, Path::new("/repo"));
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            "::error title=unsettled%3A tests%3A%3Aslow::p tests::slow was not judged: the 2nd extra run did not finish in time; `unsettled-fails` in leakcheck.toml makes that fail the run (cargo-leakcheck)"
        );
    }

    #[test]
    fn a_line_several_tests_and_stacks_leak_through_is_annotated_once() {
        let mut twice = leak("tests::b", 2);
        twice.stacks[1].frames = twice.stacks[0].frames.clone();
        let report = Report {
            tests: vec![leak("tests::a", 1), twice, leak("tests::c", 2)],
            ..Report::example()
        };
        let lines = annotations(&report, Path::new("/repo"));
        assert_eq!(
            lines,
            [
                "::error file=src/lib.rs,line=10,title=leak in tests%3A%3Aa and 2 more::400 B in 4 object(s) allocated here by 3 tests: p tests::a, p tests::b, p tests::c and never freed (cargo-leakcheck)",
                "::error file=src/lib.rs,line=11,title=leak in tests%3A%3Ac::100 B in 1 object(s) allocated here by p tests::c and never freed (cargo-leakcheck)",
            ]
        );
    }

    #[test]
    fn the_summary_tables_what_did_not_pass() {
        let mut l = leak("tests::a|b", 1);
        l.artifacts.flamegraph = Some("p-lib-p/tests.a.svg".into());
        let failed = TestReport {
            name: "tests::fails".into(),
            verdict: Verdict::Failed,
            ..TestReport::example()
        };
        let report = Report {
            tests: vec![l, failed, TestReport::example()],
            ..Report::example()
        };
        let s = summary(&report, Path::new("/repo"), Path::new("target/leakcheck"));
        assert!(s.starts_with("## cargo-leakcheck\n\n3 tests: 1 clean, 1 leak, 1 failed, 0 crashed, 0 timed out, 0 not analysed\n"), "{s}");
        assert!(s.contains("| leak | `p tests::a\\|b` | 100 B | `p::tests::leaks` (src/lib.rs:10) | `target/leakcheck/p-lib-p/tests.a.svg` |"), "{s}");
        assert!(s.contains("| failed | `p tests::fails` |  |  |  |"), "{s}");
        // Who holds the first failing stack follows where it was allocated.
        let mut held = leak("tests::held", 1);
        held.stacks[0].retained_by = Some(crate::model::RetainedBy {
            root_kind: crate::model::RootKind::Static,
            root: "static `p::REGISTRY`".into(),
            symbol: Some("p::REGISTRY".into()),
            thread: None,
            frame: None,
            definition: None,
            via: Vec::new(),
            skipped: 0,
            task: None,
            holder: None,
        });
        let report = Report {
            tests: vec![held],
            ..Report::example()
        };
        let s = summary(&report, Path::new("/repo"), Path::new("t"));
        assert!(
            s.contains("| `p::tests::leaks` (src/lib.rs:10)<br>held by static `p::REGISTRY` |"),
            "{s}"
        );
        let clean = Report {
            tests: vec![TestReport::example()],
            ..Report::example()
        };
        assert!(summary(&clean, Path::new("/repo"), Path::new("t")).ends_with("Nothing leaked.\n"));
        let stopped = Report {
            not_run: crate::model::NotRun::of(vec!["p t2".into()], "stopped early"),
            ..clean
        };
        let s = summary(&stopped, Path::new("/repo"), Path::new("t"));
        assert!(
            s.contains("0 not analysed; 1 selected but never run: stopped early\n")
                && s.ends_with("Nothing leaked in the tests that ran.\n"),
            "{s}"
        );
    }

    #[test]
    fn step_outputs_name_the_report_by_absolute_path() {
        let cwd = std::env::current_dir().unwrap();
        let text = step_outputs(Path::new("target/leakcheck"));
        let dir = cwd.join("target/leakcheck");
        assert_eq!(
            text,
            format!(
                "report-dir={}\nreport={}/report.json\npage={}/index.html\n",
                dir.display(),
                dir.display(),
                dir.display()
            )
        );
        assert_eq!(
            step_outputs(Path::new("/abs/out")),
            "report-dir=/abs/out\nreport=/abs/out/report.json\npage=/abs/out/index.html\n"
        );
    }

    #[test]
    fn on_in_github_actions_or_when_asked() {
        assert!(enabled(Some("github")));
        assert!(!enabled(Some("none")));
    }
}
