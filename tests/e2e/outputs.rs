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
    let sarif_path = path.with_extension("sarif");
    let _ = std::fs::remove_file(&sarif_path);
    let run = run_fixture(
        fixture,
        &[
            "--junit",
            path.to_str().unwrap(),
            "--sarif",
            sarif_path.to_str().unwrap(),
        ],
    );
    let xml = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no JUnit file ({e}); stderr:\n{}", run.stderr));
    assert!(run.stderr.contains("Wrote JUnit XML"), "{}", run.stderr);
    check_sarif(fixture, &sarif_path, &run);
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
        // nextest's binary id: the package for the library's unit tests, `package::target`
        // for an integration test (the fixtures name no integration test like their lib).
        let id = if row.binary == package.replace('-', "_") {
            package.to_string()
        } else {
            format!("{package}::{}", row.binary)
        };
        assert_eq!(case.classname, id, "{}", row.test);
        let expected = match row.verdict {
            "clean" | "unsettled" => ("", ""),
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

/// The SARIF file of the same run: a `leak` result at every leaking row's site, naming its
/// test, and nothing for a test that does not leak.
fn check_sarif(fixture: &str, path: &std::path::Path, run: &crate::harness::Run) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no SARIF file ({e}); stderr:\n{}", run.stderr));
    let sarif: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let at = |r: &serde_json::Value| {
        let place = &r["locations"][0]["physicalLocation"];
        let file = place["artifactLocation"]["uri"]
            .as_str()
            .unwrap_or("")
            .to_string();
        (
            file,
            place["region"]["startLine"].as_u64().unwrap_or(0) as u32,
        )
    };
    let rows = EXPECTED.iter().filter(|e| e.fixture == fixture && !e.bench);
    for row in rows {
        let named = |r: &&serde_json::Value| {
            let text = r["message"]["text"].as_str().unwrap_or("");
            text.contains(&format!(" {}`", row.test))
        };
        let found: Vec<_> = results.iter().filter(named).collect();
        match (row.verdict, row.site) {
            ("leak", Some(site)) => {
                let site = leak_site(fixture, site);
                assert!(
                    found.iter().any(|r| r["ruleId"] == "leak" && at(r) == site),
                    "{}: a result at {site:?}:\n{text}",
                    row.test
                );
            }
            ("leak", None) => assert!(!found.is_empty(), "{}:\n{text}", row.test),
            _ => assert!(found.is_empty(), "{}: no result:\n{text}", row.test),
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

/// In GitHub Actions: an `::error` per failing stack at the leak's line (at most 10, then a
/// notice), and a job summary appended to `$GITHUB_STEP_SUMMARY`.
#[test]
fn github_actions_get_annotations_at_the_leak_sites_and_a_job_summary() {
    let fixture = "tests/fixtures/leaky";
    let project = crate::harness::copy_fixture(fixture);
    let summary = scratch().join("github").join("summary.md");
    std::fs::create_dir_all(summary.parent().unwrap()).unwrap();
    std::fs::write(&summary, "earlier step's summary\n").unwrap();
    let output = crate::harness::tool()
        .arg("test")
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(scratch().join("targets/tests_fixtures_leaky--github"))
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_WORKSPACE", &project)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    let errors: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::error "))
        .collect();
    assert_eq!(errors.len(), 10, "GitHub shows 10 per step:\n{stdout}");
    for line in &errors {
        // ::error file=F,line=N,title=leak in NAME::MESSAGE
        let props = line["::error ".len()..].split("::").next().unwrap();
        let get = |key: &str| {
            props
                .split(',')
                .find_map(|p| p.strip_prefix(&format!("{key}=")))
                .unwrap()
                .to_string()
        };
        // `leak in NAME`, or `leak in NAME and N more` for a line several tests leak at.
        let title = get("title");
        let named = title.strip_prefix("leak in ").unwrap();
        let name = named
            .split_once(" and ")
            .map_or(named, |(first, _)| first)
            .replace("%3A", ":");
        let row = EXPECTED
            .iter()
            .find(|e| e.fixture == fixture && e.test == name)
            .unwrap_or_else(|| panic!("{name} is in the table"));
        let (file, site) = leak_site(fixture, row.site.expect("leaks have a site"));
        let line_no: u32 = get("line").parse().unwrap();
        assert_eq!(get("file"), file, "{line}");
        // A test's other failing stacks allocate a line or two from its marked site.
        assert!(line_no.abs_diff(site) <= 3, "{line}: site at {file}:{site}");
    }
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("::notice title=cargo-leakcheck::")
                && l.contains("more leaking allocation site(s)")),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(
        text.starts_with("earlier step's summary\n## cargo-leakcheck\n"),
        "appended:\n{text}"
    );
    let (file, line) = leak_site(fixture, "forget_vec");
    assert!(
        text.contains(&format!("| leak | `leaky tests::forget_vec` | 8.0 KiB | `leaky::tests::forget_vec` ({file}:{line})<br>unreachable, no cycle: nothing points to these objects")),
        "{text}"
    );
    // A growing collection is named once in its test's row.
    let registry = text
        .lines()
        .find(|l| l.contains("`leaky tests::growing_global_registry`"))
        .unwrap_or_else(|| panic!("a row for the registry test:\n{text}"));
    assert_eq!(
        registry.matches("Vec<String>, +64 entries per run").count(),
        1,
        "{registry}"
    );
    // Outside GitHub, none of it; and `--annotations github` asks for it anywhere.
    let run = |extra: &[&str]| {
        crate::harness::tool()
            .arg("test")
            .arg("--manifest-path")
            .arg(project.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(scratch().join("targets/tests_fixtures_leaky--github"))
            .args(extra)
            .args(["--lib", "--", "tests::forget_vec"])
            .output()
            .unwrap()
    };
    let plain = run(&[]);
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("::error"));
    let asked = run(&["--annotations", "github"]);
    assert!(
        String::from_utf8_lossy(&asked.stdout)
            .lines()
            .any(|l| l.starts_with(&format!("::error file={file},line={line},"))),
        "{}",
        String::from_utf8_lossy(&asked.stdout)
    );
}

/// google/pprof's profile messages, for decoding with prost.
mod proto {
    include!("pprof_proto.rs");
}

/// Reads a gzipped pprof profile.
fn read_profile(path: &std::path::Path) -> proto::Profile {
    use std::io::Read;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut bytes)
        .expect("gzip");
    <proto::Profile as prost::Message>::decode(bytes.as_slice()).expect("a pprof profile")
}

/// The `inuse_space` total of a gzipped pprof profile.
pub fn pprof_total_bytes(path: &std::path::Path) -> i64 {
    read_profile(path).sample.iter().map(|s| s.value[1]).sum()
}

/// Beside each flame graph, a gzipped pprof profile of the same stacks: it decodes with a
/// protobuf library, its totals are the test's in report.json and in the folded stacks, and
/// its frames are symbolized down to the leak site.
#[test]
fn pprof_profiles_decode_and_add_up_to_the_report() {
    let fixture = "tests/fixtures/leaky";
    let run = run_fixture(fixture, &[]);
    let mut checked = 0;
    for t in run.report()["tests"].as_array().unwrap() {
        if t["verdict"] != "leak" {
            assert!(t["artifacts"]["pprof"].is_null(), "{}", t["name"]);
            continue;
        }
        let path = run
            .out_dir
            .join(t["artifacts"]["pprof"].as_str().expect("a profile"));
        let p = read_profile(&path);
        let name = |i: i64| p.string_table[i as usize].clone();
        assert_eq!(name(p.sample_type[1].r#type), "inuse_space");
        assert_eq!(name(p.sample_type[0].r#type), "inuse_objects");
        let bytes_total: i64 = p.sample.iter().map(|s| s.value[1]).sum();
        let folded =
            std::fs::read_to_string(run.out_dir.join(t["artifacts"]["folded"].as_str().unwrap()))
                .unwrap();
        let folded_total: i64 = folded
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
            .sum();
        assert_eq!(bytes_total, folded_total, "{}", t["name"]);
        let stacks: Vec<&serde_json::Value> = t["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "leak")
            .collect();
        // A growing collection is a sample of its own: what one run added to it.
        let growing: Vec<&serde_json::Value> = t["collections"]
            .as_array()
            .map(|c| c.iter().filter(|c| c["fails"] == true).collect())
            .unwrap_or_default();
        // Where every leaked stack was retained by the test's own run, the totals are the
        // report's retained bytes and objects.
        if growing.is_empty() && stacks.iter().all(|s| s["bytes"].as_u64().unwrap() > 0) {
            assert_eq!(bytes_total as u64, t["retained_bytes"].as_u64().unwrap());
            let objects: i64 = p.sample.iter().map(|s| s.value[0]).sum();
            assert_eq!(objects as u64, t["retained_objects"].as_u64().unwrap());
        }
        // Every line of the profile is a frame of the report, name, file and line alike (a
        // frame the report has no file for has line 0, which pprof shows as the bare name),
        // and no function has a system_name for pprof to demangle again.
        let mut frames: std::collections::HashSet<(String, String, i64)> = stacks
            .iter()
            .flat_map(|s| s["frames"].as_array().unwrap())
            .chain(
                growing
                    .iter()
                    .flat_map(|c| c["allocated_at"].as_array().into_iter().flatten()),
            )
            .map(|f| {
                (
                    f["function"].as_str().unwrap().to_string(),
                    f["file"].as_str().unwrap_or("").to_string(),
                    f["line"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        // The frame on top of the program's own mappings.
        for s in stacks.iter() {
            match s["memory"].as_str() {
                Some("mapped") => frames.insert(("[mapped memory]".into(), String::new(), 0)),
                Some("mapped-file") => frames.insert(("[mapped file]".into(), String::new(), 0)),
                _ => false,
            };
        }
        // The frame naming a collection, with its type.
        for c in &growing {
            let kind = if c["root_kind"] == "thread-local" {
                "thread-local"
            } else {
                "static"
            };
            let at = match (c["file"].as_str(), c["line"].as_u64()) {
                (Some(f), Some(l)) => format!(" ({f}:{l})"),
                _ => String::new(),
            };
            let holder = format!(
                "{kind} `{}{}`{at}",
                c["root"].as_str().unwrap(),
                c["field"].as_str().unwrap_or("")
            );
            let named = format!(
                "[collection {holder}: {}]",
                c["type_name"].as_str().unwrap()
            );
            frames.insert((named, String::new(), 0));
        }
        for l in p.location.iter().flat_map(|l| &l.line) {
            let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
            assert_eq!(f.system_name, 0, "{}: {}", t["name"], name(f.name));
            let seen = (name(f.name), name(f.filename), l.line);
            assert!(
                frames.contains(&seen),
                "{}: {seen:?} is a report frame",
                t["name"]
            );
        }
        // The leak site is among the profile's lines.
        let row = EXPECTED
            .iter()
            .find(|e| e.fixture == fixture && e.test == t["name"] && e.binary == t["binary"])
            .unwrap();
        if let Some(site) = row.site {
            let (file, line) = leak_site(fixture, site);
            let found = p.location.iter().flat_map(|l| &l.line).any(|l| {
                let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
                name(f.filename).ends_with(&file) && l.line == i64::from(line)
            });
            assert!(found, "{}: {file}:{line} is in the profile", t["name"]);
        }
        checked += 1;
    }
    assert!(checked >= 10, "{checked} profiles checked");
}

/// Logs that scale: without a terminal, a line per test whose process did not pass as it
/// ends (as nextest prints it) and progress at most every few seconds; `--quiet` leaves
/// the totals only.
#[test]
fn logs_name_failing_tests_as_they_end_and_quiet_keeps_the_totals() {
    let run = run_fixture("tests/fixtures/misbehaving", &["--timeout", "20"]);
    for (status, name, why) in [
        ("FAIL", "tests::fails_after_leaking", "exit code 101"),
        ("CRASH", "tests::segfaults", "SIGSEGV"),
        ("CRASH", "tests::aborts", "SIGABRT"),
        ("TIMEOUT", "tests::hangs", "timed out"),
    ] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.trim_start().starts_with(status)
                    && l.contains(&format!("s] misbehaving {name}: "))
                    && l.contains(why)),
            "{status} {name}:\n{}",
            run.stderr
        );
    }
    // Passing tests get no line of their own, and progress is not a line per test.
    assert!(!run.stderr.contains("PASS ["), "{}", run.stderr);
    let progress = run
        .stderr
        .lines()
        .filter(|l| l.contains("tests done"))
        .count();
    assert!(progress <= 6, "{progress} progress lines:\n{}", run.stderr);

    let quiet = run_fixture("tests/fixtures/leaky", &["--quiet"]);
    assert_eq!(quiet.code, 3);
    assert!(
        quiet.stderr.contains(" Summary 28 tests: "),
        "{}",
        quiet.stderr
    );
    for noise in ["tests done", "Running", "LEAK ", "Compiling", "Finished"] {
        assert!(!quiet.stderr.contains(noise), "{noise}:\n{}", quiet.stderr);
    }
    let verbose = run_fixture("tests/fixtures/leaky", &["-v", "--lib"]);
    assert!(
        verbose.stderr.contains("PASS [")
            && verbose.stderr.contains("leaky tests::plain_alloc_and_drop"),
        "{}",
        verbose.stderr
    );
}
