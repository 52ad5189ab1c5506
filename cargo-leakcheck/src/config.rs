//! `leakcheck.toml`: per-test thresholds, timeouts and suppressions.
//!
//! Read in two steps, as cargo-deny does: the raw TOML (with spans) is walked once,
//! collecting every problem with the key and line it concerns, and only a file without
//! errors becomes a [`Config`]. Unknown keys are warnings (a typo must not pass silently,
//! but must not stop a run either). Settings are layered: command-line flags over the last
//! matching `[[tests]]` entry over `[defaults]` over the built-in defaults.

use crate::model::FrameReport;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// Extra runs when none are configured: enough that a cache or a deferred free that settles
/// within a few runs is not taken for a leak, and a stack must keep growing over all of them
/// to count as one.
pub const DEFAULT_EXTRA_RUNS: u32 = 5;

/// The documented reference configuration, every key at its default.
#[cfg(test)]
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// Where the configuration is looked for, relative to the workspace root, in order.
pub const FILE_NAMES: [&str; 2] = ["leakcheck.toml", ".config/leakcheck.toml"];

/// The most extra runs a test may be given.
pub const MAX_EXTRA_RUNS: u32 = leakcheck_protocol::MAX_EXTRA_RUNS;

/// A size that could not be read, with the text as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid size `{text}`: {problem}")]
pub struct SizeError {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub problem: SizeProblem,
}

/// What is wrong with a size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeProblem {
    /// No digits before the unit.
    #[error("expected a number and a unit such as `4KiB`")]
    NoNumber,
    /// A unit that is not one of the known ones (lower-cased).
    #[error("unknown unit `{0}` (use B, KiB, MiB, GiB, KB, MB or GB)")]
    UnknownUnit(String),
    /// Digits and dots that do not make a number.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// More than `u64::MAX` bytes.
    #[error("out of range (at most 2^64 - 1 bytes)")]
    OutOfRange,
    /// A fraction of a byte.
    #[error("not a whole number of bytes")]
    NotWhole,
}

/// Parses a human size: `0`, `512B`, `4KiB`, `1.5MiB`, `2GiB`; also `KB`/`MB`/`GB`
/// (decimal). Case-insensitive, optional space before the unit.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let error = |problem| SizeError {
        text: text.to_string(),
        problem,
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(error(SizeProblem::NoNumber));
    }
    let mult: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(error(SizeProblem::UnknownUnit(other.to_string()))),
    };
    // Exact decimal arithmetic: a float would round 2^64 down to fit, or turn
    // `0.1KB` into 100.00000000000001 bytes.
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(error(SizeProblem::NotANumber(num.to_string())));
    }
    let out_of_range = || error(SizeProblem::OutOfRange);
    let digits = |d: &str| -> Result<u128, SizeError> {
        if d.is_empty() {
            Ok(0)
        } else {
            d.parse::<u128>().map_err(|_| out_of_range())
        }
    };
    let frac = frac.trim_end_matches('0');
    if frac.len() > 30 {
        return Err(error(SizeProblem::NotWhole));
    }
    let whole = digits(int)?.checked_mul(mult).ok_or_else(out_of_range)?;
    let scale = 10u128.pow(frac.len() as u32);
    let part = digits(frac)?.checked_mul(mult).ok_or_else(out_of_range)?;
    if part % scale != 0 {
        return Err(error(SizeProblem::NotWhole));
    }
    let bytes = whole.checked_add(part / scale).ok_or_else(out_of_range)?;
    u64::try_from(bytes).map_err(|_| out_of_range())
}

/// A glob over names: `*` matches any run of characters (`::` included), `\*` a star.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    /// Literal pieces between stars.
    pieces: Vec<String>,
}

impl Glob {
    /// Compiles a pattern.
    pub fn new(pattern: &str) -> Glob {
        let mut pieces = vec![String::new()];
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n) => pieces.last_mut().expect("never empty").push(n),
                    None => pieces.last_mut().expect("never empty").push('\\'),
                },
                '*' => pieces.push(String::new()),
                c => pieces.last_mut().expect("never empty").push(c),
            }
        }
        Glob {
            pattern: pattern.to_string(),
            pieces,
        }
    }

    /// A pattern that matches exactly `name`.
    pub fn escape(name: &str) -> String {
        name.replace('\\', "\\\\").replace('*', "\\*")
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether any frame's function name matches.
    pub fn matches_any(&self, frames: &[FrameReport]) -> bool {
        frames.iter().any(|f| self.matches(&f.function))
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        let (first, rest) = self.pieces.split_first().expect("never empty");
        let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return remaining.is_empty();
        };
        for piece in middle {
            match remaining.find(piece.as_str()) {
                Some(i) => remaining = &remaining[i + piece.len()..],
                None => return false,
            }
        }
        remaining.len() >= last.len() && remaining.ends_with(last.as_str())
    }
}

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
    /// `[[benches]]`, in file order.
    pub benches: Vec<BenchRule>,
    /// `[output] junit`: where to write a JUnit XML report (relative paths are relative to
    /// the workspace root).
    pub junit: Option<PathBuf>,
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
}

/// One problem in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line.
    pub line: usize,
    /// Dotted key, e.g. `tests[2].stack-threshold`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Why a configuration file was rejected: every error found, not just the first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid configuration `{}` ({} {}){}",
    path.display(),
    errors.len(),
    if errors.len() == 1 { "error" } else { "errors" },
    diagnostics_text(path, errors)
)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The errors, in file order.
    pub errors: Vec<Diagnostic>,
}

/// The list under a [`ConfigError`]'s first line: one indented diagnostic per line.
fn diagnostics_text(path: &Path, errors: &[Diagnostic]) -> String {
    errors
        .iter()
        .map(|d| format!("\n  {}", format_diagnostic(path, d)))
        .collect()
}

/// `path:line: key `k`: message`.
pub fn format_diagnostic(path: &Path, d: &Diagnostic) -> String {
    if d.key.is_empty() {
        format!("{}:{}: {}", path.display(), d.line, d.message)
    } else {
        format!("{}:{}: `{}`: {}", path.display(), d.line, d.key, d.message)
    }
}

struct Reader<'a> {
    text: &'a str,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl Reader<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    fn error(&mut self, offset: usize, key: &str, message: impl Into<String>) {
        let line = self.line(offset);
        self.errors.push(Diagnostic {
            line,
            key: key.into(),
            message: message.into(),
        });
    }

    fn unknown(&mut self, offset: usize, key: &str, known: &[&str]) {
        let line = self.line(offset);
        self.warnings.push(Diagnostic {
            line,
            key: key.into(),
            message: format!("unknown key, ignored (known here: {})", known.join(", ")),
        });
    }

    fn size(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<u64> {
        match v.get_ref() {
            DeValue::String(s) => match parse_size(s) {
                Ok(n) => Some(n),
                Err(e) => {
                    self.error(v.span().start, key, e.to_string());
                    None
                }
            },
            DeValue::Integer(i) => match i.as_str().parse::<u64>() {
                Ok(n) if i.radix() == 10 => Some(n),
                _ => {
                    self.error(v.span().start, key, "expected a size such as \"64KiB\"");
                    None
                }
            },
            other => {
                self.error(
                    v.span().start,
                    key,
                    format!(
                        "expected a size such as \"64KiB\", found {}",
                        other.type_str()
                    ),
                );
                None
            }
        }
    }

    fn boolean(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.error(
                    v.span().start,
                    key,
                    format!("expected true or false, found {}", other.type_str()),
                );
                None
            }
        }
    }

    fn seconds(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<u64> {
        let parsed = match v.get_ref() {
            DeValue::Integer(i) if i.radix() == 10 => i.as_str().parse::<u64>().ok(),
            DeValue::String(s) => {
                let s = s.trim();
                let (num, mult) = if let Some(n) = s.strip_suffix('m') {
                    (n, 60)
                } else {
                    (s.strip_suffix('s').unwrap_or(s), 1)
                };
                num.trim()
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| n.checked_mul(mult))
            }
            _ => None,
        };
        match parsed {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.error(
                    v.span().start,
                    key,
                    "expected a positive number of seconds (300, \"30s\" or \"5m\")",
                );
                None
            }
        }
    }

    fn extra_runs(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<u32> {
        let parsed = match v.get_ref() {
            DeValue::Integer(i) if i.radix() == 10 => i.as_str().parse::<u32>().ok(),
            _ => None,
        };
        match parsed {
            Some(n) if n <= MAX_EXTRA_RUNS => Some(n),
            _ => {
                self.error(
                    v.span().start,
                    key,
                    format!("expected a whole number of runs from 0 (off) to {MAX_EXTRA_RUNS}"),
                );
                None
            }
        }
    }

    fn string(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<String> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            other => {
                self.error(
                    v.span().start,
                    key,
                    format!("expected a string, found {}", other.type_str()),
                );
                None
            }
        }
    }

    /// Reads the setting keys of a table; `extra` lists further keys the caller handles.
    fn settings(&mut self, table: &DeTable, prefix: &str, extra: &[&str]) -> SettingsLayer {
        const KEYS: [&str; 6] = [
            "stack-threshold",
            "test-threshold",
            "one-time-fails",
            "timeout",
            "extra-runs",
            "unsettled-fails",
        ];
        let mut s = SettingsLayer::default();
        for (k, v) in table.iter() {
            let name = k.get_ref().as_ref();
            let key = format!("{prefix}{name}");
            match name {
                "stack-threshold" => s.stack_threshold = self.size(&key, v),
                "test-threshold" => s.test_threshold = self.size(&key, v),
                "one-time-fails" => s.one_time_fails = self.boolean(&key, v),
                "timeout" => s.timeout = self.seconds(&key, v),
                "extra-runs" => s.extra_runs = self.extra_runs(&key, v),
                "unsettled-fails" => s.unsettled_fails = self.boolean(&key, v),
                // Extra runs are no longer cut by their cost, so there is nothing to lift.
                "full-repetition" => {
                    let line = self.line(k.span().start);
                    self.warnings.push(Diagnostic {
                        line,
                        key,
                        message: "has no effect any more: every test that retained memory is run again as often as its evidence needs, whatever the runs cost".into(),
                    });
                }
                n if extra.contains(&n) => {}
                _ => {
                    let known: Vec<&str> = KEYS.iter().chain(extra).copied().collect();
                    self.unknown(k.span().start, &key, &known);
                }
            }
        }
        s
    }

    fn tables<'t>(
        &mut self,
        key: &str,
        v: &'t Spanned<DeValue<'t>>,
    ) -> Vec<(usize, &'t DeTable<'t>)> {
        let Some(array) = v.get_ref().as_array() else {
            self.error(
                v.span().start,
                key,
                format!(
                    "expected an array of tables ([[{key}]]), found {}",
                    v.get_ref().type_str()
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in array.iter() {
            match item.get_ref().as_table() {
                Some(t) => out.push((item.span().start, t)),
                None => self.error(
                    item.span().start,
                    key,
                    format!("expected a table, found {}", item.get_ref().type_str()),
                ),
            }
        }
        out
    }
}

/// Parses a configuration text. Returns the configuration and its warnings, or every error.
pub fn parse(text: &str, path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
    let mut r = Reader {
        text,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let root = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            let offset = e.span().map(|s| s.start).unwrap_or(0);
            r.error(
                offset,
                "",
                format!("not valid TOML: {}", e.message().trim()),
            );
            return Err(ConfigError {
                path: path.to_path_buf(),
                errors: r.errors,
            });
        }
    };
    let mut config = Config {
        path: Some(path.to_path_buf()),
        ..Config::default()
    };
    for (k, v) in root.get_ref().iter() {
        match k.get_ref().as_ref() {
            "defaults" => match v.get_ref().as_table() {
                Some(t) => config.defaults = r.settings(t, "defaults.", &[]),
                None => r.error(v.span().start, "defaults", "expected a table ([defaults])"),
            },
            "tests" => {
                for (i, (offset, t)) in r.tables("tests", v).into_iter().enumerate() {
                    let prefix = format!("tests[{}].", i + 1);
                    let settings = r.settings(t, &prefix, &["filter"]);
                    let filter = match t.get("filter") {
                        Some(f) => r.string(&format!("{prefix}filter"), f),
                        None => {
                            r.error(
                                offset,
                                &format!("{prefix}filter"),
                                "required: a glob over test names",
                            );
                            None
                        }
                    };
                    if let Some(filter) = filter {
                        config.tests.push(TestRule {
                            filter: Glob::new(&filter),
                            settings,
                            index: i + 1,
                        });
                    }
                }
            }
            "suppress" => {
                for (i, (offset, t)) in r.tables("suppress", v).into_iter().enumerate() {
                    let prefix = format!("suppress[{}].", i + 1);
                    let mut frame = None;
                    let mut reason = None;
                    let mut filter = None;
                    for (k, v) in t.iter() {
                        let name = k.get_ref().as_ref();
                        let key = format!("{prefix}{name}");
                        match name {
                            "frame" => frame = r.string(&key, v),
                            "reason" => {
                                reason = r.string(&key, v);
                                if reason.as_deref().is_some_and(|s| s.trim().is_empty()) {
                                    r.error(
                                        v.span().start,
                                        &key,
                                        "must say why the leak is accepted",
                                    );
                                    reason = None;
                                }
                            }
                            "filter" => filter = r.string(&key, v),
                            _ => r.unknown(k.span().start, &key, &["frame", "reason", "filter"]),
                        }
                    }
                    let line = r.line(offset);
                    if t.get("frame").is_none() {
                        r.error(
                            offset,
                            &format!("{prefix}frame"),
                            "required: a glob over function names",
                        );
                    }
                    if t.get("reason").is_none() {
                        r.error(
                            offset,
                            &format!("{prefix}reason"),
                            "required: why the leak is accepted",
                        );
                    }
                    if let (Some(frame), Some(reason)) = (frame, reason) {
                        config.suppress.push(Suppression {
                            frame: Glob::new(&frame),
                            reason,
                            filter: filter.as_deref().map(Glob::new),
                            index: i + 1,
                            line,
                        });
                    }
                }
            }
            "bench" => match v.get_ref().as_table() {
                Some(t) => {
                    for (k, v) in t.iter() {
                        let key = format!("bench.{}", k.get_ref().as_ref());
                        match k.get_ref().as_ref() {
                            "growth-threshold" => config.bench_growth_threshold = r.size(&key, v),
                            _ => r.unknown(k.span().start, &key, &["growth-threshold"]),
                        }
                    }
                }
                None => r.error(v.span().start, "bench", "expected a table ([bench])"),
            },
            "benches" => {
                for (i, (offset, t)) in r.tables("benches", v).into_iter().enumerate() {
                    let prefix = format!("benches[{}].", i + 1);
                    let mut filter = None;
                    let mut growth = None;
                    for (k, v) in t.iter() {
                        let key = format!("{prefix}{}", k.get_ref().as_ref());
                        match k.get_ref().as_ref() {
                            "filter" => filter = r.string(&key, v),
                            "growth-threshold" => growth = r.size(&key, v),
                            _ => r.unknown(k.span().start, &key, &["filter", "growth-threshold"]),
                        }
                    }
                    match filter {
                        Some(f) => config.benches.push(BenchRule {
                            filter: Glob::new(&f),
                            growth_threshold: growth,
                            index: i + 1,
                        }),
                        None if t.get("filter").is_none() => r.error(
                            offset,
                            &format!("{prefix}filter"),
                            "required: a glob over bench names",
                        ),
                        None => {}
                    }
                }
            }
            "output" => match v.get_ref().as_table() {
                Some(t) => {
                    for (k, v) in t.iter() {
                        let key = format!("output.{}", k.get_ref().as_ref());
                        match k.get_ref().as_ref() {
                            "junit" => config.junit = r.string(&key, v).map(PathBuf::from),
                            _ => r.unknown(k.span().start, &key, &["junit"]),
                        }
                    }
                }
                None => r.error(v.span().start, "output", "expected a table ([output])"),
            },
            other => r.unknown(
                k.span().start,
                other,
                &[
                    "defaults", "tests", "suppress", "bench", "benches", "output",
                ],
            ),
        }
    }
    if !r.errors.is_empty() {
        r.errors.sort_by_key(|d| d.line);
        return Err(ConfigError {
            path: path.to_path_buf(),
            errors: r.errors,
        });
    }
    r.warnings.sort_by_key(|d| d.line);
    let warnings = r
        .warnings
        .iter()
        .map(|d| format_diagnostic(path, d))
        .collect();
    Ok((config, warnings))
}

/// Finds and reads the configuration: `explicit` (which must exist), else the first of
/// [`FILE_NAMES`] under the workspace root, else the built-in defaults.
pub fn load(explicit: Option<&Path>, root: &Path) -> Result<(Config, Vec<String>), LoadError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match FILE_NAMES
            .iter()
            .map(|n| root.join(n))
            .find(|p| p.is_file())
        {
            Some(p) => p,
            None => return Ok((Config::default(), Vec::new())),
        },
    };
    let bytes = std::fs::read(&path).map_err(|e| LoadError::Read(path.clone(), e))?;
    let text = decode(&bytes).map_err(|why| LoadError::Encoding(path.clone(), why))?;
    let (config, mut warnings) = parse(text, &path).map_err(LoadError::Invalid)?;
    if explicit.is_none() {
        for other in FILE_NAMES
            .iter()
            .map(|n| root.join(n))
            .filter(|p| p.is_file() && *p != path)
        {
            warnings.push(format!(
                "{} is ignored: {} is used",
                other.display(),
                path.display()
            ));
        }
    }
    Ok((config, warnings))
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read configuration `{path}`: {1}", path = .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The file is not UTF-8 text.
    #[error("invalid configuration `{path}`: {1}", path = .0.display())]
    Encoding(PathBuf, NotUtf8),
    /// The file has errors.
    #[error(transparent)]
    Invalid(ConfigError),
}

/// Why a configuration file is not UTF-8 text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotUtf8 {
    /// It looks like UTF-16 (which byte order, whether with a byte-order mark).
    #[error("the file is not UTF-8: it looks like {0}; save it as UTF-8")]
    Utf16(&'static str),
    /// Invalid UTF-8 at this line and byte.
    #[error("the file is not valid UTF-8 (line {line}, byte {byte})")]
    Invalid {
        /// 1-based line.
        line: usize,
        /// 0-based byte offset.
        byte: usize,
    },
}

/// The text of a configuration file: UTF-8, with or without a byte-order mark. Anything
/// else gets a reason that says what it looks like (editors on Windows save UTF-16).
fn decode(bytes: &[u8]) -> Result<&str, NotUtf8> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    // UTF-16 of ASCII text is valid UTF-8, zero bytes and all (TOML allows none), so it
    // is looked for first: a byte-order mark, or a zero in most odd or even positions.
    let pairs = bytes.len() / 2;
    let zeros_at = |odd: usize| {
        bytes
            .iter()
            .skip(odd)
            .step_by(2)
            .filter(|&&b| b == 0)
            .count()
    };
    let utf16 = if bytes.starts_with(b"\xFF\xFE") {
        Some("UTF-16 (little-endian, with a byte-order mark)")
    } else if bytes.starts_with(b"\xFE\xFF") {
        Some("UTF-16 (big-endian, with a byte-order mark)")
    } else if pairs >= 2 && zeros_at(1) * 4 >= pairs * 3 {
        Some("UTF-16 (little-endian)")
    } else if pairs >= 2 && zeros_at(0) * 4 >= pairs * 3 {
        Some("UTF-16 (big-endian)")
    } else {
        None
    };
    if let Some(kind) = utf16 {
        return Err(NotUtf8::Utf16(kind));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let byte = e.valid_up_to();
        let line = bytes[..byte].iter().filter(|&&b| b == b'\n').count() + 1;
        NotUtf8::Invalid { line, byte }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> (Config, Vec<String>) {
        parse(text, Path::new("leakcheck.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(text: &str) -> String {
        parse(text, Path::new("leakcheck.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn output_junit_names_a_path_and_nothing_else() {
        let (c, _) = parse_ok("[output]\njunit = \"target/junit.xml\"\n");
        assert_eq!(c.junit, Some(PathBuf::from("target/junit.xml")));
        assert_eq!(parse_ok("").0.junit, None);
        let e = parse_err("[output]\njunit = 3\n");
        assert!(e.contains("output.junit"), "{e}");
        let (_, warnings) = parse_ok("[output]\nhtml = \"x\"\n");
        assert!(
            warnings[0].contains("output.html") && warnings[0].contains("junit"),
            "{warnings:?}"
        );
    }

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("0B"), Ok(0));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4 kib"), Ok(4096));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3KB"), Ok(3000));
    }

    #[test]
    fn rejects_bad_sizes_naming_them() {
        let e = parse_size("4XB").unwrap_err().to_string();
        assert!(
            e.contains("`4XB`") && e.contains("unknown unit `xb`"),
            "{e}"
        );
        assert!(parse_size("KiB")
            .unwrap_err()
            .to_string()
            .contains("expected a number"));
        assert!(parse_size("1.5B")
            .unwrap_err()
            .to_string()
            .contains("whole number"));
        assert!(parse_size("-1B").is_err());
        assert!(parse_size("1..5B")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert!(parse_size(".")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
    }

    #[test]
    fn a_config_file_in_another_encoding_is_named_as_such() {
        let utf16le: Vec<u8> = "[defaults]\n"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect();
        let with_bom = [&[0xFF, 0xFE][..], &utf16le].concat();
        assert!(decode(&with_bom)
            .unwrap_err()
            .to_string()
            .contains("looks like UTF-16 (little-endian, with a byte-order mark)"));
        assert!(decode(&utf16le)
            .unwrap_err()
            .to_string()
            .contains("looks like UTF-16 (little-endian)"));
        let utf16be: Vec<u8> = "[defaults]\n"
            .encode_utf16()
            .flat_map(|u| u.to_be_bytes())
            .collect();
        assert!(decode(&utf16be)
            .unwrap_err()
            .to_string()
            .contains("UTF-16 (big-endian)"));
        assert_eq!(
            decode(b"a = 1\nb = \"\xFF\"\n").unwrap_err().to_string(),
            "the file is not valid UTF-8 (line 2, byte 11)"
        );
        assert_eq!(decode(b"\xEF\xBB\xBFa = 1\n"), Ok("a = 1\n"));
    }

    #[test]
    fn global_settings_ignore_every_tests_rule_even_a_catch_all() {
        let (c, _) = parse_ok(
            "[defaults]\ntimeout = 100\nstack-threshold = \"1KiB\"\n\n[[tests]]\nfilter = \"*\"\ntimeout = 7\nstack-threshold = \"2KiB\"\n",
        );
        let none = SettingsLayer::default();
        let global = c.global(&none);
        assert_eq!((global.timeout, global.stack_threshold), (Some(100), 1024));
        let any = c.effective("any::test", &none);
        assert_eq!((any.timeout, any.stack_threshold), (Some(7), 2048));
        assert_eq!(Config::default().global(&none).timeout, None, "no default");
    }

    #[test]
    fn a_timeout_in_minutes_too_large_to_hold_is_refused() {
        let e = parse_err("[defaults]\ntimeout = \"307445734561825861m\"\n");
        assert!(e.contains("expected a positive number of seconds"), "{e}");
        let (c, _) = parse_ok("[defaults]\ntimeout = \"5m\"\n");
        assert_eq!(
            c.effective("t", &SettingsLayer::default()).timeout,
            Some(300)
        );
    }

    #[test]
    fn sizes_are_exact_at_the_top_of_the_range() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for over in [
            "18446744073709551616",
            "16777216TiB",
            "17179869184GiB",
            "1e30",
            "99999999999999999999999999999999999999999B",
        ] {
            let e = parse_size(over).unwrap_err().to_string();
            assert!(
                e.contains("out of range") || e.contains("unknown unit"),
                "{over}: {e}"
            );
        }
        assert!(parse_size("17179869184GiB")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(parse_size("18446744073709551616")
            .unwrap_err()
            .to_string()
            .contains("at most 2^64 - 1"));
        assert_eq!(
            parse_size("17179869183.999999999GiB")
                .unwrap_err()
                .to_string(),
            "invalid size `17179869183.999999999GiB`: not a whole number of bytes"
        );
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        assert_eq!(parse_size("0.1KB"), Ok(100));
        assert_eq!(parse_size("1.000KB"), Ok(1000));
        assert_eq!(parse_size(".5KiB"), Ok(512));
    }

    #[test]
    fn bench_growth_thresholds_layer_like_test_settings() {
        let (c, w) = parse_ok("[bench]\ngrowth-threshold = \"1MiB\"\n\n[[benches]]\nfilter = \"cache/*\"\ngrowth-threshold = \"8MiB\"\n");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            c.growth_threshold("parse", None),
            (1 << 20, "[bench]".into())
        );
        assert_eq!(c.growth_threshold("cache/fill", None).0, 8 << 20);
        assert_eq!(
            c.growth_threshold("cache/fill", Some(5)),
            (5, "the command line".into())
        );
        assert_eq!(
            Config::default().growth_threshold("x", None).0,
            DEFAULT_GROWTH_THRESHOLD
        );
        assert!(parse_err("[[benches]]\ngrowth-threshold = 1\n")
            .contains("`benches[1].filter`: required"));
    }

    #[test]
    fn globs() {
        let g = Glob::new("cache::*");
        assert!(g.matches("cache::tests::warm") && g.matches("cache::") && !g.matches("xcache::a"));
        assert!(Glob::new("*::pool::*").matches("some_crate::pool::Slab::new"));
        assert!(
            Glob::new("pool_*").matches("pool_reuse")
                && !Glob::new("pool_*").matches("tests::pool_reuse")
        );
        assert!(
            Glob::new("a*b*c").matches("abc")
                && Glob::new("a*b*c").matches("a-b-b-c")
                && !Glob::new("a*b*c").matches("acb")
        );
        assert!(Glob::new("exact").matches("exact") && !Glob::new("exact").matches("exact2"));
        assert!(Glob::new("*").matches(""));
        let star = Glob::new(&Glob::escape("<*const T as Foo>::f"));
        assert!(star.matches("<*const T as Foo>::f") && !star.matches("<const T as Foo>::f"));
        assert!(!Glob::new("ab*ab").matches("ab"), "pieces do not overlap");
    }

    #[test]
    fn the_embedded_reference_parses_with_no_warnings_and_equals_the_built_in_defaults() {
        let (config, warnings) = parse_ok(DEFAULT_CONFIG);
        assert!(warnings.is_empty(), "{warnings:?}");
        let built_in = Config::default().effective("any", &SettingsLayer::default());
        let mut from_file = config.effective("any", &SettingsLayer::default());
        from_file.stack_threshold_source = built_in.stack_threshold_source.clone();
        from_file.test_threshold_source = built_in.test_threshold_source.clone();
        assert_eq!(from_file, built_in);
    }

    #[test]
    fn precedence_cli_over_last_matching_rule_over_defaults() {
        let (c, w) = parse_ok(
            r#"
[defaults]
stack-threshold = "1KiB"
timeout = "30s"

[[tests]]
filter = "cache::*"
stack-threshold = "256KiB"
test-threshold = "2MiB"

[[tests]]
filter = "cache::tests::huge"
stack-threshold = "1MiB"
one-time-fails = true
timeout = "2m"
"#,
        );
        assert!(w.is_empty());
        let none = SettingsLayer::default();
        let plain = c.effective("other::t", &none);
        assert_eq!(
            (plain.stack_threshold, plain.test_threshold, plain.timeout),
            (1024, None, Some(30))
        );
        assert!(plain.stack_threshold_source.starts_with("[defaults]"));
        let cache = c.effective("cache::tests::warm", &none);
        assert_eq!(
            (cache.stack_threshold, cache.test_threshold),
            (256 << 10, Some(2 << 20))
        );
        assert!(
            cache
                .stack_threshold_source
                .starts_with("[[tests]] #1 (filter \"cache::*\")"),
            "{}",
            cache.stack_threshold_source
        );
        let huge = c.effective("cache::tests::huge", &none);
        assert_eq!(
            (
                huge.stack_threshold,
                huge.test_threshold,
                huge.one_time_fails,
                huge.timeout
            ),
            (1 << 20, Some(2 << 20), true, Some(120))
        );
        let cli = SettingsLayer {
            stack_threshold: Some(0),
            timeout: Some(5),
            ..SettingsLayer::default()
        };
        let over = c.effective("cache::tests::huge", &cli);
        assert_eq!(
            (over.stack_threshold, over.timeout, over.test_threshold),
            (0, Some(5), Some(2 << 20))
        );
        assert_eq!(over.stack_threshold_source, "the command line");
    }

    #[test]
    fn extra_runs_are_layered_and_checked() {
        let (c, w) = parse_ok(
            r#"
[defaults]
extra-runs = 3

[[tests]]
filter = "slow::*"
extra-runs = 0
"#,
        );
        assert!(w.is_empty(), "{w:?}");
        let none = SettingsLayer::default();
        assert_eq!(Config::default().effective("t", &none).extra_runs, 5);
        assert_eq!(c.effective("fast::t", &none).extra_runs, 3);
        assert_eq!(c.effective("slow::t", &none).extra_runs, 0);
        let cli = SettingsLayer {
            extra_runs: Some(8),
            ..SettingsLayer::default()
        };
        assert_eq!(c.effective("slow::t", &cli).extra_runs, 8);
        assert_eq!(
            parse_err(
                "[defaults]\nextra-runs = -1\n\n[[tests]]\nfilter = \"a\"\nextra-runs = \"5\"\n"
            ),
            "invalid configuration `leakcheck.toml` (2 errors)
  leakcheck.toml:2: `defaults.extra-runs`: expected a whole number of runs from 0 (off) to 100
  leakcheck.toml:6: `tests[1].extra-runs`: expected a whole number of runs from 0 (off) to 100"
        );
        assert!(parse_err("[defaults]\nextra-runs = 101\n").contains("from 0 (off) to 100"));
    }

    #[test]
    fn suppressions_need_a_frame_and_a_reason_and_match_frames() {
        let (c, _) = parse_ok(
            r#"
[[suppress]]
frame = "some_crate::pool::*"
reason = "the pool keeps its slabs"

[[suppress]]
frame = "*::warm_cache"
reason = "warmed on purpose"
filter = "cache::*"
"#,
        );
        // What the analysis asks: the filter selects the test, and a frame matches.
        let covers = |s: &Suppression, test: &str, frames: &[FrameReport]| {
            s.applies_to(test) && s.matches_stack(frames)
        };
        let frames = |names: &[&str]| -> Vec<FrameReport> {
            names
                .iter()
                .map(|n| FrameReport {
                    function: n.to_string(),
                    file: None,
                    line: None,
                    inlined: false,
                })
                .collect()
        };
        assert!(covers(
            &c.suppress[0],
            "t",
            &frames(&["alloc::vec::from_elem", "some_crate::pool::Slab::new", "t"])
        ));
        assert!(!covers(&c.suppress[0], "t", &frames(&["other::pool::x"])));
        assert!(covers(
            &c.suppress[1],
            "cache::a",
            &frames(&["app::warm_cache"])
        ));
        assert!(
            !covers(&c.suppress[1], "other::a", &frames(&["app::warm_cache"])),
            "filtered to cache::*"
        );
        assert_eq!(c.suppressions_for("other::a").count(), 1);
        assert_eq!(c.suppress[1].line, 6);
    }

    #[test]
    fn every_error_names_file_key_and_line() {
        let text = r#"[defaults]
stack-threshold = "4XB"
one-time-fails = "yes"

[[tests]]
stack-threshold = "1KiB"

[[tests]]
filter = "a"
timeout = 0

[[suppress]]
frame = "x"
reason = "  "

[[suppress]]
reason = "no frame"
"#;
        assert_eq!(
            parse_err(text),
            "invalid configuration `leakcheck.toml` (6 errors)
  leakcheck.toml:2: `defaults.stack-threshold`: invalid size `4XB`: unknown unit `xb` (use B, KiB, MiB, GiB, KB, MB or GB)
  leakcheck.toml:3: `defaults.one-time-fails`: expected true or false, found string
  leakcheck.toml:5: `tests[1].filter`: required: a glob over test names
  leakcheck.toml:10: `tests[2].timeout`: expected a positive number of seconds (300, \"30s\" or \"5m\")
  leakcheck.toml:14: `suppress[1].reason`: must say why the leak is accepted
  leakcheck.toml:16: `suppress[2].frame`: required: a glob over function names"
        );
        assert_eq!(
            parse_err("[defaults\nx = 1\n"),
            "invalid configuration `leakcheck.toml` (1 error)\n  leakcheck.toml:1: not valid TOML: unclosed table, expected `]`"
        );
        assert!(parse_err("tests = 3\n").contains(
            "leakcheck.toml:1: `tests`: expected an array of tables ([[tests]]), found integer"
        ));
    }

    #[test]
    fn found_at_the_root_or_in_dot_config_and_an_explicit_path_must_exist() {
        let dir = std::env::temp_dir().join(format!("leakcheck-config-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".config")).unwrap();
        let (none, _) = load(None, &dir).unwrap();
        assert_eq!(none, Config::default(), "no file: built-in defaults");
        std::fs::write(
            dir.join(".config/leakcheck.toml"),
            "[defaults]\nstack-threshold = \"2KiB\"\n",
        )
        .unwrap();
        let (c, w) = load(None, &dir).unwrap();
        assert_eq!(c.defaults.stack_threshold, Some(2048));
        assert!(w.is_empty());
        std::fs::write(
            dir.join("leakcheck.toml"),
            "[defaults]\nstack-threshold = \"4KiB\"\n",
        )
        .unwrap();
        let (c, w) = load(None, &dir).unwrap();
        assert_eq!(c.defaults.stack_threshold, Some(4096), "the root file wins");
        assert_eq!(w.len(), 1, "and the other is reported as ignored: {w:?}");
        let missing = dir.join("nope.toml");
        let e = load(Some(&missing), &dir).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot read configuration `{}`",
                missing.display()
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_keys_are_warnings_naming_key_and_line() {
        let (_, w) = parse_ok("[defaults]\nstack-treshold = \"1KiB\"\n\n[[suppress]]\nframe = \"x\"\nreason = \"y\"\nreasn = \"z\"\n\n[extra]\n");
        assert_eq!(
            w,
            vec![
                "leakcheck.toml:2: `defaults.stack-treshold`: unknown key, ignored (known here: stack-threshold, test-threshold, one-time-fails, timeout, extra-runs, unsettled-fails)",
                "leakcheck.toml:7: `suppress[1].reasn`: unknown key, ignored (known here: frame, reason, filter)",
                "leakcheck.toml:9: `extra`: unknown key, ignored (known here: defaults, tests, suppress, bench, benches, output)",
            ]
        );
    }
}
