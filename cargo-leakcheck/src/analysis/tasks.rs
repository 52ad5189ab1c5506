//! Async tasks, told from their allocation stacks: which object is a task of tokio or of
//! async-task (smol, async-std, async-executor), where the program spawned it, and whether
//! the way to it runs through its runtime's own list of tasks.
//!
//! A task that never ends keeps its future and all the future owns; a heap profiler sees
//! that memory held by the runtime (`static RT → two objects of tokio's → the task → the
//! buffer`), which says nothing a developer can act on. What they can act on is the `spawn`
//! call. Every task's cell is allocated inside the spawn call, so its allocation stack holds
//! a runtime's task constructor and, further out, the program's own frame that spawned it.
//! Only what the symbols show is used: no runtime feature, no `tokio_unstable`.

use crate::analysis::classify;
use crate::analysis::frames::frame_report;
use crate::evidence::symbols::Frame;
use crate::model::{FrameReport, TaskReport};

/// A runtime's task constructor: the function its task cells are allocated in (a type by
/// the start of its path, legacy mangling keeping `<T,S>` or not, and a method), and the
/// runtime's name as reports give it.
struct Constructor {
    runtime: &'static str,
    type_path: &'static str,
    method: &'static str,
    /// The same function as a build with line tables only names an inlined frame: by its
    /// short name (`new<…>`) in this source file of the runtime's crate.
    source: &'static str,
    /// How the constructor's source file is named in a version whose task state word this
    /// reads (`/tokio-1.`: tokio 1.x, from the registry's directory name), and that word's
    /// bits; None where the header's layout is the compiler's choice.
    layout: Option<(&'static str, StateBits)>,
    /// The runtime's crates: frames of these between the constructor and the program's
    /// frame are the runtime's spawning machinery, and an object allocated in one of them
    /// before the task on a retention path is the runtime's own bookkeeping.
    crates: &'static [&'static str],
}

const CONSTRUCTORS: [Constructor; 2] = [
    Constructor {
        runtime: "tokio",
        type_path: "tokio::runtime::task::core::Cell",
        method: "::new",
        source: "src/runtime/task/core.rs",
        // tokio 1.x, `runtime/task/state.rs`: the cell and its header are `repr(C)`, and the
        // state is the header's first field.
        layout: Some((
            "/tokio-1.",
            StateBits {
                running: 0b1,
                finished: 0b10,
                scheduled: 0b100,
                cancelled: 0b10_0000,
            },
        )),
        crates: &["tokio"],
    },
    Constructor {
        runtime: "async-task",
        type_path: "async_task::raw::RawTask",
        method: "::allocate",
        source: "src/raw.rs",
        // async-task's header is not `repr(C)`: where its state lies is the compiler's
        // choice (a release build was seen to put another field first).
        layout: None,
        crates: &[
            "async_task",
            "async_executor",
            "async_global_executor",
            "async_std",
            "smol",
        ],
    },
];

/// The bits of a task's state word (its header's first word).
struct StateBits {
    running: u64,
    finished: u64,
    scheduled: u64,
    cancelled: u64,
}

fn function(f: &Frame) -> &str {
    f.function.as_deref().unwrap_or("").trim_start_matches('<')
}

/// The crate a frame is in, with `-` as `_`: from its source file when it has one (std's
/// under `/rustc/…/library/<crate>/`, a dependency's under the registry's
/// `<crate>-<version>/`), else from its function's path. A build with line tables only names
/// inlined frames without their path (`new<…>`), so the file decides there.
fn crate_of(f: &Frame) -> Option<String> {
    if let Some(file) = f.file.as_deref() {
        if let Some((_, lib)) = file
            .strip_prefix("/rustc/")
            .and_then(|f| f.split_once("/library/"))
        {
            return lib.split('/').next().map(|c| c.replace('-', "_"));
        }
        if let Some(dir) = classify::registry_package(file) {
            // `tokio-1.54.1`, `async-task-4.7.1`: the name ends where the version starts.
            let name = match dir.rfind('-') {
                Some(i) if dir[i + 1..].starts_with(|c: char| c.is_ascii_digit()) => &dir[..i],
                _ => dir,
            };
            return Some(name.replace('-', "_"));
        }
    }
    let name = function(f);
    name.split_once("::").map(|(c, _)| c.to_owned())
}

fn is_std_crate(c: &str) -> bool {
    matches!(c, "std" | "core" | "alloc" | "hashbrown")
}

/// Whether a frame is in one of these crates.
fn in_crates(f: &Frame, crates: &[&str]) -> bool {
    crate_of(f).is_some_and(|c| crates.contains(&c.as_str()))
}

/// The constructor that allocated this object, when it is a task cell: the innermost
/// frame outside std's allocation machinery must be it (what a task's future allocates
/// while it runs, or what the runtime allocates to schedule it, has other frames there).
fn constructor_of(frames: &[Frame]) -> Option<(usize, &'static Constructor)> {
    let (i, f) = frames
        .iter()
        .enumerate()
        .find(|(_, f)| !crate_of(f).is_some_and(|c| is_std_crate(&c)))?;
    let name = function(f);
    let c = CONSTRUCTORS.iter().find(|c| {
        let by_path = name.strip_prefix(c.type_path).is_some_and(|rest| {
            (rest.starts_with('<') || rest.starts_with("::")) && rest.ends_with(c.method)
        });
        let short = c.method.trim_start_matches(':');
        let by_source = in_crates(f, &c.crates[..1])
            && f.file.as_deref().is_some_and(|p| p.ends_with(c.source))
            && name
                .strip_prefix(short)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('<'));
        by_path || by_source
    })?;
    Some((i, c))
}

/// The future's type from the constructor's name, when it carries its generic arguments
/// (`new<app::f::{async_block_env#0}, alloc::sync::Arc<…>>`: the first), and they are not
/// the parameters' names (`Cell<T,S>::new`).
fn future_of(name: &str) -> Option<String> {
    let open = name.find('<')?;
    let first = first_argument(&name[open + 1..]);
    (first.contains("::") && !name[..open].contains("::")).then(|| first.to_owned())
}

/// The first of the generic arguments `args` starts with (the text after the `<`), trimmed:
/// up to the `,` or `>` at its own depth.
pub(crate) fn first_argument(args: &str) -> &str {
    let mut depth = 0usize;
    let end = args
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '<' => depth += 1,
                '>' if depth == 0 => return true,
                '>' => depth -= 1,
                ',' if depth == 0 => return true,
                _ => {}
            }
            false
        })
        .map_or(args.len(), |(i, _)| i);
    args[..end].trim()
}

/// What holds a task that its runtime lists.
pub const RUNTIME_STRUCTURES: &str =
    "its runtime's own structures (its scheduler, its list of tasks)";

/// What holds a task, in words, from the allocation stack of the object before it on a
/// retention path: its runtime's own structures, a channel (a waker the channel keeps), a
/// timer. None when the stack says nothing of the kind (the program's own object).
pub fn kept_by(frames: &[Frame], runtime: &str) -> Option<String> {
    if is_runtime_bookkeeping(frames, runtime) {
        return Some(RUNTIME_STRUCTURES.into());
    }
    let inner = innermost_outside_std(frames)?;
    let file = inner.file.as_deref().unwrap_or("");
    let name = function(inner);
    match crate_of(inner)?.as_str() {
        "tokio" if file.contains("/src/sync/") || name.starts_with("tokio::sync::") => {
            Some("a waker in a tokio channel".into())
        }
        "tokio" if file.contains("/time/") || name.starts_with("tokio::time::") => {
            Some("a tokio timer".into())
        }
        "async_channel" | "event_listener" | "futures_channel" | "flume" | "crossbeam_channel" => {
            Some("a waker in a channel".into())
        }
        _ => None,
    }
}

/// A function's name as a report gives the runtime's spawning function: without the
/// generic arguments a short (inlined) name carries.
fn spawning_name(f: &Frame) -> String {
    let name = function(f);
    match name.find('<') {
        Some(i) if !name[..i].contains("::") => name[..i].to_owned(),
        _ => name.to_owned(),
    }
}

/// The task an allocation stack made, when it is a task cell: the runtime, the program's
/// frame that spawned it and the runtime function it called. `exe` is the test binary
/// (frames of it outside std and the registry are the program's).
pub fn task_of(frames: &[Frame], exe: &str) -> Option<TaskReport> {
    let (at, constructor) = constructor_of(frames)?;
    let outer = &frames[at + 1..];
    let own_source = |f: &&Frame| f.file.as_deref().is_some_and(classify::is_own_source);
    let is_runtime = |f: &Frame| in_crates(f, constructor.crates);
    // The spawn site: the first frame of the program's own code further out; failing that
    // (a binary without line tables), the first frame that is neither the runtime's nor
    // std's.
    let site = outer
        .iter()
        .position(|f| classify::is_user_frame(f, exe) && own_source(&f) && !is_runtime(f))
        .or_else(|| {
            outer
                .iter()
                .position(|f| classify::is_user_frame(f, exe) && !is_runtime(f))
        });
    let (spawned_at, spawned_by) = match site {
        Some(i) => (
            frame_report(&outer[i]),
            outer[..i]
                .iter()
                .rev()
                .find(|f| is_runtime(f))
                .map(spawning_name),
        ),
        None => (FrameReport::named("(a frame outside the program)"), None),
    };
    let layout_known = constructor.layout.as_ref().is_some_and(|(version, _)| {
        frames[at]
            .file
            .as_deref()
            .is_some_and(|f| f.contains(version))
    });
    Some(TaskReport {
        runtime: constructor.runtime.to_owned(),
        spawned_at,
        spawned_by,
        future: future_of(function(&frames[at])),
        listed: false,
        state: None,
        layout_known,
    })
}

/// The task's state, from its header's first word as the scan read it, when its runtime's
/// version is one whose state word is known.
pub fn read_state(task: &mut TaskReport, first_word: Option<u64>) {
    let (Some(word), true) = (first_word, task.layout_known) else {
        return;
    };
    let Some((_, bits)) = CONSTRUCTORS
        .iter()
        .find(|c| c.runtime == task.runtime)
        .and_then(|c| c.layout.as_ref())
    else {
        return;
    };
    let state = if word & bits.finished != 0 {
        "finished"
    } else if word & bits.running != 0 {
        "running"
    } else if word & bits.cancelled != 0 {
        "cancelled"
    } else if word & bits.scheduled != 0 {
        "scheduled"
    } else {
        "pending"
    };
    task.state = Some(state.to_owned());
}

/// Whether an object allocated with these frames belongs to the bookkeeping of the
/// runtime `runtime` (its scheduler, its list of tasks, another of its tasks): on a
/// retention path before a task, such an object means the runtime still lists the task,
/// which it does until the task has finished.
pub fn is_runtime_bookkeeping(frames: &[Frame], runtime: &str) -> bool {
    let Some(c) = CONSTRUCTORS.iter().find(|c| c.runtime == runtime) else {
        return false;
    };
    // The innermost frame that is not std's allocation machinery decides: a runtime's own
    // structure is allocated inside the runtime, even when the program's frame is further
    // out (the builder call).
    let Some(inner) = innermost_outside_std(frames) else {
        return false;
    };
    if !in_crates(inner, c.crates) {
        return false;
    }
    match c.runtime {
        // tokio's scheduler and task lists are made in its `runtime` module (with helpers of
        // `util`, such as the sharded list of owned tasks); its channels (`sync`) and timers
        // are what a task waits on, not what lists it.
        "tokio" => {
            let in_module = |f: &Frame, module: &str| match f.file.as_deref() {
                Some(file) => file.contains(&format!("/src/{module}/")),
                None => function(f).starts_with(&format!("tokio::{module}::")),
            };
            let waits_on = in_module(inner, "sync")
                || in_module(inner, "time")
                || in_module(inner, "runtime/time");
            let tokio_frames = frames
                .iter()
                .skip_while(|f| crate_of(f).is_some_and(|c| is_std_crate(&c)))
                .take_while(|f| crate_of(f).is_some_and(|c| c == "tokio" || is_std_crate(&c)));
            !waits_on && tokio_frames.clone().any(|f| in_module(f, "runtime"))
        }
        _ => true,
    }
}

fn innermost_outside_std(frames: &[Frame]) -> Option<&Frame> {
    frames
        .iter()
        .find(|f| !crate_of(f).is_some_and(|c| is_std_crate(&c)))
}

/// Of a retention path's objects (root-most first, each by its allocation stack, and by
/// what its own words showed it to be when its stack was not sampled: `known`), the
/// innermost task cell: its index and what it is, with whether an object before it on the
/// path is its runtime's bookkeeping.
pub fn holding_task(
    chain: &[Vec<Frame>],
    known: &[Option<TaskReport>],
    exe: &str,
) -> Option<(usize, TaskReport)> {
    let (i, mut task) = chain.iter().enumerate().rev().find_map(|(i, frames)| {
        known
            .get(i)
            .cloned()
            .flatten()
            .or_else(|| task_of(frames, exe))
            .map(|t| (i, t))
    })?;
    task.listed = chain[..i]
        .iter()
        .any(|frames| is_runtime_bookkeeping(frames, &task.runtime));
    Some((i, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/ws/target/debug/deps/tasks-1";

    fn frame(function: &str, file: &str, line: u32) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(line),
            column: None,
            object: EXE.into(),
            offset: 0,
            inlined: false,
        }
    }

    /// A frame of a dependency, in its crate's directory of the registry (tokio 1.54.1,
    /// async-task 4.7.1, …).
    fn registry(function: &str) -> Frame {
        let mut path = function.split("::");
        let krate = path.next().unwrap().replace('_', "-");
        let version = if krate == "async-task" {
            "4.7.1"
        } else {
            "1.54.1"
        };
        // The module's directory, as the crate lays out its sources (`src/runtime/…`).
        let module = path.next().filter(|m| m.starts_with(char::is_lowercase));
        let dir = module.map_or("src".to_owned(), |m| format!("src/{m}"));
        frame(
            function,
            &format!(
                "/usr/local/cargo/registry/src/index.crates.io-1/{krate}-{version}/{dir}/x.rs"
            ),
            10,
        )
    }

    fn tokio_cell() -> Vec<Frame> {
        vec![
            frame(
                "alloc::boxed::Box<T>::new",
                "/rustc/abc/library/alloc/src/boxed.rs",
                286,
            ),
            registry("tokio::runtime::task::core::Cell<T,S>::new"),
            registry("tokio::runtime::task::raw::RawTask::new"),
            registry("tokio::runtime::task::new_task"),
            registry("tokio::runtime::task::list::OwnedTasks<S>::bind"),
            registry("tokio::runtime::runtime::Runtime::spawn"),
            frame("tasks::subscribe", "/ws/src/lib.rs", 20),
            frame("tasks::tests::t", "/ws/src/lib.rs", 87),
        ]
    }

    #[test]
    fn a_tokio_task_cell_is_named_by_its_spawn_site_and_spawning_function() {
        let task = task_of(&tokio_cell(), EXE).expect("a task cell");
        assert_eq!(task.runtime, "tokio");
        assert_eq!(task.spawned_at.function, "tasks::subscribe");
        assert_eq!(task.spawned_at.line, Some(20));
        assert_eq!(
            task.spawned_by.as_deref(),
            Some("tokio::runtime::runtime::Runtime::spawn")
        );
    }

    #[test]
    fn an_async_task_cell_is_named_through_the_executor() {
        let frames = vec![
            registry("async_task::raw::RawTask<F,T,S,M>::allocate"),
            registry("async_task::runnable::Builder<M>::spawn_unchecked"),
            registry("async_executor::Executor::spawn_inner"),
            registry("async_executor::Executor::spawn"),
            frame("tasks::listen", "/ws/src/lib.rs", 67),
        ];
        let task = task_of(&frames, EXE).expect("a task cell");
        assert_eq!(task.runtime, "async-task");
        assert_eq!(task.spawned_at.line, Some(67));
        assert_eq!(
            task.spawned_by.as_deref(),
            Some("async_executor::Executor::spawn")
        );
    }

    #[test]
    fn what_a_task_allocates_while_it_runs_is_not_a_task() {
        // The future's own allocations have the task's poll on their stack, not its
        // constructor; a buffer the spawning function allocated has neither.
        let polled = vec![
            frame(
                "alloc::vec::from_elem",
                "/rustc/abc/library/alloc/src/vec/mod.rs",
                1,
            ),
            frame("tasks::subscribe::{{closure}}", "/ws/src/lib.rs", 22),
            registry("tokio::runtime::task::core::Core<T,S>::poll"),
            registry("tokio::runtime::task::harness::Harness<T,S>::poll"),
        ];
        assert_eq!(task_of(&polled, EXE), None);
        let buffer = vec![
            frame(
                "alloc::vec::from_elem",
                "/rustc/abc/library/alloc/src/vec/mod.rs",
                1,
            ),
            frame("tasks::subscribe", "/ws/src/lib.rs", 19),
        ];
        assert_eq!(task_of(&buffer, EXE), None);
    }

    #[test]
    fn the_innermost_task_on_a_path_holds_and_the_runtime_lists_it() {
        let runtime = vec![
            frame(
                "alloc::sync::Arc<T>::new",
                "/rustc/abc/library/alloc/src/sync.rs",
                1,
            ),
            registry("tokio::runtime::builder::Builder::build"),
            frame("tasks::RT::{{closure}}", "/ws/src/lib.rs", 11),
        ];
        let (i, task) = holding_task(&[runtime.clone(), tokio_cell()], &[], EXE).expect("a task");
        assert_eq!(i, 1);
        assert!(task.listed, "reached through the runtime's own structure");
        // Reached from the program's own object (a JoinHandle kept in a Vec), not listed.
        let vec = vec![
            frame(
                "alloc::vec::Vec<T>::push",
                "/rustc/abc/library/alloc/src/vec/mod.rs",
                1,
            ),
            frame("tasks::keep", "/ws/src/lib.rs", 40),
        ];
        let (_, task) = holding_task(&[vec, tokio_cell()], &[], EXE).expect("a task");
        assert!(!task.listed);
        assert_eq!(holding_task(std::slice::from_ref(&runtime), &[], EXE), None);
        // A cell whose stack was not sampled, known by its words.
        let known = task_of(&tokio_cell(), EXE);
        let (i, task) =
            holding_task(&[runtime, Vec::new()], &[None, known.clone()], EXE).expect("a task");
        assert_eq!((i, Some(task.spawned_at)), (1, known.map(|t| t.spawned_at)));
    }

    #[test]
    fn a_task_s_state_is_read_from_its_first_word_in_the_versions_known() {
        let mut task = task_of(&tokio_cell(), EXE).expect("a task cell");
        assert!(task.layout_known, "tokio 1.x, from the registry's path");
        // tokio: ref count 2, join interest, nothing else: waiting to be woken.
        read_state(&mut task, Some((2 << 6) | 0b1000));
        assert_eq!(task.state.as_deref(), Some("pending"));
        read_state(&mut task, Some((1 << 6) | 0b0010));
        assert_eq!(task.state.as_deref(), Some("finished"));
        read_state(&mut task, Some((1 << 6) | 0b0101));
        assert_eq!(task.state.as_deref(), Some("running"));
        // An unknown version: nothing is said.
        let mut frames = tokio_cell();
        frames[1].file = Some("/vendor/tokio/src/runtime/task/core.rs".into());
        let mut other = task_of(&frames, EXE).expect("a task cell");
        read_state(&mut other, Some(0));
        assert_eq!(other.state, None);
    }

    #[test]
    fn a_release_build_with_line_tables_only_names_inlined_frames_by_their_sources() {
        // Inlined frames get their short DWARF names there; their files say whose they are.
        let tokio = |function: &str, file: &str| {
            frame(
                function,
                &format!("/root/.cargo/registry/src/index.crates.io-1/tokio-1.54.1/{file}"),
                1,
            )
        };
        let frames = vec![
            frame(
                "new<tokio::runtime::task::core::Cell<F, S>>",
                "/rustc/abc/library/alloc/src/boxed.rs",
                286,
            ),
            tokio(
                "new<tasks::subscribe::{async_block_env#0}, alloc::sync::Arc<…>>",
                "src/runtime/task/core.rs",
            ),
            tokio(
                "new_task<tasks::subscribe::{async_block_env#0}, …>",
                "src/runtime/task/mod.rs",
            ),
            tokio(
                "spawn<tasks::subscribe::{async_block_env#0}>",
                "src/runtime/runtime.rs",
            ),
            frame("{closure#0}", "/ws/src/lib.rs", 24),
        ];
        let task = task_of(&frames, EXE).expect("a task cell");
        assert_eq!(task.runtime, "tokio");
        assert_eq!(task.spawned_at.line, Some(24));
        assert_eq!(task.spawned_by.as_deref(), Some("spawn"));
        assert_eq!(
            task.future.as_deref(),
            Some("tasks::subscribe::{async_block_env#0}")
        );
        assert!(task.layout_known);
        // Another `new` of tokio's, in another file, is not a task's.
        let mut other = frames.clone();
        other[1] = tokio("new<tokio::runtime::park::Inner>", "src/runtime/park.rs");
        assert_eq!(task_of(&other, EXE), None);
        // The runtime's own structure, told by its file.
        let handle = vec![
            frame(
                "new<tokio::runtime::scheduler::Handle>",
                "/rustc/abc/library/alloc/src/sync.rs",
                422,
            ),
            tokio("create", "src/runtime/scheduler/multi_thread/worker.rs"),
            frame("{closure#0}", "/ws/src/lib.rs", 11),
        ];
        assert!(is_runtime_bookkeeping(&handle, "tokio"));
        assert!(!is_runtime_bookkeeping(&handle, "async-task"));
        // The list of owned tasks: made by a helper of tokio's `util`, for the runtime.
        let list = vec![
            frame(
                "with_capacity<…>",
                "/rustc/abc/library/alloc/src/vec/mod.rs",
                1,
            ),
            tokio("new<…>", "src/util/sharded_list.rs"),
            tokio("new", "src/runtime/task/list.rs"),
            tokio("build", "src/runtime/builder.rs"),
            frame("{closure#0}", "/ws/src/lib.rs", 11),
        ];
        assert!(is_runtime_bookkeeping(&list, "tokio"));
        // A tokio channel a task waits on is not what lists it.
        let channel = vec![
            frame("new<…>", "/rustc/abc/library/alloc/src/sync.rs", 1),
            tokio("channel<()>", "src/sync/oneshot.rs"),
            frame("{closure#0}", "/ws/src/lib.rs", 18),
        ];
        assert!(!is_runtime_bookkeeping(&channel, "tokio"));
    }

    #[test]
    fn what_holds_a_task_is_told_by_the_object_before_it() {
        let sync = |function: &str| {
            frame(
                function,
                "/root/.cargo/registry/src/index.crates.io-1/tokio-1.54.1/src/sync/oneshot.rs",
                1,
            )
        };
        let oneshot = vec![
            frame(
                "alloc::sync::Arc<T>::new",
                "/rustc/abc/library/alloc/src/sync.rs",
                1,
            ),
            sync("tokio::sync::oneshot::channel"),
            frame("app::subscribe", "/ws/src/lib.rs", 18),
        ];
        assert_eq!(
            kept_by(&oneshot, "tokio").as_deref(),
            Some("a waker in a tokio channel")
        );
        let runtime = vec![
            frame(
                "alloc::sync::Arc<T>::new",
                "/rustc/abc/library/alloc/src/sync.rs",
                1,
            ),
            registry("tokio::runtime::builder::Builder::build"),
            frame("app::RT::{{closure}}", "/ws/src/lib.rs", 11),
        ];
        assert!(kept_by(&runtime, "tokio")
            .unwrap()
            .starts_with("its runtime's own"));
        let program = vec![
            frame(
                "alloc::vec::Vec<T>::push",
                "/rustc/abc/library/alloc/src/vec/mod.rs",
                1,
            ),
            frame("app::keep", "/ws/src/lib.rs", 40),
        ];
        assert_eq!(kept_by(&program, "tokio"), None);
        // Debug builds name the constructor by its linkage name: no generic arguments.
        assert_eq!(
            future_of("tokio::runtime::task::core::Cell<T,S>::new"),
            None
        );
    }

    #[test]
    fn a_task_spawned_from_outside_the_program_still_counts_as_a_task() {
        let frames: Vec<Frame> = tokio_cell().into_iter().take(6).collect();
        let task = task_of(&frames, EXE).expect("a task cell");
        assert_eq!(task.spawned_at.function, "(a frame outside the program)");
        assert_eq!(task.spawned_by, None);
    }
}
