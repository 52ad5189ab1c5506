//! Finds the profiling runtime (`libleakcheck_runtime.so`), building it on first use.
//!
//! The runtime's source is embedded in this binary, so `cargo install` is the only
//! set-up step: the first run writes the source to a cache directory, builds it once with
//! cargo (jemalloc is compiled from source by tikv-jemalloc-sys, needing only a C
//! compiler and make) and reuses the result from then on. The cache key is a hash of the
//! embedded source, so a new version of the tool never picks up a stale runtime.

use crate::errors::Error;
use crate::execution::cargo::cargo_program;
use crate::fnv::Fnv;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Overrides the runtime with a prebuilt `.so` (used by this project's own tests).
pub const RUNTIME_ENV: &str = "LEAKCHECK_RUNTIME";
/// Overrides where the runtime is built and cached.
pub const CACHE_ENV: &str = "LEAKCHECK_CACHE_DIR";

/// The runtime's source files, as `(file name, text)`.
const RUNTIME_SOURCES: &[(&str, &str)] = &[
    (
        "lib.rs",
        include_str!("../../../leakcheck-runtime/src/lib.rs"),
    ),
    (
        "arenas.rs",
        include_str!("../../../leakcheck-runtime/src/arenas.rs"),
    ),
    (
        "image.rs",
        include_str!("../../../leakcheck-runtime/src/image.rs"),
    ),
    (
        "rerun.rs",
        include_str!("../../../leakcheck-runtime/src/rerun.rs"),
    ),
    (
        "sys.rs",
        include_str!("../../../leakcheck-runtime/src/sys.rs"),
    ),
    (
        "threads.rs",
        include_str!("../../../leakcheck-runtime/src/threads.rs"),
    ),
    (
        "tracker.rs",
        include_str!("../../../leakcheck-runtime/src/tracker.rs"),
    ),
];
const RUNTIME_LOCK: &str = include_str!("../../../Cargo.lock");
const RUNTIME_MANIFEST: &str = r#"[package]
name = "leakcheck-runtime"
version = "0.1.0"
edition = "2021"
publish = false

[lib]
crate-type = ["cdylib"]
path = "lib.rs"

[dependencies]
tikv-jemalloc-sys = { version = "=0.7.1", features = ["profiling", "stats"] }
libc = "0.2"

[profile.release]
debug = 1

[workspace]
"#;

const LIB_NAME: &str = "libleakcheck_runtime.so";

/// The directory the runtime is cached in.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os(CACHE_ENV) {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("cargo-leakcheck"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("cargo-leakcheck"))
}

fn source_key() -> String {
    let mut h = Fnv::new();
    let parts = RUNTIME_SOURCES
        .iter()
        .flat_map(|(name, text)| [*name, *text])
        .chain([RUNTIME_MANIFEST]);
    for part in parts {
        h.bytes(part.as_bytes()).bytes(&[0]);
    }
    format!("{:016x}", h.finish())
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
    /// cargo could not be started to build it.
    #[error("could not start cargo to build it in `{}`: {source}", dir.display())]
    CannotStartCargo {
        /// The build directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// cargo failed to build it.
    #[error("building it in `{}` failed ({status}); it needs a C compiler and make. cargo said:\n{output}", dir.display())]
    BuildFailed {
        /// The source directory.
        dir: PathBuf,
        /// cargo's exit status.
        status: std::process::ExitStatus,
        /// The end of cargo's output.
        output: String,
    },
    /// The build succeeded but its output is not a runtime (it has been removed).
    #[error("the build produced an unusable `{}` ({why}), now removed; run again to rebuild it", path.display())]
    BadBuildOutput {
        /// The build output.
        path: PathBuf,
        /// What is wrong with it.
        why: Unusable,
    },
}

/// What is wrong with a file offered as the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// It cannot be read.
    #[error("cannot read it: {0}")]
    Unreadable(#[source] std::io::Error),
    /// It is not an ELF file.
    #[error("not a readable ELF file: {0}")]
    NotElf(#[source] object::read::Error),
    /// It does not define `malloc`.
    #[error("it does not export `malloc`")]
    NoMalloc,
    /// The cached copy has no recorded size and checksum.
    #[error("no record of its size and checksum")]
    NoRecord,
    /// The cached copy differs from what was built.
    #[error("{size} bytes with checksum {checksum}, but it was built as {recorded_size} bytes with checksum {recorded_checksum}")]
    Changed {
        /// Its size now.
        size: usize,
        /// Its checksum now.
        checksum: String,
        /// The size recorded at build time.
        recorded_size: String,
        /// The checksum recorded at build time.
        recorded_checksum: String,
    },
}

/// Returns the path of a usable runtime, building it if needed.
///
/// A cached runtime is checked against the size and checksum recorded when it was built
/// (a truncated or damaged file would make every test an `error`, run after run): a
/// damaged one is restored from the build directory or rebuilt. Concurrent first runs
/// take turns on a lock, so one builds and the others wait and use its result.
pub fn locate_or_build(verbose: bool) -> Result<PathBuf, Error> {
    let lib = locate_or_build_quietly(verbose)?;
    if verbose {
        crate::say!("     Runtime `{}`", lib.display());
    }
    Ok(lib)
}

fn locate_or_build_quietly(verbose: bool) -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os(RUNTIME_ENV) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(RuntimeError::NotAFile(p).into());
        }
        let data =
            std::fs::read(&p).map_err(|e| Error::io(format!("read `{}`", p.display()), e))?;
        return match check_library(&data) {
            Ok(()) => Ok(p),
            Err(why) => Err(RuntimeError::NotARuntime { path: p, why }.into()),
        };
    }
    let base = cache_dir().ok_or(RuntimeError::NoCacheDirectory)?;
    let dir = base.join(format!("runtime-{}", source_key()));
    let lib = dir.join(LIB_NAME);
    let _lock = crate::execution::lock::exclusive(
        &base.join(format!("runtime-{}.lock", source_key())),
        "another cargo-leakcheck run using the runtime cache",
    )?;
    if lib.exists() {
        match verify_cached(&dir) {
            Ok(()) => return Ok(lib),
            Err(why) => crate::say!(
                "warning: the cached runtime `{}` is damaged ({why}); replacing it",
                lib.display()
            ),
        }
        let _ = std::fs::remove_file(&lib);
        if restore_from_build(&dir) {
            return Ok(lib);
        }
    }
    build(&dir, verbose)?;
    Ok(lib)
}

const SUM_NAME: &str = "libleakcheck_runtime.so.sum";

/// Size and checksum of a runtime file, as recorded beside it: `<bytes> <hash>`.
fn fingerprint(data: &[u8]) -> String {
    format!("{} {:016x}", data.len(), Fnv::new().words(data).finish())
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

/// Checks the cached runtime against its recorded fingerprint.
fn verify_cached(dir: &Path) -> Result<(), Unusable> {
    let lib = dir.join(LIB_NAME);
    let data = std::fs::read(&lib).map_err(Unusable::Unreadable)?;
    let recorded = std::fs::read_to_string(dir.join(SUM_NAME)).map_err(|_| Unusable::NoRecord)?;
    let actual = fingerprint(&data);
    if recorded.trim() != actual {
        let field =
            |text: &str, n: usize| text.split_whitespace().nth(n).unwrap_or("?").to_string();
        return Err(Unusable::Changed {
            size: data.len(),
            checksum: field(&actual, 1),
            recorded_size: field(&recorded, 0),
            recorded_checksum: field(&recorded, 1),
        });
    }
    check_library(&data)
}

/// Puts the build directory's copy back in place when it still matches the recorded
/// fingerprint; no rebuild needed.
fn restore_from_build(dir: &Path) -> bool {
    let built = dir.join("target").join("release").join(LIB_NAME);
    let Ok(data) = std::fs::read(&built) else {
        return false;
    };
    let recorded = std::fs::read_to_string(dir.join(SUM_NAME)).unwrap_or_default();
    if recorded.trim() != fingerprint(&data) || check_library(&data).is_err() {
        return false;
    }
    install(dir, &data).is_ok()
}

/// Writes the runtime and its fingerprint into the cache directory, each atomically: a
/// concurrent or interrupted run sees a complete file or none.
fn install(dir: &Path, data: &[u8]) -> Result<(), Error> {
    let put = |name: &str, bytes: &[u8]| -> Result<(), Error> {
        let tmp = dir.join(format!("{name}.tmp.{}", std::process::id()));
        std::fs::write(&tmp, bytes)
            .map_err(|e| Error::io(format!("write `{}`", tmp.display()), e))?;
        let path = dir.join(name);
        std::fs::rename(&tmp, &path)
            .map_err(|e| Error::io(format!("move `{}` into place", path.display()), e))
    };
    put(SUM_NAME, fingerprint(data).as_bytes())?;
    put(LIB_NAME, data)?;
    // Executable, like the linker's output.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir.join(LIB_NAME), std::fs::Permissions::from_mode(0o755));
    Ok(())
}

fn build(dir: &Path, verbose: bool) -> Result<(), Error> {
    let started = Instant::now();
    crate::say!(
        "    Building the leakcheck runtime (jemalloc with heap profiling) in `{}`; this happens once and takes a minute or two",
        dir.display()
    );
    let src = dir.join("src");
    std::fs::create_dir_all(&src)
        .map_err(|e| Error::io(format!("create `{}`", src.display()), e))?;
    let files = RUNTIME_SOURCES.iter().copied().chain([
        ("Cargo.toml", RUNTIME_MANIFEST),
        ("Cargo.lock", RUNTIME_LOCK),
    ]);
    for (name, text) in files {
        let path = src.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("write `{}`", path.display()), e))?;
    }
    let target = dir.join("target");
    let mut cmd = Command::new(cargo_program());
    cmd.arg("build")
        .arg("--release")
        .arg("--manifest-path")
        .arg(src.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        // Settings meant for the user's project must not leak into ours.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdout(Stdio::null());
    if !verbose {
        cmd.arg("--quiet").stderr(Stdio::piped());
    }
    let output = crate::execution::interrupt::output(&mut cmd).map_err(|source| {
        RuntimeError::CannotStartCargo {
            dir: dir.to_path_buf(),
            source,
        }
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(RuntimeError::BuildFailed {
            dir: src,
            status: output.status,
            output: tail.join("\n"),
        }
        .into());
    }
    let built = target.join("release").join(LIB_NAME);
    let data =
        std::fs::read(&built).map_err(|e| Error::io(format!("read `{}`", built.display()), e))?;
    if let Err(why) = check_library(&data) {
        // cargo took a damaged build output for up to date; it relinks once it is gone.
        let _ = std::fs::remove_file(&built);
        return Err(RuntimeError::BadBuildOutput { path: built, why }.into());
    }
    install(dir, &data)?;
    crate::say!(
        "    Built the leakcheck runtime in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real shared library exporting `malloc`, standing in for the runtime.
    fn sample_library() -> Vec<u8> {
        std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").expect("glibc is where Debian puts it")
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("leakcheck-rt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_truncated_or_altered_cached_runtime_is_detected() {
        let dir = scratch("verify");
        let data = sample_library();
        install(&dir, &data).unwrap();
        assert!(verify_cached(&dir).is_ok());

        std::fs::write(dir.join(LIB_NAME), &data[..data.len() / 2]).unwrap();
        let why = verify_cached(&dir).unwrap_err().to_string();
        assert!(
            why.contains(&format!("{} bytes", data.len() / 2))
                && why.contains(&format!("built as {} bytes", data.len())),
            "{why}"
        );

        let mut altered = data.clone();
        altered[1000] ^= 1;
        std::fs::write(dir.join(LIB_NAME), &altered).unwrap();
        assert!(verify_cached(&dir)
            .unwrap_err()
            .to_string()
            .contains("checksum"));

        std::fs::remove_file(dir.join(SUM_NAME)).unwrap();
        assert!(verify_cached(&dir)
            .unwrap_err()
            .to_string()
            .contains("no record"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_runtime_is_restored_from_an_intact_build_output_only() {
        let dir = scratch("restore");
        let data = sample_library();
        install(&dir, &data).unwrap();
        std::fs::write(dir.join(LIB_NAME), b"\x7fELF").unwrap();
        assert!(!restore_from_build(&dir), "no build output");
        let release = dir.join("target/release");
        std::fs::create_dir_all(&release).unwrap();
        std::fs::write(release.join(LIB_NAME), &data[..4096]).unwrap();
        assert!(!restore_from_build(&dir), "a damaged build output");
        std::fs::write(release.join(LIB_NAME), &data).unwrap();
        assert!(restore_from_build(&dir));
        assert!(verify_cached(&dir).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_a_library_exporting_malloc_passes_for_a_runtime() {
        assert!(check_library(&sample_library()).is_ok());
        assert!(matches!(
            check_library(b"not an ELF file"),
            Err(Unusable::NotElf(_))
        ));
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(matches!(check_library(&exe), Err(Unusable::NoMalloc)));
    }
}
