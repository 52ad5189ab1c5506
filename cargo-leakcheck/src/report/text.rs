//! The text every renderer shares, written once so that the summary, the page, JUnit,
//! SARIF and GitHub's annotations say the same thing in the same words: a frame and where
//! it is, who holds a stack's objects, the async tasks a stack is, how lost objects are
//! lost, and the lines every terminal summary ends with. Sizes and counts in words
//! (`human_bytes`, `count_of`) are the model's, since the analysis writes them into the
//! report's messages too.

use crate::model::count_of as plural;
use crate::model::{FrameReport, RetainedBy, RootKind, StackReport};
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
        (Some(u), _) => Some(u.text(|f| place_text(f, root))),
        (None, Some(process)) => Some(format!(
            "lost by the child process `{process}`: unreachable when it ended, in every run that started it"
        )),
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
