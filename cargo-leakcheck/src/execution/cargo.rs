//! Drives cargo: reads workspace metadata, builds the test executables, and says which
//! executables there are to run.

use crate::errors::Error;
use crate::execution::facts::BinaryFacts;
use crate::model::TargetKind as ModelKind;
use cargo_metadata::{Message, Metadata, MetadataCommand, TargetKind};
use clap::Args;
use std::collections::BTreeMap;
use std::io::BufReader;
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The cargo program to run: the one that invoked us when run as `cargo leakcheck`.
pub fn cargo_program() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

/// What we need to know about the workspace before building.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The workspace root directory.
    pub root: PathBuf,
    /// The target directory (honours `--target-dir`, `CARGO_TARGET_DIR` and cargo config).
    pub target_dir: PathBuf,
    /// Workspace members by package name.
    pub members: BTreeMap<String, Member>,
    /// The toolchain's library directory for the host (`rustc --print target-libdir`):
    /// test binaries of proc-macro crates link std dynamically from it.
    pub toolchain_libdir: Option<PathBuf>,
}

/// A workspace member.
#[derive(Debug, Clone)]
pub struct Member {
    /// Package name.
    pub name: String,
    /// Package version.
    pub version: String,
    /// What names it alone to `cargo --package`: its package id spec, which a dependency
    /// of the same name (another version, or the same version from crates.io) does not share.
    pub spec: String,
    /// Directory holding its Cargo.toml (tests run there, as under `cargo test`).
    pub dir: PathBuf,
    /// Integration-test target names.
    pub test_targets: Vec<String>,
    /// Targets declared with `harness = false`, by kind (a test and a bench may share a
    /// name): these are run as a single test each.
    pub no_harness: Vec<(ModelKind, String)>,
    /// Whether a library target has doc-tests (we skip them and say so).
    pub has_doctests: bool,
    /// Whether the package depends directly on tikv-jemallocator.
    pub uses_tikv_jemallocator: bool,
    /// Whether the package depends on criterion (its benches list with `--list`).
    pub uses_criterion: bool,
}

/// The feature that turns on the profiling of tikv-jemallocator's jemalloc. Weak (`?`): an
/// optional tikv-jemallocator behind a feature the user did not ask for stays off, as the
/// plain build has it (`dep/feature` would switch it on).
pub const JEMALLOC_PROFILING: &str = "tikv-jemallocator?/profiling";

/// Which packages and features, shared by every command (as cargo's own flags).
#[derive(Debug, Args, Clone, Default)]
pub struct Selection {
    /// Path to Cargo.toml.
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,

    /// Package(s) to check (default: the current package, or the workspace's default
    /// members).
    #[arg(short = 'p', long = "package", value_name = "SPEC")]
    pub packages: Vec<String>,

    /// Check every package in the workspace.
    #[arg(long)]
    pub workspace: bool,

    /// Exclude packages from --workspace.
    #[arg(long, value_name = "SPEC", requires = "workspace")]
    pub exclude: Vec<String>,

    /// Space or comma separated list of features to activate.
    #[arg(short = 'F', long, value_name = "FEATURES")]
    pub features: Vec<String>,

    /// Activate all available features.
    #[arg(long)]
    pub all_features: bool,

    /// Do not activate the `default` feature.
    #[arg(long)]
    pub no_default_features: bool,

    /// Directory for all generated artifacts (also honours CARGO_TARGET_DIR).
    #[arg(long, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
}

/// Reads `cargo metadata` for the project at `manifest_path` (or the current directory).
pub fn load_workspace(args: &Selection) -> Result<Workspace, Error> {
    let mut cmd = MetadataCommand::new();
    cmd.cargo_path(cargo_program()).no_deps();
    if let Some(m) = &args.manifest_path {
        if !m.exists() {
            return Err(Error::Metadata {
                manifest: Some(m.clone()),
                message: "no such file".into(),
            });
        }
        cmd.manifest_path(m);
    }
    let metadata = cmd.exec().map_err(|e| Error::Metadata {
        manifest: args.manifest_path.clone(),
        message: metadata_error_text(&e),
    })?;
    let mut ws = workspace_from_metadata(&metadata, args.target_dir.as_deref());
    ws.toolchain_libdir = toolchain_libdir(&ws.root);
    Ok(ws)
}

/// Asks the toolchain cargo uses (the same `RUSTC`, or the `rustc` rustup resolves in the
/// workspace) where its host libraries are, as cargo does to run tests.
fn toolchain_libdir(root: &Path) -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args(["--print", "target-libdir"])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let out = crate::execution::interrupt::output(&mut cmd).ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let dir = PathBuf::from(text.trim());
    (out.status.success() && dir.is_dir()).then_some(dir)
}

/// The host's target triple, as the toolchain names it (`rustc -vV`): cargo's runner
/// setting for the host is keyed by it.
pub fn host_triple() -> Result<String, Error> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(&rustc);
    cmd.arg("-vV")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let out = crate::execution::interrupt::output(&mut cmd)
        .map_err(|e| Error::io(format!("run `{} -vV`", rustc.to_string_lossy()), e))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_string())
        .ok_or_else(|| Error::Usage("`rustc -vV` names no host triple".into()))
}

fn metadata_error_text(e: &cargo_metadata::Error) -> String {
    match e {
        cargo_metadata::Error::CargoMetadata { stderr } => stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn workspace_from_metadata(metadata: &Metadata, target_dir: Option<&Path>) -> Workspace {
    let mut members = BTreeMap::new();
    for pkg in metadata.workspace_packages() {
        let dir = pkg
            .manifest_path
            .parent()
            .map(|p| p.as_std_path().to_path_buf())
            .unwrap_or_default();
        let test_targets = pkg
            .targets
            .iter()
            .filter(|t| t.kind.contains(&TargetKind::Test))
            .map(|t| t.name.clone())
            .collect();
        let has_doctests = pkg
            .targets
            .iter()
            .any(|t| t.doctest && t.kind.iter().any(is_lib_kind));
        let uses_tikv_jemallocator = pkg
            .dependencies
            .iter()
            .any(|d| d.name == "tikv-jemallocator");
        let uses_criterion = pkg.dependencies.iter().any(|d| d.name == "criterion");
        let no_harness = no_harness_targets(pkg.manifest_path.as_std_path());
        let name = pkg.name.to_string();
        let spec = package_spec(&pkg.id.repr, &name, &pkg.version.to_string());
        members.insert(
            name.clone(),
            Member {
                name,
                version: pkg.version.to_string(),
                spec,
                dir,
                test_targets,
                no_harness,
                has_doctests,
                uses_tikv_jemallocator,
                uses_criterion,
            },
        );
    }
    Workspace {
        root: metadata.workspace_root.as_std_path().to_path_buf(),
        // Absolute: the test processes run in their package's directory, and a dump prefix
        // relative to ours would point nowhere there (cargo reads `--target-dir` relative to
        // the current directory, as this does).
        target_dir: target_dir
            .map(|t| std::env::current_dir().map_or_else(|_| t.to_path_buf(), |cwd| cwd.join(t)))
            .unwrap_or_else(|| metadata.target_directory.as_std_path().to_path_buf()),
        members,
        toolchain_libdir: None,
    }
}

/// What names a package alone to `--package`: its id, which cargo 1.77 and later write as a
/// package id spec (`path+file:///ws/tokio#1.54.1`); `name@version` from an older cargo's
/// (`tokio 1.54.1 (path+file:///ws/tokio)`).
fn package_spec(id: &str, name: &str, version: &str) -> String {
    match id.contains(' ') {
        false => id.to_string(),
        true => format!("{name}@{version}"),
    }
}

fn is_lib_kind(k: &TargetKind) -> bool {
    matches!(
        k,
        TargetKind::Lib | TargetKind::RLib | TargetKind::DyLib | TargetKind::ProcMacro
    )
}

/// `cargo metadata` does not report `harness = false`, so read it from the manifest.
fn no_harness_targets(manifest: &Path) -> Vec<(ModelKind, String)> {
    let Ok(text) = std::fs::read_to_string(manifest) else {
        return Vec::new();
    };
    no_harness_in(&text)
}

fn no_harness_in(manifest: &str) -> Vec<(ModelKind, String)> {
    let Ok(value) = manifest.parse::<toml::Table>() else {
        return Vec::new();
    };
    let no_harness =
        |item: &toml::Value| item.get("harness").and_then(|h| h.as_bool()) == Some(false);
    let mut out = Vec::new();
    for (section, kind) in [
        ("test", ModelKind::Test),
        ("bin", ModelKind::Bin),
        ("bench", ModelKind::Bench),
    ] {
        if let Some(toml::Value::Array(items)) = value.get(section) {
            for item in items.iter().filter(|i| no_harness(i)) {
                if let Some(name) = item.get("name").and_then(|n| n.as_str()) {
                    out.push((kind, name.to_string()));
                }
            }
        }
    }
    if let Some(lib) = value.get("lib").filter(|l| no_harness(l)) {
        let package = value
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str());
        let name = lib.get("name").and_then(|n| n.as_str()).map(str::to_string);
        if let Some(name) = name.or_else(|| package.map(|p| p.replace('-', "_"))) {
            out.push((ModelKind::Lib, name));
        }
    }
    out
}

/// Which workspace members the arguments select, mirroring cargo's own rules closely
/// enough to validate names and decide per-package build settings.
pub fn selected_members<'a>(
    ws: &'a Workspace,
    args: &Selection,
    test_targets: &[String],
    current_package: Option<&str>,
) -> Result<Vec<&'a Member>, Error> {
    let available = || ws.members.keys().cloned().collect::<Vec<_>>();
    for name in args.packages.iter().chain(args.exclude.iter()) {
        // cargo accepts `name@version` specs; validate the name part.
        let bare = name.split('@').next().unwrap_or(name);
        if !ws.members.contains_key(bare) {
            return Err(Error::UnknownPackage {
                name: name.clone(),
                available: available(),
            });
        }
    }
    let selected: Vec<&Member> = if !args.packages.is_empty() {
        args.packages
            .iter()
            .filter_map(|p| ws.members.get(p.split('@').next().unwrap_or(p)))
            .collect()
    } else if args.workspace {
        ws.members
            .values()
            .filter(|m| {
                !args
                    .exclude
                    .iter()
                    .any(|e| e.split('@').next() == Some(m.name.as_str()))
            })
            .collect()
    } else if let Some(cur) = current_package.and_then(|c| ws.members.get(c)) {
        vec![cur]
    } else {
        ws.members.values().collect()
    };
    for t in test_targets {
        if !selected.iter().any(|m| m.test_targets.contains(t)) {
            let mut all: Vec<String> = selected
                .iter()
                .flat_map(|m| m.test_targets.iter().cloned())
                .collect();
            all.sort();
            return Err(Error::UnknownTestTarget {
                name: t.clone(),
                available: all,
            });
        }
    }
    Ok(selected)
}

/// The package whose manifest is `manifest` (or, with none, the one containing the current
/// directory), when it is a workspace member: that is what cargo tests by default.
pub fn current_package(ws: &Workspace, manifest: Option<&Path>) -> Option<String> {
    let dir = match manifest {
        Some(m) => m.canonicalize().ok()?.parent()?.to_path_buf(),
        None => std::env::current_dir().ok()?.canonicalize().ok()?,
    };
    ws.members
        .values()
        .filter(|m| {
            m.dir
                .canonicalize()
                .map(|d| dir.starts_with(&d))
                .unwrap_or(false)
        })
        .max_by_key(|m| m.dir.components().count())
        .map(|m| m.name.clone())
}

/// How a test executable runs its tests.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Harness {
    /// libtest: its tests are listed with `--list`, each run alone with `--exact`, and each
    /// has an entry point the runtime can call again in its process.
    Libtest,
    /// A harness of the target's own (`harness = false`) that lists its trials as libtest
    /// lists tests (libtest-mimic does): each trial runs alone, as under nextest, and never
    /// again in its process (there is no entry point to call).
    Trials,
    /// A `harness = false` target that does not list tests: one test, named after the
    /// target, run as it is.
    Whole,
    /// An executable rustdoc built for doc-tests, kept while they ran: what it holds is in
    /// its binary's `doc` (see [`crate::execution::doctests`]).
    Doc,
}

impl Harness {
    /// Whether its tests are listed and run one by one (`--list`, `--exact NAME`).
    pub fn lists(self) -> bool {
        matches!(self, Harness::Libtest | Harness::Trials)
    }
}

/// A built test executable.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// Package name.
    pub package: String,
    /// Target name (the lib target's name for unit tests).
    pub target: String,
    /// `lib`, `bin` or `test` (`bench` for `cargo leakcheck bench`).
    pub kind: ModelKind,
    /// The executable.
    pub path: PathBuf,
    /// How it runs its tests.
    pub harness: Harness,
    /// What one read of the executable said; empty until [`crate::execution::inspect::binaries`] ran.
    pub facts: BinaryFacts,
    /// The doc-tests it holds and how rustdoc ran it, for [`Harness::Doc`].
    pub doc: Option<std::sync::Arc<crate::execution::doctests::held::DocTests>>,
}

impl TestBinary {
    /// What orders binaries, and tells a duplicate cargo reported twice.
    fn key(&self) -> (&str, &str, ModelKind, &Path, Harness) {
        (
            &self.package,
            &self.target,
            self.kind,
            &self.path,
            self.harness,
        )
    }

    /// A stable, unique id: `package` for unit tests of the lib, `package::target` for
    /// integration tests, `package::bin/target` for unit tests of a binary.
    pub fn id(&self) -> String {
        crate::model::binary_id(&self.package, self.kind, &self.target)
    }
}

/// Which targets of the selected packages to build, and how.
#[derive(Clone, Debug, Default)]
pub struct Targets<'a> {
    /// Only the library's unit tests.
    pub lib: bool,
    /// Only these integration tests.
    pub tests: &'a [String],
    /// Only these benches.
    pub benches: &'a [String],
    /// Release profile.
    pub release: bool,
}

/// The `cargo test --no-run` arguments for these selection flags.
pub fn build_args(args: &Selection, targets: &Targets, selected: &[&Member]) -> Vec<String> {
    let mut out: Vec<String> = vec![
        "test".into(),
        "--no-run".into(),
        "--message-format=json-render-diagnostics".into(),
    ];
    if let Some(m) = &args.manifest_path {
        out.push("--manifest-path".into());
        out.push(m.display().to_string());
    }
    for p in &args.packages {
        out.push("--package".into());
        out.push(p.clone());
    }
    if args.workspace {
        out.push("--workspace".into());
    }
    for e in &args.exclude {
        out.push("--exclude".into());
        out.push(e.clone());
    }
    if targets.lib {
        out.push("--lib".into());
    }
    for t in targets.tests {
        out.push("--test".into());
        out.push(t.clone());
    }
    for b in targets.benches {
        out.push("--bench".into());
        out.push(b.clone());
    }
    let mut features = args.features.clone();
    // A crate whose global allocator is tikv-jemallocator allocates behind malloc's back;
    // turning on its profiling feature makes that jemalloc write dumps of its own.
    // With several packages selected, cargo applies a `dep?/feature` flag to each selected
    // package that has the dependency (`member/dep/feature` is not valid syntax).
    if selected.iter().any(|m| m.uses_tikv_jemallocator) {
        features.push(JEMALLOC_PROFILING.into());
    }
    if !features.is_empty() {
        out.push("--features".into());
        out.push(features.join(","));
    }
    if args.all_features {
        out.push("--all-features".into());
    }
    if args.no_default_features {
        out.push("--no-default-features".into());
    }
    if targets.release {
        out.push("--release".into());
    }
    if let Some(t) = &args.target_dir {
        out.push("--target-dir".into());
        out.push(t.display().to_string());
    }
    out
}

/// Builds the test executables, letting cargo print its diagnostics to our stderr.
pub fn build_tests(
    ws: &Workspace,
    args: &Selection,
    targets: &Targets,
    selected: &[&Member],
    verbose: bool,
) -> Result<Vec<TestBinary>, Error> {
    build(ws, build_args(args, targets, selected), false, verbose)
}

/// Builds the bench executables (`cargo bench --no-run`).
pub fn build_benches(
    ws: &Workspace,
    args: &Selection,
    targets: &Targets,
    selected: &[&Member],
    verbose: bool,
) -> Result<Vec<TestBinary>, Error> {
    let mut cargo_args = build_args(args, targets, selected);
    cargo_args[0] = "bench".into();
    build(ws, cargo_args, true, verbose)
}

fn build(
    ws: &Workspace,
    cargo_args: Vec<String>,
    benches: bool,
    verbose: bool,
) -> Result<Vec<TestBinary>, Error> {
    let mut binaries = Vec::new();
    for artifact in executables(cargo_args, verbose)? {
        {
            let Some(exe) = artifact.executable else {
                continue;
            };
            let is_bench = artifact.target.kind.contains(&TargetKind::Bench);
            if benches != is_bench || (!benches && !artifact.profile.test) {
                continue;
            }
            let kind = if is_bench {
                ModelKind::Bench
            } else if artifact.target.kind.iter().any(is_lib_kind) {
                ModelKind::Lib
            } else if artifact.target.kind.contains(&TargetKind::Test) {
                ModelKind::Test
            } else if artifact.target.kind.contains(&TargetKind::Bin) {
                ModelKind::Bin
            } else {
                // Benches and examples built in test mode are not what `cargo test` runs
                // by default; `cargo leakcheck bench` is their home.
                continue;
            };
            let package = ws
                .members
                .values()
                .find(|m| artifact.manifest_path.as_std_path().parent() == Some(m.dir.as_path()))
                .map(|m| m.name.clone())
                .unwrap_or_else(|| artifact.target.name.clone());
            // A `harness = false` target may still list trials: listing tells
            // (`execution::listing`).
            let harness = match ws
                .members
                .get(&package)
                .is_some_and(|m| m.no_harness.contains(&(kind, artifact.target.name.clone())))
            {
                true => Harness::Whole,
                false => Harness::Libtest,
            };
            let path = exe.into_std_path_buf();
            binaries.push(TestBinary {
                facts: BinaryFacts::default(),
                package,
                target: artifact.target.name.clone(),
                kind,
                path,
                harness,
                doc: None,
            });
        }
    }
    binaries.sort_by(|a, b| a.key().cmp(&b.key()));
    binaries.dedup_by(|a, b| a.key() == b.key());
    Ok(binaries)
}

/// Which program `cargo leakcheck run` builds.
#[derive(Clone, Copy, Debug)]
pub enum Program<'a> {
    /// `--bin NAME`.
    Bin(&'a str),
    /// `--example NAME`.
    Example(&'a str),
    /// The selected package's only binary, as `cargo run` picks it.
    Default,
}

/// Builds a program as `cargo build` would for `cargo run`, and returns its executable.
pub fn build_program(
    args: &Selection,
    program: Program,
    release: bool,
    selected: &[&Member],
    verbose: bool,
) -> Result<PathBuf, Error> {
    let targets = Targets {
        release,
        ..Targets::default()
    };
    let mut cargo_args = build_args(args, &targets, selected);
    cargo_args.splice(0..2, ["build".to_string()]);
    match program {
        Program::Bin(name) => cargo_args.extend(["--bin".into(), name.to_string()]),
        Program::Example(name) => cargo_args.extend(["--example".into(), name.to_string()]),
        Program::Default => cargo_args.push("--bins".into()),
    }
    let wanted = |a: &cargo_metadata::Artifact| match program {
        Program::Bin(name) => a.target.name == name && a.target.kind.contains(&TargetKind::Bin),
        Program::Example(name) => {
            a.target.name == name && a.target.kind.contains(&TargetKind::Example)
        }
        Program::Default => a.target.kind.contains(&TargetKind::Bin),
    };
    let mut found: Vec<cargo_metadata::Artifact> = executables(cargo_args, verbose)?
        .into_iter()
        .filter(|a| wanted(a) && !a.profile.test)
        .collect();
    found.sort_by(|a, b| a.target.name.cmp(&b.target.name));
    found.dedup_by(|a, b| a.target.name == b.target.name);
    match found.as_slice() {
        [one] => Ok(one
            .executable
            .clone()
            .expect("kept for its executable")
            .into_std_path_buf()),
        [] => Err(Error::Usage(match program {
            Program::Bin(name) => format!("no binary target named `{name}` was built"),
            Program::Example(name) => format!("no example named `{name}` was built"),
            Program::Default => {
                "the selected package has no binary target (use --bin, --example or --command)"
                    .into()
            }
        })),
        several => Err(Error::Usage(format!(
            "several binaries were built ({}); choose one with --bin",
            several
                .iter()
                .map(|a| format!("`{}`", a.target.name))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Runs cargo with `cargo_args` (a build that prints JSON messages), forwarding its
/// diagnostics; returns the artifacts that are executables.
fn executables(
    cargo_args: Vec<String>,
    verbose: bool,
) -> Result<Vec<cargo_metadata::Artifact>, Error> {
    let program = cargo_program();
    let mut cargo_args = cargo_args;
    if crate::console::level() == crate::console::Level::Quiet {
        cargo_args.push("--quiet".into());
    }
    let command_text = format!("{} {}", program.display(), cargo_args.join(" "));
    if verbose {
        crate::say!("     Running `{command_text}`");
    }
    // cargo's diagnostics pass through us rather than going to our stderr directly: cargo
    // panics when it cannot write them (stderr closed or full), and that must not fail the
    // build. Colours are kept when our stderr is a terminal.
    let mut cmd = Command::new(&program);
    if std::io::stderr().is_terminal() && std::env::var_os("CARGO_TERM_COLOR").is_none() {
        cmd.env("CARGO_TERM_COLOR", "always");
    }
    // A process group of its own, which an interruption stops (see `interrupt`).
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .args(&cargo_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(format!("run `{command_text}`"), e))?;
    let registration =
        crate::execution::interrupt::register(child.id() as libc::pid_t, libc::SIGTERM);
    let stdout = child.stdout.take().expect("stdout was piped");
    let stderr = child.stderr.take().expect("stderr was piped");
    let forward = std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            crate::say_raw!("{}", String::from_utf8_lossy(&line));
            line.clear();
        }
    });
    let mut artifacts = Vec::new();
    for message in Message::parse_stream(BufReader::new(stdout)) {
        let message = message.map_err(|e| Error::io("read cargo's build output", e))?;
        if let Message::CompilerArtifact(artifact) = message {
            if artifact.executable.is_some() {
                artifacts.push(artifact);
            }
        }
    }
    crate::execution::interrupt::wait_ended(child.id() as libc::pid_t);
    drop(registration);
    let status = child
        .wait()
        .map_err(|e| Error::io(format!("wait for `{command_text}`"), e))?;
    let _ = forward.join();
    if !status.success() {
        return Err(Error::Build {
            command: command_text,
            status: status.to_string(),
        });
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, jemalloc: bool) -> Member {
        Member {
            name: name.into(),
            version: "0.1.0".into(),
            spec: format!("path+file:///ws/{name}#0.1.0"),
            dir: PathBuf::from("/ws").join(name),
            test_targets: vec!["integration".into()],
            no_harness: Vec::new(),
            has_doctests: true,
            uses_tikv_jemallocator: jemalloc,
            uses_criterion: false,
        }
    }

    #[test]
    fn a_member_is_named_by_its_id_not_a_name_a_dependency_shares() {
        // tokio's own package, beside the tokio 1.54.0 of crates.io its dev-dependencies use:
        // `--package tokio` is ambiguous there.
        let id = "path+file:///ws/tokio#1.54.1";
        assert_eq!(package_spec(id, "tokio", "1.54.1"), id);
        let old = "tokio 1.54.1 (path+file:///ws/tokio)";
        assert_eq!(package_spec(old, "tokio", "1.54.1"), "tokio@1.54.1");
    }

    #[test]
    fn harness_false_belongs_to_its_own_kind_of_target() {
        // flume 0.11.1 has a test and a bench both named `basic`, only the bench without
        // libtest: its 20 integration tests must still be run one by one.
        let manifest = r#"
            [package]
            name = "my-crate"
            [lib]
            harness = false
            [[test]]
            name = "basic"
            [[bench]]
            name = "basic"
            harness = false
            [[bin]]
            name = "tool"
            harness = true
        "#;
        assert_eq!(
            no_harness_in(manifest),
            vec![
                (ModelKind::Bench, "basic".to_string()),
                (ModelKind::Lib, "my_crate".to_string())
            ]
        );
        assert!(no_harness_in("not toml [").is_empty());
    }

    #[test]
    fn build_args_pass_selection_through_and_enable_jemalloc_profiling() {
        let args = Selection {
            packages: vec!["a".into(), "b".into()],
            features: vec!["x".into()],
            target_dir: Some(PathBuf::from("/t")),
            ..Selection::default()
        };
        let tests = vec!["integration".to_string()];
        let targets = Targets {
            lib: true,
            tests: &tests,
            release: true,
            ..Targets::default()
        };
        let (a, b) = (member("a", true), member("b", false));
        let got = build_args(&args, &targets, &[&a, &b]);
        let want = [
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
            "--package",
            "a",
            "--package",
            "b",
            "--lib",
            "--test",
            "integration",
            "--features",
            "x,tikv-jemallocator?/profiling",
            "--release",
            "--target-dir",
            "/t",
        ];
        assert_eq!(got, want);
        // Without a tikv-jemallocator user, no feature is added.
        let plain = Selection::default();
        assert!(!build_args(&plain, &Targets::default(), &[&b])
            .iter()
            .any(|a| a.contains("features")));
    }

    #[test]
    fn selection_errors_name_what_is_missing() {
        let mut ws = Workspace {
            root: "/ws".into(),
            target_dir: "/ws/target".into(),
            members: BTreeMap::new(),
            toolchain_libdir: None,
        };
        for m in [member("a", false), member("b", false)] {
            ws.members.insert(m.name.clone(), m);
        }
        let args = Selection {
            packages: vec!["nope".into()],
            ..Selection::default()
        };
        let e = selected_members(&ws, &args, &[], None)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "package `nope` is not in this workspace (members: a, b)");
        let args = Selection {
            packages: vec!["a@0.1.0".into()],
            ..Selection::default()
        };
        let e = selected_members(&ws, &args, &["other".to_string()], None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "no integration test target named `other` (available: integration)"
        );
        let args = Selection {
            workspace: true,
            exclude: vec!["b".into()],
            ..Selection::default()
        };
        let names: Vec<&str> = selected_members(&ws, &args, &[], None)
            .unwrap()
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, ["a"]);
        let names: Vec<&str> = selected_members(&ws, &Selection::default(), &[], Some("b"))
            .unwrap()
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, ["b"], "the current package by default");
    }
}
