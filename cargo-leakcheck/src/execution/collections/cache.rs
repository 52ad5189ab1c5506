//! The collections of each executable, kept with the build: the walk reads the whole of
//! `.debug_info` (tens of megabytes in a debug build), so its result is stored in the target
//! directory under the executable's build id, and a later run (or the next test process
//! under nextest) over the same build reads it back. Entries unused for a month are removed.

use super::Table;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The walk's own code: a table is kept only for the walk that made it, so a build of the
/// tool that walks differently never reads a table the old walk left.
const WALK: [&str; 3] = [
    include_str!("mod.rs"),
    include_str!("walk.rs"),
    include_str!("types.rs"),
];

/// A short name for [`WALK`].
fn walk_version() -> String {
    let mut h = crate::fnv::Fnv::new();
    for source in WALK {
        h.words(source.as_bytes());
    }
    format!("{:016x}", h.finish())
}

/// How long an entry nobody used is kept.
const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// Where the tables of a target directory's executables are kept.
pub fn dir(target_dir: &Path) -> PathBuf {
    target_dir.join("leakcheck-cache").join("collections")
}

/// The collections of the executable `data` (build id `build_id`, hexadecimal), read from
/// the cache in `dir` when it has them, else walked and stored there. Without a build id
/// or a cache, walked every time. A cache that cannot be read or written costs the walk,
/// nothing else.
pub fn table(data: &[u8], build_id: &str, dir: Option<&Path>) -> Table {
    let Some(dir) = dir.filter(|_| !build_id.is_empty()) else {
        return super::read(data);
    };
    if let Some(table) = cached(build_id, dir) {
        return table;
    }
    let path = dir.join(format!("{build_id}-{}.json", walk_version()));
    let table = super::read(data);
    // Two processes that walk the same executable at once (nextest's) each leave a whole file.
    let text = serde_json::to_string(&table).expect("tables serialize");
    crate::execution::shared_file::write_whole(&path, &text);
    table
}

/// The collections of the executable with build id `build_id`, when the cache in `dir` has
/// them.
pub fn cached(build_id: &str, dir: &Path) -> Option<Table> {
    if build_id.is_empty() {
        return None;
    }
    let path = dir.join(format!("{build_id}-{}.json", walk_version()));
    let table = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str::<Table>(&text).ok())?;
    touch(&path);
    Some(table)
}

/// Marks an entry as used now.
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Removes the entries of `dir` nobody used for [`KEEP`].
pub fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > KEEP);
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_walked_once_per_build_and_read_back_after() {
        let dir = std::env::temp_dir().join(format!("leakcheck-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let exe = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fuzz/corpus/elf/tiny-c-with-dwarf"),
        )
        .unwrap();
        let walked = table(&exe, "ab01", Some(&dir));
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(files.len(), 1, "stored under its build id");
        // What is read back is what was walked; a stored table stands for the walk.
        let mut stored = walked.clone();
        stored.note = Some("read back".into());
        std::fs::write(files[0].path(), serde_json::to_string(&stored).unwrap()).unwrap();
        assert_eq!(table(&exe, "ab01", Some(&dir)), stored);
        // Another build, or none, is walked.
        assert_eq!(table(&exe, "", Some(&dir)), walked);
        prune(&dir);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "used just now");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
