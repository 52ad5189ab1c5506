//! A bench run's renderings: its flame graph, growth plot and pprof profile files
//! ([`write_artifacts`]), and its human summary ([`render`]).

use crate::model::{
    human_bytes, BenchArtifacts, BenchStack, FrameReport, GrowthReport, Report, Verdict,
};
use crate::report::{flamegraph, plot, pprof};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How many stacks its plot draws.
const STACKS_PLOTTED: usize = 5;

/// Where a bench's artifacts go: `<dir>/<stem>.<ext>` under the output directory.
struct Files {
    dir: String,
    stem: String,
}

impl Files {
    fn of(b: &GrowthReport) -> Files {
        Files {
            dir: flamegraph::file_stem(&format!("{}-bench-{}", b.package, b.binary)),
            stem: flamegraph::file_stem(&b.name),
        }
    }

    /// The artifact with extension `ext`, relative to the output directory.
    fn rel(&self, ext: &str) -> PathBuf {
        PathBuf::from(&self.dir).join(format!("{}.{ext}", self.stem))
    }
}

/// Writes a bench's or service's artifacts under `out_dir` and names them in its report: a
/// service's memory plot, whatever its verdict, and the growth's folded stacks, plot, flame
/// graph and pprof profile when it grew. What cannot be written is a note.
pub fn write_artifacts(b: &mut GrowthReport, out_dir: &Path, root: &Path, notes: &mut Vec<String>) {
    let files = Files::of(b);
    // A service's memory, whatever its verdict: a flat line is an answer too.
    if !b.rss.is_empty() {
        let written = std::fs::create_dir_all(out_dir.join(&files.dir))
            .and_then(|_| std::fs::write(out_dir.join(files.rel("memory.svg")), memory_chart(b)));
        match written {
            Ok(()) => b.artifacts.memory_plot = Some(files.rel("memory.svg").display().to_string()),
            Err(e) => notes.push(format!(
                "could not write the memory plot of `{}`: {e}",
                b.name
            )),
        }
    }
    if b.verdict != Verdict::Leak {
        return;
    }
    match write_growth(b, out_dir, &files, root) {
        Ok(()) => {
            b.artifacts = BenchArtifacts {
                flamegraph: Some(files.rel("svg").display().to_string()),
                folded: Some(files.rel("folded").display().to_string()),
                plot: Some(files.rel("plot.svg").display().to_string()),
                pprof: Some(files.rel("pb.gz").display().to_string()),
                memory_plot: b.artifacts.memory_plot.take(),
            };
        }
        Err(e) => notes.push(format!(
            "could not write the artifacts of bench `{}`: {e}",
            b.name
        )),
    }
}

/// A service's resident set size and live heap over time, with where the memory went
/// stacked under the lines when the allocator's figures were read.
fn memory_chart(b: &GrowthReport) -> String {
    let series = [
        ("resident set size (RSS)".to_string(), b.rss.clone()),
        ("live heap, all stacks".to_string(), b.heap.clone()),
    ];
    let title = format!("{}: the process's memory over time", b.name);
    match b.memory.as_ref().filter(|m| m.series.len() >= 2) {
        Some(m) => {
            let at: Vec<f64> = m.series.iter().map(|p| p.seconds).collect();
            let stacked: Vec<(String, Vec<u64>)> = crate::model::MemoryPart::ALL
                .iter()
                .enumerate()
                .map(|(i, part)| {
                    let values = m.series.iter().map(|p| p.parts[i]).collect();
                    (part.label().to_string(), values)
                })
                .collect();
            plot::stacked_chart(&title, &at, &stacked, &series)
        }
        None => plot::line_chart(&title, &series),
    }
}

/// The collections that grew.
fn growing_collections(b: &GrowthReport) -> Vec<&crate::model::BenchCollection> {
    b.collections.iter().filter(|c| c.flagged).collect()
}

/// The growth's folded stacks, sorted: each growing stack (its memory's label as its root
/// frame when not the heap's), and each growing collection as one frame.
fn folded_growth(b: &GrowthReport) -> Vec<String> {
    let mut folded: Vec<String> = b
        .stacks
        .iter()
        .filter(|s| s.flagged && s.growth_bytes > 0)
        .map(|s| match s.memory.label() {
            None => flamegraph::folded_line(&s.frames, s.growth_bytes as u64),
            Some(label) => {
                let mut frames = vec![FrameReport::named(&format!("[{label}]"))];
                frames.extend(s.frames.iter().cloned());
                flamegraph::folded_line(&frames, s.growth_bytes as u64)
            }
        })
        .collect();
    folded.extend(growing_collections(b).iter().map(|c| {
        let what = &c.collection;
        let frame = FrameReport::named(&format!(
            "[collection {}: {}]",
            crate::report::text::collection_holder(what, Path::new("")),
            what.type_name
        ));
        flamegraph::folded_line(&[frame], what.bytes_of(c.growth))
    }));
    folded.sort();
    folded
}

/// The plot's lines: the first stacks' retained bytes over time, then the growing
/// collections' (their entries times an entry's size).
fn plotted_series(b: &GrowthReport, root: &Path) -> Vec<(String, Vec<(f64, u64)>)> {
    let mut series: Vec<(String, Vec<(f64, u64)>)> = b
        .stacks
        .iter()
        .take(STACKS_PLOTTED)
        .map(|s| (stack_label(&s.frames, s.flagged, root), s.series.clone()))
        .collect();
    series.extend(growing_collections(b).iter().take(STACKS_PLOTTED).map(|c| {
        let label = format!(
            "GROWS: {} {} (its entries times {} B)",
            c.collection.root,
            c.collection.type_name,
            c.collection.entry_bytes.max(1)
        );
        (
            label,
            c.series
                .iter()
                .map(|&(t, n)| (t, c.collection.bytes_of(n)))
                .collect(),
        )
    }));
    series
}

/// The growth, as a pprof profile: objects are not counted per snapshot, so 0.
fn growth_profile(b: &GrowthReport) -> Vec<u8> {
    let samples: Vec<pprof::Sample> = b
        .stacks
        .iter()
        .filter(|s| s.flagged && s.growth_bytes > 0)
        .map(|s| pprof::Sample {
            frames: &s.frames,
            objects: 0,
            bytes: s.growth_bytes as u64,
        })
        .collect();
    pprof::encode(
        &samples,
        &b.binary,
        &format!("memory {} kept growing by (cargo-leakcheck bench)", b.name),
    )
}

/// Writes a growing bench's folded stacks, plot, flame graph and pprof profile.
fn write_growth(
    b: &GrowthReport,
    out_dir: &Path,
    files: &Files,
    root: &Path,
) -> std::io::Result<()> {
    let folded = folded_growth(b);
    let title = format!("{} {}: retained bytes over time", b.binary, b.name);
    let at = |ext: &str| out_dir.join(files.rel(ext));
    std::fs::create_dir_all(out_dir.join(&files.dir))?;
    std::fs::write(at("folded"), folded.join("\n") + "\n")?;
    std::fs::write(
        at("plot.svg"),
        plot::line_chart(&title, &plotted_series(b, root)),
    )?;
    flamegraph::svg_titled(
        &format!("{} {}: growth", b.binary, b.name),
        "memory that kept growing over the later half of the run, by allocation stack",
        &folded,
        std::io::BufWriter::new(std::fs::File::create(at("svg"))?),
    )?;
    pprof::write_gz(&at("pb.gz"), &growth_profile(b))
}

/// A stack's legend label: its first frame outside std (with file:line when known), and
/// the innermost frame when that is a different one, since several stacks often pass
/// through the same function (`handle_request`, and the `Vec` it grows).
fn stack_label(frames: &[FrameReport], flagged: bool, root: &Path) -> String {
    let text = |f: &FrameReport| match (&f.file, f.line) {
        (Some(file), Some(line)) => format!(
            "{} ({}:{line})",
            f.function,
            file.rsplit('/').next().unwrap_or(file)
        ),
        _ => f.function.clone(),
    };
    let mut label = match crate::analysis::frames::identifying_frame(frames, root) {
        Some(f) => text(f),
        None => "[unknown]".into(),
    };
    if let Some(first) = frames.first() {
        if !label.starts_with(&first.function) {
            let mut inner: String = first.function.chars().take(60).collect();
            if inner.len() < first.function.len() {
                inner.push('…');
            }
            label = format!("{label}, allocating in {inner}");
        }
    }
    format!("{}{label}", if flagged { "GROWS: " } else { "" })
}

/// `+1.5 MiB`, `-20.0 KiB`: a signed growth.
fn signed_bytes(v: i64) -> String {
    format!(
        "{}{}",
        if v < 0 { "-" } else { "+" },
        human_bytes(v.unsigned_abs())
    )
}

/// Where a service's resident memory went: one line per part, then what the figures say.
fn memory_text(m: &crate::model::MemoryExplained) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "         RSS {} to {} ({}) from {:.1} s to {:.1} s:",
        human_bytes(m.rss_from),
        human_bytes(m.rss_to),
        signed_bytes(m.rss_growth()),
        m.from_seconds,
        m.to_seconds
    );
    for p in &m.parts {
        let _ = writeln!(
            s,
            "           {:<46} {:>12}  ({} at the end){}",
            p.part.label(),
            signed_bytes(p.growth()),
            human_bytes(p.to),
            if p.part.judged() {
                ", judged stack by stack"
            } else {
                ""
            }
        );
    }
    for f in &m.findings {
        let _ = writeln!(s, "           {f}");
    }
    s
}

/// The human summary of a bench run.
pub fn render(report: &Report, root: &Path, out_dir: &Path) -> String {
    let mut s = String::new();
    for b in &report.benches {
        match b.verdict {
            Verdict::Leak => growing_text(&mut s, b, root, out_dir),
            Verdict::Clean => {}
            other => {
                let _ = writeln!(
                    s,
                    "{:>8} {} {}",
                    other.as_str().to_uppercase(),
                    b.binary,
                    b.name
                );
                if let Some(m) = &b.message {
                    for line in m.lines().take(15) {
                        let _ = writeln!(s, "           | {line}");
                    }
                }
            }
        }
    }
    for b in &report.benches {
        memory_lines(&mut s, b, out_dir);
    }
    totals_line(&mut s, report);
    crate::report::text::notes_and_outputs(&mut s, &report.notes, out_dir);
    s
}

/// A growing bench or service: by how much, how fast and in what, its first growing
/// collections and stacks, and its plot and flame graph.
fn growing_text(s: &mut String, b: &GrowthReport, root: &Path, out_dir: &Path) {
    let flagged: Vec<&BenchStack> = b.stacks.iter().filter(|st| st.flagged).collect();
    let growth: i64 = flagged.iter().map(|st| st.growth_bytes).sum();
    let rate: f64 = flagged.iter().map(|st| st.growth_bytes_per_second).sum();
    let growing = b.collections.iter().filter(|c| c.flagged).count();
    let collections = match growing {
        0 => String::new(),
        n => format!(
            "{} {}",
            if flagged.is_empty() { ":" } else { "; and" },
            crate::model::count_of(n as u64, "collection longer", "collections longer")
        ),
    };
    let _ = write!(s, "   GROWS {} {}", b.binary, b.name);
    if !flagged.is_empty() {
        let _ = write!(
            s,
            ": +{} ({}/s) over the later half of {:.1}s, in {} stack(s)",
            human_bytes(growth.max(0) as u64),
            human_bytes(rate.max(0.0) as u64),
            b.duration_seconds,
            flagged.len()
        );
    }
    let _ = writeln!(s, "{collections}");
    for c in b.collections.iter().filter(|c| c.flagged).take(3) {
        let _ = writeln!(
            s,
            "           {}",
            crate::report::text::bench_collection_text(c, root)
        );
    }
    for st in flagged.iter().take(3) {
        growing_stack_text(s, st, root);
    }
    if let (Some(p), Some(f)) = (&b.artifacts.plot, &b.artifacts.flamegraph) {
        let _ = writeln!(
            s,
            "           plot: {}\n           flame graph: {}",
            out_dir.join(p).display(),
            out_dir.join(f).display()
        );
    }
}

/// A growing stack: by how much, at its first frame of the program's own code, with the
/// task and the root that hold it.
fn growing_stack_text(s: &mut String, st: &BenchStack, root: &Path) {
    let Some(f) = crate::analysis::frames::identifying_frame(&st.frames, root) else {
        return;
    };
    let at = match (&f.file, f.line) {
        (Some(file), Some(line)) => {
            let p = Path::new(file);
            format!(" ({}:{line})", p.strip_prefix(root).unwrap_or(p).display())
        }
        _ => String::new(),
    };
    let what = st
        .memory
        .label()
        .map(|l| format!(" of {l}"))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "           +{}{what} at {}{at}",
        human_bytes(st.growth_bytes.max(0) as u64),
        f.function
    );
    if let Some(task) = &st.task {
        let _ = writeln!(
            s,
            "             {}",
            crate::report::text::live_tasks_text(task, st.objects, root)
        );
    }
    for line in st
        .retained_by
        .iter()
        .flat_map(|h| crate::report::text::held_text(h, root))
    {
        let _ = writeln!(s, "             {line}");
    }
}

/// A service's memory: its peaks and plot, and where its resident memory went.
fn memory_lines(s: &mut String, b: &GrowthReport, out_dir: &Path) {
    if let Some(plot) = &b.artifacts.memory_plot {
        let peak = |series: &[(f64, u64)]| series.iter().map(|p| p.1).max().unwrap_or(0);
        let _ = writeln!(
            s,
            "  Memory {}: RSS peaked at {}, live heap at {}; plot: {}",
            b.name,
            human_bytes(peak(&b.rss)),
            human_bytes(peak(&b.heap)),
            out_dir.join(plot).display()
        );
    }
    if let Some(m) = &b.memory {
        s.push_str(&memory_text(m));
    }
}

/// The counts by verdict, and how the heap was sampled.
fn totals_line(s: &mut String, report: &Report) {
    let count = |v: Verdict| report.benches.iter().filter(|b| b.verdict == v).count();
    let sampling = match report.settings.sample_period {
        1 => "every allocation recorded".to_string(),
        p => format!(
            "sampled at one sample per {} allocated (growth under ~{} over a run is not reliably seen)",
            human_bytes(p),
            human_bytes(16 * p)
        ),
    };
    let _ = writeln!(
        s,
        "\n Summary {}: {} clean, {} growing,{} {} other; {sampling}",
        match report.benches.iter().all(|b| b.service) {
            true => crate::model::count_of(report.benches.len() as u64, "service", "services"),
            false => crate::model::count_of(report.benches.len() as u64, "bench", "benches"),
        },
        count(Verdict::Clean),
        count(Verdict::Leak),
        match count(Verdict::Unsettled) {
            0 => String::new(),
            n => format!(" {n} too short to judge,"),
        },
        report.benches.len()
            - count(Verdict::Clean)
            - count(Verdict::Leak)
            - count(Verdict::Unsettled),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str) -> FrameReport {
        FrameReport::named(name)
    }

    #[test]
    fn labels_tell_stacks_through_the_same_function_apart() {
        let direct = [frame("grows::handle_request"), frame("grows::main")];
        let via_vec = [
            frame("alloc::raw_vec::RawVec<T,A>::grow_one"),
            frame("grows::handle_request"),
        ];
        let root = Path::new("/ws");
        assert_eq!(
            stack_label(&direct, true, root),
            "GROWS: grows::handle_request"
        );
        assert_eq!(
            stack_label(&via_vec, false, root),
            "grows::handle_request, allocating in alloc::raw_vec::RawVec<T,A>::grow_one"
        );
    }

    #[test]
    fn labels_name_the_workspace_s_code_not_std_s() {
        let at = |name: &str, file: &str| FrameReport::at(name, file, 7);
        // Both frames have absolute paths; only one is under the workspace.
        let frames = [
            at(
                "<hashbrown::raw::RawTable<T>>::reserve_rehash",
                "/cargo/registry/src/hashbrown-0.15/src/raw/mod.rs",
            ),
            at("grows::Cache::insert", "/ws/src/lib.rs"),
        ];
        assert_eq!(
            stack_label(&frames, true, Path::new("/ws")),
            "GROWS: grows::Cache::insert (lib.rs:7), allocating in <hashbrown::raw::RawTable<T>>::reserve_rehash"
        );
    }

    #[test]
    fn the_bench_summary() {
        let bench = GrowthReport::example;
        let grows = bench("grows", Verdict::Leak);
        let mut failed = bench("crashes", Verdict::Crashed);
        failed.message = Some("killed by signal 11 (SIGSEGV)".into());
        let mut report = Report {
            benches: vec![grows, failed, bench("plateau", Verdict::Clean)],
            notes: vec!["a note".into()],
            ..Report::example()
        };
        report.settings.sample_period = 4096;
        let text = render(&report, Path::new("/ws"), Path::new("target/leakcheck"));
        crate::report::expected_text::assert_matches("bench-summary", &text);
    }
}
