//! The layering, checked: imports point down. `model` (the report schema) is at the bottom;
//! `analysis` (every verdict rule, pure) and `report` (renderers) sit on it and must not
//! reach up into `execution` (processes), `commands` or `cli`. Also: no source file, the
//! runtime's included (`runtime/`, a link to `leakcheck-runtime/src`), holds more than about
//! 800 lines of code before its tests.
//!
//! What does not hold yet is listed below as debt, so that nothing new adds to it; an entry
//! that no longer applies fails the check too, so the lists only shrink.

use std::path::{Path, PathBuf};

/// Modules a lower layer must not name.
const UPPER: &[&str] = &["execution", "commands", "cli"];

/// (file under `src/`, module it still names) that break the rule today.
const IMPORT_DEBT: &[(&str, &str)] = &[];

/// Files over the size limit today.
const SIZE_DEBT: &[&str] = &[];

/// Lines of code a file may hold before its `#[cfg(test)]` part.
const MAX_LINES: usize = 800;

fn sources() -> Vec<PathBuf> {
    sources_in(&src())
}

fn sources_in(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("src is readable").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

/// The runtime's sources, seen through the package's `runtime` link.
fn runtime() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime")
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The file's path under `src/` (or `runtime/…` for the runtime's), with `/` separators.
fn rel(path: &Path) -> String {
    match path.strip_prefix(src()) {
        Ok(p) => p.to_string_lossy().replace('\\', "/"),
        Err(_) => Path::new("runtime")
            .join(path.strip_prefix(runtime()).unwrap())
            .to_string_lossy()
            .replace('\\', "/"),
    }
}

/// Whether a file is in a layer that must not name [`UPPER`] modules.
fn is_lower(rel: &str) -> bool {
    rel == "model.rs" || rel.starts_with("analysis/") || rel.starts_with("report/")
}

/// The code of a file before its tests, without comments.
fn code(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

/// The `crate::<module>` names a file's code uses.
fn named_modules(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code(text) {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && !found.contains(&name) {
                found.push(name);
            }
        }
        // `use crate::{a, b}` groups.
        if let Some(group) = line.split("crate::{").nth(1) {
            let group = group.split('}').next().unwrap_or_default();
            for name in group.split([',', ' ']).filter(|n| !n.is_empty()) {
                let name = name.split("::").next().unwrap_or(name).to_string();
                if !found.contains(&name) {
                    found.push(name);
                }
            }
        }
    }
    found
}

#[test]
fn lower_layers_do_not_name_upper_ones_except_the_listed_debt() {
    let mut wrong = Vec::new();
    let mut seen_debt = Vec::new();
    for path in sources() {
        let rel = rel(&path);
        if !is_lower(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for module in named_modules(&text) {
            if !UPPER.contains(&module.as_str()) {
                continue;
            }
            if IMPORT_DEBT.contains(&(rel.as_str(), module.as_str())) {
                seen_debt.push((rel.clone(), module));
            } else {
                wrong.push(format!("{rel} names crate::{module}"));
            }
        }
    }
    for (file, module) in IMPORT_DEBT {
        if !seen_debt.iter().any(|(f, m)| f == file && m == module) {
            wrong.push(format!(
                "{file} no longer names crate::{module}: take it off IMPORT_DEBT"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_file_is_over_the_size_limit_except_the_listed_debt() {
    let mut wrong = Vec::new();
    let runtime = sources_in(&runtime());
    assert!(
        !runtime.is_empty(),
        "no runtime sources under {}",
        self::runtime().display()
    );
    for path in sources().into_iter().chain(runtime) {
        let rel = rel(&path);
        let lines = code(&std::fs::read_to_string(&path).unwrap()).len();
        let listed = SIZE_DEBT.contains(&rel.as_str());
        if lines > MAX_LINES && !listed {
            wrong.push(format!("{rel}: {lines} lines of code (limit {MAX_LINES})"));
        }
        if lines <= MAX_LINES && listed {
            wrong.push(format!("{rel} is within the limit: take it off SIZE_DEBT"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_scanner_sees_paths_groups_and_skips_comments() {
    let text = "use crate::model::X;\nuse crate::{execution, cli::Args};\n// crate::commands\nfn f() { crate::report::json::write(); }\n#[cfg(test)]\nmod tests { use crate::commands; }\n";
    let mut names = named_modules(text);
    names.sort();
    assert_eq!(names, ["cli", "execution", "model", "report"]);
}
