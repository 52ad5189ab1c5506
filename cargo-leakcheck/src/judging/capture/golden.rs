//! The golden corpus: every case under `testdata/golden` judged again from its files, and
//! compared with its `expected.json` (`LEAKCHECK_BLESS=1` rewrites those instead).

use super::*;
use crate::analysis::verdict::{self, Policy};
use crate::config;
use crate::evidence::load;
use crate::evidence::symbols::Replay;
use crate::evidence::test_run::ExtraRunsOutcome;
use crate::evidence::{Entry, Record};
use std::collections::BTreeSet;
use std::time::Duration;

fn end_of(word: &str) -> Result<ProcessEnd, String> {
    let number = |n: &str| {
        n.parse::<i32>()
            .map_err(|_| format!("bad process end `{word}`"))
    };
    Ok(match word.split_once(' ') {
        Some(("exit", n)) => ProcessEnd::Exited(number(n)?),
        Some(("signal", n)) => ProcessEnd::Signaled(number(n)?),
        Some(("spawn-failed:", why)) => ProcessEnd::SpawnFailed(why.to_owned()),
        _ if word == "timeout" => ProcessEnd::TimedOut,
        _ if word == "interrupted" => ProcessEnd::Interrupted,
        _ => return Err(format!("bad process end `{word}`")),
    })
}

fn process_of(p: &ProcessFile, dir: &Path) -> Result<ProcessResult, String> {
    let at = |name: &String| dir.join(name);
    let missing = dir.join("missing");
    Ok(ProcessResult {
        end: end_of(&p.end)?,
        duration: Duration::ZERO,
        timeout: Duration::from_millis(p.timeout_ms),
        peak_rss_kib: None,
        record: match &p.record {
            Some(f) => Some(Record::parse(
                &std::fs::read_to_string(at(f)).map_err(|e| format!("{}: {e}", at(f).display()))?,
            )),
            None => None,
        },
        record_file: p.record.as_ref().map(at),
        preload_dumps: p.preload_dumps.iter().map(at).collect(),
        app_dumps: p.app_dumps.iter().map(at).collect(),
        run_dumps: p
            .run_dumps
            .iter()
            .map(|d| d.iter().map(at).collect())
            .collect(),
        stdout: p.stdout.as_ref().map_or_else(|| missing.clone(), at),
        stderr: p.stderr.as_ref().map_or_else(|| missing.clone(), at),
        left_running: p.left_running.clone(),
        children: p
            .children
            .iter()
            .map(|c| crate::evidence::ChildProcess {
                exe: c.exe.clone(),
                run: c.run,
                checked: c.checked,
                dump: c.dump.as_ref().map(at),
            })
            .collect(),
    })
}

/// Judges the case in `dir` again, from its files alone.
pub fn replay(dir: &Path) -> Result<TestReport, String> {
    replay_with(dir, |_| {})
}

/// Judges the case in `dir` again, its description changed by `change` first.
fn replay_with(dir: &Path, change: impl Fn(&mut CaseFile)) -> Result<TestReport, String> {
    let path = dir.join("case.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut case: CaseFile =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    change(&mut case);
    let (config, _) = match &case.config {
        Some(text) => {
            config::parse(text, &dir.join("leakcheck.toml")).map_err(|e| e.to_string())?
        }
        None => (config::Config::default(), Vec::new()),
    };
    let result = process_of(&case.own, dir)?;
    let counting = case
        .counting
        .as_ref()
        .map(|p| process_of(p, dir))
        .transpose()?;
    let baseline = case
        .baseline
        .as_ref()
        .map(|p| process_of(p, dir))
        .transpose()?;
    let extra_runs = ExtraRunsOutcome {
        made: case.extra_runs_made,
        status: case.extra_runs.clone(),
    };
    let entry = case.entry.map(|(address, start, end)| Entry {
        address,
        file_range: (start, end),
    });
    let settings = config.effective(&case.name, &case.cli);
    let mut symbols = Replay::new(case.symbols);
    let (bin, _) = load::binary(
        Path::new(&case.exe),
        case.custom_allocator,
        baseline.as_ref(),
        std::sync::Arc::new(case.collections.clone().unwrap_or_default()),
    );
    let id = TestIdentity {
        package: &case.package,
        binary: &case.binary,
        kind: case.kind,
        name: &case.name,
    };
    let policy = Policy {
        effective: &settings,
        suppressions: config.suppressions_for(&case.name).collect(),
    };
    let suite = suite_of(&case.suite);
    let evidence = load::test(
        &result,
        counting.as_ref(),
        case.method,
        &extra_runs,
        entry.as_ref(),
        &suite,
    );
    Ok(verdict::judge(&id, &evidence, &bin, &mut symbols, &policy))
}

/// The run's processes a case kept, to compare its children's losses with.
fn suite_of(
    files: &[crate::judging::suite::SuiteProcessFile],
) -> crate::evidence::test_run::SuiteProcesses {
    let mut suite = crate::evidence::test_run::SuiteProcesses::default();
    crate::judging::suite::add_files(&mut suite, files);
    suite
}

/// The first place two JSON values differ, as a path and both sides.
fn first_difference(
    path: &str,
    got: &serde_json::Value,
    want: &serde_json::Value,
) -> Option<String> {
    use serde_json::Value;
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let mut keys: Vec<&String> = g.keys().chain(w.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let (a, b) = (
                    g.get(k).unwrap_or(&Value::Null),
                    w.get(k).unwrap_or(&Value::Null),
                );
                first_difference(&format!("{path}.{k}"), a, b)
            })
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => g
            .iter()
            .zip(w)
            .enumerate()
            .find_map(|(i, (a, b))| first_difference(&format!("{path}[{i}]"), a, b)),
        _ if got == want => None,
        // serde_json reads back a float it wrote to within its last digit or two.
        (Value::Number(g), Value::Number(w))
            if g.as_f64()
                .zip(w.as_f64())
                .is_some_and(|(g, w)| (g - w).abs() <= 1e-9 * w.abs().max(1.0)) =>
        {
            None
        }
        _ => Some(format!("{path}: got {got}, expected {want}")),
    }
}

/// A test's or a bench's report as a JSON value, written first as `expected.json` (in its
/// own field order) when blessing.
fn judged(report: &impl serde::Serialize, expected: &Path, bless: bool) -> serde_json::Value {
    if bless {
        write_json(expected, report).unwrap();
    }
    serde_json::to_value(report).unwrap()
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden")
}

/// The cases the corpus's README lists, one table row each (`| \`name\` | …`).
fn listed_cases() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(corpus().join("README.md")).unwrap();
    readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .collect()
}

#[test]
fn the_corpus_lists_every_kind_of_case() {
    let cases = listed_cases();
    let has = |prefix: &str| cases.iter().filter(|c| c.starts_with(prefix)).count();
    assert!(cases.len() >= 29, "{} cases", cases.len());
    for (prefix, at_least) in [("leak", 8), ("clean", 4), ("bench-", 4), ("service-", 4)] {
        assert!(has(prefix) >= at_least, "{prefix}: {}", has(prefix));
    }
}

#[test]
fn every_golden_case_is_judged_as_it_was() {
    let bless = std::env::var_os("LEAKCHECK_BLESS").is_some_and(|v| v == "1");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus())
        .expect("the golden corpus is in the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.json").is_file() || p.join("growth.json").is_file())
        .collect();
    dirs.sort();
    let found: BTreeSet<String> = dirs
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        found,
        listed_cases(),
        "the golden cases on disk are the ones its README's table lists"
    );
    let mut failures = Vec::new();
    for dir in &dirs {
        // A test's case, or a bench's or service's; blessed in the report's own field order.
        let expected_path = dir.join("expected.json");
        let got = match dir.join("case.json").is_file() {
            true => replay(dir).map(|r| judged(&r, &expected_path, bless)),
            false => growth::replay(dir).map(|r| judged(&r, &expected_path, bless)),
        }
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        if bless {
            continue;
        }
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&expected_path).unwrap()).unwrap();
        if let Some(d) = first_difference("", &got, &want) {
            failures.push(format!(
                "{}: {d}",
                dir.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden cases changed (LEAKCHECK_BLESS=1 accepts the new reports):\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}

#[test]
fn the_corpus_notices_a_rule_that_judges_differently() {
    // A threshold no stack reaches stands in for a broken rule: every leak case must then
    // differ from its expected report, at its verdict.
    let leaks: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("leak"))
        .collect();
    assert!(leaks.len() >= 5, "{leaks:?}");
    for dir in leaks {
        let report = replay_with(&dir, |c| c.cli.stack_threshold = Some(u64::MAX)).unwrap();
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
                .unwrap();
        assert_eq!(want["verdict"], "leak", "{}", dir.display());
        let difference = first_difference("", &serde_json::to_value(&report).unwrap(), &want);
        assert!(
            difference
                .as_deref()
                .is_some_and(|d| d.starts_with(".stack_threshold")
                    || d.starts_with(".verdict")
                    || d.starts_with(".stacks")
                    || d.starts_with(".collections")),
            "{}: {difference:?}",
            dir.display()
        );
        assert_eq!(
            report.verdict,
            crate::model::Verdict::Clean,
            "{}",
            dir.display()
        );
    }
}

#[test]
fn the_growth_cases_notice_a_rule_that_judges_differently() {
    // A growth threshold no stack reaches stands in for a broken rule: every growing bench
    // and service must then be judged clean, and so differ from its expected report.
    let growing: Vec<PathBuf> = [
        "bench-growing",
        "bench-growing-in-under-a-second",
        "service-growing-held",
    ]
    .iter()
    .map(|name| corpus().join(name))
    .collect();
    for dir in growing {
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
                .unwrap();
        assert_eq!(want["verdict"], "leak", "{}", dir.display());
        let report = growth::replay_with(&dir, |c| c.threshold = u64::MAX).unwrap();
        assert_eq!(
            report.verdict,
            crate::model::Verdict::Clean,
            "{}",
            dir.display()
        );
    }
    // And the short bench, judged on the four snapshots of a 250 ms clock, is too short
    // for the rule rather than clean.
    let dir = corpus().join("bench-growing-in-under-a-second");
    let report = growth::replay_with(&dir, |c| {
        let n = c.dumps.len();
        c.dumps = (1..=4).map(|i| c.dumps[i * (n - 1) / 4].clone()).collect();
    })
    .unwrap();
    assert_eq!(
        report.verdict,
        crate::model::Verdict::Unsettled,
        "{report:?}"
    );
}

#[test]
fn the_suppressions_written_for_a_case_allow_its_leaks_on_the_next_run() {
    // What `--write-suppressions` writes for a failing case, read back as its configuration:
    // every entry is used, and nothing fails any more.
    let mut checked = 0;
    for name in listed_cases() {
        let dir = corpus().join(&name);
        if !dir.join("case.json").is_file() {
            continue;
        }
        let report = replay(&dir).unwrap();
        if !report.stacks.iter().any(|s| s.fails) && !report.collections.iter().any(|c| c.fails) {
            continue;
        }
        let mut run = crate::model::Report::example();
        run.tests = vec![report];
        let written = crate::report::suppressions::entries(&run, Path::new("/tmp/gsrc"));
        let entries = written.matches("[[suppress]]").count();
        assert!(entries > 0, "{name}: nothing written");
        let again = replay_with(&dir, |c| c.config = Some(written.clone())).unwrap();
        let used = |i: usize| {
            again.stacks.iter().any(|s| s.suppression == Some(i))
                || again.collections.iter().any(|c| c.suppression == Some(i))
        };
        let unused: Vec<usize> = (0..entries).filter(|&i| !used(i)).collect();
        assert!(
            unused.is_empty(),
            "{name}: entries {unused:?} of\n{written}\nmatch nothing"
        );
        assert!(
            !again.stacks.iter().any(|s| s.fails) && !again.collections.iter().any(|c| c.fails),
            "{name}: still fails with\n{written}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "{checked} failing cases");
}
