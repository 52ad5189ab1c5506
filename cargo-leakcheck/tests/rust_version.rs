//! The `rust-version` the manifests declare is what the code needs: the oldest Rust that
//! builds every crate `cargo install` compiles, and no newer.
//!
//! Three sources set the floor, and each is checked against the declared version:
//! - the dependencies a user's `cargo install` builds, each by its own `rust-version`;
//! - the language features the three crates' code uses, from a table of the syntax each
//!   stabilised (below);
//! - the standard library's items, by clippy's `incompatible_msrv` lint, which reads the
//!   same `rust-version` and is denied in CI (`cargo clippy -- -D warnings`).
//!
//! A toolchain other than the machine's cannot be fetched here, so the floor is proved by
//! these checks, not by building with that toolchain.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Syntax and the Rust version that stabilised it, for the features the code may use.
/// `(what to look for in the code, version, what it is)`.
const FEATURES: &[(&str, (u32, u32), &str)] = &[
    ("#[unsafe(naked)]", (1, 88), "naked functions"),
    ("naked_asm!", (1, 88), "naked functions"),
    ("&raw const ", (1, 82), "raw borrows"),
    ("&raw mut ", (1, 82), "raw borrows"),
    ("unsafe extern \"C\" {", (1, 82), "unsafe extern blocks"),
    ("#[unsafe(", (1, 82), "unsafe attributes"),
    ("use<", (1, 82), "precise capturing"),
    ("#[expect(", (1, 81), "lint expectations"),
    ("const {", (1, 79), "inline const"),
    ("c\"", (1, 77), "C string literals"),
    ("async ||", (1, 85), "async closures"),
    ("#[diagnostic::", (1, 78), "the diagnostic namespace"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn version(text: &str) -> (u32, u32) {
    let mut parts = text.trim().trim_matches('"').split('.');
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

/// The `rust-version` a manifest declares, `None` when it inherits the workspace's.
fn declared_in(manifest: &Path) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("rust-version"))
        .unwrap_or_else(|| panic!("{} declares no rust-version", manifest.display()));
    let (_, value) = line.split_once('=').unwrap();
    (value.trim() != "true" && !line.contains(".workspace")).then(|| version(value))
}

fn declared() -> (u32, u32) {
    declared_in(&root().join("Cargo.toml")).expect("the workspace sets it")
}

#[test]
fn every_crate_declares_the_workspace_s_rust_version() {
    let workspace = declared();
    for krate in ["cargo-leakcheck", "leakcheck-runtime", "leakcheck-protocol"] {
        let manifest = root().join(krate).join("Cargo.toml");
        let own = declared_in(&manifest).unwrap_or(workspace);
        assert_eq!(own, workspace, "{}", manifest.display());
    }
}

/// `(name, version) -> rust-version` of every package `cargo install` builds for the tool:
/// its normal and build dependencies from the registry, transitively (dev-dependencies are
/// this project's own tests', not a user's).
fn installed_dependencies() -> BTreeMap<(String, String), Option<(u32, u32)>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages: BTreeMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let tool = packages
        .values()
        .find(|p| p["name"] == "cargo-leakcheck")
        .unwrap()["id"]
        .as_str()
        .unwrap();
    let mut seen = BTreeSet::from([tool]);
    let mut todo = vec![tool];
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let installed = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            let dep_id = dep["pkg"].as_str().unwrap();
            if installed && seen.insert(dep_id) {
                todo.push(dep_id);
            }
        }
    }
    // The workspace's own crates declare the version under test: only others' count.
    seen.into_iter()
        .filter(|id| !packages[id]["source"].is_null())
        .map(|id| {
            let p = packages[id];
            (
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["version"].as_str().unwrap().to_owned(),
                ),
                p["rust_version"].as_str().map(version),
            )
        })
        .collect()
}

/// Every feature of the table the code of the three crates uses, with the first file that
/// does.
fn features_used() -> Vec<((u32, u32), &'static str, PathBuf)> {
    let mut files = Vec::new();
    for dir in [
        "cargo-leakcheck/src",
        "leakcheck-runtime/src",
        "leakcheck-protocol/src",
    ] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut used = Vec::new();
    for &(syntax, version, what) in FEATURES {
        if let Some(file) = files
            .iter()
            .find(|f| std::fs::read_to_string(f).unwrap().contains(syntax))
        {
            used.push((version, what, file.clone()));
        }
    }
    used
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_declared_rust_version_is_the_oldest_that_builds_everything() {
    let declared = declared();
    let deps = installed_dependencies();
    assert!(deps.len() > 50, "{} dependencies", deps.len());
    let newer: Vec<String> = deps
        .iter()
        .filter(|(_, v)| v.is_some_and(|v| v > declared))
        .map(|((n, v), r)| format!("{n} {v} needs {r:?}"))
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version {declared:?} is older than dependencies need: {newer:?}"
    );
    let features = features_used();
    let too_new: Vec<String> = features
        .iter()
        .filter(|(v, ..)| *v > declared)
        .map(|(v, what, file)| format!("{what} ({v:?}) in {}", file.display()))
        .collect();
    assert!(
        too_new.is_empty(),
        "rust-version {declared:?} is older than the code needs: {too_new:?}"
    );
    // And no newer than needed: something asks for exactly this version.
    let floor = deps
        .values()
        .flatten()
        .chain(features.iter().map(|(v, ..)| v))
        .max()
        .copied()
        .unwrap();
    assert_eq!(
        declared, floor,
        "rust-version {declared:?} is newer than anything needs ({floor:?})"
    );
}

#[test]
fn the_feature_table_sees_what_the_runtime_uses() {
    // The runtime's mapping trampolines are naked functions: the newest feature in use.
    let features = features_used();
    assert!(
        features
            .iter()
            .any(|(v, what, _)| *v == (1, 88) && *what == "naked functions"),
        "{features:?}"
    );
}
