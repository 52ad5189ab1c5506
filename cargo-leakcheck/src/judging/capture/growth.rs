//! Golden cases of benches and services: what one bench's or service's verdict was drawn
//! from (its snapshots, their timeline, the snapshot after a service's load with its scan,
//! its stderr, how it ended), copied into a directory of its own with the symbols the verdict
//! asked for, and judged again from there by the same loader and verdict stage a run uses.
//! Written by `LEAKCHECK_CAPTURE=DIR cargo leakcheck bench|run`, as `growth.json` beside the
//! report the run gave (`expected.json`).

use crate::analysis::growth::{self, BenchIdentity};
use crate::analysis::service;
use crate::evidence::symbols::{Captured, Recording, Symbols};
use crate::evidence::{ProcessEnd, ServiceStage};
use crate::model::GrowthReport;
use std::path::{Path, PathBuf};

/// A bench's or service's case, `growth.json`; file names are relative to its directory.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct GrowthCaseFile {
    pub package: String,
    pub binary: String,
    pub name: String,
    /// The executable's path in the run it was captured from (frames name it).
    pub exe: String,
    pub criterion: bool,
    pub whole_program: bool,
    /// How it went: a bench's end, or a service's stage and what readiness waited for.
    pub ran: GrowthRan,
    pub threshold: u64,
    pub period: u64,
    /// Each snapshot's dumps (this runtime's, then the program's own jemalloc's).
    pub dumps: Vec<Vec<String>>,
    pub timeline: Option<String>,
    pub stderr: Option<String>,
    /// A service's snapshot after its load (its dumps), and the dump its scan files are
    /// beside.
    pub after: Option<(Vec<String>, String)>,
    pub symbols: Captured,
    /// The program's collections, when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collections: Option<crate::evidence::CollectionTable>,
}

/// How a bench or a service ran.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GrowthRan {
    Bench(ProcessEnd),
    Service { stage: ServiceStage, ready: String },
}

/// One bench or service as a run judges it: who, how it ran, its settings, and the files
/// its evidence was loaded from (what a capture copies).
pub struct GrowthCase<'a> {
    pub id: &'a BenchIdentity<'a>,
    pub ran: GrowthRan,
    pub threshold: u64,
    pub period: u64,
    pub dumps: &'a [Vec<PathBuf>],
    pub timeline: &'a Path,
    pub stderr: &'a Path,
    /// A service's snapshot after its load (its dumps) and the dump its scan is beside.
    pub after: Option<(&'a [PathBuf], &'a Path)>,
}

/// A case's verdict from its loaded `evidence`; when the run records cases (`recorder`),
/// the case is also written, with the symbols its verdict asked for, under its directory
/// (a case that cannot be written is a note, never a lost result).
pub fn verdict_of(
    case: &GrowthCase,
    evidence: &crate::evidence::growth_run::GrowthEvidence,
    symbols: &mut dyn Symbols,
    notes: &mut Vec<String>,
    recorder: &super::Recorder,
) -> GrowthReport {
    let Some(root) = recorder.root() else {
        return verdict(
            case.id,
            &case.ran,
            evidence,
            symbols,
            case.threshold,
            case.period,
        );
    };
    let mut recording = Recording::new(symbols);
    let report = verdict(
        case.id,
        &case.ran,
        evidence,
        &mut recording,
        case.threshold,
        case.period,
    );
    let table = &evidence.collections;
    if let Err(e) = write(root, case, recording.captured(), table, &report) {
        notes.push(format!(
            "could not capture `{}` under {}: {e}",
            case.id.name,
            root.display()
        ));
    }
    report
}

/// Writes a case under `root`, in a directory named after the bench; returns it.
fn write(
    root: &Path,
    c: &GrowthCase,
    symbols: Captured,
    collections: &crate::evidence::CollectionTable,
    report: &GrowthReport,
) -> std::io::Result<PathBuf> {
    let dir = root.join(super::case_stem(&[c.id.package, c.id.binary, c.id.name]));
    std::fs::create_dir_all(&dir)?;
    let mut copied = 0usize;
    let mut copy = |from: &Path, with_scan: bool| -> std::io::Result<String> {
        copied += 1;
        let name = format!(
            "{copied}.{}",
            from.file_name().and_then(|n| n.to_str()).unwrap_or("file")
        );
        super::copy_with_scan(from, &dir.join(&name), with_scan)?;
        Ok(name)
    };
    let dumps = c
        .dumps
        .iter()
        .map(|parts| parts.iter().map(|p| copy(p, false)).collect())
        .collect::<std::io::Result<_>>()?;
    let timeline = copy(c.timeline, false).ok();
    let stderr = copy(c.stderr, false).ok();
    let after = match c.after {
        Some((parts, scanned)) => Some((
            parts
                .iter()
                .map(|p| copy(p, false))
                .collect::<std::io::Result<_>>()?,
            copy(scanned, true)?,
        )),
        None => None,
    };
    let case = GrowthCaseFile {
        package: c.id.package.into(),
        binary: c.id.binary.into(),
        name: c.id.name.into(),
        exe: c.id.exe.display().to_string(),
        criterion: c.id.criterion,
        whole_program: c.id.whole_program,
        ran: c.ran.clone(),
        threshold: c.threshold,
        period: c.period,
        dumps,
        timeline,
        stderr,
        after,
        symbols,
        collections: (!collections.collections.is_empty()).then(|| collections.clone()),
    };
    super::write_json(&dir.join("growth.json"), &case)?;
    super::write_json(&dir.join("expected.json"), report)?;
    Ok(dir)
}

/// A bench's or a service's verdict from what it left, as a run asks for it.
fn verdict(
    id: &BenchIdentity,
    ran: &GrowthRan,
    evidence: &crate::evidence::growth_run::GrowthEvidence,
    symbols: &mut dyn Symbols,
    threshold: u64,
    period: u64,
) -> GrowthReport {
    match ran {
        GrowthRan::Bench(end) => growth::judge_bench(id, end, evidence, symbols, threshold, period),
        GrowthRan::Service { stage, ready } => {
            service::judge(id, stage, ready, evidence, symbols, threshold, period)
        }
    }
}

/// Judges the case in `dir` again, from its files alone.
#[cfg(test)]
pub fn replay(dir: &Path) -> Result<GrowthReport, String> {
    replay_with(dir, |_| {})
}

/// Judges the case in `dir` again, its description changed by `change` first.
#[cfg(test)]
pub fn replay_with(
    dir: &Path,
    change: impl Fn(&mut GrowthCaseFile),
) -> Result<GrowthReport, String> {
    use crate::evidence::load;
    let path = dir.join("growth.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut case: GrowthCaseFile =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    change(&mut case);
    let at = |name: &String| dir.join(name);
    let missing = dir.join("missing");
    let dumps: Vec<Vec<PathBuf>> = case
        .dumps
        .iter()
        .map(|parts| parts.iter().map(at).collect())
        .collect();
    let timeline = case.timeline.as_ref().map_or(missing.clone(), at);
    let after = case.after.as_ref().map(|(parts, scanned)| {
        let parts: Vec<PathBuf> = parts.iter().map(at).collect();
        load::growth_after(&parts, &at(scanned), &timeline)
    });
    let evidence = load::growth(
        &case.stderr.as_ref().map_or_else(|| missing.clone(), at),
        &dumps,
        &timeline,
        after,
        std::sync::Arc::new(case.collections.clone().unwrap_or_default()),
    );
    let exe = PathBuf::from(&case.exe);
    let id = BenchIdentity {
        package: &case.package,
        binary: &case.binary,
        name: &case.name,
        exe: &exe,
        criterion: case.criterion,
        whole_program: case.whole_program,
    };
    let mut symbols = crate::evidence::symbols::Replay::new(case.symbols);
    Ok(verdict(
        &id,
        &case.ran,
        &evidence,
        &mut symbols,
        case.threshold,
        case.period,
    ))
}
