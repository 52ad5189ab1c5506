//! Doc-tests, checked like any test: rustdoc compiles each into an executable of its own
//! (edition 2021), or a crate's mergeable ones into one (edition 2024), runs it and deletes
//! it. `cargo test --doc` is run with cargo's target runner set to this tool (rustdoc's
//! runtool), which keeps every executable with the directory and environment it ran in
//! ([`keep`]); which doc-test each one holds is then read from what rustdoc printed and from
//! the executable's symbols ([`naming`]), and each kept executable becomes a test binary the
//! passes run like the others: a doc-test alone by running its executable, one of a merged
//! executable by its index. Nothing is rebuilt: the executables are rustdoc's own, with line
//! tables added (`-C debuginfo=line-tables-only` for rustdoc) so their frames have lines.
//!
//! A doc-test can be run again in its process: one compiled alone through the `fn main()`
//! rustdoc wraps it in (when its own `main` is not the doc-test's, and returns nothing), one
//! of a merged executable through the closure libtest keeps for it. rustdoc compiles a
//! doc-test as code of a crate of its own, whose lines count from its generated source: the
//! frames of that code are put back at the doc-test's lines in its file ([`SourceMap`]).

pub mod held;
pub mod keep;
pub mod naming;
mod ordered;
pub mod positions;
pub mod sources;

use crate::evidence::Entry;
use crate::execution::cargo::{cargo_program, Harness, Member, Selection, TestBinary, Workspace};
use crate::execution::facts::BinaryFacts;
use crate::model::TargetKind;
pub use held::{DocTest, DocTests};
use keep::Kept;
use naming::{Outcome, RunMode};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
pub use sources::SourceMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// The doc-tests of the selected packages, kept.
#[derive(Debug, Default)]
pub struct Collected {
    /// One test binary per kept executable.
    pub binaries: Vec<TestBinary>,
    /// Doc-tests only compiled (`no_run`, `compile_fail`), by package: nothing of them runs.
    pub compile_only: Vec<(String, String)>,
    /// Doc-tests rustdoc ignored, by package.
    pub ignored: Vec<(String, String)>,
    /// Doc-tests rustdoc failed that left no executable (they did not build), by package.
    pub failed_to_build: Vec<(String, String, String)>,
    /// What could not be collected, and why.
    pub problems: Vec<String>,
}

/// What collecting needs to know.
pub struct Request<'a> {
    pub ws: &'a Workspace,
    pub selection: &'a Selection,
    /// The selected packages; those with doc-tests are collected.
    pub members: &'a [&'a Member],
    pub release: bool,
    /// libtest's filters, which rustdoc applies to doc-test names.
    pub filters: &'a [String],
    /// Where the executables are kept.
    pub dir: &'a Path,
    pub verbose: bool,
}

/// Runs the doc-tests of every selected package with doc-tests once through rustdoc,
/// keeping their executables, and makes a test binary of each.
pub fn collect(req: &Request) -> Collected {
    let mut out = Collected::default();
    let Some(host) = host_triple(&req.ws.root) else {
        out.problems
            .push("doc-tests are not checked: `rustc -vV` did not say the host's target".into());
        return out;
    };
    for m in req.members.iter().filter(|m| m.has_doctests) {
        let dir = req.dir.join(&m.name);
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            out.problems.push(format!(
                "the doc-tests of `{}` are not checked: cannot create `{}`: {e}",
                m.name,
                dir.display()
            ));
            continue;
        }
        match run_rustdoc(req, m, &host, &dir, req.filters) {
            Ok(stdout) => {
                let pkg = Package {
                    member: m,
                    root: &req.ws.root,
                };
                let (unplaced, in_merged) = package(&pkg, &RustdocRan::of(&stdout), &dir, &mut out);
                if !unplaced.is_empty() {
                    let run = ordered::Run {
                        req,
                        pkg: &pkg,
                        host: &host,
                        dir: &dir.join(ordered::DIR),
                    };
                    let still = ordered::place(&run, &unplaced, &in_merged, &mut out);
                    if !still.is_empty() {
                        out.problems.push(format!(
                            "{} doc-tests of `{}` are not checked: their executables name no doc-test, where their code is fits no single one of them (a doc comment a macro writes for many items, blocks alike, or a line rustdoc gives that holds no code block), and run again one at a time their executables did not match the doc-tests rustdoc ran: {}",
                            still.len(),
                            m.name,
                            listed(still.iter().map(|o| o.name.as_str()))
                        ));
                    }
                }
            }
            Err(why) => out.problems.push(format!(
                "the doc-tests of `{}` are not checked: {why}",
                m.name
            )),
        }
    }
    out
}

/// The host's target triple, as the toolchain cargo uses says it.
fn host_triple(root: &Path) -> Option<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .current_dir(root)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_string())
}

/// The `cargo test --doc` arguments for one package, with this tool as the host's runner.
pub fn rustdoc_args(
    req: &Request,
    member: &Member,
    host: &str,
    dir: &Path,
    filters: &[String],
) -> Vec<String> {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("cargo-leakcheck"));
    let toml = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut args: Vec<String> = vec![
        "test".into(),
        "--doc".into(),
        "--no-fail-fast".into(),
        "--package".into(),
        member.spec.clone(),
        "--config".into(),
        format!(
            "target.{host}.runner=[{}, {}, {}]",
            toml(&exe.display().to_string()),
            toml(RUNNER_COMMAND),
            toml(&dir.display().to_string())
        ),
    ];
    let s = req.selection;
    // cargo runs from the workspace's root here: a path the user gave relative to where the
    // tool started is made absolute first.
    let from_here = |p: &Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    if let Some(m) = &s.manifest_path {
        args.extend(["--manifest-path".into(), from_here(m)]);
    }
    if !s.features.is_empty() {
        args.extend(["--features".into(), s.features.join(",")]);
    }
    if s.all_features {
        args.push("--all-features".into());
    }
    if s.no_default_features {
        args.push("--no-default-features".into());
    }
    if req.release {
        args.push("--release".into());
    }
    if let Some(t) = &s.target_dir {
        args.extend(["--target-dir".into(), from_here(t)]);
    }
    if rustdocflags_from_env().is_none() {
        // Added to the configuration's own flags (cargo joins arrays across sources).
        args.extend([
            "--config".into(),
            format!("build.rustdocflags=[{}]", toml(LINE_TABLES)),
        ]);
    }
    args.push("--".into());
    args.extend(filters.iter().cloned());
    args
}

/// The hidden command cargo runs as the target runner while doc-tests are collected.
pub const RUNNER_COMMAND: &str = "__doctest-runner";

/// Line tables for the doc-tests' code, so that their frames have lines.
const LINE_TABLES: &str = "-Cdebuginfo=line-tables-only";

/// The user's rustdoc flags from the environment (which win over any configuration), with
/// line tables added: the variable and its new value.
fn rustdocflags_from_env() -> Option<(&'static str, String)> {
    if let Ok(encoded) = std::env::var("CARGO_ENCODED_RUSTDOCFLAGS") {
        let joined = if encoded.is_empty() {
            LINE_TABLES.to_string()
        } else {
            format!("{encoded}\x1f{LINE_TABLES}")
        };
        return Some(("CARGO_ENCODED_RUSTDOCFLAGS", joined));
    }
    let flags = std::env::var("RUSTDOCFLAGS").ok()?;
    Some(("RUSTDOCFLAGS", format!("{flags} {LINE_TABLES}")))
}

/// Runs one package's doc-tests through rustdoc with this tool as the runner; returns what
/// cargo printed on stdout, or why no doc-test ran.
fn run_rustdoc(
    req: &Request,
    member: &Member,
    host: &str,
    dir: &Path,
    filters: &[String],
) -> Result<String, String> {
    let args = rustdoc_args(req, member, host, dir, filters);
    let program = cargo_program();
    let text = format!("{} {}", program.display(), args.join(" "));
    if req.verbose {
        crate::say!("     Running `{text}`");
    }
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .current_dir(&req.ws.root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((var, value)) = rustdocflags_from_env() {
        cmd.env(var, value);
    }
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .spawn()
        .map_err(|e| format!("`{text}` did not start: {e}"))?;
    let registration =
        crate::execution::interrupt::register(child.id() as libc::pid_t, libc::SIGTERM);
    let out = child.wait_with_output();
    drop(registration);
    let out = out.map_err(|e| format!("`{text}` failed: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // Failing doc-tests make cargo exit non-zero; anything else that stops it leaves no
    // result line at all.
    if !out.status.success() && naming::outcomes(&stdout).is_empty() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "`cargo test --doc` failed ({}): {}",
            out.status,
            tail.join(" / ")
        ));
    }
    Ok(stdout)
}

/// Whether `name` (demangled, hash dropped) is std's `lang_start` closure, in either
/// mangling: `std::rt::lang_start::{{closure}}`, `std::rt::lang_start::<T>::{closure#0}`.
fn is_lang_start_closure(name: &str) -> bool {
    name.strip_prefix("std::rt::lang_start::")
        .is_some_and(|rest| {
            rest == "{{closure}}" || (rest.starts_with('<') && rest.ends_with("::{closure#0}"))
        })
}

/// Whether `name` (demangled, hash dropped) is rustdoc's wrapper of a doc-test compiled
/// alone, `rust_out::main::_doctest_main_<path>_<N>_<k>`, the function its `main` holds;
/// not an item the doc-test's code defines inside it
/// (`rust_out::main::_doctest_main_src_lib_rs_10_0::helper`, `<… as Debug>::fmt`).
fn is_wrapper(name: &str) -> bool {
    name.strip_prefix("rust_out::main::")
        .is_some_and(|rest| rest.starts_with("_doctest_main_") && !rest.contains("::"))
}

/// What rustdoc printed of the doc-tests it ran.
struct RustdocRan {
    outcomes: Vec<Outcome>,
    /// Those that failed because they did not build.
    not_built: Vec<String>,
}

impl RustdocRan {
    fn of(stdout: &str) -> RustdocRan {
        RustdocRan {
            outcomes: naming::outcomes(stdout),
            not_built: naming::not_built(stdout),
        }
    }
}

/// The package whose doc-tests are collected, and the workspace they are named in.
struct Package<'a> {
    member: &'a Member,
    /// The workspace's root: rustdoc names a doc-test by its file's path from there.
    root: &'a Path,
}

impl Package<'_> {
    /// The doc-test file a doc-test's name gives.
    fn file(&self, path: &str) -> PathBuf {
        let from_root = self.root.join(path);
        if from_root.is_file() {
            from_root
        } else {
            self.member.dir.join(path)
        }
    }

    /// The code block of the doc-test `name`, with its file and fence line.
    fn block(&self, name: &str) -> Option<(PathBuf, u32, Vec<String>)> {
        let (path, line) = naming::place(name)?;
        let file = self.file(path);
        let source = std::fs::read_to_string(&file).ok()?;
        let (fence, block) = naming::code_block(&source, line)?;
        Some((file, fence, block))
    }
}

/// Makes a test binary of each executable kept in `dir` for the package, and sorts out the
/// doc-tests that have none. Returns the doc-tests that ran whose executables could not be
/// told apart, and those merged into one executable.
fn package(
    pkg: &Package,
    ran: &RustdocRan,
    dir: &Path,
    out: &mut Collected,
) -> (Vec<Outcome>, Vec<String>) {
    let member = pkg.member;
    let mut kept: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    kept.sort();
    let mut placed: Vec<String> = Vec::new();
    let mut in_merged: Vec<String> = Vec::new();
    let mut own_mains: Vec<(PathBuf, Kept, DocSymbols)> = Vec::new();
    for d in kept {
        let Some(k) = Kept::read(&d) else { continue };
        let exe = d.join(keep::EXECUTABLE);
        let Ok(data) = std::fs::read(&exe) else {
            continue;
        };
        let Some(symbols) = DocSymbols::of(&data) else {
            continue;
        };
        let doc = if symbols.merged.is_empty() {
            match alone(pkg, &ran.outcomes, &k, &symbols) {
                Some(doc) => doc,
                None => {
                    own_mains.push((exe, k, symbols));
                    continue;
                }
            }
        } else {
            match merged(pkg, &ran.outcomes, &k, &symbols, &data) {
                Ok(doc) => {
                    in_merged.extend(doc.tests.iter().map(|t| t.name.clone()));
                    doc
                }
                Err(why) => {
                    out.problems.push(why);
                    continue;
                }
            }
        };
        placed.extend(doc.tests.iter().map(|t| t.name.clone()));
        out.binaries.push(binary(member, exe, doc));
    }
    // One that did not build left no executable to place.
    let built: Vec<Outcome> = (ran.outcomes.iter())
        .filter(|o| !ran.not_built.contains(&o.name))
        .cloned()
        .collect();
    let unplaced = place_own_mains(pkg, &built, own_mains, &mut placed, out);
    for o in &ran.outcomes {
        let name = (member.name.clone(), o.name.clone());
        if o.mode == RunMode::CompileOnly {
            out.compile_only.push(name);
        } else if o.ignored() {
            out.ignored.push(name);
        } else if !placed.contains(&o.name) && o.result == "FAILED" {
            let why = if ran.not_built.contains(&o.name) {
                "it did not build"
            } else {
                "rustdoc failed it before it ran"
            };
            out.failed_to_build.push((name.0, name.1, why.into()));
        } else if !placed.contains(&o.name) {
            out.problems.push(format!(
                "the doc-test `{}` of `{}` ran, but its executable was not kept",
                o.name, member.name
            ));
        }
    }
    (unplaced, in_merged)
}

/// The executables of doc-tests with a `fn main` of their own, which no symbol names: one
/// is its package's last unplaced doc-test only when it is the one such executable left;
/// others are told by where their code is. Returns the doc-tests left unpaired.
fn place_own_mains(
    pkg: &Package,
    outcomes: &[Outcome],
    own_mains: Vec<(PathBuf, Kept, DocSymbols)>,
    placed: &mut Vec<String>,
    out: &mut Collected,
) -> Vec<Outcome> {
    let left: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.mode != RunMode::CompileOnly && !o.ignored() && !placed.contains(&o.name))
        .collect();
    if own_mains.is_empty() {
        return Vec::new();
    }
    if own_mains.len() == 1 && left.len() == 1 {
        let (exe, kept, symbols) = own_mains.into_iter().next().expect("one");
        let doc = alone_named(pkg, left[0], kept, &symbols, None);
        placed.push(left[0].name.clone());
        out.binaries.push(binary(pkg.member, exe, doc));
        return Vec::new();
    }
    let (named, unplaced) = match_by_positions(pkg, own_mains, &left);
    for (exe, kept, symbols, o, before) in named {
        placed.push(o.name.clone());
        out.binaries
            .push(own_main_binary(pkg, exe, kept, &symbols, o, before));
    }
    // Said by the caller, not again as doc-tests whose executables were not kept.
    placed.extend(unplaced.iter().map(|o| o.name.clone()));
    unplaced.into_iter().cloned().collect()
}

/// The test binary of an executable found to be `o`'s, with `before` lines rustdoc put
/// before its code (`None`: not known).
fn own_main_binary(
    pkg: &Package,
    exe: PathBuf,
    kept: Kept,
    symbols: &DocSymbols,
    o: &Outcome,
    before: Option<u32>,
) -> TestBinary {
    let wrapper = symbols.wrapper.as_ref().map(|(_, start)| *start);
    let mut doc = alone_named(pkg, o, kept, symbols, wrapper);
    for map in &mut doc.sources {
        map.lines_from = (before.zip(pkg.block(&o.name)))
            .map(|(before, (_, fence, _))| i64::from(fence) - i64::from(before));
    }
    binary(pkg.member, exe, doc)
}

/// An executable that names no doc-test, with the doc-test found to be its and how many
/// lines rustdoc put before that one's code (`None`: found as the last one left).
type Matched<'o> = (PathBuf, Kept, DocSymbols, &'o Outcome, Option<u32>);

/// Pairs the executables that name no doc-test with `candidates` by the blocks their code
/// fits ([`positions::pair`]). Returns the pairs and the candidates left unpaired.
fn match_by_positions<'o>(
    pkg: &Package,
    exes: Vec<(PathBuf, Kept, DocSymbols)>,
    candidates: &[&'o Outcome],
) -> (Vec<Matched<'o>>, Vec<&'o Outcome>) {
    let fits: Vec<Vec<(usize, u32)>> = (exes.iter())
        .map(|(exe, _, symbols)| fitting(pkg, exe, symbols, candidates))
        .collect();
    let pairs = positions::pair(&fits, candidates.len());
    let mut unpaired: Vec<&'o Outcome> = candidates.to_vec();
    let mut by_exe: HashMap<usize, (usize, Option<u32>)> =
        pairs.into_iter().map(|(e, c, b)| (e, (c, b))).collect();
    let mut named = Vec::new();
    for (i, (exe, kept, symbols)) in exes.into_iter().enumerate() {
        if let Some((c, before)) = by_exe.remove(&i) {
            let o = candidates[c];
            unpaired.retain(|u| u.name != o.name);
            named.push((exe, kept, symbols, o, before));
        }
    }
    (named, unpaired)
}

/// The candidates (by index) whose block holds code at every position of the code of crate
/// `rust_out` in the executable `exe`, each with how many lines rustdoc put before it.
fn fitting(
    pkg: &Package,
    exe: &Path,
    symbols: &DocSymbols,
    candidates: &[&Outcome],
) -> Vec<(usize, u32)> {
    let code = symbols.addresses("rust_out::");
    let mut positions: HashMap<&str, Vec<(u32, u32)>> = HashMap::new();
    (candidates.iter().enumerate())
        .filter_map(|(i, o)| {
            let (path, _) = naming::place(&o.name)?;
            let (_, _, block) = pkg.block(&o.name)?;
            let at = positions
                .entry(path)
                .or_insert_with(|| positions::code_positions(exe, &code, path));
            positions::fits(&block, at).map(|before| (i, before))
        })
        .collect()
}

/// Names, the first few of them, and how many more.
fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    const SHOWN: usize = 5;
    let names: Vec<&str> = names.collect();
    let mut text = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// The test binary of a kept executable.
fn binary(member: &Member, exe: PathBuf, doc: DocTests) -> TestBinary {
    TestBinary {
        package: member.name.clone(),
        target: member.name.replace('-', "_"),
        kind: TargetKind::Doc,
        path: exe,
        harness: Harness::Doc,
        facts: BinaryFacts::default(),
        doc: Some(Arc::new(doc)),
    }
}

/// File offsets `[start, end)` of functions.
type Ranges = Vec<(u64, u64)>;

/// The functions of an executable that tell which doc-tests it holds.
struct DocSymbols {
    /// A wrapper `…::_doctest_main_…` of a doc-test compiled alone: (name, file offset).
    wrapper: Option<(String, u64)>,
    /// `rust_out::main` of a doc-test compiled alone: its entry point.
    main: Option<Entry>,
    /// std's `lang_start` closure, which calls `main` and reports what it returns; `None`
    /// when there is not exactly one.
    lang_start: Option<Entry>,
    /// A merged executable's `TEST` closures by index: their entry points.
    merged: HashMap<usize, Entry>,
    /// A merged executable's `__doctest_<i>::main` by index: (crate path, file offset).
    merged_mains: HashMap<usize, (String, u64)>,
    /// The crate of a merged executable's `TEST` closures (rustdoc's runner).
    runner: Option<String>,
    /// Every function: its name (hash dropped), file offsets `[start, end)` and address.
    functions: Vec<(String, u64, u64, u64)>,
}

impl DocSymbols {
    fn of(data: &[u8]) -> Option<DocSymbols> {
        let file = object::File::parse(data).ok()?;
        let offset = |address: u64| -> Option<u64> {
            file.segments().find_map(|s| {
                let (start, size) = (s.address(), s.size());
                let (file_start, _) = s.file_range();
                (address >= start && address < start + size).then(|| address - start + file_start)
            })
        };
        let mut starts = 0;
        let mut found = DocSymbols {
            wrapper: None,
            main: None,
            lang_start: None,
            merged: HashMap::new(),
            merged_mains: HashMap::new(),
            runner: None,
            functions: Vec::new(),
        };
        for s in file.symbols() {
            if s.kind() != SymbolKind::Text || s.address() == 0 {
                continue;
            }
            let Ok(raw) = s.name() else { continue };
            let demangled = addr2line::demangle_auto(raw.into(), None);
            let name = crate::execution::symbolize::strip_hash(&demangled);
            let Some(at) = offset(s.address()) else {
                continue;
            };
            let entry = Entry {
                address: s.address(),
                file_range: (at, at + s.size().max(1)),
            };
            found.functions.push((
                name.to_string(),
                entry.file_range.0,
                entry.file_range.1,
                s.address(),
            ));
            if is_wrapper(name) {
                found.wrapper = Some((name.to_string(), at));
            } else if name == "rust_out::main" {
                found.main = Some(entry);
            } else if is_lang_start_closure(name) {
                starts += 1;
                found.lang_start = Some(entry);
            } else if let Some(i) = naming::merged_index(name) {
                found.merged.insert(i, entry);
                found.runner = name.split_once("::__doctest_").map(|(c, _)| c.to_string());
            } else if let Some((krate, rest)) = name.split_once("::__doctest_") {
                if let Some(i) = rest.strip_suffix("::main").and_then(|i| i.parse().ok()) {
                    found
                        .merged_mains
                        .insert(i, (format!("{krate}::__doctest_{i}::"), at));
                }
            }
        }
        if starts != 1 {
            found.lang_start = None;
        }
        Some(found)
    }

    /// The address ranges of the functions whose names start with `prefix`.
    fn addresses(&self, prefix: &str) -> Vec<(u64, u64)> {
        (self.functions.iter())
            .filter(|(name, ..)| name.starts_with(prefix))
            .map(|(_, start, end, address)| (*address, address + (end - start)))
            .collect()
    }

    /// The file offsets of the functions whose names start with `prefix`, rustdoc's own
    /// (named `prefix` then one of `rustdocs`) apart: (code, rustdoc's).
    fn ranges(&self, prefix: &str, rustdocs: &[&str]) -> (Ranges, Ranges) {
        let mut code = Vec::new();
        let mut outer = Vec::new();
        for (name, start, end, _) in &self.functions {
            let Some(rest) = name.strip_prefix(prefix) else {
                continue;
            };
            if rustdocs.contains(&rest) {
                outer.push((*start, *end));
            } else {
                code.push((*start, *end));
            }
        }
        (code, outer)
    }
}

/// A doc-test compiled alone, named by its wrapper; `None` when it has none (its own
/// `main`).
fn alone(
    pkg: &Package,
    outcomes: &[Outcome],
    kept: &Kept,
    symbols: &DocSymbols,
) -> Option<DocTests> {
    let (wrapper, start) = symbols.wrapper.as_ref()?;
    let names: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.mode != RunMode::CompileOnly)
        .map(|o| o.name.as_str())
        .collect();
    let name = naming::by_wrapper(wrapper, &names)?;
    let outcome = outcomes.iter().find(|o| o.name == name)?;
    Some(alone_named(
        pkg,
        outcome,
        kept.clone(),
        symbols,
        Some(*start),
    ))
}

/// A doc-test compiled alone and known to be `outcome`'s: `wrapper_start` is its wrapper's
/// file offset, `None` when it has a `main` of its own.
fn alone_named(
    pkg: &Package,
    outcome: &Outcome,
    kept: Kept,
    symbols: &DocSymbols,
    wrapper_start: Option<u64>,
) -> DocTests {
    // One compiled alone says nothing of `should_panic`: rustdoc passed it although it
    // failed.
    let should_panic = kept.status.is_some_and(|s| s != 0) && outcome.result == "ok";
    let name = outcome.name.clone();
    let block = pkg.block(&name);
    let own_main = block.as_ref().and_then(|(_, _, b)| naming::own_main(b));
    let mut doc = DocTests {
        kept,
        tests: vec![DocTest {
            name: name.clone(),
            index: None,
            should_panic,
            runs: true,
        }],
        unit_entries: true,
        ..DocTests::default()
    };
    // rustdoc's wrapper `main` returns nothing; a `main` of the doc-test's own that returns
    // a value cannot be called as `fn()`.
    match (symbols.main, wrapper_start, own_main) {
        (Some(main), Some(_), _) | (Some(main), None, Some((_, false))) => {
            doc.entries.insert(name.clone(), main);
        }
        // A `main` of its own that returns a value, or may (its block not read, or its
        // `fn main` not told from it), is called through std's `lang_start` closure, which
        // reports what it returns as the process would.
        (Some(main), None, _) => match symbols.lang_start {
            Some(start) => {
                let entry = Entry {
                    address: start.address,
                    file_range: main.file_range,
                };
                doc.entries.insert(name.clone(), entry);
                doc.entry_mains.insert(name.clone(), main.address);
            }
            None => {
                doc.no_entry.insert(
                        name.clone(),
                        "its own `fn main` returns a value, or may, and std's `lang_start` closure that calls it was not found".into(),
                    );
            }
        },
        _ => {
            doc.no_entry
                .insert(name.clone(), "its `main` was not found".into());
        }
    }
    // A block not at the line rustdoc gives is put at that line.
    let named = naming::place(&name).map(|(path, line)| (pkg.file(path), line));
    let one_line = block.is_none();
    let anchor = match (wrapper_start, own_main, &block) {
        (Some(start), _, Some((_, line, _))) => Some((start, *line)),
        (None, Some((j, _)), Some((_, line, _))) => {
            symbols.main.map(|m| (m.file_range.0, line + j))
        }
        (Some(start), _, None) => named.as_ref().map(|(_, line)| (start, *line)),
        (None, _, None) => {
            (symbols.main.zip(named.as_ref())).map(|(m, (_, line))| (m.file_range.0, *line))
        }
        _ => None,
    };
    let file = (block.as_ref().map(|(file, _, _)| file.clone())).or(named.map(|(file, _)| file));
    if let (Some((start, line_at_start)), Some(file)) = (anchor, file) {
        // Everything of crate `rust_out` is the doc-test's, but rustdoc's `main` around
        // its wrapper.
        let rustdocs: &[&str] = if wrapper_start.is_some() {
            &["main"]
        } else {
            &[]
        };
        let (code, outer) = symbols.ranges("rust_out::", rustdocs);
        doc.sources.push(SourceMap {
            code,
            outer,
            start,
            line_at_start,
            file,
            name,
            lines_from: None,
            one_line,
        });
    }
    doc
}

/// A merged executable: the names of the package's doc-tests it holds, sorted as rustdoc
/// numbers them; refused when they are not exactly as many as its doc-tests.
fn merged(
    pkg: &Package,
    outcomes: &[Outcome],
    kept: &Kept,
    symbols: &DocSymbols,
    data: &[u8],
) -> Result<DocTests, String> {
    let names: Vec<&str> = outcomes.iter().map(|o| o.name.as_str()).collect();
    let found = naming::names_in(data, &names);
    let mut held: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| found.contains(o.name.as_str()))
        .collect();
    held.sort_by(|a, b| a.name.cmp(&b.name));
    let count = symbols.merged.len();
    if held.len() != count || (0..count).any(|i| !symbols.merged.contains_key(&i)) {
        return Err(format!(
            "the merged doc-tests of `{}` are not checked: the executable holds {count}, and {} of the package's doc-test names",
            pkg.member.name,
            held.len()
        ));
    }
    let mut doc = DocTests {
        kept: kept.clone(),
        ..DocTests::default()
    };
    for (i, o) in held.into_iter().enumerate() {
        doc.tests.push(DocTest {
            name: o.name.clone(),
            index: Some(i),
            should_panic: o.mode == RunMode::ShouldPanic,
            runs: o.mode != RunMode::CompileOnly && !o.ignored(),
        });
        doc.entries.insert(o.name.clone(), symbols.merged[&i]);
        if let Some(map) = merged_source(pkg, &o.name, i, symbols) {
            doc.sources.push(map);
        }
    }
    Ok(doc)
}

/// Where the code of merged doc-test `name` is: its generated `main` (`prefix`, file
/// offset) stands for the line before its code, or for its own `fn main` line.
fn merged_source(pkg: &Package, name: &str, i: usize, symbols: &DocSymbols) -> Option<SourceMap> {
    let (prefix, start) = symbols.merged_mains.get(&i)?;
    let (file, line_at_start, one_line) = match pkg.block(name) {
        Some((file, line, block)) => match naming::own_main(&block) {
            Some((j, _)) => (file, line + j, false),
            None => (file, line, false),
        },
        None => {
            let (path, line) = naming::place(name)?;
            (pkg.file(path), line, true)
        }
    };
    let (code, mut outer) = symbols.ranges(prefix, &["__main_fn"]);
    // The closure libtest keeps for it, in rustdoc's runner crate, is rustdoc's too.
    if let Some(runner) = &symbols.runner {
        let (tests, _) = symbols.ranges(&format!("{runner}::__doctest_{i}::"), &[]);
        outer.extend(tests);
    }
    Some(SourceMap {
        code,
        outer,
        start: *start,
        line_at_start,
        file,
        name: name.to_string(),
        lines_from: None,
        one_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An item a doc-test defines (a helper function, a derived trait's method) is named
    /// inside rustdoc's wrapper, and is not the wrapper: taken for it, the doc-test would
    /// not be named by its executable's symbols.
    #[test]
    fn the_wrapper_is_told_from_the_items_inside_it() {
        assert!(is_wrapper("rust_out::main::_doctest_main_src_lib_rs_136_0"));
        assert!(is_wrapper(
            "rust_out::main::_doctest_main_src_traits_rs_71_12"
        ));
        for inside in [
            "rust_out::main::_doctest_main_src_traits_rs_112_0::defined_flags",
            "<rust_out::main::_doctest_main_src_lib_rs_832_0::_::InternalBitFlags as core::fmt::Debug>::fmt",
            "rust_out::main::_doctest_main_src_lib_rs_158_0::_::<impl rust_out::main::_doctest_main_src_lib_rs_158_0::Flags>::all",
            "rust_out::main",
            "other::main::_doctest_main_src_lib_rs_1_0",
        ] {
            assert!(!is_wrapper(inside), "{inside}");
        }
    }
}
