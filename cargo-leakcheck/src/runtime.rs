//! Finds the profiling runtime (`libleakcheck_runtime.so`), building it on first use.
//!
//! The runtime's source is embedded in this binary, so `cargo install` is the only
//! set-up step: the first run writes the source to a cache directory, builds it once with
//! cargo (jemalloc is compiled from source by tikv-jemalloc-sys, needing only a C
//! compiler and make) and reuses the result from then on. The cache key is a hash of the
//! embedded source, so a new version of the tool never picks up a stale runtime.

use crate::cargo::cargo_program;
use crate::errors::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Overrides the runtime with a prebuilt `.so` (used by this project's own tests).
pub const RUNTIME_ENV: &str = "LEAKCHECK_RUNTIME";
/// Overrides where the runtime is built and cached.
pub const CACHE_ENV: &str = "LEAKCHECK_CACHE_DIR";

/// The runtime's source files, as `(file name, text)`.
const RUNTIME_SOURCES: &[(&str, &str)] = &[
    ("lib.rs", include_str!("../../leakcheck-runtime/src/lib.rs")),
    (
        "arenas.rs",
        include_str!("../../leakcheck-runtime/src/arenas.rs"),
    ),
    (
        "image.rs",
        include_str!("../../leakcheck-runtime/src/image.rs"),
    ),
    (
        "rerun.rs",
        include_str!("../../leakcheck-runtime/src/rerun.rs"),
    ),
    ("sys.rs", include_str!("../../leakcheck-runtime/src/sys.rs")),
    (
        "threads.rs",
        include_str!("../../leakcheck-runtime/src/threads.rs"),
    ),
];
const RUNTIME_LOCK: &str = include_str!("../../Cargo.lock");
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
    // FNV-1a: stable across Rust versions, unlike DefaultHasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let parts = RUNTIME_SOURCES
        .iter()
        .flat_map(|(name, text)| [*name, *text])
        .chain([RUNTIME_MANIFEST]);
    for part in parts {
        for b in part.bytes().chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Returns the path of a usable runtime, building it if needed.
pub fn locate_or_build(verbose: bool) -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os(RUNTIME_ENV) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(Error::Runtime(format!(
            "{RUNTIME_ENV} points at `{}`, which is not a file",
            p.display()
        )));
    }
    let base = cache_dir()
        .ok_or_else(|| Error::Runtime(format!("no cache directory: set {CACHE_ENV} or HOME")))?;
    let dir = base.join(format!("runtime-{}", source_key()));
    let lib = dir.join(LIB_NAME);
    if lib.is_file() {
        return Ok(lib);
    }
    build(&dir, verbose)?;
    Ok(lib)
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
    let output = crate::interrupt::output(&mut cmd)
        .map_err(|e| Error::Runtime(format!("could not start cargo to build it: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(Error::Runtime(format!(
            "building it in `{}` failed ({}); it needs a C compiler and make. cargo said:\n{}",
            src.display(),
            output.status,
            tail.join("\n")
        )));
    }
    let built = target.join("release").join(LIB_NAME);
    let tmp = dir.join(format!("{LIB_NAME}.tmp.{}", std::process::id()));
    std::fs::copy(&built, &tmp).map_err(|e| Error::io(format!("copy `{}`", built.display()), e))?;
    // Rename is atomic: a concurrent run sees either no runtime or a complete one.
    std::fs::rename(&tmp, dir.join(LIB_NAME))
        .map_err(|e| Error::io(format!("move the runtime into `{}`", dir.display()), e))?;
    crate::say!(
        "    Built the leakcheck runtime in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
