//! Outputs for CI tools: the JUnit report, parsed with an XML parser and checked against
//! the verdict table.

use crate::expected::{EXPECTED, IGNORED};
use crate::harness::{leak_site, run_fixture, scratch};
use quick_xml::events::Event;
use std::collections::BTreeMap;

/// One `<testcase>`: its classname, and the element inside it (`failure`, `error`,
/// `skipped`, or empty for a pass) with its `type` and text.
#[derive(Debug, Default, Clone)]
struct Case {
    classname: String,
    outcome: String,
    kind: String,
    message: String,
    text: String,
}

/// Parses a JUnit document into its test cases by name, checking it is well-formed XML.
fn parse(xml: &str) -> BTreeMap<String, Case> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut cases = BTreeMap::new();
    let mut current: Option<(String, Case)> = None;
    let attr = |e: &quick_xml::events::BytesStart, name: &str| -> String {
        e.try_get_attribute(name)
            .unwrap()
            .map(|a| {
                a.normalized_value(quick_xml::XmlVersion::Explicit1_0)
                    .unwrap()
                    .into_owned()
            })
            .unwrap_or_default()
    };
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == b"testcase" => {
                let case = Case {
                    classname: attr(&e, "classname"),
                    ..Case::default()
                };
                let name = attr(&e, "name");
                // An empty <testcase/> is a pass and has no end tag.
                if xml[..reader.buffer_position() as usize].ends_with("/>") {
                    cases.insert(name, case);
                } else {
                    current = Some((name, case));
                }
            }
            Event::Start(e) | Event::Empty(e)
                if matches!(e.name().as_ref(), b"failure" | b"error" | b"skipped") =>
            {
                if let Some((_, case)) = current.as_mut() {
                    case.outcome = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                    case.kind = attr(&e, "type");
                    case.message = attr(&e, "message");
                }
            }
            Event::Text(t) => {
                if let Some((_, case)) = current.as_mut() {
                    case.text.push_str(&t.decode().unwrap());
                }
            }
            Event::GeneralRef(r) => {
                if let Some((_, case)) = current.as_mut() {
                    let name = r.decode().unwrap();
                    case.text.push_str(match name.as_ref() {
                        "amp" => "&",
                        "lt" => "<",
                        "gt" => ">",
                        "quot" => "\"",
                        "apos" => "'",
                        _ => "?",
                    });
                }
            }
            Event::End(e) if e.name().as_ref() == b"testcase" => {
                let (name, case) = current.take().unwrap();
                cases.insert(name, case);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    cases
}

/// The JUnit file of a fixture's run has a testcase per table row with the table's outcome;
/// a leak's failure names the allocating line and the flame graph.
fn check_junit(fixture: &str, package: &str) {
    let path = scratch()
        .join("junit")
        .join(format!("{}.xml", fixture.replace('/', "_")));
    let _ = std::fs::remove_file(&path);
    let run = run_fixture(fixture, &["--junit", path.to_str().unwrap()]);
    let xml = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no JUnit file ({e}); stderr:\n{}", run.stderr));
    assert!(run.stderr.contains("Wrote JUnit XML"), "{}", run.stderr);
    let cases = parse(&xml);
    let rows: Vec<_> = EXPECTED
        .iter()
        .filter(|e| e.fixture == fixture && !e.bench)
        .collect();
    assert_eq!(cases.len(), rows.len(), "{xml}");
    for row in rows {
        let case = cases
            .get(row.test)
            .unwrap_or_else(|| panic!("{} is not in the JUnit file:\n{xml}", row.test));
        assert_eq!(case.classname, format!("{package}::{}", row.binary));
        let expected = match row.verdict {
            "clean" => ("", ""),
            "leak" => ("failure", "leak"),
            "failed" => ("failure", "failed"),
            "crashed" => ("error", "crashed"),
            "timeout" => ("error", "timeout"),
            "unanalysable" => ("error", "unanalysable"),
            v if v == IGNORED => ("skipped", ""),
            other => panic!("no JUnit outcome for {other}"),
        };
        assert_eq!(
            (case.outcome.as_str(), case.kind.as_str()),
            expected,
            "{}: {case:?}",
            row.test
        );
        if let (Some(site), "leak") = (row.site, row.verdict) {
            let (file, line) = leak_site(fixture, site);
            assert!(
                case.text.contains(&format!("{file}:{line})")),
                "{}: the failure names {file}:{line}:\n{}",
                row.test,
                case.text
            );
            assert!(case.text.contains("flame graph: "), "{}", case.text);
            assert!(case.message.starts_with("leaked "), "{}", case.message);
        }
    }
}

#[test]
fn junit_lists_every_test_of_leaky_with_its_verdict_and_leak_site() {
    check_junit("tests/fixtures/leaky", "leaky");
}

#[test]
fn junit_marks_ignored_tests_skipped() {
    check_junit("tests/fixtures/token-macros", "token-macros");
}
