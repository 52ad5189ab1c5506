//! `--write-suppressions`: turns today's failing stacks (and growing collections, by their
//! static's name) into `[[suppress]]` entries, so a large codebase can turn the check on at
//! once and burn the list down later.

use crate::analysis::frames::identifying_frame;
use crate::config::Glob;
use crate::errors::Error;
use crate::model::Report;
use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

/// The reason written into every generated entry; the run says how many are left.
pub const PLACEHOLDER_REASON: &str =
    "TODO: say why this leak is accepted (written by cargo leakcheck --write-suppressions)";

/// The `[[suppress]]` entries for every failing stack of the report: one per distinct
/// (frame, test), each limited to its test.
pub fn entries(report: &Report, root: &Path) -> String {
    let mut seen = BTreeSet::new();
    let mut out = String::new();
    for t in &report.tests {
        for s in t.failing_stacks() {
            let Some(frame) = identifying_frame(&s.frames, root) else {
                continue;
            };
            let (frame, filter) = (Glob::escape(&frame.function), Glob::escape(&t.name));
            if !seen.insert((frame.clone(), filter.clone())) {
                continue;
            }
            let _ = write!(
                out,
                "\n[[suppress]]\n# {} {}: {} bytes in {} objects\nframe = {}\nfilter = {}\nreason = {}\n",
                t.binary,
                t.name,
                s.bytes,
                s.objects,
                toml_string(&frame),
                toml_string(&filter),
                toml_string(PLACEHOLDER_REASON)
            );
        }
        // A growing collection is matched by its static's name.
        for c in t.collections.iter().filter(|c| c.fails) {
            let (frame, filter) = (Glob::escape(&c.collection.root), Glob::escape(&t.name));
            if !seen.insert((frame.clone(), filter.clone())) {
                continue;
            }
            let _ = write!(
                out,
                "\n[[suppress]]\n# {} {}: {}\nframe = {}\nfilter = {}\nreason = {}\n",
                t.binary,
                t.name,
                crate::report::text::collection_text(c, root),
                toml_string(&frame),
                toml_string(&filter),
                toml_string(PLACEHOLDER_REASON)
            );
        }
    }
    out
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Appends the entries to `path` (creating it); returns how many were written.
pub fn write(report: &Report, path: &Path, root: &Path) -> Result<usize, Error> {
    let text = entries(report, root);
    let count = text.matches("[[suppress]]").count();
    if count == 0 {
        return Ok(0);
    }
    let mut existing = std::fs::read_to_string(path).unwrap_or_default();
    if !existing.is_empty() && !existing.ends_with('\n') {
        existing.push('\n');
    }
    if existing.is_empty() {
        existing.push_str(
            "# Accepted leaks, written by `cargo leakcheck test --write-suppressions`.\n",
        );
    }
    existing.push_str(&text);
    std::fs::write(path, existing)
        .map_err(|e| Error::io(format!("write `{}`", path.display()), e))?;
    Ok(count)
}
