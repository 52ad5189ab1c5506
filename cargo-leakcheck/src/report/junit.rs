//! JUnit XML, in the shape nextest and Jenkins write: one `<testsuite>` per test binary,
//! named and classed by nextest's binary id (`package`, `package::test`, `package::bin/name`,
//! so a CI's test history does not change with the runner), one `<testcase>` per test. A leak is a `<failure type="leak">` whose
//! message is the retained size and whose text holds the failing stacks and the flame
//! graph; a failed test is a `<failure>`, a crashed or timed-out one an `<error>`, a test the
//! tool could not analyse an `<error>`, an ignored one `<skipped/>`.

use crate::model::{Report, TestReport, Verdict};
use crate::report::human::human_bytes;
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
    enum Case<'a> {
        Judged(&'a TestReport),
        Skipped(&'a str, &'a str),
    }
    let mut suites: BTreeMap<String, Vec<Case>> = BTreeMap::new();
    for t in &report.tests {
        suites
            .entry(t.binary_id())
            .or_default()
            .push(Case::Judged(t));
    }
    for (id, name, why) in skipped {
        suites
            .entry(id.clone())
            .or_default()
            .push(Case::Skipped(name, why));
    }
    let time_of = |t: &TestReport| {
        durations
            .get(&(t.package.clone(), t.binary.clone(), t.name.clone()))
            .copied()
            .unwrap_or(0.0)
    };
    let count = |cases: &[Case], f: &dyn Fn(&TestReport) -> bool| {
        cases
            .iter()
            .filter(|c| matches!(c, Case::Judged(t) if f(t)))
            .count()
    };
    let is_failure = |t: &TestReport| {
        matches!(t.verdict, Verdict::Leak | Verdict::Failed) || t.unsettled_fails_the_run()
    };
    let is_error = |t: &TestReport| {
        matches!(
            t.verdict,
            Verdict::Crashed | Verdict::Timeout | Verdict::Error | Verdict::Unanalysable
        )
    };
    let all: Vec<Case> = report.tests.iter().map(Case::Judged).collect();
    let total_time: f64 = report.tests.iter().map(time_of).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"cargo-leakcheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        report.tests.len() + skipped.len(),
        count(&all, &is_failure),
        count(&all, &is_error),
        skipped.len(),
        total_time
    );
    for (suite, cases) in &suites {
        let time: f64 = cases
            .iter()
            .map(|c| match c {
                Case::Judged(t) => time_of(t),
                Case::Skipped(..) => 0.0,
            })
            .sum();
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{time:.3}\">",
            escape(suite),
            cases.len(),
            count(cases, &is_failure),
            count(cases, &is_error),
            cases.iter().filter(|c| matches!(c, Case::Skipped(..))).count()
        );
        for case in cases {
            match case {
                Case::Skipped(name, why) => {
                    let _ = writeln!(
                        x,
                        "    <testcase name=\"{}\" classname=\"{}\" time=\"0.000\">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        escape(name),
                        escape(suite),
                        escape(why)
                    );
                }
                Case::Judged(t) => {
                    let _ = write!(
                        x,
                        "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
                        escape(&t.name),
                        escape(suite),
                        time_of(t)
                    );
                    match outcome(t, out_dir, root) {
                        None => x.push_str("/>\n"),
                        Some((element, kind, message, text)) => {
                            let _ = writeln!(
                                x,
                                ">\n      <{element} type=\"{kind}\" message=\"{}\">{}</{element}>\n    </testcase>",
                                escape(&message),
                                escape(&text)
                            );
                        }
                    }
                }
            }
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

/// The element (`failure` or `error`), its type, message and text, for a test that did not
/// pass clean.
fn outcome(
    t: &TestReport,
    out_dir: &Path,
    root: &Path,
) -> Option<(&'static str, &'static str, String, String)> {
    let detail = t.message.clone().unwrap_or_default();
    match t.verdict {
        // Could not be judged, and the configuration asks that this fail the run.
        Verdict::Unsettled if t.unsettled_fails => Some((
            "failure",
            "unsettled",
            "not judged, and `unsettled-fails` makes that fail the run".into(),
            detail,
        )),
        // Not shown to leak: it passes, with the reason in report.json and the summary.
        Verdict::Clean | Verdict::Unsettled => None,
        Verdict::Leak => {
            let failing: Vec<_> = t.failing_stacks().collect();
            let message = format!(
                "leaked {} in {} object(s): {} stack(s) over the threshold of {} B",
                human_bytes(t.retained_bytes),
                t.retained_objects,
                failing.len(),
                t.stack_threshold
            );
            let mut text = String::new();
            for st in &failing {
                let _ = writeln!(
                    text,
                    "{} in {} object(s), allocated at:",
                    human_bytes(st.bytes),
                    st.objects
                );
                // From the first frame of the user's code (std's allocation frames above it
                // say nothing about where the leak is).
                let first = crate::analysis::frames::identifying_frame(&st.frames, root)
                    .and_then(|f| st.frames.iter().position(|g| std::ptr::eq(f, g)))
                    .unwrap_or(0);
                // Down to the test's own frames: what calls the test (libtest, the closure
                // it stores) says nothing about the leak, as in the terminal.
                let own = st.frames[first..]
                    .iter()
                    .take_while(|f| !crate::report::human::is_harness_frame(f))
                    .take(6);
                for f in own {
                    let _ = writeln!(text, "    {}", crate::report::human::frame_text(f, root));
                }
                for line in st
                    .retained_by
                    .iter()
                    .flat_map(|h| crate::report::human::held_text(h, root))
                {
                    let _ = writeln!(text, "  {line}");
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

/// Text as XML character data or an attribute value: markup escaped, and the characters
/// XML 1.0 cannot hold (most control characters) replaced, so any test output loads.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
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
        assert!(
            xml.contains("<testcase name=\"tests::lenient\" classname=\"p\" time=\"0.000\"/>"),
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
