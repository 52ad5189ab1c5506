//! `index.html`: one self-contained page per run (no network: its style and script are
//! inline, and it points at the run's own flame graphs and plots by relative paths, so it
//! works from a downloaded CI artifact opened with `file://`).
//!
//! The page is rendered here, whole: every test is a row of one table, failing ones first;
//! a failing or unsettled test's row expands (`<details>`, no script needed) to its stacks
//! with `file:line` and the source line, who holds them, a chart of what its runs retained
//! and its flame graph. A little script filters the rows by verdict and by name, and keeps
//! the filter in the address (`#verdict=leak&q=cache`), so a filtered page can be linked
//! (`&open=NAME` opens one test's details).
//! Everything that differs from run to run without the code changing (the date, the times)
//! is outside `<main>`, or in `data-` attributes and cells marked `time`.

use crate::analysis::frames::from_identifying_frame;
use crate::errors::ExitCode;
use crate::model::{
    human_bytes, Baseline, Change, FrameReport, GrowthReport, Method, Report, RetainedBy,
    StackKind, StackReport, TaskReport, TestReport, Verdict,
};
use crate::report::markup::escape as esc;
use crate::report::text::{frame_text, held_text, is_harness_frame, live_tasks_text, task_text};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::Path;

mod lost;
mod run_notes;

/// What the page says about the run beyond the report.
pub struct Page<'a> {
    /// The command, as typed (`cargo leakcheck test --workspace`).
    pub command: &'a str,
    /// When the run ended, as text (UTC).
    pub date: String,
    /// How long each test's process ran, seconds, by (package, binary, name), when known.
    pub durations: &'a HashMap<(String, String, String), f64>,
}

/// Stacks shown per expanded test at most (the rest are in report.json).
const STACKS_SHOWN: usize = 10;
/// Frames shown per stack at most.
const FRAMES_SHOWN: usize = 8;

/// The order tests are listed in: what needs a look first.
fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::Leak => 0,
        Verdict::Failed => 1,
        Verdict::Crashed => 2,
        Verdict::Timeout => 3,
        Verdict::Unanalysable => 4,
        Verdict::Error => 5,
        Verdict::Unsettled => 6,
        Verdict::Clean => 7,
    }
}

/// Renders the page of `report`; `root` is the workspace root (paths are shown relative to
/// it, and source lines read from under it).
pub fn render(report: &Report, page: &Page, root: &Path) -> String {
    let mut h = String::with_capacity(64 * 1024 + report.tests.len() * 512);
    let crates: Vec<&str> = {
        let mut c: Vec<&str> = report
            .tests
            .iter()
            .map(|t| t.package.as_str())
            .chain(report.benches.iter().map(|b| b.package.as_str()))
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let title = format!("cargo-leakcheck: {}", crates.join(", "));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(&title)
    );
    let _ = write!(
        h,
        "<header>\n<h1>{}</h1>\n<p id=\"meta\"><code>{}</code> · {} · cargo-leakcheck {}</p>\n</header>\n",
        esc(&title),
        esc(page.command),
        esc(&page.date),
        env!("CARGO_PKG_VERSION")
    );
    h.push_str(&main_element(report, page, root));
    let _ = write!(h, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    h
}

/// The page's `<main>` element: everything it says about the run's results (without the
/// style, the script and the header with the command and the date).
pub fn main_element(report: &Report, page: &Page, root: &Path) -> String {
    let mut sources = Sources::new(root);
    let mut h = String::with_capacity(32 * 1024 + report.tests.len() * 512);
    h.push_str("<main>\n");
    // The gate's answer (`Report::exit_code`), as the exit code, JUnit and the annotations
    // give it.
    let code = report.exit_code();
    let _ = writeln!(
        h,
        "<p id=\"outcome\" class=\"{}\">The run {}: exit code {} ({})</p>",
        if code == ExitCode::Success {
            "o-passes"
        } else {
            "o-fails"
        },
        if code == ExitCode::Success {
            "passes"
        } else {
            "fails"
        },
        code as i32,
        code.meaning()
    );
    if let Some(b) = &report.baseline {
        baseline_section(&mut h, b);
    }
    if !report.tests.is_empty() || report.benches.is_empty() {
        tests_section(&mut h, report, page, root, &mut sources);
    }
    run_notes::lifetime_section(&mut h, report);
    run_notes::not_run_section(&mut h, report);
    run_notes::processes_section(&mut h, report);
    if !report.benches.is_empty() {
        benches_section(&mut h, report, root, &mut sources);
    }
    if !report.notes.is_empty() {
        h.push_str("<section id=\"notes\">\n<h2>Notes</h2>\n<ul>\n");
        for n in &report.notes {
            let _ = writeln!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n</section>\n");
    }
    h.push_str("</main>\n");
    h
}

/// The page of `cargo leakcheck diff`: the headline (what grew, in all), the stacks that
/// grew with their frames from the program's own code and source lines, and the flame graph
/// (`growth.svg` beside the page).
pub fn render_diff(
    growth: &crate::analysis::heap_growth::Growth,
    headline: &str,
    page: &Page,
    root: &Path,
) -> String {
    let mut sources = Sources::new(root);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>cargo-leakcheck diff</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>cargo-leakcheck diff</h1>\n<p id=\"meta\"><code>{}</code> · {} · cargo-leakcheck {}</p>\n</header>\n<main>\n<p><b>{}</b></p>\n",
        esc(page.command),
        esc(&page.date),
        env!("CARGO_PKG_VERSION"),
        esc(headline)
    );
    h.push_str("<section id=\"stacks\">\n<h2>Stacks that grew</h2>\n");
    for st in growth.stacks.iter().take(50) {
        let _ = write!(
            h,
            "<div class=\"stack k-leak\"><p class=\"stackhead\"><b>+{}</b> in {}</p><ol class=\"frames\">",
            human_bytes(st.bytes),
            crate::model::count_of(st.objects, "object", "objects")
        );
        for f in from_identifying_frame(&st.frames, root)
            .iter()
            .take(FRAMES_SHOWN)
        {
            let _ = write!(h, "<li><code>{}</code>", esc(&frame_text(f, root)));
            if let Some(line) = sources.line(f) {
                let _ = write!(h, "<pre class=\"src\">{}</pre>", esc(line.trim_end()));
            }
            h.push_str("</li>");
        }
        h.push_str("</ol></div>\n");
    }
    if growth.stacks.len() > 50 {
        let _ = writeln!(
            h,
            "<p>… and {} more stacks in growth.json</p>",
            growth.stacks.len() - 50
        );
    }
    h.push_str("</section>\n<figure class=\"flamegraph\"><object type=\"image/svg+xml\" data=\"growth.svg\"></object><figcaption>flame graph: <a href=\"growth.svg\">growth.svg</a></figcaption></figure>\n</main>\n</body>\n</html>\n");
    h
}

/// Writes the page to `out_dir/index.html`.
pub fn write(report: &Report, page: &Page, out_dir: &Path, root: &Path) -> std::io::Result<()> {
    std::fs::write(
        out_dir.join(crate::model::PAGE_FILE),
        render(report, page, root),
    )
}

fn tests_section(h: &mut String, report: &Report, page: &Page, root: &Path, sources: &mut Sources) {
    let mut counts: BTreeMap<u8, (Verdict, usize)> = BTreeMap::new();
    for t in &report.tests {
        counts.entry(rank(t.verdict)).or_insert((t.verdict, 0)).1 += 1;
    }
    let _ = write!(
        h,
        "<section id=\"tests-section\">\n<h2>{}</h2>\n<nav id=\"filters\">\n<button type=\"button\" class=\"filter on\" data-verdict=\"\">all {}</button>\n",
        crate::model::count_of(report.tests.len() as u64, "test", "tests"),
        report.tests.len()
    );
    for (verdict, n) in counts.values() {
        let _ = writeln!(
            h,
            "<button type=\"button\" class=\"filter v-{v}\" data-verdict=\"{v}\">{v} {n}</button>",
            v = verdict.as_str()
        );
    }
    h.push_str("<input id=\"search\" type=\"search\" placeholder=\"search by name\" aria-label=\"search by name\">\n<span id=\"shown\"></span>\n</nav>\n");
    h.push_str("<table id=\"tests\">\n<thead><tr><th>verdict</th><th>test</th><th>retained</th><th>growth per run</th><th>judged by</th><th class=\"time\">time</th></tr></thead>\n<tbody>\n");
    let mut order: Vec<&TestReport> = report.tests.iter().collect();
    order.sort_by(|a, b| {
        (rank(a.verdict), &a.package, &a.binary, &a.name).cmp(&(
            rank(b.verdict),
            &b.package,
            &b.binary,
            &b.name,
        ))
    });
    for t in order {
        test_row(h, t, report, page, root, sources);
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

fn test_row(
    h: &mut String,
    t: &TestReport,
    report: &Report,
    page: &Page,
    root: &Path,
    sources: &mut Sources,
) {
    let v = t.verdict.as_str();
    let full = format!("{} {}", t.binary, t.name);
    let _ = write!(
        h,
        "<tr class=\"test\" data-verdict=\"{v}\" data-name=\"{}\"><td><span class=\"badge v-{v}\">{v}</span>",
        esc(&full)
    );
    gate_and_change(h, t, report);
    h.push_str("</td><td>");
    let expands = t.verdict != Verdict::Clean;
    if expands {
        let _ = write!(
            h,
            "<details><summary><span class=\"bin\">{}</span> {}</summary>",
            esc(&t.binary),
            esc(&t.name)
        );
        test_details(h, t, root, sources);
        h.push_str("</details>");
    } else {
        let _ = write!(
            h,
            "<span class=\"bin\">{}</span> {}",
            esc(&t.binary),
            esc(&t.name)
        );
    }
    let retained = match (t.verdict, &t.first_run_retained) {
        (Verdict::Leak, _) => human_bytes(t.retained_bytes),
        (_, Some(r)) if r.bytes > 0 => format!("({} own run)", human_bytes(r.bytes)),
        _ => String::new(),
    };
    let time = page
        .durations
        .get(&(t.package.clone(), t.binary.clone(), t.name.clone()))
        .map(|s| format!("{s:.2} s"))
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num time\">{}</td></tr>",
        esc(&retained),
        esc(&growth_cell(t)),
        esc(&judged_cell(t)),
        esc(&time)
    );
}

/// Beside a test's verdict: whether it fails the run where the verdict alone does not say,
/// and how it changed against the base run.
fn gate_and_change(h: &mut String, t: &TestReport, report: &Report) {
    // Where the verdict alone does not say whether it fails the run, the gate does.
    let fails = report.fails(t);
    if t.verdict == Verdict::Unsettled && fails {
        h.push_str(" <span class=\"gate\" title=\"unsettled-fails\">fails the run</span>");
    } else if t.verdict == Verdict::Leak && !fails {
        h.push_str(" <span class=\"gate\" title=\"--fail-on new\">does not fail the run</span>");
    }
    if let Some(c) = report.change_of(t) {
        let _ = write!(
            h,
            " <span class=\"change c-{0}\" title=\"{1}\">{0}</span>",
            c.change.as_str(),
            esc(&c.detail)
        );
    }
}

/// A test's growth per run: its failing stacks' bytes, and its first failing collection's
/// entries.
fn growth_cell(t: &TestReport) -> String {
    let growth = per_run_growth(t)
        .map(|g| format!("+{}", human_bytes(g)))
        .unwrap_or_default();
    let Some(c) = t.collections.iter().find(|c| c.fails) else {
        return growth;
    };
    let last = c.growth_per_run.last().copied().unwrap_or(0);
    let entries = crate::report::text::length_count(c.collection.unit, last);
    match growth.is_empty() {
        true => format!("+{entries}"),
        false => format!("{growth}, +{entries}"),
    }
}

/// How a test was judged: the method, its extra runs, why on one run, what was drained.
fn judged_cell(t: &TestReport) -> String {
    let method = method_name(t.method);
    let runs = |n: u32| crate::model::count_of(u64::from(n), "extra run", "extra runs");
    let judged = match (t.extra_runs.in_all, t.extra_runs.made) {
        (0, _) => method.to_string(),
        (all, made) if t.method == Method::Stacks && all > made => {
            format!("{method}, {} ({made} with stacks)", runs(all))
        }
        (all, _) => format!("{method}, {}", runs(all)),
    };
    let judged = match crate::report::judged::way(t)
        .filter(|w| w.on_one_run())
        .and(crate::report::judged::one_run_reason(t))
    {
        Some(why) => format!("{judged}; one run: {why}"),
        None => judged,
    };
    match &t.drained {
        Some(d) => format!(
            "{judged}; drained {} of {} garbage first",
            crate::model::count_of(d.objects, "object", "objects"),
            d.runtime
        ),
        None => judged,
    }
}

/// What the failing stacks grew by on the last extra run, in all.
fn per_run_growth(t: &TestReport) -> Option<u64> {
    let last: i64 = t
        .stacks
        .iter()
        .filter(|s| s.fails)
        .filter_map(|s| s.growth_per_run.last())
        .map(|g| g.bytes)
        .sum();
    (t.verdict == Verdict::Leak && last > 0).then_some(last as u64)
}

fn test_details(h: &mut String, t: &TestReport, root: &Path, sources: &mut Sources) {
    h.push_str("<div class=\"detail\">");
    if let Some(m) = &t.message {
        let _ = write!(h, "<p class=\"message\">{}</p>", esc(m));
    }
    let _ = write!(h, "<p class=\"exit\">{}</p>", esc(&t.exit));
    if let Some(chart) = runs_chart(t) {
        h.push_str(&chart);
    }
    if !t.left_processes.is_empty() {
        let _ = write!(
            h,
            "<p class=\"left\">left running, killed: {}</p>",
            esc(&t.left_processes.join(", "))
        );
    }
    if !t.processes.is_empty() {
        let listed: Vec<String> = (t.processes.iter())
            .map(|p| match &p.not_checked {
                None => format!("{} ×{} (checked when they ended)", p.name, p.started),
                Some(why) => format!("{} ×{} (not checked: {why})", p.name, p.started),
            })
            .collect();
        let _ = write!(
            h,
            "<p class=\"processes\">processes it started: {}</p>",
            esc(&listed.join("; "))
        );
    }
    for c in t.collections.iter().take(STACKS_SHOWN) {
        collection_block(h, c, root, sources);
    }
    let mut stacks: Vec<&StackReport> = t.stacks.iter().collect();
    stacks.sort_by_key(|s| (!s.fails, std::cmp::Reverse(s.bytes)));
    let shown = t.shown_stacks(stacks.iter().copied(), STACKS_SHOWN);
    for st in &shown {
        stack_block(h, st, root, sources);
    }
    if stacks.len() > shown.len() {
        let _ = write!(
            h,
            "<p>… and {} more stacks in report.json</p>",
            stacks.len() - shown.len()
        );
    }
    if let Some(svg) = &t.artifacts.flamegraph {
        let _ = write!(
            h,
            "<figure class=\"flamegraph\"><object type=\"image/svg+xml\" data=\"{0}\"></object><figcaption>flame graph: <a href=\"{0}\">{0}</a></figcaption></figure>",
            esc(svg)
        );
    }
    h.push_str("</div>");
}

fn stack_block(h: &mut String, st: &StackReport, root: &Path, sources: &mut Sources) {
    let kind = kind_name(st.kind);
    let status = if st.fails {
        "fails"
    } else if st.allowed.is_some() {
        "allowed"
    } else {
        "listed"
    };
    let amount = match st.memory.label() {
        None => format!(
            "<b>{}</b> in {}",
            human_bytes(st.bytes),
            crate::model::count_of(st.objects, "object", "objects")
        ),
        Some(label) => format!(
            "<b>{}</b> of {label} in {}",
            human_bytes(st.bytes),
            crate::model::count_of(st.objects, "mapping", "mappings")
        ),
    };
    let _ = write!(
        h,
        "<div class=\"stack k-{kind}\"><p class=\"stackhead\">{amount} · {kind} · {status}",
    );
    if let Some(r) = &st.reason {
        let _ = write!(h, " · {}", esc(r));
    }
    h.push_str("</p>");
    frames_list(h, &st.frames, root, sources);
    if let Some(task) = &st.task {
        let summary = task_text(st, root).unwrap_or_default();
        task_block(h, task, &summary, root, sources);
    }
    if let Some(held) = &st.retained_by {
        held_block(h, held, root, sources);
    }
    if let Some(lost) = &st.unreachable {
        lost::block(h, lost, root);
    } else if let Some(text) = (st.process.is_some())
        .then(|| crate::report::text::unreachable_text(st, root))
        .flatten()
    {
        let _ = write!(h, "<p class=\"lost\">{}</p>", esc(&text));
    }
    h.push_str("</div>");
}

/// One of the program's own collections whose length the runs changed: where it is
/// defined (with that line), its length after each run, and the call that last made its
/// buffer grow.
fn collection_block(
    h: &mut String,
    c: &crate::model::CollectionReport,
    root: &Path,
    sources: &mut Sources,
) {
    let kind = kind_name(c.kind);
    let status = if c.fails {
        "fails"
    } else if c.allowed.is_some() {
        "allowed"
    } else {
        "listed"
    };
    let _ = write!(
        h,
        "<div class=\"stack collection k-{kind}\"><p class=\"stackhead\"><b>collection</b> · {kind} · {status}"
    );
    if let Some(r) = &c.reason {
        let _ = write!(h, " · {}", esc(r));
    }
    let _ = write!(
        h,
        "</p><p class=\"what\">{}</p>",
        esc(&crate::report::text::collection_text(c, root))
    );
    let definition = FrameReport {
        function: c.collection.root.clone(),
        file: c.collection.file.clone(),
        line: c.collection.line,
        inlined: false,
    };
    if let Some(line) = sources.line(&definition) {
        let _ = write!(h, "<pre class=\"src\">{}</pre>", esc(line.trim_end()));
    }
    let lengths: Vec<String> = c
        .lengths
        .iter()
        .map(|l| if *l < 0 { "?".into() } else { l.to_string() })
        .collect();
    let _ = write!(
        h,
        "<p class=\"lengths\">length after its own run and each extra run: {}</p>",
        esc(&lengths.join(" → "))
    );
    if let Some(p) = &c.problem {
        let _ = write!(h, "<p class=\"message\">{}</p>", esc(p));
    }
    if !c.allocated_at.is_empty() {
        h.push_str("<p>its buffer last grown at:</p>");
        frames_list(h, &c.allocated_at, root, sources);
    }
    h.push_str("</div>");
}

/// A stack's frames from the first of the program's own to the harness's, each with its
/// source line.
fn frames_list(h: &mut String, frames: &[FrameReport], root: &Path, sources: &mut Sources) {
    h.push_str("<ol class=\"frames\">");
    for f in from_identifying_frame(frames, root)
        .iter()
        .take_while(|f| !is_harness_frame(f))
        .take(FRAMES_SHOWN)
    {
        let _ = write!(h, "<li><code>{}</code>", esc(&frame_text(f, root)));
        if let Some(line) = sources.line(f) {
            let _ = write!(h, "<pre class=\"src\">{}</pre>", esc(line.trim_end()));
        }
        h.push_str("</li>");
    }
    h.push_str("</ol>");
}

/// Who holds a stack's objects; a task that does, by its spawn line.
fn held_block(h: &mut String, held: &RetainedBy, root: &Path, sources: &mut Sources) {
    h.push_str("<div class=\"held\">");
    let mut lines = held_text(held, root).into_iter();
    if let Some(t) = &held.task {
        // The first line names the task; the page shows it with its spawn line.
        let head = lines.next().unwrap_or_default();
        task_block(h, &t.task, &head, root, sources);
    }
    for line in lines {
        let _ = write!(h, "<div>{}</div>", esc(line.trim()));
    }
    h.push_str("</div>");
}

/// A task, in words (`text`), with its spawn site linked to the source file and the
/// spawning line beside it.
fn task_block(h: &mut String, task: &TaskReport, text: &str, root: &Path, sources: &mut Sources) {
    let site = frame_text(&task.spawned_at, root);
    let linked = match source_link(&task.spawned_at, root) {
        Some(href) => format!("<a href=\"{}\"><code>{}</code></a>", esc(&href), esc(&site)),
        None => format!("<code>{}</code>", esc(&site)),
    };
    let words = esc(text.trim()).replacen(&esc(&site), &linked, 1);
    let _ = write!(h, "<div class=\"task\">{words}");
    if let Some(line) = sources.line(&task.spawned_at) {
        let _ = write!(h, "<pre class=\"src\">{}</pre>", esc(line.trim_end()));
    }
    h.push_str("</div>");
}

/// A `file://` link to a frame's source line, when its file is known.
fn source_link(f: &FrameReport, root: &Path) -> Option<String> {
    let file = Path::new(f.file.as_deref()?);
    let path = if file.is_absolute() {
        file.to_path_buf()
    } else {
        root.join(file)
    };
    Some(format!(
        "file://{}#L{}",
        path.display(),
        f.line.unwrap_or(1)
    ))
}

/// A small bar chart: what the test's own run retained, then what each extra run added,
/// in its failing stacks (or all of them when none fails).
fn runs_chart(t: &TestReport) -> Option<String> {
    let failing: Vec<&StackReport> = t.stacks.iter().filter(|s| s.fails).collect();
    let stacks: Vec<&StackReport> = if failing.is_empty() {
        t.stacks.iter().collect()
    } else {
        failing
    };
    let runs = stacks.iter().map(|s| s.growth_per_run.len()).max()?;
    if runs == 0 {
        return None;
    }
    let own: u64 = t
        .first_run_retained
        .as_ref()
        .map_or_else(|| stacks.iter().map(|s| s.bytes).sum(), |r| r.bytes);
    let mut bars: Vec<(String, i64)> = vec![("own run".into(), own as i64)];
    for i in 0..runs {
        let g: i64 = stacks
            .iter()
            .filter_map(|s| s.growth_per_run.get(i))
            .map(|g| g.bytes)
            .sum();
        bars.push((format!("run {}", i + 1), g));
    }
    let max = bars.iter().map(|b| b.1.max(0)).max().unwrap_or(0).max(1) as f64;
    let (w, bar_h, label_w) = (420.0, 16.0, 70.0);
    let height = bars.len() as f64 * (bar_h + 4.0) + 4.0;
    let mut s = format!(
        "<figure class=\"runs\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" role=\"img\" aria-label=\"retained by its own run and added by each extra run\">"
    );
    for (i, (label, bytes)) in bars.iter().enumerate() {
        let y = 4.0 + i as f64 * (bar_h + 4.0);
        let len = (*bytes).max(0) as f64 / max * (w - label_w - 90.0);
        let shown = if *bytes < 0 {
            format!("−{}", human_bytes(bytes.unsigned_abs()))
        } else {
            human_bytes(*bytes as u64)
        };
        let _ = write!(
            s,
            "<text x=\"0\" y=\"{:.1}\" font-size=\"11\">{label}</text><rect x=\"{label_w}\" y=\"{y:.1}\" width=\"{len:.1}\" height=\"{bar_h}\" class=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text>",
            y + 12.0,
            if i == 0 { "own" } else { "extra" },
            label_w + len + 4.0,
            y + 12.0,
            esc(&shown)
        );
    }
    s.push_str("</svg><figcaption>retained by its own run, then added by each extra run</figcaption></figure>");
    Some(s)
}

/// What changed against the base run, first: the counts, then each new, grown, changed
/// and gone test.
fn baseline_section(h: &mut String, b: &Baseline) {
    let _ = write!(
        h,
        "<section id=\"baseline\">\n<h2>Against the base run</h2>\n<p><b>{}</b> against <code>{}</code>{}</p>\n<ul>\n",
        crate::report::text::baseline_counts(b),
        esc(&b.path),
        if b.fail_on_new {
            "; only new and grown leaks fail (<code>--fail-on new</code>)"
        } else {
            ""
        }
    );
    for change in [Change::New, Change::Grown, Change::Changed] {
        for c in b.tests.iter().filter(|c| c.change == change) {
            let _ = writeln!(
                h,
                "<li><span class=\"change c-{0}\">{0}</span> {1} {2}: {3}</li>",
                change.as_str(),
                esc(&c.binary),
                esc(&c.name),
                esc(&c.detail)
            );
        }
    }
    for g in &b.gone {
        let _ = writeln!(
            h,
            "<li><span class=\"change c-gone\">gone</span> {}: leaked in the base run</li>",
            esc(g)
        );
    }
    h.push_str("</ul>\n</section>\n");
}

fn benches_section(h: &mut String, report: &Report, root: &Path, sources: &mut Sources) {
    h.push_str("<section id=\"benches\">\n<h2>Benches and services</h2>\n");
    for b in &report.benches {
        bench_block(h, b, root, sources);
    }
    h.push_str("</section>\n");
}

fn bench_block(h: &mut String, b: &GrowthReport, root: &Path, sources: &mut Sources) {
    let v = b.verdict.as_str();
    let _ = write!(
        h,
        "<article class=\"bench\" data-verdict=\"{v}\"><h3><span class=\"badge v-{v}\">{v}</span> {} {}</h3><p>{} · {} snapshots over {:.1} s · threshold {}</p>",
        esc(&b.binary),
        esc(&b.name),
        esc(&b.exit),
        b.snapshots,
        b.duration_seconds,
        human_bytes(b.growth_threshold)
    );
    if let Some(m) = &b.message {
        let _ = write!(h, "<p class=\"message\">{}</p>", esc(m));
    }
    for c in b.collections.iter().filter(|c| c.flagged) {
        let _ = write!(
            h,
            "<div class=\"stack collection k-leak\"><p class=\"stackhead\"><b>collection</b> · longer over the later half</p><p class=\"what\">{}</p>",
            esc(&crate::report::text::bench_collection_text(c, root))
        );
        let definition = FrameReport {
            function: c.collection.root.clone(),
            file: c.collection.file.clone(),
            line: c.collection.line,
            inlined: false,
        };
        if let Some(line) = sources.line(&definition) {
            let _ = write!(h, "<pre class=\"src\">{}</pre>", esc(line.trim_end()));
        }
        h.push_str("</div>");
    }
    for st in b.stacks.iter().filter(|s| s.flagged) {
        let _ = write!(
            h,
            "<div class=\"stack k-leak\"><p class=\"stackhead\"><b>+{}</b> ({}/s) over the later half</p><ol class=\"frames\">",
            human_bytes(st.growth_bytes.max(0) as u64),
            human_bytes(st.growth_bytes_per_second.max(0.0) as u64)
        );
        for f in from_identifying_frame(&st.frames, root)
            .iter()
            .take(FRAMES_SHOWN)
        {
            let _ = write!(h, "<li><code>{}</code></li>", esc(&frame_text(f, root)));
        }
        h.push_str("</ol>");
        if let Some(task) = &st.task {
            let text = live_tasks_text(task, st.objects, root);
            task_block(h, task, &text, root, sources);
        }
        if let Some(held) = &st.retained_by {
            held_block(h, held, root, sources);
        }
        h.push_str("</div>");
    }
    for (what, file) in [
        ("retained bytes over time", &b.artifacts.plot),
        ("the process's memory", &b.artifacts.memory_plot),
        ("growth flame graph", &b.artifacts.flamegraph),
    ] {
        if let Some(file) = file {
            let _ = write!(
                h,
                "<figure><object type=\"image/svg+xml\" data=\"{0}\"></object><figcaption>{what}: <a href=\"{0}\">{0}</a></figcaption></figure>",
                esc(file)
            );
        }
    }
    h.push_str("</article>\n");
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Counters => "counters",
        Method::Stacks => "stacks",
        Method::CountRunOnly => "count run",
    }
}

/// `YYYY-MM-DD HH:MM UTC` of a moment.
pub fn utc_text(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

fn kind_name(k: StackKind) -> &'static str {
    match k {
        StackKind::Leak => "leak",
        StackKind::OneTime => "one-time",
        StackKind::ProcessLifetime => "process-lifetime",
        StackKind::Harness => "harness",
    }
}

/// Source files read once each, for the line a frame names; a relative path (a static's
/// definition) is under the workspace root, not the tool's working directory.
struct Sources {
    root: std::path::PathBuf,
    files: HashMap<String, Option<Vec<String>>>,
}

impl Sources {
    fn new(root: &Path) -> Sources {
        Sources {
            root: root.to_path_buf(),
            files: HashMap::new(),
        }
    }

    fn line(&mut self, f: &FrameReport) -> Option<&str> {
        let (file, line) = (f.file.as_ref()?, f.line?);
        let root = &self.root;
        let lines = self.files.entry(file.clone()).or_insert_with(|| {
            std::fs::read_to_string(root.join(file))
                .ok()
                .map(|t| t.lines().map(str::to_owned).collect())
        });
        lines
            .as_ref()?
            .get(line.checked_sub(1)? as usize)
            .map(String::as_str)
    }
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2329;background:#fafbfc}
header{background:#24292f;color:#fff;padding:14px 24px}
header h1{font-size:20px;margin:0 0 4px}
#meta{margin:0;color:#c9d1d9}#meta code{color:#fff}
main{padding:12px 24px 40px}
h2{font-size:17px;margin:22px 0 8px}
nav#filters{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-bottom:8px}
.filter{border:1px solid #d0d7de;background:#fff;border-radius:12px;padding:2px 10px;cursor:pointer}
.filter.on{outline:2px solid #0969da}
#search{margin-left:8px;padding:3px 8px;border:1px solid #d0d7de;border-radius:4px;min-width:220px}
#shown{color:#57606a;margin-left:6px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.num{text-align:right;white-space:nowrap}
.bin{color:#57606a}
#outcome{font-weight:600;padding:6px 10px;border-radius:6px}.o-fails{background:#ffebe9;color:#82071e}.o-passes{background:#dafbe1;color:#116329}.gate{font-size:12px;font-weight:600;color:#82071e;margin-left:4px}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;background:#6e7781}
.v-leak{background:#cf222e;color:#fff}.v-clean{background:#2da44e;color:#fff}
.v-failed,.v-crashed,.v-timeout{background:#bc4c00;color:#fff}
.v-unsettled,.v-unanalysable,.v-error{background:#9a6700;color:#fff}
button.filter.v-clean,button.filter.v-leak,button.filter.v-failed,button.filter.v-crashed,button.filter.v-timeout,button.filter.v-unsettled,button.filter.v-unanalysable,button.filter.v-error{border-color:transparent}
summary{cursor:pointer}
.detail{padding:6px 0 10px 14px}
.stack{border-left:3px solid #d0d7de;padding:2px 10px;margin:8px 0}
.stack.k-leak{border-color:#cf222e}
.stackhead{margin:2px 0}
ol.frames{margin:2px 0;padding-left:22px}
pre.src{margin:0 0 2px;padding:1px 6px;background:#f6f8fa;color:#24292f;font-size:12px;white-space:pre-wrap}
.held{color:#8250df;margin:4px 0}
.lost{color:#cf222e;margin:4px 0}
.cycle{display:flex;flex-wrap:wrap;align-items:center;gap:6px;margin:6px 0}
.cycle .node{border:1px solid #8250df;border-radius:6px;padding:4px 8px;color:#1f2328;background:#fbefff}
.cycle .edge{text-align:center;color:#57606a}
.cycle .edge.weak{color:#cf222e}
.task{margin:4px 0;padding:4px 8px;border-left:3px solid #8250df;background:#f6f0ff}
.task a{color:inherit}
.message{color:#57606a;white-space:pre-wrap}
.exit{color:#57606a;margin:2px 0}
figure{margin:8px 0}figure object{max-width:100%;border:1px solid #eaeef2;background:#fff}
figure.flamegraph object{width:100%;min-height:240px}
figcaption{color:#57606a;font-size:12px}
rect.own{fill:#0969da}rect.extra{fill:#cf222e}
article.bench{background:#fff;border:1px solid #eaeef2;padding:4px 14px;margin:10px 0}
tr[hidden]{display:none}
.change{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;font-weight:600;border:1px solid #d0d7de;color:#57606a}
.c-new,.c-grown{border-color:#cf222e;color:#cf222e}.c-gone{border-color:#2da44e;color:#2da44e}.c-changed{border-color:#9a6700;color:#9a6700}
#baseline ul{margin:4px 0;padding-left:20px}
"#;

const SCRIPT: &str = r#"
(function(){
  var rows=[].slice.call(document.querySelectorAll('tr.test'));
  var buttons=[].slice.call(document.querySelectorAll('button.filter'));
  var search=document.getElementById('search');
  var shown=document.getElementById('shown');
  var state={verdict:'',q:''};
  function fromHash(){
    var p=new URLSearchParams(location.hash.slice(1));
    state.verdict=p.get('verdict')||'';state.q=p.get('q')||'';
    if(search){search.value=state.q;}
  }
  function apply(){
    var q=state.q.toLowerCase(),n=0;
    rows.forEach(function(r){
      var ok=(!state.verdict||r.dataset.verdict===state.verdict)&&(!q||r.dataset.name.toLowerCase().indexOf(q)>=0);
      r.hidden=!ok;if(ok){n++;}
    });
    buttons.forEach(function(b){b.classList.toggle('on',b.dataset.verdict===state.verdict);});
    if(shown){shown.textContent=n+' of '+rows.length+' shown';}
  }
  function save(){
    var p=new URLSearchParams();
    if(state.verdict){p.set('verdict',state.verdict);}
    if(state.q){p.set('q',state.q);}
    history.replaceState(null,'','#'+p.toString());
  }
  buttons.forEach(function(b){b.addEventListener('click',function(){state.verdict=b.dataset.verdict;apply();save();});});
  if(search){search.addEventListener('input',function(){state.q=search.value;apply();save();});}
  window.addEventListener('hashchange',function(){fromHash();apply();});
  fromHash();apply();
  var open=new URLSearchParams(location.hash.slice(1)).get('open');
  if(open){rows.forEach(function(r){
    if(r.dataset.name===open){var d=r.querySelector('details');if(d){d.open=true;if(r.getBoundingClientRect().top>innerHeight/2){r.scrollIntoView();}}}
  });}
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_links_its_spawn_site_to_the_source_line() {
        let dir = std::env::temp_dir().join(format!("leakcheck-html-task-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "fn a() {}\n    RT.spawn(task);\n").unwrap();
        let task = TaskReport {
            runtime: "tokio".into(),
            spawned_at: FrameReport::at("app::subscribe", "src/lib.rs", 2),
            spawned_by: None,
            future: None,
            listed: false,
            state: None,
            layout_known: false,
        };
        let mut h = String::new();
        task_block(
            &mut h,
            &task,
            "held by a tokio task spawned at app::subscribe (src/lib.rs:2)",
            &dir,
            &mut Sources::new(&dir),
        );
        let href = format!("file://{}#L2", dir.join("src/lib.rs").display());
        assert_eq!(
            h,
            format!(
                "<div class=\"task\">held by a tokio task spawned at <a href=\"{href}\"><code>app::subscribe (src/lib.rs:2)</code></a><pre class=\"src\">    RT.spawn(task);</pre></div>"
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
