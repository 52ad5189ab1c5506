//! Files that processes of one run share while they run (nextest's runners, two runs
//! walking one executable): each written whole under a name of its writer's own, then
//! renamed into place, so that a reader never meets half a file, whichever writer wins.

use std::path::Path;

/// Writes `text` to `path` whole (creating its directory). A file that cannot be written
/// costs its readers a look of their own, nothing else: no error to report.
pub fn write_whole(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_is_written_whole_in_a_new_directory_and_leaves_nothing_beside_it() {
        let dir = std::env::temp_dir().join(format!("leakcheck-shared-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub/entry.json");
        super::write_whole(&path, "{\"a\":1}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}");
        let names: Vec<_> = std::fs::read_dir(dir.join("sub")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
