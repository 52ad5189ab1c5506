//! `report.json`: the machine-readable report (schema in `model` and in docs/reading-reports.md).

use crate::errors::{Error, MergeError};
use crate::model::{Report, REPORT_VERSION};
use std::path::{Path, PathBuf};

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

/// Reads a report (`path`: a report.json or a directory holding one) of this schema
/// version; the file read, and the report.
pub fn read(path: &Path) -> Result<(PathBuf, Report), MergeError> {
    let path = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&path).map_err(|source| MergeError::Unreadable {
        path: path.clone(),
        source,
    })?;
    let not_a_report = |reason: String| MergeError::NotAReport {
        path: path.clone(),
        reason,
    };
    // The version first: a newer schema gets a message about versions, not about a field.
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| not_a_report(e.to_string()))?;
    let version = value
        .get("version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| not_a_report("it has no numeric `version`".into()))?;
    if version != u64::from(REPORT_VERSION) {
        return Err(MergeError::Version {
            path,
            found: version,
            expected: format!("but this cargo-leakcheck reads version {REPORT_VERSION}"),
        });
    }
    let report: Report = serde_json::from_value(value).map_err(|e| not_a_report(e.to_string()))?;
    Ok((path, report))
}
