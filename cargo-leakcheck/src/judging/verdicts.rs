//! Every test's verdict from what its processes left: each binary's evidence and each
//! test's are loaded ([`crate::evidence::load`]) and handed to the verdict stage
//! ([`crate::analysis::verdict`]), which decides; when the run records golden cases
//! ([`Recorder`]), each test's case is written beside. One binary per thread (up to `jobs`
//! at once): each binary has its own symbol contexts, and building them is most of the
//! cost. Results are merged in binary order, so they do not depend on scheduling.

use crate::analysis::verdict::{self, Policy};
use crate::config;
use crate::evidence::identity::TestIdentity;
use crate::evidence::load;
use crate::evidence::symbols::Recording;
use crate::evidence::test_run::{BinaryEvidence, SuiteProcesses};
use crate::execution::binary_symbols::FromFiles;
use crate::execution::cargo::TestBinary;
use crate::execution::passes::{self, Method, TestOutcome};
use crate::judging::capture::{self, Recorder};
use crate::model::{StackReport, TestKey, TestReport};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How long each stage took per test and per binary, and the harness stacks live at each
/// test's exit: what goes to `metrics.json`, kept out of `report.json` so that stays
/// deterministic.
#[derive(Default)]
pub struct Timings {
    /// Seconds spent reading a test's dumps, diffing, symbolizing and judging.
    pub analysis: HashMap<TestKey, f64>,
    /// Seconds spent writing a test's folded stacks and SVG.
    pub flamegraph: HashMap<TestKey, f64>,
    /// binary id -> seconds spent preparing it (baseline, allocator check).
    pub binaries: Vec<(String, f64)>,
    /// Harness stacks live at a test's exit (timing-dependent, so not in report.json).
    pub harness: HashMap<TestKey, Vec<StackReport>>,
}

/// The verdicts of a run's tests, in binary order, with the notes their analysis made.
#[derive(Default)]
pub struct Verdicts {
    pub reports: Vec<TestReport>,
    pub notes: Vec<String>,
    pub timings: Timings,
}

/// Every test's verdict (see the module's documentation).
pub fn of_all(
    binaries: &[TestBinary],
    results: &passes::PassResults,
    settings: &config::Layers,
    jobs: usize,
    recorder: &Recorder,
    others: &[crate::judging::suite::SuiteProcessFile],
) -> Verdicts {
    let mut suite = suite_processes(results);
    crate::judging::suite::add_files(&mut suite, others);
    let next = AtomicUsize::new(0);
    let outputs: Mutex<Vec<Option<Verdicts>>> =
        Mutex::new((0..binaries.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(binaries.len().max(1)) {
            scope.spawn(|| loop {
                let bi = next.fetch_add(1, Ordering::SeqCst);
                if bi >= binaries.len() {
                    break;
                }
                let binary = Binary {
                    index: bi,
                    binary: &binaries[bi],
                    results,
                    settings,
                    recorder,
                    suite: &suite,
                };
                let out = binary.verdicts();
                outputs
                    .lock()
                    .expect("no verdict thread panics holding the lock")[bi] = Some(out);
            });
        }
    });
    let outputs = outputs.into_inner().expect("verdict threads ended");
    merge(outputs.into_iter().flatten())
}

/// The processes of the build's executables that the run's tests started, each with what
/// it lost, for every test's verdict to compare its own processes' losses with.
pub fn suite_processes(results: &passes::PassResults) -> SuiteProcesses {
    let mut suite = SuiteProcesses::default();
    for t in &results.tests {
        let started = t.result.children.iter();
        if started
            .chain(t.counted.iter().flat_map(|c| &c.children))
            .next()
            .is_none()
        {
            continue;
        }
        let children = load::children_of(&t.result, t.counted.as_ref(), t.method);
        suite.add(&format!("{} {}", t.case.binary, t.case.name), children);
    }
    suite
}

/// The binaries' verdicts in order; a note several binaries made is kept once.
fn merge(outputs: impl Iterator<Item = Verdicts>) -> Verdicts {
    let mut all = Verdicts::default();
    for out in outputs {
        all.reports.extend(out.reports);
        for n in out.notes {
            if !all.notes.contains(&n) {
                all.notes.push(n);
            }
        }
        all.timings.analysis.extend(out.timings.analysis);
        all.timings.binaries.extend(out.timings.binaries);
    }
    all
}

/// One binary's tests to judge.
struct Binary<'a> {
    index: usize,
    binary: &'a TestBinary,
    results: &'a passes::PassResults,
    settings: &'a config::Layers<'a>,
    recorder: &'a Recorder,
    suite: &'a SuiteProcesses,
}

impl Binary<'_> {
    fn verdicts(&self) -> Verdicts {
        let mut out = Verdicts::default();
        // Symbol contexts are opened on first use; a binary has a baseline only when some
        // of its tests were profiled.
        let mut symbols = FromFiles::default();
        if let Some(doc) = &self.binary.doc {
            // Frames are keyed by the path the process's maps give: the canonical one.
            let path = std::fs::canonicalize(&self.binary.path)
                .unwrap_or_else(|_| self.binary.path.clone());
            (symbols.code).map_sources(&path.display().to_string(), doc.sources.clone());
        }
        let mut loaded: Option<BinaryEvidence> = None;
        let tests = self.results.tests.iter();
        for t in tests.filter(|t| t.case.binary == self.index) {
            if loaded.is_none() {
                let started = std::time::Instant::now();
                loaded = Some(self.load(&mut out.notes));
                if t.method != Method::Counters {
                    let seconds = started.elapsed().as_secs_f64();
                    out.timings.binaries.push((self.binary.id(), seconds));
                }
            }
            let bin = loaded.as_ref().expect("loaded above");
            let started = std::time::Instant::now();
            let report = self.verdict(t, bin, &mut symbols, &mut out.notes);
            if t.method != Method::Counters {
                let seconds = started.elapsed().as_secs_f64();
                out.timings.analysis.insert(report.key(), seconds);
            }
            out.reports.push(report);
        }
        out.notes.extend(symbols.code.warnings());
        out
    }

    /// The binary's own evidence (its baseline, its collections).
    fn load(&self, notes: &mut Vec<String>) -> BinaryEvidence {
        let b = self.binary;
        let (evidence, note) = load::binary(
            &b.path,
            b.facts.symbols.custom_global_allocator,
            self.results.baselines[self.index].as_ref(),
            b.facts.collections.clone(),
        );
        notes.extend(note);
        evidence
    }

    /// One test's verdict; its case written when the run records cases (a case that
    /// cannot be written is a note, never a lost verdict).
    fn verdict(
        &self,
        t: &TestOutcome,
        bin: &BinaryEvidence,
        symbols: &mut FromFiles,
        notes: &mut Vec<String>,
    ) -> TestReport {
        let b = self.binary;
        let id = TestIdentity {
            package: &b.package,
            binary: &b.target,
            kind: b.kind,
            name: &t.case.name,
        };
        let policy = Policy {
            effective: &t.case.settings,
            suppressions: self
                .settings
                .config
                .suppressions_for(&t.case.name)
                .collect(),
        };
        let test = load::test(
            &t.result,
            t.counted.as_ref(),
            t.method,
            &t.extra_runs,
            t.entry.as_ref(),
            self.suite,
        );
        let Some(root) = self.recorder.root() else {
            return verdict::judge(&id, &test, bin, symbols, &policy);
        };
        let mut recording = Recording::new(symbols);
        let report = verdict::judge(&id, &test, bin, &mut recording, &policy);
        let asked = recording.captured();
        let case = capture::Capture {
            id: &id,
            test: t,
            exe: &bin.exe,
            custom_allocator: b.facts.symbols.custom_global_allocator,
            baseline: self.results.baselines[self.index].as_ref(),
            cli: self.settings.cli,
            config_file: self.settings.config.path.as_deref(),
            symbols: asked,
            report: &report,
            collections: &b.facts.collections,
            suite: self.suite,
        };
        if let Err(e) = capture::write(root, &case) {
            notes.push(format!(
                "could not capture `{}` under {}: {e}",
                t.case.name,
                root.display()
            ));
        }
        report
    }
}
