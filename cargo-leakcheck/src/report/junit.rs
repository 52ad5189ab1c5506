//! JUnit XML, in the shape nextest and Jenkins write: one `<testsuite>` per test binary,
//! named and classed by nextest's binary id (`package`, `package::test`, `package::bin/name`,
//! so a CI's test history does not change with the runner), one `<testcase>` per test. A leak is a `<failure type="leak">` whose
//! message is the retained size and whose text holds the failing stacks and the flame
//! graph; a failed test is a `<failure>`, a crashed or timed-out one an `<error>`, a test the
//! tool could not analyse an `<error>`, an ignored one `<skipped/>`. Benches and services
//! (`bench`, `run`) follow, one `<testsuite>` per target or program.

use crate::model::{human_bytes, GrowthReport, Report, TestReport, Verdict};
use crate::report::markup::escape;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::Path;

/// A test that was listed but not run: its binary's id, its name, and why (`ignored`,
/// `interrupted by SIGINT`).
pub type Skipped = (String, String, String);

/// How long each test's process ran, seconds, by (package, binary, name).
pub type Durations = HashMap<(String, String, String), f64>;

/// The JUnit document for a report. `out_dir` is where the flame graphs are (as shown to the
/// user), `root` the workspace root (file paths in stacks are shown relative to it).
pub fn render(
    report: &Report,
    durations: &Durations,
    skipped: &[Skipped],
    out_dir: &Path,
    root: &Path,
) -> String {
    enum JunitCase<'a> {
        Judged(&'a TestReport),
        Skipped(&'a str, &'a str),
    }
    let mut suites: BTreeMap<String, Vec<JunitCase>> = BTreeMap::new();
    for t in &report.tests {
        suites
            .entry(t.binary_id())
            .or_default()
            .push(JunitCase::Judged(t));
    }
    for (id, name, why) in skipped {
        suites
            .entry(id.clone())
            .or_default()
            .push(JunitCase::Skipped(name, why));
    }
    let time_of = |t: &TestReport| {
        durations
            .get(&(t.package.clone(), t.binary.clone(), t.name.clone()))
            .copied()
            .unwrap_or(0.0)
    };
    let count = |cases: &[JunitCase], f: &dyn Fn(&TestReport) -> bool| {
        cases
            .iter()
            .filter(|c| matches!(c, JunitCase::Judged(t) if f(t)))
            .count()
    };
    let is_error = |t: &TestReport| {
        matches!(
            t.verdict,
            Verdict::Crashed | Verdict::Timeout | Verdict::Error | Verdict::Unanalysable
        )
    };
    // What fails the run is the gate's to say; JUnit only sorts it into failures and errors.
    let is_failure = |t: &TestReport| report.fails(t) && !is_error(t);
    let all: Vec<JunitCase> = report.tests.iter().map(JunitCase::Judged).collect();
    let benches = bench_suites(report, out_dir, root);
    let total_time: f64 = report.tests.iter().map(time_of).sum::<f64>() + benches.time;
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"cargo-leakcheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        report.tests.len() + skipped.len() + report.benches.len(),
        count(&all, &is_failure) + benches.failures,
        count(&all, &is_error) + benches.errors,
        skipped.len(),
        total_time
    );
    for (suite, cases) in &suites {
        let time: f64 = cases
            .iter()
            .map(|c| match c {
                JunitCase::Judged(t) => time_of(t),
                JunitCase::Skipped(..) => 0.0,
            })
            .sum();
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{time:.3}\">",
            escape(suite),
            cases.len(),
            count(cases, &is_failure),
            count(cases, &is_error),
            cases.iter().filter(|c| matches!(c, JunitCase::Skipped(..))).count()
        );
        for case in cases {
            match case {
                JunitCase::Skipped(name, why) => {
                    let _ = writeln!(
                        x,
                        "    <testcase name=\"{}\" classname=\"{}\" time=\"0.000\">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        escape(name),
                        escape(suite),
                        escape(why)
                    );
                }
                JunitCase::Judged(t) => {
                    judged_case(&mut x, report, t, suite, time_of(t), out_dir, root)
                }
            }
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str(&benches.xml);
    x.push_str("</testsuites>\n");
    x
}

/// One judged test's `<testcase>`: passed, its failure or error (what the gate says fails the
/// run), or a leak let through by `--fail-on new` with why.
fn judged_case(
    x: &mut String,
    report: &Report,
    t: &TestReport,
    suite: &str,
    time: f64,
    out_dir: &Path,
    root: &Path,
) {
    let _ = write!(
        x,
        "    <testcase name=\"{}\" classname=\"{}\" time=\"{time:.3}\"",
        escape(&t.name),
        escape(suite),
    );
    let change = report.change_of(t);
    let fails = report.fails(t);
    if t.verdict == Verdict::Leak && !fails {
        let _ = writeln!(
            x,
            ">\n      <system-out>{}</system-out>\n    </testcase>",
            escape(&format!(
                "an unchanged leak of the base run ({}), not failing under --fail-on new",
                change.map_or("", |c| c.detail.as_str())
            ))
        );
        return;
    }
    match outcome(t, fails, out_dir, root) {
        // Judged on one run: why, so a CI page says it where the test is listed.
        None => match crate::report::judged::way(t)
            .filter(|w| w.on_one_run())
            .and_then(|_| crate::report::judged::sentence(t))
        {
            Some(why) => {
                let _ = writeln!(
                    x,
                    ">\n      <system-out>{}</system-out>\n    </testcase>",
                    escape(&why)
                );
            }
            None => x.push_str("/>\n"),
        },
        Some((element, kind, message, text)) => {
            // What changed against the base run leads the message.
            let message = match change {
                Some(c) => format!("[{}] {message}", c.change.as_str()),
                None => message,
            };
            let _ = writeln!(
                x,
                ">\n      <{element} type=\"{kind}\" message=\"{}\">{}</{element}>\n    </testcase>",
                escape(&message),
                escape(&text)
            );
        }
    }
}

/// The `<testsuite>` elements of a report's benches and services, and their totals.
struct BenchSuites {
    xml: String,
    failures: usize,
    errors: usize,
    time: f64,
}

/// One `<testsuite>` per bench target or service (`package::binary`), one `<testcase>` per
/// benchmark: growth is a `<failure type="leak">` naming the growing stacks, a bench or
/// service that failed a `<failure>`, one that crashed or could not be analysed an `<error>`.
fn bench_suites(report: &Report, out_dir: &Path, root: &Path) -> BenchSuites {
    let mut suites: BTreeMap<String, Vec<&GrowthReport>> = BTreeMap::new();
    for b in &report.benches {
        suites
            .entry(format!("{}::{}", b.package, b.binary))
            .or_default()
            .push(b);
    }
    let mut out = BenchSuites {
        xml: String::new(),
        failures: 0,
        errors: 0,
        time: 0.0,
    };
    for (suite, benches) in &suites {
        let outcomes: Vec<_> = benches
            .iter()
            .map(|b| bench_outcome(b, out_dir, root))
            .collect();
        let failures = outcomes
            .iter()
            .filter(|o| matches!(o, Some(("failure", ..))))
            .count();
        let errors = outcomes
            .iter()
            .filter(|o| matches!(o, Some(("error", ..))))
            .count();
        let time: f64 = benches.iter().map(|b| b.duration_seconds).sum();
        out.failures += failures;
        out.errors += errors;
        out.time += time;
        let _ = writeln!(
            out.xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{time:.3}\">",
            escape(suite),
            benches.len(),
        );
        for (b, outcome) in benches.iter().zip(outcomes) {
            let _ = write!(
                out.xml,
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
                escape(&b.name),
                escape(suite),
                b.duration_seconds
            );
            match outcome {
                None => out.xml.push_str("/>\n"),
                Some((element, kind, message, text)) => {
                    let _ = writeln!(
                        out.xml,
                        ">\n      <{element} type=\"{kind}\" message=\"{}\">{}</{element}>\n    </testcase>",
                        escape(&message),
                        escape(&text)
                    );
                }
            }
        }
        out.xml.push_str("  </testsuite>\n");
    }
    out
}

/// The element, its type, message and text, for a bench or service that did not end clean.
fn bench_outcome(
    b: &GrowthReport,
    out_dir: &Path,
    root: &Path,
) -> Option<(&'static str, &'static str, String, String)> {
    let detail = b.message.clone().unwrap_or_default();
    match b.verdict {
        Verdict::Unsettled if b.exit_code() != crate::errors::ExitCode::Success => Some((
            "failure",
            "unsettled",
            "not judged, and `unsettled-fails` makes that fail the run".into(),
            detail,
        )),
        Verdict::Clean | Verdict::Unsettled => None,
        Verdict::Leak => {
            let flagged: Vec<_> = b.stacks.iter().filter(|s| s.flagged).collect();
            let growth: i64 = flagged.iter().map(|s| s.growth_bytes).sum();
            let rate: f64 = flagged.iter().map(|s| s.growth_bytes_per_second).sum();
            let growing: Vec<_> = b.collections.iter().filter(|c| c.flagged).collect();
            let mut message = match flagged.len() {
                0 => String::new(),
                n => format!(
                    "memory grew by {} ({}/s) over the later half of the run, in {n} stack(s) over the threshold of {}",
                    human_bytes(growth.max(0) as u64),
                    human_bytes(rate.max(0.0) as u64),
                    human_bytes(b.growth_threshold)
                ),
            };
            if let Some(c) = growing.first() {
                if !message.is_empty() {
                    message.push_str("; ");
                }
                let _ = write!(
                    message,
                    "{} collection(s) longer over the later half: {}",
                    growing.len(),
                    crate::report::text::bench_collection_text(c, root)
                );
            }
            let mut text = String::new();
            for c in &growing {
                let _ = writeln!(
                    text,
                    "{}",
                    crate::report::text::bench_collection_text(c, root)
                );
            }
            for st in &flagged {
                let _ = writeln!(
                    text,
                    "+{} ({}/s), allocated at:",
                    human_bytes(st.growth_bytes.max(0) as u64),
                    human_bytes(st.growth_bytes_per_second.max(0.0) as u64)
                );
                stack_text(&mut text, &st.frames, st.retained_by.as_ref(), root);
            }
            for (what, file) in [
                ("flame graph", &b.artifacts.flamegraph),
                ("plot", &b.artifacts.plot),
            ] {
                if let Some(file) = file {
                    let shown = out_dir.join(file);
                    let shown = shown.strip_prefix(root).unwrap_or(&shown);
                    let _ = writeln!(text, "{what}: {}", shown.display());
                }
            }
            Some(("failure", "leak", message, text))
        }
        Verdict::Failed => Some(("failure", "failed", format!("failed: {}", b.exit), detail)),
        Verdict::Crashed | Verdict::Timeout => {
            Some(("error", "crashed", format!("crashed: {}", b.exit), detail))
        }
        Verdict::Error | Verdict::Unanalysable => Some((
            "error",
            "not-analysed",
            "cargo-leakcheck could not analyse it".into(),
            detail,
        )),
    }
}

/// The element (`failure` or `error`), its type, message and text, for a test that did not
/// pass clean.
fn outcome(
    t: &TestReport,
    fails: bool,
    out_dir: &Path,
    root: &Path,
) -> Option<(&'static str, &'static str, String, String)> {
    let detail = t.message.clone().unwrap_or_default();
    match t.verdict {
        // Could not be judged, and the configuration asks that this fail the run.
        Verdict::Unsettled if fails => Some((
            "failure",
            "unsettled",
            "not judged, and `unsettled-fails` makes that fail the run".into(),
            detail,
        )),
        // Not shown to leak: it passes, with the reason in report.json and the summary.
        Verdict::Clean | Verdict::Unsettled => None,
        Verdict::Leak => {
            let failing = t.shown_stacks(t.failing_stacks(), usize::MAX);
            let growing: Vec<_> = t.collections.iter().filter(|c| c.fails).collect();
            let mut message = match failing.len() {
                0 => String::new(),
                n => format!(
                    "leaked {} in {} object(s): {n} stack(s) over the threshold of {} B",
                    human_bytes(t.retained_bytes),
                    t.retained_objects,
                    t.stack_threshold
                ),
            };
            if !growing.is_empty() {
                if !message.is_empty() {
                    message.push_str("; ");
                }
                let _ = write!(
                    message,
                    "{} collection(s) longer on every run: {}",
                    growing.len(),
                    crate::report::text::collection_text(growing[0], root)
                );
            }
            let mut text = String::new();
            for c in &growing {
                let _ = writeln!(text, "{}", crate::report::text::collection_text(c, root));
                if !c.allocated_at.is_empty() {
                    let _ = writeln!(text, "  grown at:");
                    stack_text(&mut text, &c.allocated_at, None, root);
                }
            }
            for st in &failing {
                let _ = writeln!(
                    text,
                    "{} in {} object(s), allocated at:",
                    human_bytes(st.bytes),
                    st.objects
                );
                stack_text(&mut text, &st.frames, st.retained_by.as_ref(), root);
                if let Some(lost) = crate::report::text::unreachable_text(st, root) {
                    let _ = writeln!(text, "  {lost}");
                }
            }
            if let Some(svg) = &t.artifacts.flamegraph {
                let shown = out_dir.join(svg);
                let shown = shown.strip_prefix(root).unwrap_or(&shown);
                let _ = writeln!(text, "flame graph: {}", shown.display());
            }
            Some(("failure", "leak", message, text))
        }
        Verdict::Failed => Some((
            "failure",
            "failed",
            format!("test failed: {}", t.exit),
            detail,
        )),
        Verdict::Crashed => Some((
            "error",
            "crashed",
            format!("test crashed: {}", t.exit),
            detail,
        )),
        Verdict::Timeout => Some(("error", "timeout", "test timed out".into(), detail)),
        Verdict::Error => Some((
            "error",
            "not-analysed",
            "cargo-leakcheck could not analyse this test".into(),
            detail,
        )),
        Verdict::Unanalysable => Some((
            "error",
            "unanalysable",
            "this test's allocations are invisible to cargo-leakcheck".into(),
            detail,
        )),
    }
}

/// A failing stack's lines: from the first frame of the user's code (std's allocation
/// frames above it say nothing about where the leak is) down to the harness's frames (what
/// calls the test, libtest or the closure it stores, says nothing either, as in the
/// terminal), at most six, then who holds its objects.
fn stack_text(
    text: &mut String,
    frames: &[crate::model::FrameReport],
    held: Option<&crate::model::RetainedBy>,
    root: &Path,
) {
    let own = crate::analysis::frames::from_identifying_frame(frames, root)
        .iter()
        .take_while(|f| !crate::report::text::is_harness_frame(f))
        .take(6);
    for f in own {
        let _ = writeln!(text, "    {}", crate::report::text::frame_text(f, root));
    }
    for line in held
        .iter()
        .flat_map(|h| crate::report::text::held_text(h, root))
    {
        let _ = writeln!(text, "  {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FrameReport, StackKind, StackReport};

    /// The JUnit text of a report from workspace `/ws`, nothing skipped, no durations.
    fn render_in_ws(report: &Report) -> String {
        render(
            report,
            &Durations::default(),
            &[],
            Path::new("/ws/target/leakcheck"),
            Path::new("/ws"),
        )
    }

    #[test]
    fn benches_and_services_are_testcases_growth_a_failure_naming_its_line_and_holder() {
        let mut crashed = GrowthReport::example("crashes", Verdict::Crashed);
        crashed.exit = "killed by signal 11 (SIGSEGV)".into();
        let report = Report {
            tests: vec![TestReport::example()],
            benches: vec![
                GrowthReport::example("grows", Verdict::Leak),
                crashed,
                GrowthReport::example("plateau", Verdict::Clean),
            ],
            ..Report::example()
        };
        let xml = render_in_ws(&report);
        assert!(
            xml.contains(
                "<testsuites name=\"cargo-leakcheck\" tests=\"4\" failures=\"1\" errors=\"1\""
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"benches::grows\" tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\" time=\"30.000\">"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<testcase name=\"plateau\" classname=\"benches::grows\" time=\"10.000\"/>"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<failure type=\"leak\" message=\"memory grew by 2.0 MiB (400.0 KiB/s) over the later half of the run, in 1 stack(s) over the threshold of 64.0 KiB\">"),
            "{xml}"
        );
        assert!(
            xml.contains("grows::handle_request (benches/grows.rs:12)"),
            "{xml}"
        );
        assert!(xml.contains("held by static `grows::SEEN`"), "{xml}");
        assert!(
            xml.contains("flame graph: target/leakcheck/benches-bench-grows/grows.svg"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<error type=\"crashed\" message=\"crashed: killed by signal 11 (SIGSEGV)\">"
            ),
            "{xml}"
        );
    }

    #[test]
    fn an_unsettled_test_fails_only_where_the_configuration_asks() {
        let unsettled = |name: &str, fails: bool| TestReport {
            name: name.into(),
            verdict: Verdict::Unsettled,
            message: Some("no usable entry point: none is certain".into()),
            unsettled_fails: fails,
            ..TestReport::example()
        };
        let report = Report {
            tests: vec![
                unsettled("tests::lenient", false),
                unsettled("tests::strict", true),
            ],
            ..Report::example()
        };
        let xml = render_in_ws(&report);
        assert!(
            xml.contains("tests=\"2\" failures=\"1\" errors=\"0\""),
            "{xml}"
        );
        // It passes, saying why it was not judged.
        assert!(
            xml.contains("<testcase name=\"tests::lenient\" classname=\"p\" time=\"0.000\">\n      <system-out>not run again enough to tell</system-out>"),
            "{xml}"
        );
        assert!(xml.contains("<testcase name=\"tests::strict\" classname=\"p\" time=\"0.000\">\n      <failure type=\"unsettled\" message=\"not judged, and `unsettled-fails` makes that fail the run\">no usable entry point: none is certain</failure>"), "{xml}");
    }

    #[test]
    fn verdicts_become_testcases_failures_errors_and_skips() {
        let mut leak = TestReport {
            name: "tests::leaks<T>".into(),
            verdict: Verdict::Leak,
            retained_bytes: 8192,
            retained_objects: 1,
            ..TestReport::example()
        };
        let mut stack = StackReport::example(StackKind::Leak, 8192);
        let frame = FrameReport::at;
        stack.frames = vec![
            frame(
                "alloc::vec::from_elem",
                "/rustc/0123abcd/library/alloc/src/vec/mod.rs",
                3,
            ),
            frame("p::tests::leaks", "/ws/src/lib.rs", 39),
            frame(
                "p::helper",
                "/rustc/0123abcd/library/alloc/src/vec/mod.rs",
                7,
            ),
            frame("p::tests::leaks::{{closure}}", "/ws/src/lib.rs", 38),
            frame(
                "core::ops::function::FnOnce::call_once",
                "/rustc/0123abcd/library/core/src/ops/function.rs",
                250,
            ),
            frame(
                "test::run_test",
                "/rustc/0123abcd/library/test/src/lib.rs",
                600,
            ),
        ];
        leak.stacks = vec![stack];
        leak.artifacts.flamegraph = Some("p-lib-p/tests.leaks.svg".into());
        let failed = TestReport {
            name: "tests::fails".into(),
            verdict: Verdict::Failed,
            exit: "exit code 101".into(),
            message: Some("assertion failed: \u{1b}[31mred\u{1b}[0m & <b>".into()),
            ..TestReport::example()
        };
        let crashed = TestReport {
            name: "tests::crashes".into(),
            verdict: Verdict::Crashed,
            exit: "signal 11 (SIGSEGV)".into(),
            ..TestReport::example()
        };
        let clean = TestReport::example();
        let report = Report {
            tests: vec![clean, crashed, failed, leak.clone()],
            ..Report::example()
        };
        let durations: Durations = [(("p".into(), "p".into(), "tests::t".into()), 0.25)].into();
        let skipped = vec![
            (
                "p".to_string(),
                "tests::slow".to_string(),
                "ignored".to_string(),
            ),
            (
                "p::it".to_string(),
                "cut_short".to_string(),
                "interrupted by SIGINT".to_string(),
            ),
        ];
        let mut it = TestReport {
            name: "it_leaks".into(),
            kind: crate::model::TargetKind::Test,
            binary: "integration".into(),
            verdict: Verdict::Leak,
            ..leak.clone()
        };
        it.artifacts.flamegraph = None;
        let report = Report {
            tests: report.tests.into_iter().chain([it]).collect(),
            ..Report::example()
        };
        let xml = render(
            &report,
            &durations,
            &skipped,
            Path::new("/ws/target/leakcheck"),
            Path::new("/ws"),
        );
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"cargo-leakcheck\" tests=\"7\" failures=\"3\" errors=\"1\" skipped=\"2\" time=\"0.250\">"), "{xml}");
        assert!(xml.contains("<testsuite name=\"p\" tests=\"5\" failures=\"2\" errors=\"1\" skipped=\"1\" time=\"0.250\">"), "{xml}");
        assert!(
            xml.contains("<testcase name=\"tests::t\" classname=\"p\" time=\"0.250\"/>"),
            "{xml}"
        );
        assert!(xml.contains("<testcase name=\"tests::leaks&lt;T&gt;\" classname=\"p\" time=\"0.000\">\n      <failure type=\"leak\" message=\"leaked 8.0 KiB in 1 object(s): 1 stack(s) over the threshold of 0 B\">8.0 KiB in 1 object(s), allocated at:\n    p::tests::leaks (src/lib.rs:39)\n    p::helper (alloc/src/vec/mod.rs:7)\n    p::tests::leaks::{{closure}} (src/lib.rs:38)\nflame graph: target/leakcheck/p-lib-p/tests.leaks.svg\n</failure>"), "{xml}");
        assert!(xml.contains("<failure type=\"failed\" message=\"test failed: exit code 101\">assertion failed: \u{fffd}[31mred\u{fffd}[0m &amp; &lt;b&gt;</failure>"), "{xml}");
        assert!(
            xml.contains(
                "<error type=\"crashed\" message=\"test crashed: signal 11 (SIGSEGV)\"></error>"
            ),
            "{xml}"
        );
        assert!(xml.contains("<testcase name=\"tests::slow\" classname=\"p\" time=\"0.000\">\n      <skipped message=\"ignored\"/>"), "{xml}");
        assert!(xml.contains("<testcase name=\"cut_short\" classname=\"p::it\" time=\"0.000\">\n      <skipped message=\"interrupted by SIGINT\"/>"), "{xml}");
        // An integration test's suite and class are `package::target`, as nextest names it.
        assert!(
            xml.contains("<testcase name=\"it_leaks\" classname=\"p::integration\""),
            "{xml}"
        );
        assert!(xml.ends_with("  </testsuite>\n</testsuites>\n"));
    }

    #[test]
    fn a_held_leak_says_by_what_in_its_failure_text() {
        let mut stack = StackReport::example(StackKind::Leak, 512);
        stack.frames = vec![FrameReport::at("app::remember", "/ws/src/lib.rs", 20)];
        stack.retained_by = Some(crate::model::RetainedBy {
            root_kind: crate::model::RootKind::ThreadLocal,
            root: "thread-local `app::CACHE` of thread `worker`".into(),
            symbol: Some("app::CACHE".into()),
            thread: Some("worker".into()),
            frame: None,
            definition: None,
            via: vec![FrameReport::at("app::work", "/ws/src/lib.rs", 12)],
            skipped: 0,
            task: None,
            holder: None,
        });
        let leak = TestReport {
            verdict: Verdict::Leak,
            retained_bytes: 512,
            retained_objects: 1,
            stacks: vec![stack],
            ..TestReport::example()
        };
        let report = Report {
            tests: vec![leak],
            ..Report::example()
        };
        let xml = render_in_ws(&report);
        assert!(
            xml.contains("    app::remember (src/lib.rs:20)\n  held by thread-local `app::CACHE` of thread `worker`\n    → app::work (src/lib.rs:12)\n"),
            "{xml}"
        );
    }
}
