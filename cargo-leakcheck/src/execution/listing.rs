//! Listing: which tests each binary holds (libtest's `--list`), filtered by the selection and
//! the shard, each with the settings it will run under.

use crate::config::Effective;
use crate::execution::cargo::{Harness, TestBinary};
use crate::execution::partition::Dealer;
use crate::execution::process::{base_command, through_wrapper};
use crate::execution::run_config::RunConfig;
use std::path::PathBuf;
use std::process::Stdio;

/// The libtest name no test has: running it runs the harness alone, which is the
/// baseline every test of the binary is compared with.
pub const BASELINE_FILTER: &str = "__leakcheck_baseline__no_such_test__";

/// One test to run.
#[derive(Clone, Debug)]
pub struct TestCase {
    /// Index into the binaries list.
    pub binary: usize,
    /// The full libtest name (the target name for a `harness = false` target).
    pub name: String,
    /// Whether the test is `#[ignore]`d (then it needs `--include-ignored` to run).
    pub ignored: bool,
    /// A doc-test that passes by panicking (`should_panic`): its harness, rustdoc, is
    /// outside its process, which ends with a failure status when it passes.
    pub passes_by_panicking: bool,
    /// Its settings, computed once when it was listed.
    pub settings: Effective,
}

/// The tests of one binary to run, and how many more match the filters but are
/// `#[ignore]`d (not run without `--include-ignored`).
pub struct Listing {
    /// The tests to run.
    pub tests: Vec<TestCase>,
    /// The ignored tests left out.
    pub ignored: Vec<String>,
    /// Every test of the binary, whatever the filters: the entry-point search reads
    /// libtest's layout from all of them (a lone selected test cannot pin it down).
    pub names: Vec<String>,
    /// How the binary runs its tests, as listing found: a `harness = false` target that
    /// lists trials runs them one by one.
    pub harness: Harness,
}

/// Why a binary's tests could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The executable could not be started.
    #[error("could not run `{}`: {source}", path.display())]
    Spawn {
        /// The executable.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--list` ended in failure.
    #[error("`{} --list` failed ({status}): {stderr}", path.display())]
    Failed {
        /// The executable.
        path: PathBuf,
        /// How it ended.
        status: std::process::ExitStatus,
        /// What it wrote to stderr, trimmed.
        stderr: String,
    },
}

/// Lists the tests of one binary. A `harness = false` target is asked to list its trials as
/// libtest lists tests (as nextest asks it); one that does not (it fails, or lists nothing)
/// is one test named after the target. Only one whose executable spells the option's value
/// (`terse`) is asked: a plain `main` that ignores its arguments would run its whole test
/// to answer.
pub fn list_tests(binary: &TestBinary, config: &RunConfig) -> Result<Listing, ListError> {
    let list = |filters: &[String], extra: &[&str]| list_names(binary, config, filters, extra);
    let harness = match binary.harness {
        Harness::Whole
            if may_list(&binary.path) && list(&[], &[]).is_ok_and(|names| !names.is_empty()) =>
        {
            Harness::Trials
        }
        other => other,
    };
    if let (Harness::Doc, Some(doc)) = (harness, &binary.doc) {
        // rustdoc applied the filters already; what it ignored is said with the doc-tests.
        return Ok(Listing {
            tests: (doc.tests.iter().filter(|t| t.runs))
                .map(|t| TestCase {
                    binary: 0,
                    name: t.name.clone(),
                    ignored: false,
                    passes_by_panicking: t.should_panic,
                    settings: config.settings.of(&t.name),
                })
                .collect(),
            ignored: Vec::new(),
            names: Vec::new(),
            harness,
        });
    }
    if !harness.lists() {
        return Ok(Listing {
            tests: vec![TestCase {
                binary: 0,
                name: binary.target.clone(),
                ignored: false,
                passes_by_panicking: false,
                settings: config.settings.of(&binary.target),
            }],
            ignored: Vec::new(),
            names: Vec::new(),
            harness,
        });
    }
    let mut listing = list_filtered(config, &list)?;
    listing.harness = harness;
    Ok(listing)
}

/// Whether an executable may answer `--list --format terse`: a harness that parses that
/// option holds the word `terse` among its strings.
fn may_list(exe: &std::path::Path) -> bool {
    const WORD: &[u8] = b"terse";
    std::fs::read(exe).is_ok_and(|data| data.windows(WORD.len()).any(|w| w == WORD))
}

/// The names a binary lists (`name: test` lines of `--list --format terse`) with these
/// filters and options.
fn list_names(
    binary: &TestBinary,
    config: &RunConfig,
    filters: &[String],
    extra: &[&str],
) -> Result<Vec<String>, ListError> {
    let mut cmd = base_command(binary, config);
    cmd.arg("--list").arg("--format").arg("terse");
    cmd.args(filters).args(extra);
    let mut cmd = through_wrapper(cmd, config.wrapper);
    // A `harness = false` target asked whether it lists trials may be a plain `main`
    // that runs its test whatever it is asked: it reads nothing from the terminal.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = crate::execution::interrupt::output(&mut cmd).map_err(|source| ListError::Spawn {
        path: binary.path.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(ListError::Failed {
            path: binary.path.clone(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

/// Lists a binary's names with these filters and options (see [`list_names`]).
type ListFn<'a> = dyn Fn(&[String], &[&str]) -> Result<Vec<String>, ListError> + 'a;

/// The tests a listing binary has, as the filters select them.
fn list_filtered(config: &RunConfig, list: &ListFn<'_>) -> Result<Listing, ListError> {
    let filters = &config.filter.list_args;
    let ignored = list(filters, &["--ignored"])?;
    let all = if config.filter.ignored_only {
        ignored.clone()
    } else {
        list(filters, &[])?
    };
    // libtest lists ignored tests too; without filters, `all` is every test already.
    let names = if filters.is_empty() && !config.filter.ignored_only {
        all.clone()
    } else {
        list(&[], &[])?
    };
    let mut left_out = Vec::new();
    let tests = all
        .into_iter()
        .filter_map(|name| {
            let is_ignored = ignored.contains(&name);
            let wanted = config.filter.ignored_only || config.filter.include_ignored || !is_ignored;
            if !wanted {
                left_out.push(name);
                return None;
            }
            Some(TestCase {
                binary: 0,
                settings: config.settings.of(&name),
                name,
                ignored: is_ignored,
                passes_by_panicking: false,
            })
        })
        .collect();
    Ok(Listing {
        tests,
        ignored: left_out,
        names,
        harness: Harness::Libtest,
    })
}

/// Every name a listing binary has, and those of them it ignores: all that a run selecting
/// one test by its exact name needs to know (see [`exact_listing`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Names {
    pub all: Vec<String>,
    pub ignored: Vec<String>,
}

/// Lists a binary's names, ignored and not (two listings, no filter).
pub fn names_of(binary: &TestBinary, config: &RunConfig) -> Result<Names, ListError> {
    Ok(Names {
        all: list_names(binary, config, &[], &[])?,
        ignored: list_names(binary, config, &[], &["--ignored"])?,
    })
}

/// The listing a run whose filter is `--exact NAME` gets from a listing binary, answered
/// from its `names` as libtest answers `--exact` (the whole name, nothing else); None for
/// any other filter.
pub fn exact_listing(config: &RunConfig, names: &Names) -> Option<Result<Listing, ListError>> {
    let [exact, wanted] = config.filter.list_args.as_slice() else {
        return None;
    };
    if exact != "--exact" || config.filter.partition.is_some() {
        return None;
    }
    let list = |filters: &[String], extra: &[&str]| -> Result<Vec<String>, ListError> {
        let from = match extra {
            [] => &names.all,
            ["--ignored"] => &names.ignored,
            _ => unreachable!("list_filtered asks for `--ignored` or nothing"),
        };
        Ok(from
            .iter()
            .filter(|n| filters.is_empty() || *n == wanted)
            .cloned()
            .collect())
    };
    Some(list_filtered(config, &list))
}

/// The tests of every binary, as far as the filters and the partition select them.
pub struct Selected {
    /// The tests to run, binary by binary.
    pub tests: Vec<TestCase>,
    /// Ignored tests left out, by binary index and name.
    pub ignored: Vec<(usize, String)>,
    /// Tests left out because they belong to another shard of `--partition`.
    pub other_shards: usize,
    /// The binaries that could not be listed, with the reason.
    pub errors: Vec<(usize, ListError)>,
    /// By binary: every test it has, whatever the filters (see [`Listing::names`]).
    pub names: Vec<Vec<String>>,
}

/// Lists every binary's tests and keeps those of this run's shard; a binary listing found
/// to list trials of its own harness is marked so.
pub fn list_all(binaries: &mut [TestBinary], config: &RunConfig) -> Selected {
    let mut selected = Selected {
        tests: Vec::new(),
        ignored: Vec::new(),
        other_shards: 0,
        errors: Vec::new(),
        names: vec![Vec::new(); binaries.len()],
    };
    let mut dealer = config.filter.partition.map(Dealer::new);
    for (i, b) in binaries.iter_mut().enumerate() {
        let listing = match list_tests(b, config) {
            Ok(listing) => listing,
            Err(e) => {
                selected.errors.push((i, e));
                continue;
            }
        };
        b.harness = listing.harness;
        let (mut tests, mut ignored) = (listing.tests, listing.ignored);
        selected.names[i] = listing.names;
        if let Some(dealer) = dealer.as_mut() {
            // Ignored tests are dealt too, so the shards' counts add up to the suite's.
            let id = b.id();
            let listed = tests.len() + ignored.len();
            tests.retain(|t| dealer.keeps(&id, &t.name));
            ignored.retain(|name| dealer.keeps(&id, name));
            selected.other_shards += listed - tests.len() - ignored.len();
        }
        selected
            .ignored
            .extend(ignored.into_iter().map(|name| (i, name)));
        selected.tests.extend(tests.into_iter().map(|mut c| {
            c.binary = i;
            c
        }));
    }
    selected
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::run_config::TestFilter;

    /// `exact_listing` answers as libtest answers `--exact NAME`, over what the binary has.
    #[test]
    fn a_test_selected_by_its_exact_name_is_listed_from_the_binary_s_names() {
        let ws = crate::execution::cargo::Workspace {
            root: "/nowhere".into(),
            target_dir: "/nowhere/target".into(),
            members: Default::default(),
            toolchain_libdir: None,
        };
        let (config, cli) = (crate::config::Config::default(), Default::default());
        let history = crate::execution::history::History::default();
        let names = Names {
            all: vec!["a::one".into(), "a::one_more".into(), "a::slow".into()],
            ignored: vec!["a::slow".into()],
        };
        let listed = |args: &[&str], ignored_only: bool| {
            let filter = TestFilter {
                list_args: args.iter().map(|a| a.to_string()).collect(),
                ignored_only,
                ..TestFilter::default()
            };
            let run = RunConfig {
                workspace: &ws,
                runtime: std::path::Path::new("/nowhere/runtime.so"),
                work_dir: std::path::Path::new("/nowhere/work"),
                jobs: 1,
                timeout: None,
                settings: crate::config::Layers {
                    config: &config,
                    cli: &cli,
                },
                filter: &filter,
                wrapper: &[],
                verbose: false,
                progress: false,
                known_layout: None,
                memo: None,
                history: &history,
            };
            exact_listing(&run, &names).map(|l| {
                let l = l.unwrap();
                let tests: Vec<String> = l.tests.iter().map(|t| t.name.clone()).collect();
                (tests, l.ignored, l.names)
            })
        };
        // The whole name only: `a::one` does not select `a::one_more`.
        let (tests, ignored, all) = listed(&["--exact", "a::one"], false).unwrap();
        assert_eq!(tests, ["a::one"]);
        assert!(ignored.is_empty());
        assert_eq!(all, names.all, "every name, for the entry points");
        // An ignored test is left out unless ignored tests are asked for.
        assert_eq!(
            listed(&["--exact", "a::slow"], false).unwrap(),
            (vec![], vec!["a::slow".to_string()], names.all.clone())
        );
        assert_eq!(
            listed(&["--exact", "a::slow"], true).unwrap().0,
            ["a::slow"]
        );
        // A name the binary does not have selects nothing.
        assert!(listed(&["--exact", "a::gone"], false).unwrap().0.is_empty());
        // Any other filter is listed by the binary itself.
        assert!(listed(&["a::one"], false).is_none());
        assert!(listed(&[], false).is_none());
    }

    #[test]
    fn only_an_executable_that_spells_the_listing_option_is_asked_to_list() {
        let dir = std::env::temp_dir().join(format!("leakcheck-may-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let harness = dir.join("harness");
        let plain = dir.join("plain");
        std::fs::write(&harness, b"\x7fELF...--format\0terse\0json\0").unwrap();
        std::fs::write(&plain, b"\x7fELF...fn main, no options here").unwrap();
        assert!(may_list(&harness));
        assert!(!may_list(&plain));
        assert!(!may_list(&dir.join("missing")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
