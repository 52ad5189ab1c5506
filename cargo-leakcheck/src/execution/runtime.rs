//! Puts the profiling runtime (`libleakcheck_runtime.so`) where a test process can preload it.
//!
//! The runtime is built with cargo-leakcheck itself (see `build.rs`) and carried inside
//! this binary, so installing the tool is the only set-up step and a first run builds
//! nothing but the user's tests. `LD_PRELOAD` needs a file, so the library is written once
//! to a cache directory named after its hash, and checked against the embedded copy on
//! every run: a damaged or truncated file is replaced, never used.

use crate::execution::lock::{self, LockError};
use crate::fnv::Fnv;
use std::path::{Path, PathBuf};

/// Overrides the runtime with a prebuilt `.so` (a runtime built by hand, for a debugger).
pub const RUNTIME_ENV: &str = "LEAKCHECK_RUNTIME";
/// Overrides where the runtime is written.
pub const CACHE_ENV: &str = "LEAKCHECK_CACHE_DIR";

/// The runtime, as built with this binary.
const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libleakcheck_runtime.so"));

const LIB_NAME: &str = "libleakcheck_runtime.so";

/// `--version`'s long form: the tool's version and what it carries.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nruntime: leakcheck-runtime ",
    env!("CARGO_PKG_VERSION"),
    " for ",
    env!("LEAKCHECK_RUNTIME_TARGET"),
    ", embedded (",
    env!("LEAKCHECK_RUNTIME_SIZE"),
    " bytes, fnv ",
    env!("LEAKCHECK_RUNTIME_HASH"),
    ")\njemalloc: ",
    env!("LEAKCHECK_JEMALLOC_VERSION"),
    " (tikv-jemalloc-sys ",
    env!("LEAKCHECK_JEMALLOC_SYS_VERSION"),
    ", heap profiling)",
);

/// The directory the runtime is written to.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os(CACHE_ENV) {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("cargo-leakcheck"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("cargo-leakcheck"))
}

/// Why no usable runtime could be had.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `LEAKCHECK_RUNTIME` names no file.
    #[error("{RUNTIME_ENV} points at `{}`, which is not a file", .0.display())]
    NotAFile(PathBuf),
    /// `LEAKCHECK_RUNTIME` names a file that is not a runtime.
    #[error("{RUNTIME_ENV} points at `{}`, which is not a usable runtime: {why}", path.display())]
    NotARuntime {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: Unusable,
    },
    /// Neither `LEAKCHECK_CACHE_DIR` nor `HOME` is set.
    #[error("no cache directory: set {CACHE_ENV} or HOME")]
    NoCacheDirectory,
    /// The file named by `LEAKCHECK_RUNTIME` could not be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The cache directory's lock could not be taken.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The runtime could not be written to the cache directory.
    #[error("could not write the runtime to `{}`: {source}", path.display())]
    CannotWrite {
        /// Where it was being written.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What is wrong with a file offered as the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// It is not an ELF file.
    #[error("not a readable ELF file: {0}")]
    NotElf(#[source] object::read::Error),
    /// It does not define `malloc`.
    #[error("it does not export `malloc`")]
    NoMalloc,
    /// The cached copy differs from the one this binary carries.
    #[error("{size} bytes with checksum {checksum}, but this cargo-leakcheck carries {expected_size} bytes with checksum {expected_checksum}")]
    Changed {
        /// Its size now.
        size: usize,
        /// Its checksum now.
        checksum: String,
        /// The embedded runtime's size.
        expected_size: usize,
        /// The embedded runtime's checksum.
        expected_checksum: String,
    },
}

/// Returns the path of a usable runtime, writing it out if needed.
///
/// Concurrent runs take turns on a lock, so a half-written file is never seen.
pub fn locate(verbose: bool) -> Result<PathBuf, RuntimeError> {
    let lib = locate_quietly()?;
    if verbose {
        crate::say!("     Runtime `{}`", lib.display());
    }
    Ok(lib)
}

fn locate_quietly() -> Result<PathBuf, RuntimeError> {
    if let Some(p) = std::env::var_os(RUNTIME_ENV) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(RuntimeError::NotAFile(p));
        }
        let data = std::fs::read(&p).map_err(|source| RuntimeError::Unreadable {
            path: p.clone(),
            source,
        })?;
        return match check_library(&data) {
            Ok(()) => Ok(p),
            Err(why) => Err(RuntimeError::NotARuntime { path: p, why }),
        };
    }
    let base = cache_dir().ok_or(RuntimeError::NoCacheDirectory)?;
    let key = env!("LEAKCHECK_RUNTIME_HASH");
    let dir = base.join(format!("runtime-{key}"));
    std::fs::create_dir_all(&dir).map_err(|source| RuntimeError::CannotWrite {
        path: dir.clone(),
        source,
    })?;
    let _lock = lock::exclusive(
        &base.join(format!("runtime-{key}.lock")),
        "another cargo-leakcheck run writing the runtime",
    )?;
    extract(&dir, EMBEDDED)
}

/// Makes `dir` hold `data` as the runtime: a matching copy is used as it is, a missing one
/// written, a different one (truncated, altered) replaced with a warning.
fn extract(dir: &Path, data: &[u8]) -> Result<PathBuf, RuntimeError> {
    let lib = dir.join(LIB_NAME);
    match std::fs::read(&lib) {
        Ok(found) => match compare(&found, data) {
            Ok(()) => return Ok(lib),
            Err(why) => crate::say!(
                "warning: the cached runtime `{}` is damaged ({why}); replacing it",
                lib.display()
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => crate::say!(
            "warning: cannot read the cached runtime `{}` ({e}); replacing it",
            lib.display()
        ),
    }
    write_atomically(&lib, data)?;
    Ok(lib)
}

fn checksum(data: &[u8]) -> String {
    format!("{:016x}", Fnv::new().words(data).finish())
}

/// Whether a cached copy is the runtime this binary carries.
fn compare(found: &[u8], expected: &[u8]) -> Result<(), Unusable> {
    if found == expected {
        return Ok(());
    }
    Err(Unusable::Changed {
        size: found.len(),
        checksum: checksum(found),
        expected_size: expected.len(),
        expected_checksum: checksum(expected),
    })
}

/// Whether `data` is a shared library exporting the allocator the runtime provides.
fn check_library(data: &[u8]) -> Result<(), Unusable> {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(data).map_err(Unusable::NotElf)?;
    let exports_malloc = file
        .dynamic_symbols()
        .any(|s| s.is_definition() && s.name() == Ok("malloc"));
    if exports_malloc {
        Ok(())
    } else {
        Err(Unusable::NoMalloc)
    }
}

/// Writes through a temporary file and a rename, so a concurrent or interrupted run sees
/// the whole library or none.
fn write_atomically(path: &Path, data: &[u8]) -> Result<(), RuntimeError> {
    let tmp = path.with_extension(format!("so.tmp.{}", std::process::id()));
    let cannot = |source| RuntimeError::CannotWrite {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, data).map_err(cannot)?;
    // Executable, like the linker's output.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755));
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        cannot(e)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("leakcheck-rt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_embedded_runtime_is_a_library_exporting_malloc() {
        assert!(check_library(EMBEDDED).is_ok());
        assert!(LONG_VERSION.contains(&format!("embedded ({} bytes", EMBEDDED.len())));
    }

    #[test]
    fn a_missing_truncated_or_altered_copy_is_written_afresh() {
        let dir = scratch("extract");
        let data = EMBEDDED;
        let lib = extract(&dir, data).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), data);
        let written = std::fs::metadata(&lib).unwrap().modified().unwrap();
        assert_eq!(extract(&dir, data).unwrap(), lib);
        assert_eq!(
            std::fs::metadata(&lib).unwrap().modified().unwrap(),
            written,
            "an intact copy is left alone"
        );

        std::fs::write(&lib, &data[..data.len() / 2]).unwrap();
        let why = compare(&std::fs::read(&lib).unwrap(), data)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains(&format!("{} bytes", data.len() / 2))
                && why.contains(&format!("carries {} bytes", data.len())),
            "{why}"
        );
        extract(&dir, data).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), data);

        let mut altered = data.to_vec();
        altered[1000] ^= 1;
        std::fs::write(&lib, &altered).unwrap();
        assert!(compare(&altered, data)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        extract(&dir, data).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), data);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, [LIB_NAME], "no temporary files left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_cache_is_an_error_naming_the_file() {
        let dir = scratch("unwritable");
        // A directory where the library should be: it can be neither read nor replaced.
        std::fs::create_dir_all(dir.join(LIB_NAME).join("x")).unwrap();
        let err = extract(&dir, EMBEDDED).unwrap_err().to_string();
        assert!(
            err.contains(&dir.join(LIB_NAME).display().to_string()),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_a_library_exporting_malloc_passes_for_a_runtime() {
        let libc = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6")
            .expect("glibc is where Debian puts it");
        assert!(check_library(&libc).is_ok());
        assert!(matches!(
            check_library(b"not an ELF file"),
            Err(Unusable::NotElf(_))
        ));
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(matches!(check_library(&exe), Err(Unusable::NoMalloc)));
    }
}
