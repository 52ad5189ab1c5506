//! `report.json`: the machine-readable report (schema in `model` and the README).

use crate::errors::Error;
use crate::model::Report;
use std::path::Path;

/// Serializes the report, pretty-printed with a trailing newline.
pub fn to_string(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).expect("the report serializes");
    s.push('\n');
    s
}

/// Writes the report to `path`, atomically (a reader never sees half a report).
pub fn write(report: &Report, path: &Path) -> Result<(), Error> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, to_string(report))
        .map_err(|e| Error::io(format!("write `{}`", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("write `{}`", path.display()), e))
}
