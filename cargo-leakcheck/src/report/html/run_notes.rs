//! What the page says about the run as a whole, after its tests: memory kept for the process
//! lifetime by root, the tests not run, and the processes the tests started.

use crate::model::{human_bytes, Report, StackKind};
use crate::report::markup::escape as esc;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Memory kept for the process lifetime, by the root that holds it, over all tests.
pub(super) fn lifetime_section(h: &mut String, report: &Report) {
    let mut by_root: BTreeMap<String, (u64, Vec<String>)> = BTreeMap::new();
    for t in &report.tests {
        for st in t
            .stacks
            .iter()
            .filter(|s| matches!(s.kind, StackKind::OneTime | StackKind::ProcessLifetime))
        {
            let root = st
                .retained_by
                .as_ref()
                .map_or_else(|| "(no root found)".to_string(), |r| r.root.clone());
            let e = by_root.entry(root).or_default();
            e.0 += st.bytes;
            let name = format!("{} {}", t.binary, t.name);
            if !e.1.contains(&name) {
                e.1.push(name);
            }
        }
    }
    if by_root.is_empty() {
        return;
    }
    h.push_str("<section id=\"lifetime\">\n<h2>Kept for the process lifetime, by root</h2>\n<table>\n<thead><tr><th>held by</th><th>bytes</th><th>tests</th></tr></thead>\n<tbody>\n");
    let mut rows: Vec<_> = by_root.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
    for (root, (bytes, tests)) in rows {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&root),
            human_bytes(bytes),
            esc(&tests.join(", "))
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

pub(super) fn not_run_section(h: &mut String, report: &Report) {
    let Some(n) = &report.not_run else { return };
    let _ = write!(
        h,
        "<section id=\"not-run\">\n<h2>Not run: {}</h2>\n<p>{}</p>\n<ul>\n",
        crate::model::count_of(n.count as u64, "test", "tests"),
        esc(&n.why)
    );
    for t in &n.tests {
        let _ = writeln!(h, "<li>{}</li>", esc(t));
    }
    h.push_str("</ul>\n</section>\n");
}

/// The processes the tests started: how many were checked, and which were not and why.
pub(super) fn processes_section(h: &mut String, report: &Report) {
    let lines = crate::report::judged::processes_lines(report);
    if lines.is_empty() {
        return;
    }
    h.push_str("<section id=\"processes\">\n<h2>Processes the tests started</h2>\n<ul>\n");
    for line in lines {
        let _ = writeln!(h, "<li>{}</li>", esc(&line));
    }
    h.push_str("</ul>\n</section>\n");
}
