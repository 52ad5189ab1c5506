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

/// Where a setting no layer says comes from.
const BUILT_IN: &str = "built-in default";

/// Declares the per-test settings once. Each entry is a setting's documentation, its field
/// and type (`= DEFAULT` when it has one; without, it stays optional), its key in
/// `[defaults]` and `[[tests]]`, the [`ReadValue`] method its value is read with, and, for
/// the settings whose origin a report names, the field of [`Effective`] that says where it
/// was set. From it come [`SettingsLayer`] (every field an `Option`, `None`: not said here),
/// its keys ([`SettingsLayer::KEYS`]) and reading ([`SettingsLayer::read`]), the merge of
/// two layers ([`SettingsLayer::or`]) and [`Effective`], resolved from the layers in
/// precedence order ([`Effective::from_layers`]). A new per-test setting is one entry here
/// and, when the command line gives it, one flag in `cli::SettingFlags`.
macro_rules! per_test_settings {
    ($(
        $(#[doc = $doc:literal])+
        $field:ident: $t:ty $(= $default:expr)?,
            key $key:literal, read $read:ident $(, source $source:ident)?;
    )+) => {
        /// One layer of settings: what `[defaults]`, a `[[tests]]` entry or the command line
        /// says; `None` means "not said here".
        #[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct SettingsLayer {
            $(
                #[doc = concat!("`", $key, "`: ")]
                $(#[doc = $doc])+
                pub $field: Option<$t>,
            )+
        }

        /// The settings in force for one test, and where the thresholds came from.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Effective {
            $(
                $(#[doc = $doc])+
                pub $field: resolved_type!($t $(, $default)?),
            )+
            $($(
                #[doc = concat!(
                    "Where `", $key, "` was set: `built-in default`, `[defaults] in FILE`, ",
                    "`[[tests]] #2 (filter \"cache::*\") in FILE` or `the command line`."
                )]
                pub $source: String,
            )?)+
        }

        impl SettingsLayer {
            /// The keys of the settings, as `[defaults]` and `[[tests]]` spell them.
            pub const KEYS: &'static [&'static str] = &[$($key),+];

            /// Reads the setting `name` (its dotted `key` for messages) from `v` into this
            /// layer; false when `name` is not a setting's key.
            pub fn read<V: ?Sized>(
                &mut self,
                values: &mut impl ReadValue<V>,
                name: &str,
                key: &str,
                v: &V,
            ) -> bool {
                match name {
                    $($key => self.$field = values.$read(key, v),)+
                    _ => return false,
                }
                true
            }

            /// This layer over `lower`: each setting this one says, else the one `lower` says.
            pub fn or(self, lower: &SettingsLayer) -> SettingsLayer {
                SettingsLayer {
                    $($field: self.$field.or_else(|| lower.$field.clone()),)+
                }
            }
        }

        impl Effective {
            /// The settings `layers` give, the highest first, each with where it comes from:
            /// of every setting, what the first layer that says it says, else its built-in
            /// default.
            pub fn from_layers<'a>(
                layers: impl IntoIterator<Item = (String, &'a SettingsLayer)>,
            ) -> Effective {
                let mut said = SettingsLayer::default();
                $($(let mut $source = None::<String>;)?)+
                for (from, layer) in layers {
                    $($(
                        if said.$field.is_none() && layer.$field.is_some() {
                            $source = Some(from.clone());
                        }
                    )?)+
                    said = said.or(layer);
                }
                Effective {
                    $($field: resolved_value!(said.$field $(, $default)?),)+
                    $($($source: $source.unwrap_or_else(|| BUILT_IN.into()),)?)+
                }
            }
        }
    };
}

/// A setting's type in [`Effective`]: its own with a default, else optional.
macro_rules! resolved_type {
    ($t:ty) => { Option<$t> };
    ($t:ty, $default:expr) => { $t };
}

/// A setting's value in [`Effective`]: what the layers said, else its default, if any.
macro_rules! resolved_value {
    ($said:expr) => {
        $said
    };
    ($said:expr, $default:expr) => {
        $said.unwrap_or($default)
    };
}

per_test_settings! {
    /// Bytes a stack may retain.
    stack_threshold: u64 = 0,
        key "stack-threshold", read size, source stack_threshold_source;
    /// Bytes all leaked stacks of the test together may retain.
    test_threshold: u64,
        key "test-threshold", read size, source test_threshold_source;
    /// Whether one-time initialisation counts as a leak.
    one_time_fails: bool = false,
        key "one-time-fails", read boolean;
    /// Seconds the test's own run may take before it is killed; none by default, as under
    /// `cargo test` and nextest (its extra runs are bounded by the runtime).
    timeout: u64,
        key "timeout", read seconds;
    /// How many times a test that retained memory runs again in its process (0: never).
    extra_runs: u32 = DEFAULT_EXTRA_RUNS,
        key "extra-runs", read runs;
    /// Whether an `unsettled` verdict (a test that could not be judged) fails the run
    /// (exit 5).
    unsettled_fails: bool = false,
        key "unsettled-fails", read boolean;
}

/// How the configuration file's values are read, one method for each kind a setting takes
/// (its entry in `per_test_settings!` names which); each problem is the reader's to report.
pub trait ReadValue<V: ?Sized> {
    /// A size: `"64KiB"` or a number of bytes.
    fn size(&mut self, key: &str, v: &V) -> Option<u64>;
    /// `true` or `false`.
    fn boolean(&mut self, key: &str, v: &V) -> Option<bool>;
    /// A positive number of seconds: `300`, `"30s"` or `"5m"`.
    fn seconds(&mut self, key: &str, v: &V) -> Option<u64>;
    /// A number of extra runs, from 0 to [`MAX_EXTRA_RUNS`].
    fn runs(&mut self, key: &str, v: &V) -> Option<u32>;
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
            None => (DEFAULT_GROWTH_THRESHOLD, BUILT_IN.into()),
        }
    }

    /// The growth that fails a service under `cargo leakcheck run`, and where it was set:
    /// the command line, `[run]`, or the built-in default (the benches' rules are the
    /// benches').
    pub fn service_growth_threshold(&self, cli: Option<u64>) -> (u64, String) {
        match (cli, self.run_growth_threshold) {
            (Some(v), _) => (v, "the command line".into()),
            (None, Some(v)) => (v, "[run]".into()),
            (None, None) => (DEFAULT_GROWTH_THRESHOLD, BUILT_IN.into()),
        }
    }
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

    /// The layers of one test (none of `[[tests]]` outside a test), highest first: the
    /// command line, the matching `[[tests]]` entries from the last, `[defaults]`.
    fn layered(&self, test: Option<&str>, cli: &SettingsLayer) -> Effective {
        let file = self
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let rules = self
            .tests
            .iter()
            .rev()
            .filter(|r| test.is_some_and(|t| r.filter.matches(t)))
            .map(|rule| {
                let source = format!(
                    "[[tests]] #{} (filter \"{}\") in {file}",
                    rule.index,
                    rule.filter.as_str()
                );
                (source, &rule.settings)
            });
        let defaults = (format!("[defaults] in {file}"), &self.defaults);
        let layers = std::iter::once(("the command line".to_string(), cli))
            .chain(rules)
            .chain(std::iter::once(defaults));
        Effective::from_layers(layers)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_higher_layer_wins_setting_by_setting_and_says_where() {
        let cli = SettingsLayer {
            timeout: Some(5),
            ..SettingsLayer::default()
        };
        let rule = SettingsLayer {
            timeout: Some(7),
            test_threshold: Some(9),
            ..SettingsLayer::default()
        };
        let merged = cli.clone().or(&rule);
        assert_eq!((merged.timeout, merged.test_threshold), (Some(5), Some(9)));
        let e = Effective::from_layers([("cli".to_string(), &cli), ("rule".to_string(), &rule)]);
        assert_eq!((e.timeout, e.test_threshold), (Some(5), Some(9)));
        assert_eq!(e.extra_runs, DEFAULT_EXTRA_RUNS);
        assert_eq!(e.test_threshold_source, "rule");
        assert_eq!(e.stack_threshold_source, BUILT_IN);
    }

    #[test]
    fn every_setting_is_in_the_reference_configuration_and_the_guide() {
        let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let guide = std::fs::read_to_string(guide).unwrap();
        let reference: Vec<&str> = DEFAULT_CONFIG
            .lines()
            .map(|l| l.trim_start_matches("# "))
            .collect();
        for key in SettingsLayer::KEYS {
            let set = format!("{key} =");
            assert!(
                reference.iter().any(|l| l.starts_with(&set)),
                "`{key}` is not in src/default-config.toml"
            );
            assert!(
                guide.lines().any(|l| l.starts_with(&set)),
                "`{key}` is not in docs/configuration.md"
            );
        }
    }
}
