//! The layering, checked: imports point down, no module imports itself back, and no file is
//! large. Every file of the tool and of the runtime (`runtime/`, a link to
//! `leakcheck-runtime/src`) is read as code: comments, the insides of string and character
//! literals, and every item under `#[cfg(test)]` (wherever it is in the file) are left out;
//! what remains is counted and its `crate::`, `super::` and `self::` paths are resolved to
//! the files they name. On that graph:
//! - **layers**: each file of the tool has a rank ([`LAYERS`]); a file may name files of its
//!   own rank or below. Because every file is ranked, a path that climbs anywhere climbs at
//!   one of its steps; the check reports the whole path from the file that starts it, so a
//!   lower file that reaches upward through an unranked-looking helper is found too;
//! - **cycles**: the strongly connected parts of the graph (the tool's and the runtime's);
//! - **size**: at most [`MAX_LINES`] lines of code per file, and functions of at most
//!   [`MAX_FN_LINES`] lines ([`MAX_COMMAND_FN_LINES`] in `commands/`, which read as tables of
//!   contents).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Lines of code a file may hold (tests, comments and blank lines are not counted).
const MAX_LINES: usize = 800;

/// Lines a function may span, from its `fn` to its closing brace (tests are not counted).
const MAX_FN_LINES: usize = 100;

/// Lines a function of a command may span: a command is a short list of named steps.
const MAX_COMMAND_FN_LINES: usize = 60;

/// What the analysis may not name: it opens no file, reads no clock, starts no process and
/// reads no environment, so that every verdict is a function of the evidence loaded for it.
const ANALYSIS_FORBIDS: &[&str] = &[
    "fs::",
    "File::",
    "OpenOptions",
    "read_dir",
    "read_to_string",
    "canonicalize",
    "metadata(",
    "Instant",
    "SystemTime",
    "std::env",
    "Command::",
    "std::process",
    "stderr_tail(",
];

/// Literals the tool and the runtime may both spell: they name no part of the contract
/// between them (a C symbol each uses for its own purpose, and hex notation).
const SHARED_LITERALS: &[&str] = &["pthread_create", "0x"];

/// The tool's layers, bottom first: a file's rank is that of the longest prefix of its path
/// under `src/` listed here. A file may name files of its own rank or lower.
const LAYERS: &[(&str, u8)] = &[
    // What everything shares: evidence a process leaves, the report's types, their errors.
    ("fnv.rs", 0),
    ("evidence/", 0),
    ("model.rs", 0),
    ("model/", 0),
    ("exit_code.rs", 0),
    ("console.rs", 0),
    // The settings every stage reads.
    ("config.rs", 1),
    ("config/", 1),
    // Pure analysis: every verdict rule.
    ("analysis/", 2),
    // Processes started and evidence collected; decides nothing. The errors that stop a
    // run wrap the typed errors of this layer and the ones below.
    ("execution/", 3),
    ("errors.rs", 3),
    // Evidence loaded once processes have run, and judged; golden cases recorded.
    ("judging/", 4),
    // Renderers of the report.
    ("report/", 5),
    // Commands, the command line, and the crate's root that dispatches them.
    ("commands/", 6),
    ("cli.rs", 6),
    ("lib.rs", 7),
    ("main.rs", 7),
];

/// A source file read as code.
struct Source {
    /// Its path under `src/` (or `runtime/…`), `/`-separated.
    rel: String,
    /// Its module path from the crate root (`["analysis", "settling"]`).
    module: Vec<String>,
    /// Its code: comments, literal contents and test items blanked, line breaks kept.
    code: String,
    /// The contents of its string literals outside comments and test items, as written.
    literals: Vec<String>,
}

impl Source {
    fn new(rel: String, text: &str) -> Source {
        let module = module_of(&rel);
        let code = without_tests(&blank_comments_and_literals(text));
        // Blanking keeps every byte's place and each literal's quotes: the quotes left in
        // the code pair up, and the text between a pair is a literal's.
        let quotes: Vec<usize> = code.match_indices('"').map(|(at, _)| at).collect();
        let literals = quotes
            .chunks_exact(2)
            .map(|q| text.get(q[0] + 1..q[1]).unwrap_or_default().to_string())
            .collect();
        Source {
            rel,
            module,
            code,
            literals,
        }
    }

    fn lines_of_code(&self) -> usize {
        self.code.lines().filter(|l| !l.trim().is_empty()).count()
    }
}

/// The module path of a file from its path under the crate's root directory.
fn module_of(rel: &str) -> Vec<String> {
    let rel = rel.strip_prefix("runtime/").unwrap_or(rel);
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// Comments become spaces, as do the contents of string and character literals (their
/// quotes stay); line breaks are kept, so line counts and positions do not move.
fn blank_comments_and_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let keep_breaks = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(keep_breaks(b[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(b, i) {
            // r"…", r#"…"#, br"…": copy the opening, blank to the matching close.
            let open = b[i..].iter().position(|&x| x == b'"').unwrap() + 1;
            out.extend(&b[i..i + open]);
            i += open;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(keep_breaks(b[i]));
                i += 1;
            }
            out.extend(&b[i..(i + close.len()).min(b.len())]);
            i += close.len();
        } else if c == b'"' {
            out.push(b'"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    out.push(b' ');
                    i += 1;
                }
                out.push(keep_breaks(b[i]));
                i += 1;
            }
            if i < b.len() {
                out.push(b'"');
                i += 1;
            }
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{7f}'), or a lifetime ('a), left as it is.
            let len = char_literal_len(&b[i..]);
            if len > 0 {
                out.push(b'\'');
                out.extend(std::iter::repeat_n(b' ', len - 2));
                out.push(b'\'');
                i += len;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The number of `#` of a raw string literal starting at `i`, if one does.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    if ident_before {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&b'b') || b.get(j) == Some(&b'c') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&x| x == b'#').count();
    (b.get(j + hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a character literal at the start of `b`, 0 if it is not one.
fn char_literal_len(b: &[u8]) -> usize {
    match b.get(1) {
        Some(b'\\') => b[2..].iter().position(|&x| x == b'\'').map_or(0, |p| p + 3),
        Some(_) => {
            // One character (up to 4 bytes of UTF-8) and the closing quote.
            let width = match b[1] {
                x if x < 0x80 => 1,
                x if x >= 0xf0 => 4,
                x if x >= 0xe0 => 3,
                _ => 2,
            };
            if b.get(1 + width) == Some(&b'\'') {
                width + 2
            } else {
                0
            }
        }
        None => 0,
    }
}

/// Blanks every item marked `#[cfg(test)]`: from the attribute to the end of its item (the
/// matching `}` of its body, or its `;`).
fn without_tests(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(at) = code[from..].find(MARK).map(|p| p + from) {
        let end = item_end(code.as_bytes(), at + MARK.len());
        for x in &mut out[at..end] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
        from = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the item that starts at or after `i` ends (just past its body's `}` or its `;`).
fn item_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return i + 1,
            b'{' if depth == 0 => {
                let mut braces = 0;
                while i < b.len() {
                    match b[i] {
                        b'{' => braces += 1,
                        b'}' => {
                            braces -= 1;
                            if braces == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return b.len();
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// Every path the code names from `crate::`, `super::` or `self::`, made absolute (module
/// segments from the crate root). Use groups are expanded: `crate::a::{b, c::d}` names
/// `a::b` and `a::c::d`.
fn named_paths(source: &Source) -> Vec<Vec<String>> {
    let b = source.code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts_word = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|r| starts_word && b[i..].starts_with(r.as_bytes()));
        let Some(root) = root else {
            i += 1;
            continue;
        };
        // `mod.rs` and the crate root are their module; any other file's `super` is its
        // module's parent.
        let here = &source.module;
        let base: Vec<String> = match root {
            "crate::" => Vec::new(),
            "self::" => here.clone(),
            _ => {
                let mut m = here.clone();
                m.pop();
                m
            }
        };
        let (paths, next) = use_tree(b, i + root.len(), &base);
        found.extend(paths);
        i = next.max(i + 1);
    }
    found
}

/// Parses a path or use tree at `i` (after `crate::`); returns the full paths and where it
/// ended.
fn use_tree(b: &[u8], mut i: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix.to_vec();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) == Some(&b'{') {
            let mut out = Vec::new();
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return (out, i + 1);
                }
                let (paths, next) = use_tree(b, i, &path);
                out.extend(paths);
                if next <= i {
                    return (out, i + 1);
                }
                i = next;
            }
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i > start {
            let word = String::from_utf8_lossy(&b[start..i]).into_owned();
            if word != "self" {
                path.push(word);
            }
        }
        if b[i..].starts_with(b"::") {
            i += 2;
            continue;
        }
        return (vec![path], i);
    }
}

/// One crate's files and which of them each names.
struct Graph {
    files: Vec<Source>,
    /// For each file, the files it names (never itself).
    edges: Vec<BTreeSet<usize>>,
}

impl Graph {
    fn new(files: Vec<Source>) -> Graph {
        let by_module: BTreeMap<Vec<String>, usize> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let edges = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                named_paths(f)
                    .into_iter()
                    .filter_map(|path| {
                        // The longest prefix of the path that is a file's module.
                        (1..=path.len())
                            .rev()
                            .find_map(|n| by_module.get(&path[..n]).copied())
                    })
                    .filter(|&j| j != i)
                    .collect()
            })
            .collect();
        Graph { files, edges }
    }

    /// The groups of files that name each other round in a circle, each as one such circle
    /// (`a → b → a`), largest group first.
    fn cycles(&self) -> Vec<Vec<usize>> {
        let n = self.files.len();
        let mut out = Vec::new();
        let mut done = vec![false; n];
        for start in 0..n {
            if done[start] {
                continue;
            }
            // The files on a cycle through `start`: those it reaches that reach it back.
            let from = self.reach(start);
            let group: Vec<usize> = (0..n)
                .filter(|&j| j != start && from[j] && self.reach(j)[start])
                .collect();
            for &j in &group {
                done[j] = true;
            }
            if let Some(&back) = group.first() {
                let mut circle = self.path(start, back).unwrap_or_default();
                let home = self.path(back, start).unwrap_or_default();
                circle.extend(home.into_iter().skip(1));
                out.push(circle);
            }
        }
        out
    }

    /// Which files `from` reaches by one step or more.
    fn reach(&self, from: usize) -> Vec<bool> {
        let mut seen = vec![false; self.files.len()];
        let mut queue: VecDeque<usize> = self.edges[from].iter().copied().collect();
        while let Some(f) = queue.pop_front() {
            if !seen[f] {
                seen[f] = true;
                queue.extend(self.edges[f].iter().copied());
            }
        }
        seen
    }

    /// A shortest chain of files from `from` to `to`, both included.
    fn path(&self, from: usize, to: usize) -> Option<Vec<usize>> {
        let mut before: Vec<Option<usize>> = vec![None; self.files.len()];
        let mut queue = VecDeque::from([from]);
        let mut seen = vec![false; self.files.len()];
        seen[from] = true;
        while let Some(f) = queue.pop_front() {
            for &g in &self.edges[f] {
                if g == to {
                    let mut chain = vec![to, f];
                    let mut at = f;
                    while let Some(p) = before[at] {
                        chain.push(p);
                        at = p;
                    }
                    chain.reverse();
                    return Some(chain);
                }
                if !seen[g] {
                    seen[g] = true;
                    before[g] = Some(f);
                    queue.push_back(g);
                }
            }
        }
        None
    }

    /// For each file, the chains by which it reaches a file of a higher rank than its own:
    /// one shortest chain per (file, higher file) whose only climb is its last step.
    fn upward(&self, rank: impl Fn(&str) -> Option<u8>) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            let Some(mine) = rank(&f.rel) else { continue };
            let reached = self.reach(i);
            for (j, g) in self.files.iter().enumerate() {
                if !reached[j] || rank(&g.rel).is_none_or(|r| r <= mine) {
                    continue;
                }
                // Reported where it first climbs: a chain through a file already above is
                // that file's own finding.
                let chain = self.path(i, j).unwrap_or_default();
                let climbs_last = chain[..chain.len().saturating_sub(1)]
                    .iter()
                    .all(|&k| rank(&self.files[k].rel).is_some_and(|r| r <= mine));
                if climbs_last {
                    out.push(chain);
                }
            }
        }
        out
    }

    fn show(&self, chain: &[usize]) -> String {
        chain
            .iter()
            .map(|&i| self.files[i].rel.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    }
}

/// The rank of a tool file: that of the longest listed prefix of its path.
fn rank(rel: &str) -> Option<u8> {
    LAYERS
        .iter()
        .filter(|(prefix, _)| rel == *prefix || (prefix.ends_with('/') && rel.starts_with(prefix)))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, r)| r)
}

/// Everything wrong with one crate's files: cycles, upward paths (when ranked), files too
/// large.
fn findings(graph: &Graph, ranked: bool) -> Vec<String> {
    let mut wrong = Vec::new();
    for cycle in graph.cycles() {
        wrong.push(format!("cycle: {}", graph.show(&cycle)));
    }
    if ranked {
        for f in &graph.files {
            if rank(&f.rel).is_none() {
                wrong.push(format!("{}: no layer (add it to LAYERS)", f.rel));
            }
        }
        for chain in graph.upward(rank) {
            let (from, to) = (
                &graph.files[chain[0]].rel,
                &graph.files[*chain.last().unwrap()].rel,
            );
            wrong.push(format!(
                "upward: {} (layer {} reaches layer {})",
                graph.show(&chain),
                rank(from).unwrap_or(0),
                rank(to).unwrap_or(0)
            ));
        }
    }
    for f in &graph.files {
        let lines = f.lines_of_code();
        if lines > MAX_LINES {
            wrong.push(format!(
                "{}: {lines} lines of code (limit {MAX_LINES})",
                f.rel
            ));
        }
        let limit = match f.rel.starts_with("commands/") {
            true => MAX_COMMAND_FN_LINES,
            false => MAX_FN_LINES,
        };
        for (name, line, lines) in functions(&f.code) {
            if lines > limit {
                wrong.push(format!(
                    "{}:{line}: fn {name} spans {lines} lines (limit {limit})",
                    f.rel
                ));
            }
        }
    }
    wrong
}

/// Every function with a body in `code` (comments, literals and tests blanked): its name,
/// the line of its `fn` and how many lines it spans to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = code[i..].find("fn ") {
        let start = i + at;
        i = start + 3;
        if start > 0 && is_word(b[start - 1]) {
            continue;
        }
        let name_len = b[i..].iter().take_while(|&&c| is_word(c)).count();
        if name_len == 0 {
            continue;
        }
        let name = &code[i..i + name_len];
        // The body opens at the signature's first `{` outside brackets (`[u8; 4]`); a
        // declaration ends at a `;` there instead.
        let mut depth = 0i32;
        let open = (i..b.len()).find(|&k| {
            match b[k] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                _ => {}
            }
            depth == 0 && (b[k] == b'{' || b[k] == b';')
        });
        let Some(open) = open.filter(|&k| b[k] == b'{') else {
            continue;
        };
        let end = item_end(b, open);
        let line = code[..start].matches('\n').count() + 1;
        let lines = code[start..end.min(b.len())].matches('\n').count() + 1;
        out.push((name.to_string(), line, lines));
    }
    out
}

/// The files of modules declared under `#[cfg(test)]` (`#[cfg(test)] mod fuzz;`): test
/// code, left out like test items.
fn test_only_modules(files: &[(String, String)]) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for (rel, text) in files {
        let code = blank_comments_and_literals(text);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let item = item.strip_prefix("pub(crate) ").unwrap_or(item);
            let item = item.strip_prefix("pub ").unwrap_or(item);
            let Some(decl) = item.strip_prefix("mod ") else {
                continue;
            };
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if decl[name.len()..].trim_start().starts_with(';') {
                let mut module = module_of(rel);
                // A child of `a.rs` (not `mod.rs`) lives in `a/`, its module is still `a::x`.
                module.push(name);
                out.insert(module);
            }
        }
    }
    out
}

fn read_crate(root: &Path, label: &str) -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir)
            .expect("sources are readable")
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(root, &mut paths);
    paths.sort();
    assert!(!paths.is_empty(), "no sources under {}", root.display());
    let texts: Vec<(String, String)> = paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (
                format!("{label}{rel}"),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    let tests = test_only_modules(&texts);
    texts
        .into_iter()
        .map(|(rel, text)| Source::new(rel, &text))
        .filter(|s| !tests.contains(&s.module))
        .collect()
}

#[test]
fn the_tool_has_no_cycle_no_upward_path_and_no_large_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // main.rs is a crate of its own (the binary) that only calls `main_impl`.
    let files = read_crate(&src, "")
        .into_iter()
        .filter(|f| f.rel != "main.rs")
        .collect();
    let wrong = findings(&Graph::new(files), true);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_analysis_opens_no_file_and_reads_no_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong: Vec<String> = read_crate(&src, "")
        .iter()
        .filter(|f| f.rel.starts_with("analysis/"))
        .flat_map(|f| {
            ANALYSIS_FORBIDS
                .iter()
                .filter(|word| f.code.contains(*word))
                .map(|word| format!("{} names `{word}`", f.rel))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The modules of the analysis the execution may name: what to run next is the only
/// question it asks; every verdict is drawn after it has run.
const EXECUTION_ASKS: &[&str] = &["next"];

#[test]
fn the_execution_asks_the_analysis_only_what_to_run_next() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong: BTreeSet<String> = read_crate(&src, "")
        .iter()
        .filter(|f| f.rel.starts_with("execution/"))
        .flat_map(|f| {
            named_paths(f)
                .into_iter()
                .filter(|p| p.first().is_some_and(|m| m == "analysis"))
                .filter(|p| {
                    !p.get(1)
                        .is_some_and(|m| EXECUTION_ASKS.contains(&m.as_str()))
                })
                .map(|p| format!("{} names `crate::{}`", f.rel, p.join("::")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{}",
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The types a file's code declares (structs, enums, unions, traits and type aliases).
fn declared_types(code: &str) -> Vec<String> {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| matches!(w[0], "struct" | "enum" | "union" | "trait" | "type"))
        .filter(|w| w[1].starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|w| w[1].to_string())
        .collect()
}

#[test]
fn no_two_types_of_the_tool_share_a_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in read_crate(&src, "") {
        // A trait's associated type is declared again in each of its impls: one name of
        // one file counts once.
        let names: BTreeSet<String> = declared_types(&f.code).into_iter().collect();
        for name in names {
            by_name.entry(name).or_default().push(f.rel.clone());
        }
    }
    assert!(
        by_name.contains_key("TestReport"),
        "the check sees types at all"
    );
    let shared: Vec<String> = by_name
        .into_iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "one name, several types:\n{}",
        shared.join("\n")
    );
}

#[test]
fn no_name_of_the_contract_is_spelled_in_both_the_tool_and_the_runtime() {
    // Every file name, line word and variable the two exchange is spelled once, in
    // leakcheck-protocol; a literal both spell (with a letter or digit pair in it) is one
    // that drifted out.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spelled = |dir: &str, label: &str| -> BTreeSet<String> {
        read_crate(&manifest.join(dir), label)
            .into_iter()
            .flat_map(|f| f.literals)
            .filter(|l| l.chars().filter(|c| c.is_ascii_alphanumeric()).count() >= 2)
            .collect()
    };
    let tool = spelled("src", "");
    let runtime = spelled("runtime", "runtime/");
    let both: Vec<&String> = tool
        .intersection(&runtime)
        .filter(|l| !SHARED_LITERALS.contains(&l.as_str()))
        .collect();
    assert!(both.is_empty(), "spelled in both crates: {both:?}");
    // The check sees literals at all.
    assert!(
        runtime.iter().any(|l| l.contains("/proc/self/")),
        "{runtime:?}"
    );
}

#[test]
fn the_runtime_and_the_protocol_have_no_cycle_and_no_large_file() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, label) in [
        ("runtime", "runtime/"),
        ("../leakcheck-protocol/src", "protocol/"),
    ] {
        let wrong = findings(&Graph::new(read_crate(&manifest.join(dir), label)), false);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        Graph::new(
            files
                .iter()
                .map(|(rel, text)| Source::new(rel.to_string(), text))
                .collect(),
        )
    }

    #[test]
    fn literals_are_read_outside_comments_and_tests_as_written() {
        let text = "const A: &str = \"a \\\" b\"; // \"comment\"\n\
            #[cfg(test)]\n\
            const T: &str = \"only in tests\";\n\
            const B: &[u8] = b\"heap_v2/\";\n";
        let s = Source::new("model.rs".into(), text);
        assert_eq!(s.literals, ["a \\\" b", "heap_v2/"]);
    }

    #[test]
    fn code_leaves_out_comments_literals_and_test_items_wherever_they_are() {
        let text = "use crate::model::X; // crate::cli\n\
            /* crate::commands\n   still a comment */\n\
            const S: &str = \"crate::execution {\";\n\
            const C: char = '{';\n\
            fn f<'a>(x: &'a str) {}\n\
            #[cfg(test)]\n\
            const ONLY_IN_TESTS: usize = 1;\n\
            #[cfg(test)]\n\
            impl Foo {\n    fn g() { crate::report::x(); }\n}\n\
            fn h() { crate::analysis::y(); }\n";
        let s = Source::new("config.rs".into(), text);
        let paths = named_paths(&s);
        assert_eq!(
            paths,
            [
                vec!["model".to_string(), "X".into()],
                vec!["analysis".into(), "y".into()]
            ]
        );
        // `use`, const S, const C, fn f, fn h.
        assert_eq!(s.lines_of_code(), 5, "{}", s.code);
    }

    #[test]
    fn groups_super_and_self_resolve_to_files() {
        let g = graph(&[
            ("analysis/mod.rs", "pub mod a; pub mod b;"),
            (
                "analysis/a.rs",
                "use super::b::Thing; use crate::{model::{M, N}, evidence};",
            ),
            ("analysis/b.rs", "pub struct Thing;"),
            ("model.rs", ""),
            ("evidence.rs", ""),
        ]);
        let names: Vec<&str> = g.edges[1]
            .iter()
            .map(|&j| g.files[j].rel.as_str())
            .collect();
        assert_eq!(names, ["analysis/b.rs", "model.rs", "evidence.rs"]);
    }

    #[test]
    fn a_planted_cycle_is_reported() {
        let g = graph(&[
            ("analysis/a.rs", "use crate::analysis::b;"),
            ("analysis/b.rs", "use crate::analysis::c::X;"),
            ("analysis/c.rs", "fn f() { crate::analysis::a::g() }"),
            ("analysis/d.rs", "use crate::analysis::a;"),
        ]);
        let wrong = findings(&g, false);
        assert_eq!(
            wrong,
            ["cycle: analysis/a.rs → analysis/b.rs → analysis/c.rs → analysis/a.rs"]
        );
    }

    #[test]
    fn a_planted_upward_path_is_reported_direct_and_through_a_lower_file() {
        let g = graph(&[
            ("model.rs", "use crate::console::E;"),
            ("console.rs", "use crate::execution::runtime::R;"),
            ("execution/runtime.rs", "use crate::commands::test;"),
            ("commands/test.rs", ""),
            ("analysis/x.rs", "use crate::model::M;"),
        ]);
        let wrong = findings(&g, true);
        assert_eq!(
            wrong,
            [
                "upward: model.rs → console.rs → execution/runtime.rs (layer 0 reaches layer 3)",
                "upward: console.rs → execution/runtime.rs (layer 0 reaches layer 3)",
                "upward: execution/runtime.rs → commands/test.rs (layer 3 reaches layer 6)",
                "upward: analysis/x.rs → model.rs → console.rs → execution/runtime.rs (layer 2 reaches layer 3)",
            ]
        );
    }

    #[test]
    fn a_long_function_is_reported_with_the_limit_of_its_layer() {
        let body = |n: usize| format!("fn f() {{\n{}}}\n", "    x();\n".repeat(n - 2));
        let trait_decl = "trait T {\n    fn g(&self, x: [u8; 4]);\n}\n";
        let command = format!("{trait_decl}{}", body(MAX_COMMAND_FN_LINES + 1));
        let analysis = format!("{}{}", body(MAX_FN_LINES), body(MAX_FN_LINES + 1));
        let tested = format!("#[cfg(test)]\nmod tests {{\n{}}}\n", body(300));
        let g = graph(&[
            ("commands/c.rs", &command),
            ("analysis/a.rs", &analysis),
            ("report/r.rs", &tested),
        ]);
        assert_eq!(
            findings(&g, true),
            [
                "commands/c.rs:4: fn f spans 61 lines (limit 60)".to_string(),
                format!(
                    "analysis/a.rs:{}: fn f spans 101 lines (limit 100)",
                    MAX_FN_LINES + 1
                ),
            ]
        );
    }

    #[test]
    fn declared_types_are_read_from_code_only() {
        let text = "pub struct A;\nenum B { X }\n// struct C\ntype D<'a> = &'a str;\nimpl E for A {}\n#[cfg(test)]\nstruct T;\n";
        let s = Source::new("model.rs".into(), text);
        assert_eq!(declared_types(&s.code), ["A", "B", "D"]);
    }

    #[test]
    fn a_planted_large_file_and_an_unranked_one_are_reported() {
        let big = "fn f() {}\n".repeat(MAX_LINES + 1);
        let tested = format!("fn f() {{}}\n#[cfg(test)]\nmod tests {{\n{big}}}\n");
        let g = graph(&[
            ("model.rs", &big),
            ("evidence/mod.rs", &tested),
            ("stray.rs", ""),
        ]);
        let wrong = findings(&g, true);
        assert_eq!(
            wrong,
            [
                "stray.rs: no layer (add it to LAYERS)".to_string(),
                format!(
                    "model.rs: {} lines of code (limit {MAX_LINES})",
                    MAX_LINES + 1
                ),
            ]
        );
    }
}
