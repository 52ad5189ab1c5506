//! The raw TOML, walked once with its spans, to a [`Config`] or every problem found.

use crate::config::glob::Glob;
use crate::config::settings::*;
use crate::config::size::parse_size;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

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
        let mut s = SettingsLayer::default();
        for (k, v) in table.iter() {
            let name = k.get_ref().as_ref();
            let key = format!("{prefix}{name}");
            if s.read(self, name, &key, v) {
                continue;
            }
            match name {
                // Extra runs are not cut by their cost, so there is nothing to lift.
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
                    let known: Vec<&str> =
                        SettingsLayer::KEYS.iter().chain(extra).copied().collect();
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

/// The values of the per-test settings, each problem an error naming its key and line.
impl<'v> ReadValue<Spanned<DeValue<'v>>> for Reader<'_> {
    fn size(&mut self, key: &str, v: &Spanned<DeValue<'v>>) -> Option<u64> {
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

    fn boolean(&mut self, key: &str, v: &Spanned<DeValue<'v>>) -> Option<bool> {
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

    fn seconds(&mut self, key: &str, v: &Spanned<DeValue<'v>>) -> Option<u64> {
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

    fn runs(&mut self, key: &str, v: &Spanned<DeValue<'v>>) -> Option<u32> {
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
            "tests" => r.tests(v, &mut config),
            "suppress" => r.suppressions(v, &mut config),
            section @ ("bench" | "run") => r.growth_section(section, v, &mut config),
            "benches" => r.benches(v, &mut config),
            "output" => r.output(v, &mut config),
            other => r.unknown(
                k.span().start,
                other,
                &[
                    "defaults", "tests", "suppress", "bench", "benches", "run", "output",
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

/// The sections of the file, each read into `config`, its problems into the reader.
impl Reader<'_> {
    /// `[[tests]]`: per-test settings by a glob over names.
    fn tests(&mut self, v: &Spanned<DeValue>, config: &mut Config) {
        for (i, (offset, t)) in self.tables("tests", v).into_iter().enumerate() {
            let prefix = format!("tests[{}].", i + 1);
            let settings = self.settings(t, &prefix, &["filter"]);
            let filter = match t.get("filter") {
                Some(f) => self.string(&format!("{prefix}filter"), f),
                None => {
                    self.error(
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

    /// `[[suppress]]`: accepted leaks, by a glob over a stack's functions, each with why.
    fn suppressions(&mut self, v: &Spanned<DeValue>, config: &mut Config) {
        for (i, (offset, t)) in self.tables("suppress", v).into_iter().enumerate() {
            let prefix = format!("suppress[{}].", i + 1);
            let mut frame = None;
            let mut reason = None;
            let mut filter = None;
            for (k, v) in t.iter() {
                let name = k.get_ref().as_ref();
                let key = format!("{prefix}{name}");
                match name {
                    "frame" => frame = self.string(&key, v),
                    "reason" => {
                        reason = self.string(&key, v);
                        if reason.as_deref().is_some_and(|s| s.trim().is_empty()) {
                            self.error(v.span().start, &key, "must say why the leak is accepted");
                            reason = None;
                        }
                    }
                    "filter" => filter = self.string(&key, v),
                    _ => self.unknown(k.span().start, &key, &["frame", "reason", "filter"]),
                }
            }
            let line = self.line(offset);
            if t.get("frame").is_none() {
                self.error(
                    offset,
                    &format!("{prefix}frame"),
                    "required: a glob over function names",
                );
            }
            if t.get("reason").is_none() {
                self.error(
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

    /// `[bench]` and `[run]`: their growth threshold; `[run]`'s budget for RSS growth.
    fn growth_section(&mut self, section: &str, v: &Spanned<DeValue>, config: &mut Config) {
        match v.get_ref().as_table() {
            Some(t) => {
                for (k, v) in t.iter() {
                    let key = format!("{section}.{}", k.get_ref().as_ref());
                    match (section, k.get_ref().as_ref()) {
                        (_, "growth-threshold") => {
                            let size = self.size(&key, v);
                            match section {
                                "bench" => config.bench_growth_threshold = size,
                                _ => config.run_growth_threshold = size,
                            }
                        }
                        ("run", "rss-growth-budget") => {
                            config.run_rss_growth_budget = self.size(&key, v);
                        }
                        ("run", _) => self.unknown(
                            k.span().start,
                            &key,
                            &["growth-threshold", "rss-growth-budget"],
                        ),
                        _ => self.unknown(k.span().start, &key, &["growth-threshold"]),
                    }
                }
            }
            None => self.error(
                v.span().start,
                section,
                format!("expected a table ([{section}])"),
            ),
        }
    }

    /// `[[benches]]`: a growth threshold by a glob over bench names.
    fn benches(&mut self, v: &Spanned<DeValue>, config: &mut Config) {
        for (i, (offset, t)) in self.tables("benches", v).into_iter().enumerate() {
            let prefix = format!("benches[{}].", i + 1);
            let mut filter = None;
            let mut growth = None;
            for (k, v) in t.iter() {
                let key = format!("{prefix}{}", k.get_ref().as_ref());
                match k.get_ref().as_ref() {
                    "filter" => filter = self.string(&key, v),
                    "growth-threshold" => growth = self.size(&key, v),
                    _ => self.unknown(k.span().start, &key, &["filter", "growth-threshold"]),
                }
            }
            match filter {
                Some(f) => config.benches.push(BenchRule {
                    filter: Glob::new(&f),
                    growth_threshold: growth,
                    index: i + 1,
                }),
                None if t.get("filter").is_none() => self.error(
                    offset,
                    &format!("{prefix}filter"),
                    "required: a glob over bench names",
                ),
                None => {}
            }
        }
    }

    /// `[output]`: the files outputs go to, by output name (which names an output exists
    /// is the exporters' to say, when the outputs are chosen).
    fn output(&mut self, v: &Spanned<DeValue>, config: &mut Config) {
        match v.get_ref().as_table() {
            Some(t) => {
                for (k, v) in t.iter() {
                    let name = k.get_ref().as_ref();
                    let key = format!("output.{name}");
                    if let Some(path) = self.string(&key, v) {
                        let line = self.line(k.span().start);
                        config
                            .outputs
                            .insert(name.to_string(), (PathBuf::from(path), line));
                    }
                }
            }
            None => self.error(v.span().start, "output", "expected a table ([output])"),
        }
    }
}
