//! The pictures and profiles of what failed, drawn before the report is written so that
//! report.json, the page, JUnit and the rest can point to them: for each failing test its
//! folded stacks, flame graph and pprof profile; for each bench or service its plots too.

use crate::model::{Report, TestKey, TestReport};
use crate::report::{flamegraph, pprof};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Writes the artifacts of everything that failed under `out_dir` and records where in the
/// report; what cannot be written is a note, never a lost verdict. Seconds spent per test.
pub fn write(report: &mut Report, out_dir: &Path, root: &Path) -> HashMap<TestKey, f64> {
    let mut seconds = HashMap::new();
    let mut notes = Vec::new();
    for t in report.tests.iter_mut() {
        if t.failing_stacks().next().is_none() && !t.collections.iter().any(|c| c.fails) {
            continue;
        }
        let started = std::time::Instant::now();
        if let Err(e) = write_test(t, out_dir) {
            notes.push(format!(
                "could not write the flame graph of `{}`: {e}",
                t.name
            ));
        }
        seconds.insert(t.key(), started.elapsed().as_secs_f64());
    }
    for b in &mut report.benches {
        crate::report::bench::write_artifacts(b, out_dir, root, &mut notes);
    }
    report.notes.extend(notes);
    seconds
}

/// One failing test's folded stacks, flame graph and pprof profile, under a directory of
/// its binary.
fn write_test(t: &mut TestReport, out_dir: &Path) -> std::io::Result<()> {
    let lines = flamegraph::folded_lines(t);
    let dir_name = flamegraph::file_stem(&format!("{}-{}-{}", t.package, t.kind, t.binary));
    let stem = flamegraph::file_stem(&t.name);
    let folded_rel = PathBuf::from(&dir_name).join(format!("{stem}.folded"));
    let svg_rel = PathBuf::from(&dir_name).join(format!("{stem}.svg"));
    let pprof_rel = PathBuf::from(&dir_name).join(format!("{stem}.pb.gz"));
    std::fs::create_dir_all(out_dir.join(&dir_name))?;
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(out_dir.join(&folded_rel), text)?;
    let file = std::fs::File::create(out_dir.join(&svg_rel))?;
    flamegraph::svg(
        &format!("{} {}", t.binary, t.name),
        &lines,
        std::io::BufWriter::new(file),
    )?;
    let graphed = flamegraph::graphed_stacks(t);
    let samples: Vec<pprof::Sample> = graphed
        .iter()
        .map(|g| pprof::Sample {
            frames: &g.frames,
            objects: g.objects,
            bytes: g.bytes,
        })
        .collect();
    let profile = pprof::encode(
        &samples,
        &t.binary,
        &format!("memory {} retained at its end (cargo-leakcheck)", t.name),
    );
    pprof::write_gz(&out_dir.join(&pprof_rel), &profile)?;
    t.artifacts.folded = Some(folded_rel.display().to_string());
    t.artifacts.flamegraph = Some(svg_rel.display().to_string());
    t.artifacts.pprof = Some(pprof_rel.display().to_string());
    Ok(())
}
