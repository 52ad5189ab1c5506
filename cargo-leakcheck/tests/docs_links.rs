//! Every relative link in the repository's Markdown files resolves: the file (or directory)
//! it names exists, and its `#anchor`, if any, is a heading of that file as GitHub slugs
//! headings. Links with a scheme (`https://`, `mailto:`) are skipped: the suite runs without
//! network. A guide whose links rot sends a newcomer nowhere, and no reviewer clicks them all.

use std::collections::HashSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The repository root: this package's parent directory.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the package lives in the workspace")
        .to_path_buf()
}

/// Every `*.md` file under `dir`, leaving out build output (`target`), version control and
/// hidden directories, whose files are not part of the documentation.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if name == "target" || name.starts_with('.') {
                continue;
            }
            markdown_files(&path, out);
        } else if kind.is_file() && name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if let Some(c) = marker {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => {
                        fence = Some((c, run));
                        continue;
                    }
                    Some((open, len)) if open == c && run >= len => {
                        fence = None;
                        continue;
                    }
                    _ => {}
                }
            }
        }
        if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line with its inline code spans blanked, so that `[a](b)` written as code is no link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|c| **c == '`').count();
            // The span ends at the next run of exactly as many backticks.
            let mut j = i + run;
            let mut end = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let r = chars[j..].iter().take_while(|c| **c == '`').count();
                    if r == run {
                        end = Some(j + r);
                        break;
                    }
                    j += r;
                } else {
                    j += 1;
                }
            }
            match end {
                Some(e) => {
                    out.extend(std::iter::repeat_n(' ', e - i));
                    i = e;
                }
                None => {
                    out.extend(&chars[i..i + run]);
                    i += run;
                }
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// The targets of the inline links and images on one line (`[text](target "title")`), and of
/// a reference definition (`[name]: target`).
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(close) = trimmed.find("]:") {
            let rest = trimmed[close + 2..].trim();
            if let Some(target) = rest.split_whitespace().next() {
                out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
            }
            return out;
        }
    }
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(at) = line[i..].find("](") {
        let start = i + at + 2;
        // The target runs to the matching `)`, parentheses inside it balanced.
        let mut depth = 1;
        let mut end = start;
        while end < bytes.len() {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        let inner = line[start..end.min(line.len())].trim();
        let target = if let Some(stripped) = inner.strip_prefix('<') {
            stripped.split('>').next().unwrap_or_default()
        } else {
            inner.split_whitespace().next().unwrap_or_default()
        };
        if !target.is_empty() {
            out.push(target.to_string());
        }
        i = end.min(line.len());
    }
    out
}

/// GitHub's anchor for a heading: its text as rendered (code spans' contents kept, a link's
/// text kept), lowercased, punctuation other than `-` and `_` dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    // Keep a link's text, drop its target.
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](") {
            Some(mid) => {
                let after = open + mid + 2;
                let close = rest[after..]
                    .find(')')
                    .map_or(rest.len(), |c| after + c + 1);
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + mid]);
                rest = &rest[close..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings, a repeated one numbered as GitHub numbers it
/// (`name`, `name-1`, `name-2`).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || line.len() - trimmed.len() > 3 {
            continue;
        }
        let Some(title) = trimmed[hashes..].strip_prefix(' ') else {
            continue;
        };
        // An ATX heading may end in a closing run of `#`s.
        let title = title.trim().trim_end_matches('#').trim();
        let base = slug(title);
        let mut name = base.clone();
        let mut n = 0;
        while seen.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        seen.insert(name);
    }
    seen
}

/// `%XX` escapes decoded, as a browser resolves a link's path.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Every broken relative link of one Markdown file, as `file:line: target: why`. `read`
/// gives the text of another Markdown file a link points into (for its anchors).
fn broken_links(
    root: &Path,
    file: &Path,
    text: &str,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Vec<String> {
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut out = Vec::new();
    for (number, line) in prose_lines(text) {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else if let Some(from_root) = path.strip_prefix('/') {
                root.join(percent_decoded(from_root))
            } else {
                file.parent().unwrap_or(root).join(percent_decoded(path))
            };
            let resolved = normalized(&resolved);
            let Some(text) = (if resolved == file {
                Some(text.to_string())
            } else if resolved.is_file() || resolved.is_dir() {
                read(&resolved)
            } else {
                out.push(format!("{shown}:{number}: `{target}`: no such file"));
                continue;
            }) else {
                if anchor.is_some() {
                    out.push(format!(
                        "{shown}:{number}: `{target}`: an anchor into a file that is not Markdown"
                    ));
                }
                continue;
            };
            if let Some(anchor) = anchor {
                if !anchors(&text).contains(&percent_decoded(anchor)) {
                    out.push(format!(
                        "{shown}:{number}: `{target}`: no heading with the anchor `#{anchor}`"
                    ));
                }
            }
        }
    }
    out
}

/// The text of a Markdown file a link points into; `None` for anything else (a directory, a
/// source file), whose anchors are not checked.
fn read_markdown(path: &Path) -> Option<String> {
    if path.extension().is_some_and(|e| e == "md") {
        fs::read_to_string(path).ok()
    } else {
        None
    }
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    for expected in [
        "README.md",
        "ARCHITECTURE.md",
        "CHANGELOG.md",
        "docs/SUMMARY.md",
    ] {
        assert!(
            files.contains(&root.join(expected)),
            "{expected} is among the files checked: {files:?}"
        );
    }
    let mut broken = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        broken.extend(broken_links(&root, file, &text, &read_markdown));
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the docs:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The checker itself: it must report what it exists to report, or a broken guide passes.
#[test]
fn a_missing_file_or_heading_is_reported() {
    let root = repo_root();
    let file = root.join("docs/SUMMARY.md");
    let text = "\
# Title

## Two words, `code` and punctuation!

[fine](#title) [fine too](#two-words-code-and-punctuation) [readme](../README.md)
[web](https://example.invalid/nothing) `[code](nowhere.md)`

```text
[in a fence](nowhere.md)
```

[gone](no-such-file.md) [no heading](#no-such-heading) [other file](../README.md#no-such-heading)
[reference]: missing/also-missing.md
";
    let broken = broken_links(&root, &file, text, &read_markdown);
    assert_eq!(
        broken,
        [
            "docs/SUMMARY.md:12: `no-such-file.md`: no such file",
            "docs/SUMMARY.md:12: `#no-such-heading`: no heading with the anchor `#no-such-heading`",
            "docs/SUMMARY.md:12: `../README.md#no-such-heading`: no heading with the anchor `#no-such-heading`",
            "docs/SUMMARY.md:13: `missing/also-missing.md`: no such file",
        ],
    );
}

#[test]
fn headings_get_githubs_anchors() {
    assert_eq!(
        slug("Configuration: `leakcheck.toml`"),
        "configuration-leakchecktoml"
    );
    assert_eq!(
        slug("Every test judged: evidence ends the runs, not the clock"),
        "every-test-judged-evidence-ends-the-runs-not-the-clock"
    );
    assert_eq!(
        slug("`report.json` schema (version 1)"),
        "reportjson-schema-version-1"
    );
    assert_eq!(
        slug("Why not [LeakSanitizer](x.md)"),
        "why-not-leaksanitizer"
    );
    assert_eq!(slug("snake_case and-dash"), "snake_case-and-dash");
    let repeated = anchors("# A\n## A\n```\n# A\n```\n### A ##\n");
    let expected: HashSet<String> = ["a", "a-1", "a-2"].map(String::from).into();
    assert_eq!(repeated, expected);
}
