//! Builds the profiling runtime (`libleakcheck_runtime.so`) while cargo-leakcheck itself is
//! built, so the binary carries it and its first run builds nothing but the user's tests.
//!
//! jemalloc is the slow part (a configure script and a C build); it is compiled once, by
//! this package's own dependency on tikv-jemalloc-sys, which cargo schedules beside every
//! other dependency. The runtime crate is then built by a nested cargo into `OUT_DIR`,
//! linked against that same static jemalloc (`JEMALLOC_OVERRIDE`) and offline: every crate
//! it needs is in this package's dependency graph, so cargo has already fetched it.

#[path = "src/fnv.rs"]
#[allow(dead_code)]
mod fnv;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB_NAME: &str = "libleakcheck_runtime.so";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let target = env::var("TARGET").expect("set by cargo");

    // The runtime's sources: `runtime/` links to the workspace's `leakcheck-runtime/src`
    // (and is a real directory in the published package).
    let sources = manifest_dir.join("runtime");
    let entry = sources.join("lib.rs");
    if !entry.is_file() {
        fail(&format!(
            "the runtime's sources are missing: no `{}`",
            entry.display()
        ));
    }
    // The contract the runtime shares with this tool: the protocol crate, a build dependency
    // of this script, as cargo provides it (from the registry, or the workspace's path).
    let protocol = PathBuf::from(leakcheck_protocol::SOURCE_DIR);
    if !protocol.join("Cargo.toml").is_file() {
        fail(&format!(
            "the protocol crate's sources are missing: no `{}`",
            protocol.join("Cargo.toml").display()
        ));
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/fnv.rs");
    println!(
        "cargo:rerun-if-changed={}",
        protocol.join("Cargo.toml").display()
    );
    for file in rust_files(&sources)
        .into_iter()
        .chain(rust_files(&protocol.join("src")))
    {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    let lock = [
        manifest_dir.join("Cargo.lock"),
        manifest_dir.join("../Cargo.lock"),
    ]
    .into_iter()
    .find(|p| p.is_file());
    let lock_text = lock.as_ref().map(|p| {
        println!("cargo:rerun-if-changed={}", p.display());
        std::fs::read_to_string(p).unwrap_or_else(|e| fail(&format!("read {}: {e}", p.display())))
    });
    let sys_version = lock_text
        .as_deref()
        .and_then(|text| locked_version(text, "tikv-jemalloc-sys"))
        .unwrap_or_else(|| fail("no tikv-jemalloc-sys version in Cargo.lock"));

    let jemalloc_root = PathBuf::from(env::var_os("DEP_JEMALLOC_ROOT").unwrap_or_else(|| {
        fail("tikv-jemalloc-sys did not say where it built jemalloc (DEP_JEMALLOC_ROOT)")
    }));
    let static_lib = jemalloc_root.join("lib").join("libjemalloc_pic.a");
    if !static_lib.is_file() {
        fail(&format!("no `{}`", static_lib.display()));
    }
    let jemalloc_version = jemalloc_version(&jemalloc_root.join("include/jemalloc/jemalloc.h"));

    // The nested package: a manifest pointing at the sources in place, and this build's lock
    // so it resolves to the crates already fetched (cargo drops the entries it does not use).
    let package = out_dir.join("runtime-package");
    std::fs::create_dir_all(&package).unwrap_or_else(|e| fail(&format!("create dir: {e}")));
    let manifest = format!(
        r#"[package]
name = "leakcheck-runtime"
version = "{version}"
edition = "2021"
publish = false

[lib]
crate-type = ["cdylib"]
path = "{entry}"

[dependencies]
tikv-jemalloc-sys = {{ version = "={sys_semver}", features = ["profiling", "stats"] }}
tikv-jemalloc-ctl = "={ctl_version}"
libc = "0.2"
leakcheck-protocol = {{ path = "{protocol}" }}

[profile.release]
debug = false

[workspace]
"#,
        version = env::var("CARGO_PKG_VERSION").expect("set by cargo"),
        // Build metadata (`+5.3.1-…`) has no place in a version requirement.
        sys_semver = sys_version.split('+').next().unwrap_or(&sys_version),
        ctl_version = lock_text
            .as_deref()
            .and_then(|text| locked_version(text, "tikv-jemalloc-ctl"))
            .unwrap_or_else(|| fail("no tikv-jemalloc-ctl version in Cargo.lock")),
        entry = entry.display().to_string().replace('\\', "\\\\"),
        protocol = protocol.display().to_string().replace('\\', "\\\\"),
    );
    write(&package.join("Cargo.toml"), manifest.as_bytes());
    if let Some(text) = &lock_text {
        write(&package.join("Cargo.lock"), text.as_bytes());
    }

    let target_dir = out_dir.join("runtime-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--offline", "--quiet", "--target"])
        .arg(&target)
        .arg("--manifest-path")
        .arg(package.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env("JEMALLOC_OVERRIDE", &static_lib);
    // What cargo tells this build script is about this package, not the nested one; clippy's
    // wrapper and the outer flags must not reach the runtime's build either.
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let ours = key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_CFG_")
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || key.starts_with("DEP_")
            || matches!(
                key,
                "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_ENCODED_RUSTFLAGS"
                    | "CARGO_TARGET_DIR"
                    | "CARGO_BUILD_TARGET"
                    | "RUSTFLAGS"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "CLIPPY_ARGS"
                    | "OUT_DIR"
                    | "TARGET"
                    | "HOST"
                    | "NUM_JOBS"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "PROFILE"
            );
        if ours {
            cmd.env_remove(key);
        }
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("could not start cargo: {e}")));
    if !output.status.success() {
        fail(&format!(
            "building the runtime failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let built = target_dir.join(&target).join("release").join(LIB_NAME);
    let data =
        std::fs::read(&built).unwrap_or_else(|e| fail(&format!("read {}: {e}", built.display())));
    write(&out_dir.join(LIB_NAME), &data);

    let hash = fnv::Fnv::new().words(&data).finish();
    println!("cargo:rustc-env=LEAKCHECK_RUNTIME_HASH={hash:016x}");
    println!("cargo:rustc-env=LEAKCHECK_RUNTIME_SIZE={}", data.len());
    println!("cargo:rustc-env=LEAKCHECK_RUNTIME_TARGET={target}");
    println!("cargo:rustc-env=LEAKCHECK_JEMALLOC_VERSION={jemalloc_version}");
    println!("cargo:rustc-env=LEAKCHECK_JEMALLOC_SYS_VERSION={sys_version}");
}

fn fail(why: &str) -> ! {
    eprintln!(
        "error: cargo-leakcheck's build could not build its profiling runtime (jemalloc with heap \
         profiling; it needs a C compiler and make): {why}"
    );
    std::process::exit(1);
}

fn write(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap_or_else(|e| fail(&format!("write {}: {e}", path.display())));
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| fail(&format!("read {}: {e}", dir.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    files
}

/// The version a lockfile records for a package (the first, if several).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{name}\"") {
            let version = lines.next()?.trim().strip_prefix("version = \"")?;
            return Some(version.trim_end_matches('"').to_string());
        }
    }
    None
}

/// `JEMALLOC_VERSION` from the installed header, e.g. `5.3.1-0-g81034ce…`.
fn jemalloc_version(header: &Path) -> String {
    let text = std::fs::read_to_string(header).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("#define JEMALLOC_VERSION ")
                .map(|v| v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}
