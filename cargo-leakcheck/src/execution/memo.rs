//! What listing and reading one test binary found, kept on disk for the other processes of
//! one nextest run. nextest starts the tool once per test, and each would otherwise list
//! the binary three times and read it whole (symbols, libtest's table, entry points) to
//! run one test of it: the same answers every time, for as long as the file is the same.
//! An entry is keyed by the executable's path, size and modification time, written whole
//! under another name and then renamed (runners of one binary start side by side), and only
//! ever read back by processes of the run that wrote it.

use crate::execution::cargo::{Harness, TestBinary};
use crate::execution::collections;
use crate::execution::entry::Inspection;
use crate::execution::facts::{BinaryFacts, BinarySymbols};
use crate::execution::listing::{self, Names, Selected};
use crate::execution::run_config::RunConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One binary as a run's first reading of it found it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Known {
    pub harness: Harness,
    pub names: Names,
    pub symbols: BinarySymbols,
    pub tests: Option<Inspection>,
    pub build_id: String,
}

/// The entry of executable `exe` in `dir`; None when it has none or the file changed.
pub fn load(dir: &Path, exe: &Path) -> Option<Known> {
    let text = std::fs::read_to_string(entry_path(dir, exe)?).ok()?;
    serde_json::from_str(&text).ok()
}

/// Keeps `known` as executable `exe`'s entry in `dir`. A memo that cannot be written costs
/// the next runner a reading, nothing else.
pub fn store(dir: &Path, exe: &Path, known: &Known) {
    if let Some(path) = entry_path(dir, exe) {
        let text = serde_json::to_string(known).expect("memos serialize");
        crate::execution::shared_file::write_whole(&path, &text);
    }
}

/// Where `exe`'s entry goes: named after its path, size and modification time, so that a
/// rebuilt file never meets the entry of the one it replaced.
fn entry_path(dir: &Path, exe: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(exe).ok()?;
    let mut key = crate::fnv::Fnv::new();
    key.bytes(exe.as_os_str().as_encoded_bytes())
        .bytes(&meta.size().to_le_bytes())
        .bytes(&meta.mtime().to_le_bytes())
        .bytes(&meta.mtime_nsec().to_le_bytes())
        .bytes(&meta.ino().to_le_bytes());
    Some(dir.join(format!("{:016x}.json", key.finish())))
}

/// Lists every binary's tests and reads every binary (its facts go with it): from the memo
/// where the run has one and can use it (see [`select`]), else as any run does.
pub fn list_and_read(binaries: &mut [TestBinary], config: &RunConfig) -> Selected {
    let cache = collections::cache::dir(&config.workspace.target_dir);
    if let Some(selected) = (config.memo).and_then(|memo| select(binaries, config, memo, &cache)) {
        return selected;
    }
    let selected = listing::list_all(binaries, config);
    crate::execution::inspect::binaries(
        binaries,
        &selected.names,
        config.known_layout,
        Some(&cache),
    );
    selected
}

/// The listing and facts of a run of one listing binary whose filter is `--exact NAME` (a
/// nextest runner's), from `memo` when a runner of this run read the binary already, else
/// read now and kept there. None when the run is not of that kind or the binary cannot be
/// listed: the run then lists and reads as any other, and says why.
pub fn select(
    binaries: &mut [TestBinary],
    config: &RunConfig,
    memo: &Path,
    cache: &Path,
) -> Option<Selected> {
    let [binary] = binaries else {
        return None;
    };
    if !binary.harness.lists() || binary.doc.is_some() {
        return None;
    }
    let known = match load(memo, &binary.path).filter(|k| k.harness == binary.harness) {
        Some(known) => {
            binary.facts = facts(binary, &known, config, cache);
            known
        }
        None => {
            let names = listing::names_of(binary, config).ok()?;
            crate::execution::inspect::binaries(
                std::slice::from_mut(binary),
                std::slice::from_ref(&names.all),
                config.known_layout,
                Some(cache),
            );
            let known = Known {
                harness: binary.harness,
                names,
                symbols: binary.facts.symbols,
                tests: binary.facts.tests.clone(),
                build_id: binary.facts.build_id.clone(),
            };
            store(memo, &binary.path, &known);
            known
        }
    };
    let listed = listing::exact_listing(config, &known.names)?.ok()?;
    Some(Selected {
        tests: listed.tests,
        ignored: listed.ignored.into_iter().map(|name| (0, name)).collect(),
        other_shards: 0,
        errors: Vec::new(),
        names: vec![known.names.all],
    })
}

/// The facts a memo's entry holds, the collections from the build's cache (read from the
/// executable when the cache lost them), libtest's layout settled by one another binary of
/// the build proved since the entry was written.
fn facts(binary: &TestBinary, known: &Known, config: &RunConfig, cache: &Path) -> BinaryFacts {
    let collections = collections::cache::cached(&known.build_id, cache).unwrap_or_else(|| {
        let data = std::fs::read(&binary.path).unwrap_or_default();
        collections::cache::table(&data, &known.build_id, Some(cache))
    });
    let mut tests = known.tests.clone();
    if let (Some(inspection), Some(layout)) = (tests.as_mut(), config.known_layout) {
        if inspection.proven_layout.is_none() {
            let names: Vec<&str> = known.names.all.iter().map(String::as_str).collect();
            inspection.settle(layout, &names);
        }
    }
    BinaryFacts {
        symbols: known.symbols,
        tests,
        build_id: known.build_id.clone(),
        collections: Arc::new(collections),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        let mut tests = Inspection {
            build_id: "ab12".into(),
            panic_hook: Some((0x1000, 24)),
            collectors: vec![leakcheck_protocol::drain::Collector {
                kind: leakcheck_protocol::drain::Reclaimer::CrossbeamEpoch,
                enter: 0x10,
                leave: 0x20,
            }],
            ..Inspection::default()
        };
        tests.entries.insert(
            "a::b".into(),
            crate::evidence::Entry {
                address: 0x4000,
                file_range: (0x3000, 0x3040),
            },
        );
        Known {
            harness: Harness::Libtest,
            names: Names {
                all: vec!["a::b".into(), "a::c".into()],
                ignored: vec!["a::c".into()],
            },
            symbols: BinarySymbols {
                custom_global_allocator: true,
                links_criterion: false,
            },
            tests: Some(tests),
            build_id: "ab12".into(),
        }
    }

    #[test]
    fn an_entry_comes_back_whole_until_its_executable_changes() {
        let dir = std::env::temp_dir().join(format!("leakcheck-memo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let exe = dir.join("exe");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&exe, b"one build").unwrap();
        let memo = dir.join("memo");
        assert_eq!(load(&memo, &exe), None, "nothing kept yet");
        store(&memo, &exe, &known());
        assert_eq!(load(&memo, &exe), Some(known()));
        // A rebuilt executable (another size) is read again, never answered from the old.
        std::fs::write(&exe, b"another, longer build").unwrap();
        assert_eq!(load(&memo, &exe), None);
        assert_eq!(load(&memo, &dir.join("missing")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
