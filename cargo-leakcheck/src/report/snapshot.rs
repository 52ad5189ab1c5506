//! Snapshot testing for rendered text: compares with a file under
//! `testdata/snapshots/`, or writes it when `UPDATE_SNAPSHOTS=1` (then review the diff).

use std::path::PathBuf;

/// Asserts that `text` is what `testdata/snapshots/<name>.txt` holds.
pub fn assert_snapshot(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "no snapshot {} ({e}); run with UPDATE_SNAPSHOTS=1 to write it:\n{text}",
            path.display()
        )
    });
    if expected != text {
        let first = expected
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(text.lines().count()));
        panic!(
            "{} differs from line {} on (UPDATE_SNAPSHOTS=1 rewrites it):\n--- expected\n{expected}\n--- actual\n{text}",
            path.display(),
            first + 1
        );
    }
}
