//! Every output of a run, one exporter each, written by [`write_all`] for every command:
//! report.json, the page, JUnit, SARIF, GitHub's annotations and job summary, and the
//! summary on the terminal. The per-test flame graphs and pprof profiles are drawn first
//! ([`crate::report::artifacts`]), so that every exporter sees where they are.
//!
//! An exporter that writes a file the user names (`--junit FILE`, `[output] junit`) says so
//! with [`Exporter::file`]; the command line and the configuration offer exactly the files
//! of [`EXPORTERS`], so a new format is a module and a row there.

use crate::config::Config;
use crate::errors::Error;
use crate::model::Report;
use crate::report::junit::{Durations, Skipped};
use crate::report::{github, html, human, json, junit};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod sarif;

/// The exporters, in the order they write: what a later one fails to write never costs an
/// earlier one's file (report.json first), and the summary comes last on the terminal.
pub const EXPORTERS: &[&dyn Exporter] = &[
    &Json,
    &PageExporter,
    &JUnit,
    &sarif::Sarif,
    &Github,
    &Summary,
];

/// One output of a run.
pub trait Exporter: Sync {
    /// Its name: the `--NAME FILE` flag and the `[output] NAME` key of a file output.
    fn name(&self) -> &'static str;

    /// For an output written to a file the user names: its format and what the file holds
    /// (the flag's help). `None`: written whenever the run ends.
    fn file(&self) -> Option<FileOutput> {
        None
    }

    /// Whether this run writes it: a file output when a file is named for it, any other
    /// always unless it says otherwise.
    fn wanted(&self, outputs: &Outputs) -> bool {
        self.file().is_none() || outputs.files.contains_key(self.name())
    }

    /// Its text for this run, where it is one (what a snapshot test compares).
    fn render(&self, run: &Export) -> Option<String>;

    /// Writes it; a file output, its text to `file`.
    fn write(&self, run: &Export, file: Option<&Path>) -> Result<(), Error> {
        let (Some(path), Some(output), Some(text)) = (file, self.file(), self.render(run)) else {
            return Ok(());
        };
        write_file(path, &text)?;
        crate::info!("       Wrote {} to `{}`", output.format, path.display());
        Ok(())
    }
}

/// A file output's format (`JUnit XML`) and what it holds.
#[derive(Clone, Copy, Debug)]
pub struct FileOutput {
    pub format: &'static str,
    pub holds: &'static str,
}

/// Where a run's outputs go.
#[derive(Clone, Debug)]
pub struct Destination {
    /// The output directory, written to (`<target>/leakcheck`, `merge`'s `--output-dir`).
    pub out_dir: PathBuf,
    /// The output directory as shown to the user: relative to where they are, when below.
    pub shown: PathBuf,
    /// The workspace root: file paths in stacks are shown relative to it.
    pub root: PathBuf,
}

impl Destination {
    /// `out_dir`, shown relative to the current directory when it is below it.
    pub fn new(out_dir: PathBuf, root: PathBuf) -> Destination {
        let shown = std::env::current_dir()
            .ok()
            .and_then(|cwd| out_dir.strip_prefix(cwd).ok().map(Path::to_path_buf))
            .unwrap_or_else(|| out_dir.clone());
        Destination {
            out_dir,
            shown,
            root,
        }
    }
}

/// What the outputs draw on besides the report: facts of the run report.json does not keep.
#[derive(Clone, Debug, Default)]
pub struct RunFacts {
    /// How long each test's process ran (JUnit, the page).
    pub durations: Durations,
    /// Tests listed and not run, with why (JUnit's `<skipped/>`).
    pub skipped: Vec<Skipped>,
    /// The run's cost line under the summary's totals (see [`crate::report::cost`]).
    pub cost: Option<String>,
    /// The command line as typed, and when it ran (the page's header).
    pub command: String,
    pub date: String,
}

/// One exporter's view of a finished run.
pub struct Export<'a> {
    pub report: &'a Report,
    pub to: &'a Destination,
    pub facts: &'a RunFacts,
}

/// Which outputs a run writes, chosen once from the command line and the configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outputs {
    /// Exporter name -> the file it writes.
    pub files: BTreeMap<&'static str, PathBuf>,
    /// GitHub's annotations and job summary.
    pub github: bool,
}

/// What the command line asks for: `--NAME FILE` per file output, `--annotations`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    pub files: BTreeMap<&'static str, PathBuf>,
    /// `--annotations github|none`; unset: on when `GITHUB_ACTIONS=true`.
    pub annotations: Option<String>,
}

/// The outputs of a run: a file the command line names wins over `[output]` in the
/// configuration (relative to `root`); a key there no exporter knows is a warning.
pub fn choose(asked: &Asked, config: &Config, root: &Path) -> (Outputs, Vec<String>) {
    let mut files = BTreeMap::new();
    let mut warnings = Vec::new();
    for (key, (path, line)) in &config.outputs {
        match file_exporter(key) {
            Some(e) => {
                files.insert(e.name(), root.join(path));
            }
            None => warnings.push(format!(
                "{}:{line}: output.{key}: unknown key, ignored (known here: {})",
                config
                    .path
                    .as_deref()
                    .unwrap_or(Path::new("leakcheck.toml"))
                    .display(),
                file_names().join(", ")
            )),
        }
    }
    files.extend(asked.files.iter().map(|(k, v)| (*k, v.clone())));
    let github = github::enabled(asked.annotations.as_deref());
    (Outputs { files, github }, warnings)
}

/// The exporters that write a file the user names.
pub fn file_exporters() -> impl Iterator<Item = &'static dyn Exporter> {
    EXPORTERS.iter().copied().filter(|e| e.file().is_some())
}

fn file_exporter(name: &str) -> Option<&'static dyn Exporter> {
    file_exporters().find(|e| e.name() == name)
}

fn file_names() -> Vec<&'static str> {
    file_exporters().map(|e| e.name()).collect()
}

/// Writes every output `outputs` asks for. The first failure to write a file the user asked
/// for is returned once every other output is written: one output never loses another.
pub fn write_all(run: &Export, outputs: &Outputs) -> Result<(), Error> {
    let mut first_error = None;
    for e in EXPORTERS {
        if !e.wanted(outputs) {
            continue;
        }
        let file = outputs.files.get(e.name()).map(PathBuf::as_path);
        if let Err(err) = e.write(run, file) {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Writes an output file, creating its directory.
pub fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create `{}`", dir.display()), e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(format!("write `{}`", path.display()), e))
}

/// `report.json`, always, atomically.
struct Json;

impl Exporter for Json {
    fn name(&self) -> &'static str {
        "json"
    }

    fn render(&self, run: &Export) -> Option<String> {
        Some(json::to_string(run.report))
    }

    fn write(&self, run: &Export, _: Option<&Path>) -> Result<(), Error> {
        json::write(run.report, &run.to.out_dir.join("report.json"))
    }
}

/// `index.html` beside the report; a page that cannot be written is a warning, never a
/// lost result (report.json is written already).
struct PageExporter;

impl Exporter for PageExporter {
    fn name(&self) -> &'static str {
        "page"
    }

    fn render(&self, run: &Export) -> Option<String> {
        Some(html::render(run.report, &page(run), &run.to.root))
    }

    fn write(&self, run: &Export, _: Option<&Path>) -> Result<(), Error> {
        if let Err(e) = html::write(run.report, &page(run), &run.to.out_dir, &run.to.root) {
            crate::say!(
                "warning: could not write `{}`: {e}",
                run.to.out_dir.join(crate::model::PAGE_FILE).display()
            );
        }
        Ok(())
    }
}

fn page<'a>(run: &'a Export) -> html::Page<'a> {
    html::Page {
        command: &run.facts.command,
        date: run.facts.date.clone(),
        durations: &run.facts.durations,
    }
}

/// JUnit XML: one testcase per test, bench or service; leaks are failures.
struct JUnit;

impl Exporter for JUnit {
    fn name(&self) -> &'static str {
        "junit"
    }

    fn file(&self) -> Option<FileOutput> {
        Some(FileOutput {
            format: "JUnit XML",
            holds: "one testcase per test, bench or service; a leak or growth is a failure, a test not run is skipped",
        })
    }

    fn render(&self, run: &Export) -> Option<String> {
        Some(junit::render(
            run.report,
            &run.facts.durations,
            &run.facts.skipped,
            &run.to.out_dir,
            &run.to.root,
        ))
    }
}

/// GitHub Actions: annotations on stdout, the job summary and the step outputs.
struct Github;

impl Exporter for Github {
    fn name(&self) -> &'static str {
        "github"
    }

    fn wanted(&self, outputs: &Outputs) -> bool {
        outputs.github
    }

    fn render(&self, run: &Export) -> Option<String> {
        let mut text = github::annotations(run.report, &run.to.root).join("\n");
        text.push_str("\n\n");
        text.push_str(&github::summary(run.report, &run.to.root, &run.to.shown));
        Some(text)
    }

    fn write(&self, run: &Export, _: Option<&Path>) -> Result<(), Error> {
        github::emit(run.report, &run.to.root, &run.to.shown);
        Ok(())
    }
}

/// The summary on the terminal: the tests', then the benches' and services'.
struct Summary;

impl Exporter for Summary {
    fn name(&self) -> &'static str {
        "summary"
    }

    fn render(&self, run: &Export) -> Option<String> {
        let (report, root, shown) = (run.report, &run.to.root, &run.to.shown);
        let mut text = String::new();
        if !report.tests.is_empty() || report.benches.is_empty() {
            text.push_str(&human::render_with_cost(
                report,
                root,
                shown,
                run.facts.cost.as_deref(),
            ));
        }
        if !report.benches.is_empty() {
            text.push_str(&crate::report::bench::render(report, root, shown));
        }
        Some(text)
    }

    fn write(&self, run: &Export, _: Option<&Path>) -> Result<(), Error> {
        let text = self.render(run).unwrap_or_default();
        // Quiet: the totals only (from the summary line on).
        let text = match crate::console::level() {
            crate::console::Level::Quiet => text
                .find("\n Summary")
                .map_or(text.as_str(), |i| &text[i + 1..]),
            _ => text.as_str(),
        };
        crate::say_raw!("{text}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_the_command_line_names_wins_and_unknown_output_keys_are_warned_about() {
        let config = Config {
            outputs: BTreeMap::from([
                ("junit".to_string(), (PathBuf::from("ci/junit.xml"), 2)),
                ("html".to_string(), (PathBuf::from("x"), 3)),
            ]),
            ..Config::default()
        };
        let (outputs, warnings) = choose(&Asked::default(), &config, Path::new("/ws"));
        assert_eq!(
            outputs.files.get("junit"),
            Some(&PathBuf::from("/ws/ci/junit.xml"))
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(":3: output.html: unknown key")
                && warnings[0].contains("known here: junit"),
            "{warnings:?}"
        );
        let asked = Asked {
            files: BTreeMap::from([("junit", PathBuf::from("mine.xml"))]),
            annotations: Some("github".into()),
        };
        let (outputs, _) = choose(&asked, &config, Path::new("/ws"));
        assert_eq!(outputs.files.get("junit"), Some(&PathBuf::from("mine.xml")));
        assert!(outputs.github);
    }

    #[test]
    fn every_exporter_has_its_own_name() {
        let mut names: Vec<_> = EXPORTERS.iter().map(|e| e.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), EXPORTERS.len());
    }
}
