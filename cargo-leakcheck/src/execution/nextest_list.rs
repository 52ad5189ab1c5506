//! Which tests a `cargo nextest run` selected, from `cargo nextest list --message-format
//! json` with the run's own filters: the tests nextest never started (fail-fast, a crash of
//! nextest) are then known by name, and a `--partition` shard knows how many tests the
//! other shards hold.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

/// What nextest's listing says about the tests of one run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NextestListing {
    /// The tests the filters select, as `<binary id> <name>`.
    pub selected: BTreeSet<String>,
    /// Tests left out because they are `#[ignore]`d.
    pub ignored: usize,
    /// Tests left out because they belong to another shard of `--partition`.
    pub other_shards: usize,
}

/// Options of `cargo nextest run` that `cargo nextest list` refuses, with whether each
/// takes a value. They change how tests run or are reported, never which are selected.
const RUN_ONLY: &[(&str, bool)] = &[
    ("--no-run", false),
    ("-j", true),
    ("--test-threads", true),
    ("--retries", true),
    ("--flaky-result", true),
    ("--fail-fast", false),
    ("--no-fail-fast", false),
    ("--max-fail", true),
    ("--debugger", true),
    ("--tracer", true),
    ("--no-tests", true),
    ("--no-capture", false),
    ("--nocapture", false),
    ("--stress-count", true),
    ("--stress-duration", true),
    ("--failure-output", true),
    ("--success-output", true),
    ("--status-level", true),
    ("--final-status-level", true),
    ("--no-output-indent", false),
    ("--hide-progress-bar", false),
    ("--no-input-handler", false),
    ("--max-progress-running", true),
    ("--message-format", true),
    ("--message-format-version", true),
];

/// The arguments of `cargo nextest list` that select what `run_args` selected: the run's
/// arguments without the options only `run` takes (what follows `--` goes to the test
/// binaries and stays). `None` when the run's selection cannot be listed: `--rerun` picks
/// tests from a recording, `--no-run` runs none.
pub fn list_args(run_args: &[String]) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut it = run_args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a.clone());
            out.extend(it.cloned());
            break;
        }
        if a == "--rerun" || a.starts_with("--rerun=") || a.starts_with("-R") || a == "--no-run" {
            return None;
        }
        let (flag, inline_value) = match a.split_once('=') {
            Some((f, _)) if f.starts_with("--") => (f, true),
            _ => (a.as_str(), false),
        };
        // `-j4` is `-j 4`.
        let short_joined = a.len() > 2 && a.starts_with("-j") && !a.starts_with("--");
        if short_joined {
            continue;
        }
        match RUN_ONLY.iter().find(|(f, _)| *f == flag) {
            Some((_, takes_value)) => {
                if *takes_value && !inline_value {
                    it.next();
                }
            }
            None => out.push(a.clone()),
        }
    }
    Some(out)
}

/// Why the tests nextest selected are not known.
#[derive(Debug, thiserror::Error)]
pub enum NextestListError {
    /// `cargo nextest list` could not be started.
    #[error("could not run `cargo nextest list`: {0}")]
    Spawn(std::io::Error),
    /// It ran and failed; the last line it printed on stderr says why, if it printed any.
    #[error("`cargo nextest list` failed ({status}){}", last.as_ref().map(|l| format!(": {l}")).unwrap_or_default())]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its last non-blank line of stderr, trimmed.
        last: Option<String>,
    },
    /// Its output is not JSON.
    #[error("not the JSON nextest lists: {0}")]
    NotJson(serde_json::Error),
    /// Its JSON has no suites.
    #[error("no `rust-suites` in nextest's listing")]
    NoSuites,
    /// The caller did not list at all, for the reason given (the run picked its tests from
    /// a recording, say).
    #[error("{0}")]
    NotListed(&'static str),
}

/// Reads the JSON `cargo nextest list --message-format json` prints.
pub fn parse(json: &str) -> Result<NextestListing, NextestListError> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(NextestListError::NotJson)?;
    let suites = value
        .get("rust-suites")
        .and_then(|s| s.as_object())
        .ok_or(NextestListError::NoSuites)?;
    let mut listing = NextestListing::default();
    for (key, suite) in suites {
        let id = suite
            .get("binary-id")
            .and_then(|v| v.as_str())
            .unwrap_or(key);
        let Some(cases) = suite.get("testcases").and_then(|c| c.as_object()) else {
            continue;
        };
        for (name, case) in cases {
            let matched = &case["filter-match"];
            match (matched["status"].as_str(), matched["reason"].as_str()) {
                (Some("matches"), _) => {
                    listing.selected.insert(format!("{id} {name}"));
                }
                (_, Some("ignored")) => listing.ignored += 1,
                (_, Some("partition")) => listing.other_shards += 1,
                _ => {}
            }
        }
    }
    Ok(listing)
}

/// Runs `cargo nextest list` with `args` (see [`list_args`]) and `envs`, as the run did.
pub fn list(
    program: &Path,
    args: &[String],
    envs: &[(String, String)],
) -> Result<NextestListing, NextestListError> {
    let out = Command::new(program)
        .args(["nextest", "list", "--message-format", "json"])
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .map_err(NextestListError::Spawn)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(NextestListError::Failed {
            status: out.status,
            last: last.map(|l| l.trim().to_string()),
        });
    }
    parse(&String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn run_only_options_are_left_out_with_their_values_and_filters_kept() {
        let run = strings(&[
            "--no-fail-fast",
            "-j",
            "4",
            "-j2",
            "--retries=2",
            "--max-fail",
            "3",
            "--partition",
            "hash:1/3",
            "-E",
            "test(foo)",
            "--features",
            "x",
            "--status-level=all",
            "--",
            "--include-ignored",
            "-j",
            "name",
        ]);
        assert_eq!(
            list_args(&run).unwrap(),
            strings(&[
                "--partition",
                "hash:1/3",
                "-E",
                "test(foo)",
                "--features",
                "x",
                "--",
                "--include-ignored",
                "-j",
                "name",
            ])
        );
        assert_eq!(list_args(&strings(&["--rerun", "latest"])), None);
        assert_eq!(list_args(&strings(&["-R", "latest"])), None);
        assert_eq!(list_args(&strings(&["--no-run"])), None);
    }

    /// The shape nextest 0.9 prints (trimmed to what is read).
    const LISTED: &str = r#"{
      "test-count": 5,
      "rust-suites": {
        "demo": { "binary-id": "demo", "testcases": {
          "a": { "ignored": false, "filter-match": { "status": "matches" } },
          "b": { "ignored": false, "filter-match": { "status": "mismatch", "reason": "partition" } },
          "c": { "ignored": true, "filter-match": { "status": "mismatch", "reason": "ignored" } }
        }},
        "demo::it": { "binary-id": "demo::it", "testcases": {
          "d": { "ignored": false, "filter-match": { "status": "matches" } },
          "e": { "ignored": false, "filter-match": { "status": "mismatch", "reason": "string" } }
        }}
      }
    }"#;

    #[test]
    fn a_listing_names_the_selected_tests_and_counts_ignored_and_other_shards() {
        let listing = parse(LISTED).unwrap();
        assert_eq!(
            listing.selected,
            ["demo a", "demo::it d"]
                .into_iter()
                .map(String::from)
                .collect()
        );
        assert_eq!((listing.ignored, listing.other_shards), (1, 1));
        assert!(parse("{}").unwrap_err().to_string().contains("rust-suites"));
        assert!(parse("Finished")
            .unwrap_err()
            .to_string()
            .contains("not the JSON"));
    }
}
