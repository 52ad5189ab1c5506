//! The validated configuration and the settings each test gets from its layers.

use crate::config::glob::Glob;
use crate::model::FrameReport;
use std::path::PathBuf;

/// Extra runs when none are configured: enough that a cache or a deferred free that settles
/// within a few runs is not taken for a leak, and a stack must keep growing over all of them
/// to count as one.
pub const DEFAULT_EXTRA_RUNS: u32 = 5;

/// The documented reference configuration, every key at its default.
#[cfg(test)]
pub const DEFAULT_CONFIG: &str = include_str!("../default-config.toml");

/// Where the configuration is looked for, relative to the workspace root, in order.
pub const FILE_NAMES: [&str; 2] = ["leakcheck.toml", ".config/leakcheck.toml"];

/// The most extra runs a test may be given.
pub const MAX_EXTRA_RUNS: u32 = leakcheck_protocol::MAX_EXTRA_RUNS;

/// One layer of settings: what `[defaults]`, a `[[tests]]` entry or the command line says;
/// `None` means "not said here".
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SettingsLayer {
    /// `stack-threshold`, bytes.
    pub stack_threshold: Option<u64>,
    /// `test-threshold`, bytes.
    pub test_threshold: Option<u64>,
    /// `one-time-fails`.
    pub one_time_fails: Option<bool>,
    /// `timeout`, seconds.
    pub timeout: Option<u64>,
    /// `extra-runs`: how many times a retaining test runs again in its process.
    pub extra_runs: Option<u32>,
    /// `unsettled-fails`: a test that could not be judged (`unsettled`) fails the run.
    #[serde(default)]
    pub unsettled_fails: Option<bool>,
}

/// A `[[tests]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRule {
    /// Which tests it applies to.
    pub filter: Glob,
    /// What it sets.
    pub settings: SettingsLayer,
    /// 1-based position among the `[[tests]]` entries.
    pub index: usize,
}

/// A `[[suppress]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suppression {
    /// Glob over demangled function names; any frame of a stack may match.
    pub frame: Glob,
    /// Why the leak is accepted.
    pub reason: String,
    /// Only for these tests, when given.
    pub filter: Option<Glob>,
    /// 1-based position among the `[[suppress]]` entries.
    pub index: usize,
    /// Line of the entry in its file.
    pub line: usize,
}

impl Suppression {
    /// Whether its `filter` (if any) selects the test.
    pub fn applies_to(&self, test: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(test))
    }

    /// Whether one of the stack's frames matches its `frame`.
    pub fn matches_stack(&self, frames: &[FrameReport]) -> bool {
        self.frame.matches_any(frames)
    }
}

/// A validated configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The file it came from (None: built-in defaults only).
    pub path: Option<PathBuf>,
    /// `[defaults]`.
    pub defaults: SettingsLayer,
    /// `[[tests]]`, in file order.
    pub tests: Vec<TestRule>,
    /// `[[suppress]]`, in file order.
    pub suppress: Vec<Suppression>,
    /// `[bench] growth-threshold`, bytes.
    pub bench_growth_threshold: Option<u64>,
    /// `[run] growth-threshold`, bytes: `cargo leakcheck run`'s.
    pub run_growth_threshold: Option<u64>,
    /// `[run] rss-growth-budget`: how much a service's resident set may grow over the run,
    /// whatever it is made of; None: RSS growth is explained, never failed on.
    pub run_rss_growth_budget: Option<u64>,
    /// `[[benches]]`, in file order.
    pub benches: Vec<BenchRule>,
    /// `[output]`: output name (`junit`, `sarif`) -> the file it goes to (relative to the
    /// workspace root) and the line that says so.
    pub outputs: std::collections::BTreeMap<String, (PathBuf, usize)>,
}

/// A `[[benches]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchRule {
    /// Which benchmarks it applies to.
    pub filter: Glob,
    /// Its `growth-threshold`, bytes.
    pub growth_threshold: Option<u64>,
    /// 1-based position among the `[[benches]]` entries.
    pub index: usize,
}

/// Built-in growth threshold for benchmarks: the rise over the later half of a run that
/// fails a bench. It is also about the smallest growth the default sampling (one sample
/// per 4 KiB on average) catches reliably.
pub const DEFAULT_GROWTH_THRESHOLD: u64 = 64 << 10;

impl Config {
    /// The growth threshold for a bench, and where it was set: command line >
    /// last matching `[[benches]]` > `[bench]` > built-in.
    pub fn growth_threshold(&self, bench: &str, cli: Option<u64>) -> (u64, String) {
        if let Some(v) = cli {
            return (v, "the command line".into());
        }
        let rule = self.benches.iter().rev().find_map(|r| {
            r.growth_threshold
                .filter(|_| r.filter.matches(bench))
                .map(|v| (r, v))
        });
        if let Some((r, v)) = rule {
            return (
                v,
                format!(
                    "[[benches]] #{} (filter \"{}\")",
                    r.index,
                    r.filter.as_str()
                ),
            );
        }
        match self.bench_growth_threshold {
            Some(v) => (v, "[bench]".into()),
            None => (DEFAULT_GROWTH_THRESHOLD, "built-in default".into()),
        }
    }

    /// The growth that fails a service under `cargo leakcheck run`, and where it was set:
    /// the command line, `[run]`, or the built-in default (the benches' rules are the
    /// benches').
    pub fn service_growth_threshold(&self, cli: Option<u64>) -> (u64, String) {
        match (cli, self.run_growth_threshold) {
            (Some(v), _) => (v, "the command line".into()),
            (None, Some(v)) => (v, "[run]".into()),
            (None, None) => (DEFAULT_GROWTH_THRESHOLD, "built-in default".into()),
        }
    }
}

/// The settings in force for one test, and where the stack threshold came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    /// Bytes a stack may retain.
    pub stack_threshold: u64,
    /// Bytes all leaked stacks of the test together may retain.
    pub test_threshold: Option<u64>,
    /// Whether one-time initialisation counts as a leak.
    pub one_time_fails: bool,
    /// Seconds the test's own run may take before it is killed; none by default, as under
    /// `cargo test` and nextest (its extra runs are bounded by the runtime).
    pub timeout: Option<u64>,
    /// How many times a test that retained memory runs again in its process (0: never).
    pub extra_runs: u32,
    /// Whether an `unsettled` verdict fails the run (exit 5).
    pub unsettled_fails: bool,
    /// Where `stack_threshold` was set: `built-in default`, `[defaults]`,
    /// `[[tests]] #2 (filter "cache::*")` or `command line`.
    pub stack_threshold_source: String,
    /// Where `test_threshold` was set.
    pub test_threshold_source: String,
}

/// What every test's settings are computed from: the configuration, and the command line's
/// settings over it. Each test's are computed once, when it is listed, and travel with it.
#[derive(Clone, Copy, Debug)]
pub struct Layers<'a> {
    /// `leakcheck.toml`.
    pub config: &'a Config,
    /// The command line's settings.
    pub cli: &'a SettingsLayer,
}

impl Layers<'_> {
    /// The settings of one test (see [`Config::effective`]).
    pub fn of(&self, test: &str) -> Effective {
        self.config.effective(test, self.cli)
    }

    /// The settings outside any test (see [`Config::global`]).
    pub fn global(&self) -> Effective {
        self.config.global(self.cli)
    }
}

impl Config {
    /// Layers built-in defaults, `[defaults]`, matching `[[tests]]` (later wins) and the
    /// command line (`cli`) for one test.
    pub fn effective(&self, test: &str, cli: &SettingsLayer) -> Effective {
        self.layered(Some(test), cli)
    }

    /// The settings outside any test: `[defaults]` and the command line, no `[[tests]]`
    /// rule (not even `filter = "*"`). What the report calls the global threshold, and
    /// what a harness-only baseline process runs under.
    pub fn global(&self, cli: &SettingsLayer) -> Effective {
        self.layered(None, cli)
    }

    fn layered(&self, test: Option<&str>, cli: &SettingsLayer) -> Effective {
        let mut e = Effective {
            stack_threshold: 0,
            test_threshold: None,
            one_time_fails: false,
            timeout: None,
            extra_runs: DEFAULT_EXTRA_RUNS,
            unsettled_fails: false,
            stack_threshold_source: "built-in default".into(),
            test_threshold_source: "built-in default".into(),
        };
        let file = self
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut layers: Vec<(String, &SettingsLayer)> =
            vec![(format!("[defaults] in {file}"), &self.defaults)];
        for rule in self
            .tests
            .iter()
            .filter(|r| test.is_some_and(|t| r.filter.matches(t)))
        {
            layers.push((
                format!(
                    "[[tests]] #{} (filter \"{}\") in {file}",
                    rule.index,
                    rule.filter.as_str()
                ),
                &rule.settings,
            ));
        }
        layers.push(("the command line".into(), cli));
        for (source, s) in layers {
            if let Some(v) = s.stack_threshold {
                e.stack_threshold = v;
                e.stack_threshold_source = source.clone();
            }
            if let Some(v) = s.test_threshold {
                e.test_threshold = Some(v);
                e.test_threshold_source = source.clone();
            }
            if let Some(v) = s.one_time_fails {
                e.one_time_fails = v;
            }
            if let Some(v) = s.timeout {
                e.timeout = Some(v);
            }
            if let Some(v) = s.extra_runs {
                e.extra_runs = v;
            }
            if let Some(v) = s.unsettled_fails {
                e.unsettled_fails = v;
            }
        }
        e
    }

    /// The suppressions that may apply to a test, with their index among all of them.
    pub fn suppressions_for<'a>(
        &'a self,
        test: &'a str,
    ) -> impl Iterator<Item = (usize, &'a Suppression)> + 'a {
        self.suppress
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.applies_to(test))
    }
}
