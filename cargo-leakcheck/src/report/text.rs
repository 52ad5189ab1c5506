//! The text every renderer shares, written once so that the summary, the page, JUnit,
//! SARIF and GitHub's annotations say the same thing in the same words: a frame and where
//! it is, who holds a stack's objects, the async tasks a stack is, how lost objects are
//! lost, a collection's growth, the counts against a base run, and the lines every
//! terminal summary ends with. Sizes and counts in words (`human_bytes`, `count_of`) are
//! the model's, since the analysis writes them into the report's messages too.

use crate::model::count_of as plural;
use crate::model::{
    Baseline, BenchCollection, CollectionId, CollectionReport, CycleMember, FrameReport,
    LengthUnit, RetainedBy, RootKind, StackReport, Unreachable,
};
use std::fmt::Write;
use std::path::Path;

/// A frame as `function (file:line)`, with paths shown relative to the workspace, and the
/// standard library's `/rustc/<commit>/library/` prefix dropped.
pub fn frame_text(f: &FrameReport, root: &Path) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{} ({}:{line})", f.function, short_path(file, root)),
        _ => f.function.clone(),
    }
}

/// Where a frame is, `src/lib.rs:14` (its function when the debug info does not say).
pub fn place_text(f: &FrameReport, root: &Path) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{}:{line}", short_path(file, root)),
        _ => f.function.clone(),
    }
}

/// The line that says how a leaked stack's lost objects are lost (a reference cycle, or
/// nothing pointing to them), when the scan found that.
pub fn unreachable_text(stack: &StackReport, root: &Path) -> Option<String> {
    match (&stack.unreachable, &stack.process) {
        (Some(u), _) => Some(unreachable_line(u, |f| place_text(f, root))),
        (None, Some(process)) => Some(match stack.kind {
            crate::model::StackKind::OneTime => format!(
                "lost by the child process `{process}` once, as it started: the same in every process of it, whatever it was asked"
            ),
            _ => format!(
                "lost by the child process `{process}`: {}",
                stack
                    .reason
                    .as_deref()
                    .unwrap_or("unreachable when it ended, in every run that started it")
            ),
        }),
        (None, None) => None,
    }
}

fn short_path(file: &str, root: &Path) -> String {
    if let Some(rest) = file.strip_prefix("/rustc/") {
        if let Some((_, lib)) = rest.split_once("/library/") {
            return lib.to_string();
        }
    }
    let p = Path::new(file);
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// `held by static `app::REGISTRY``, `held by a thread spawned at tests/lib.rs:648
/// (`lib::clone_churn`) that never ended, running`, `held in a register of …`: the root,
/// with the thread a stack, register or thread-local belongs to named by where it was
/// spawned.
pub fn held_phrase(held: &RetainedBy, root: &Path) -> String {
    let Some(h) = &held.holder else {
        return format!("held by {}", held.root);
    };
    let site = h.spawned_at.as_ref().map(|f| match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{}:{line} (`{}`)", short_path(file, root), f.function),
        _ => format!("`{}`", f.function),
    });
    let thread = crate::analysis::retention::thread_words(h, site.as_deref());
    match (held.root_kind, &held.symbol) {
        (RootKind::Register, _) => format!("held in a register of {thread}"),
        (RootKind::ThreadLocal, Some(s)) => format!("held by thread-local `{s}` of {thread}"),
        (RootKind::ThreadLocal, None) => format!("held in the thread-local storage of {thread}"),
        _ => format!("held by {thread}"),
    }
}

/// The `held by` lines under a stack, unindented: its root, then where each object on the
/// way from the root was allocated (`→ …`). When an async task is on the way, the task
/// comes first, by its spawn site, then what holds the task.
pub fn held_text(held: &RetainedBy, root: &Path) -> Vec<String> {
    let held_by = held_phrase(held, root);
    let root_line = match (&held.frame, &held.definition) {
        (Some(f), _) => format!("{held_by}, in {}", frame_text(f, root)),
        (
            None,
            Some(FrameReport {
                file: Some(file),
                line: Some(line),
                ..
            }),
        ) => format!("{held_by} ({}:{line})", short_path(file, root)),
        (None, _) => held_by,
    };
    let via = |lines: &mut Vec<String>, range: std::ops::Range<usize>, indent: &str| {
        let half = held.via.len().div_ceil(2);
        for i in range {
            if i == half && held.skipped > 0 {
                lines.push(format!(
                    "{indent}→ … {}",
                    plural(held.skipped, "object more", "objects more")
                ));
            }
            lines.push(format!("{indent}→ {}", frame_text(&held.via[i], root)));
        }
    };
    let mut lines = Vec::new();
    match &held.task {
        None => {
            lines.push(root_line);
            via(&mut lines, 0..held.via.len(), "  ");
        }
        Some(t) => {
            let state = match (&t.task.state, t.task.listed) {
                (Some(state), _) => format!(", {}", state_words(state)),
                (None, true) => ", not finished: its runtime still lists it".to_owned(),
                (None, false) => String::new(),
            };
            lines.push(format!(
                "held by {} spawned at {}{state}",
                a_task_of(&t.task.runtime),
                frame_text(&t.task.spawned_at, root)
            ));
            if let Some(future) = &t.task.future {
                lines.push(format!("  its future: `{future}`"));
            }
            let inside = t.via_index + 1..held.via.len();
            if !inside.is_empty() {
                lines.push("  inside the task:".into());
                via(&mut lines, inside, "    ");
            }
            // Without a state, the first line already says the runtime lists it.
            let said = t.task.state.is_none() && t.task.listed;
            match &t.kept_by {
                Some(kept) if !(said && kept == crate::analysis::tasks::RUNTIME_STRUCTURES) => {
                    lines.push(format!("  the task is kept by {kept}"));
                }
                _ => {}
            }
            lines.push(format!("  the task is {root_line}"));
            via(&mut lines, 0..t.via_index.min(held.via.len()), "    ");
        }
    }
    lines
}

/// What a stack of task cells is: `2 tokio tasks spawned at … by `…`, +1 task per run`.
pub fn task_text(stack: &StackReport, root: &Path) -> Option<String> {
    let task = stack.task.as_ref()?;
    let per_run: Vec<i64> = stack.growth_per_run.iter().map(|g| g.objects).collect();
    let growth = match (per_run.iter().min(), per_run.iter().max()) {
        (Some(&min), Some(&max)) if min > 0 && min == max => {
            format!(", +{} per run", plural(min as u64, "task", "tasks"))
        }
        (Some(&min), Some(&max)) if min > 0 => format!(", +{min} to +{max} tasks per run"),
        _ => String::new(),
    };
    let state = match (&task.state, task.listed) {
        (Some(state), _) => format!("; {} when read", state_words(state)),
        (None, true) => "; not finished: its runtime still lists them".to_owned(),
        (None, false) => String::new(),
    };
    Some(format!(
        "{}{growth}{state}",
        tasks_spawned(task, stack.objects, "still alive", root)
    ))
}

/// A stack of task cells of a bench or service, at the end: `about 19,707 tokio tasks
/// alive at the end, spawned at … by `…``.
pub fn live_tasks_text(task: &crate::model::TaskReport, objects: u64, root: &Path) -> String {
    let state = match &task.state {
        Some(state) => format!("; the one read was {}", state_words(state)),
        None => String::new(),
    };
    format!(
        "about {}{state}",
        tasks_spawned(task, objects, "alive at the end", root)
    )
}

/// `2 tokio tasks <alive>, spawned at app::f (src/lib.rs:20) by `tokio::spawn``.
fn tasks_spawned(task: &crate::model::TaskReport, n: u64, alive: &str, root: &Path) -> String {
    let by = match &task.spawned_by {
        Some(f) => format!(" by `{f}`"),
        None => String::new(),
    };
    format!(
        "{} {alive}, spawned at {}{by}",
        plural(
            n,
            &format!("{} task", task.runtime),
            &format!("{} tasks", task.runtime)
        ),
        frame_text(&task.spawned_at, root)
    )
}

/// A task's state in words.
fn state_words(state: &str) -> &str {
    match state {
        "pending" => "still pending (waiting to be woken)",
        "scheduled" => "still pending (scheduled to run)",
        "finished" => "finished, its cell still referenced",
        other => other,
    }
}

/// `a tokio task`, `an async-task task`.
fn a_task_of(runtime: &str) -> String {
    let article = match runtime.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    };
    format!("{article} {runtime} task")
}

/// A frame of what runs a test rather than of the test: libtest, the `FnOnce` shim that
/// calls the closure libtest stores, std's panic catching and thread start.
pub fn is_harness_frame(f: &FrameReport) -> bool {
    const HARNESS: [&str; 5] = [
        "test::",
        "core::ops::function::FnOnce::call_once",
        "<fn() -> core::result::Result<(), alloc::string::String> as core::ops::function::FnOnce<()>>",
        "std::panicking::",
        "std::sys::backtrace::__rust_begin_short_backtrace",
    ];
    HARNESS.iter().any(|h| f.function.starts_with(h))
}

/// One line that says how a stack's lost objects are lost, each site as `site` writes a
/// frame (`src/lib.rs:14`).
pub fn unreachable_line(lost: &Unreachable, site: impl Fn(&FrameReport) -> String) -> String {
    match lost {
        Unreachable::Cycle(c) => {
            let ring: Vec<String> = c
                .members
                .iter()
                .map(|m| format!("{} ({})", member_what(m), member_place(m, &site)))
                .collect();
            let more = match c.length as usize > c.members.len() {
                true => format!(" → … {} more", c.length as usize - c.members.len()),
                false => String::new(),
            };
            let times = match c.cycles {
                1 => String::new(),
                n => format!("; {n} such cycles"),
            };
            let hint = match c.weak_edge() {
                Some((from, to)) if c.members.len() > 1 => format!(
                    "; one of these pointers should be `Weak`: likely {}'s ({}) back to {} ({})",
                    member_what(from),
                    member_place(from, &site),
                    member_what(to),
                    member_place(to, &site)
                ),
                _ => "; it points to itself: that pointer should be `Weak`".to_owned(),
            };
            format!(
                "unreachable: a reference cycle of {} — {}{more} → back{times}{hint}",
                plural(c.length, "object", "objects"),
                ring.join(" → ")
            )
        }
        Unreachable::InCycle => "unreachable: in a reference cycle among the same lost objects as a cycle shown for another stack (one cycle of each group is shown)".to_owned(),
        Unreachable::InsideLost => "unreachable: only other lost objects point to these (inside a lost structure)".to_owned(),
        Unreachable::NoCycle => "unreachable, no cycle: nothing points to these objects (a `Box::leak` or `mem::forget` whose result was dropped)".to_owned(),
    }
}

/// Where a member of a reference cycle was allocated, each frame as `site` writes one:
/// `src/tree.rs:23`, or `src/tree.rs:23 via src/tree.rs:55` when another member shares that
/// line.
pub fn member_place(m: &CycleMember, site: &impl Fn(&FrameReport) -> String) -> String {
    match &m.called_at {
        Some(c) => format!("{} via {}", site(&m.site), site(c)),
        None => site(&m.site),
    }
}

/// What a member of a reference cycle is, in words: its type, else what allocated it
/// (`an \`Rc\``).
pub fn member_what(m: &CycleMember) -> String {
    match (&m.type_name, m.container.as_deref()) {
        (Some(t), _) => format!("`{t}`"),
        (None, Some("Vec")) => "a `Vec`'s buffer".to_owned(),
        (None, Some(c @ ("Arc" | "Rc"))) => format!("an `{c}`"),
        (None, Some(c)) => format!("a `{c}`"),
        (None, None) => "an object".to_owned(),
    }
}

/// `1 entry`, `3 bytes`: a length in what it counts.
pub fn length_count(unit: LengthUnit, n: i64) -> String {
    let (one, many) = match unit {
        LengthUnit::Entries => ("entry", "entries"),
        LengthUnit::Bytes => ("byte", "bytes"),
    };
    format!("{n} {}", if n.abs() == 1 { one } else { many })
}

/// `static `app::SEEN` (src/lib.rs:9)`: a collection's root, where it is defined, and the
/// field; its file relative to `root` when it is below it (the workspace: the same words on
/// every machine and CI runner; `""` leaves it as recorded).
pub fn collection_holder(c: &CollectionId, root: &Path) -> String {
    let kind = match c.root_kind {
        RootKind::ThreadLocal => "thread-local",
        _ => "static",
    };
    let at = match (&c.file, c.line) {
        (Some(f), Some(l)) => {
            let f = Path::new(f);
            let f = f.strip_prefix(root).unwrap_or(f).display();
            format!(" ({f}:{l})")
        }
        _ => String::new(),
    };
    format!("{kind} `{}{}`{at}", c.root, c.field)
}

/// `static `app::SEEN` (src/lib.rs:9): HashSet<u64>, +1 entry per run (7 after 7 runs)`,
/// then the other holders of the same collection, if any; files relative to `root` when
/// below it.
pub fn collection_text(r: &CollectionReport, root: &Path) -> String {
    let c = &r.collection;
    let runs = r.lengths.len();
    let last = r.lengths.last().copied().unwrap_or(0).max(0);
    let per_run = match (r.min_growth(), r.growth_per_run.iter().max()) {
        (Some(lo), Some(&hi)) if lo == hi => format!("+{} per run", length_count(c.unit, lo)),
        (Some(lo), Some(&hi)) => format!("+{lo} to +{} per run", length_count(c.unit, hi)),
        _ => "no extra runs".into(),
    };
    let also = if r.also_held_by.is_empty() {
        String::new()
    } else {
        let others: Vec<String> = (r.also_held_by.iter())
            .map(|o| collection_holder(o, root))
            .collect();
        format!("; also reached from {}", others.join(", "))
    };
    format!(
        "{}: {}, {per_run} ({} after {}){also}",
        collection_holder(c, root),
        c.type_name,
        length_count(c.unit, last),
        plural(runs as u64, "run", "runs")
    )
}

/// `static `app::VISITS` (src/main.rs:9): HashMap<u64, u64>, +9812 entries (4906 per
/// second) over the later half, 20000 entries at the end`: a collection over a bench's or a
/// service's run; files relative to `root` when below it.
pub fn bench_collection_text(b: &BenchCollection, root: &Path) -> String {
    let c = &b.collection;
    let last = b.series.last().map_or(0, |p| p.1);
    format!(
        "{}: {}, +{} ({:.0} per second) over the later half, {} at the end",
        collection_holder(c, root),
        c.type_name,
        length_count(c.unit, b.growth),
        b.per_second,
        length_count(c.unit, last)
    )
}

/// `1 new, 1 grown, 2 unchanged, 0 gone`: the counts against the base run every renderer
/// leads with.
pub fn baseline_counts(b: &Baseline) -> String {
    format!(
        "{} new, {} grown, {} unchanged, {} gone",
        b.new,
        b.grown,
        b.unchanged,
        b.gone.len()
    )
}

/// A summary's last lines, every command's: the notes, then where the report and the page are.
pub fn notes_and_outputs(s: &mut String, notes: &[String], out_dir: &Path) {
    for note in notes {
        let _ = writeln!(s, "    note {note}");
    }
    let _ = writeln!(s, "  Report {}", out_dir.join("report.json").display());
    let _ = writeln!(
        s,
        "    Page {}",
        out_dir.join(crate::model::PAGE_FILE).display()
    );
}
