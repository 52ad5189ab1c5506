//! Who holds a stack's objects: the retention paths the runtime's reachability scan writes
//! beside a dump (`<dump>.paths`, format in the runtime's `paths` module), read, matched to
//! the dump's stacks and named: a static or thread-local by its symbol, a stack root by the
//! function whose frame holds the pointer, each object on the way by where it was allocated.

use crate::analysis::classify;
use crate::analysis::frames::{frame_report, resolve_stack};
use crate::analysis::tasks;
use crate::evidence::normalized::FrameKey;
use crate::evidence::paths::{HeldPath, RawRoot};
use crate::evidence::symbols::Frame;
use crate::evidence::symbols::Symbols;
use crate::model::{FrameReport, HolderThread, HoldingTask, RetainedBy, RootKind, TaskReport};
use std::collections::HashMap;
use std::path::Path;

/// Names a path's root and the objects on its way (`exe`: the test binary, which a static
/// of `-` is in).
pub fn describe(
    p: &HeldPath,
    exe: &str,
    symbols: &mut dyn Symbols,
    tasks_by_words: &TaskWords,
) -> RetainedBy {
    // Thread ids differ from run to run, and the report must not: threads go by name, or,
    // better, by what started them.
    let thread = p.thread.as_ref().map(|(_, name)| name.clone());
    let holder = p
        .thread
        .as_ref()
        .map(|(_, name)| holder_thread(p, name, exe, symbols));
    let root = NamedRoot::of(p, holder.as_ref(), exe, symbols);
    let on_the_way: Vec<Vec<Frame>> = p.chain[..p.chain.len() - 1]
        .iter()
        .map(|keys| resolve_stack(keys, symbols))
        .collect();
    let via = on_the_way
        .iter()
        .map(|frames| match frames.is_empty() {
            // Stacks sampled (`run`): this object's was not taken.
            true => FrameReport::named("(an object whose stack was not sampled)"),
            false => allocation_site(frames, exe),
        })
        .collect();
    RetainedBy {
        root_kind: root.kind,
        root: root.words,
        symbol: root.symbol,
        thread,
        frame: root.frame,
        definition: root.definition,
        via,
        skipped: p.skipped,
        task: holding_task(p, &on_the_way, exe, tasks_by_words),
        holder,
    }
}

/// A path's root, named.
struct NamedRoot {
    kind: RootKind,
    /// The symbol it is, or the function whose frame it is in.
    symbol: Option<String>,
    /// The root in words (see [`RetainedBy::root`]).
    words: String,
    /// A stack root's frame.
    frame: Option<FrameReport>,
    /// Where a static is defined.
    definition: Option<FrameReport>,
}

impl NamedRoot {
    fn of(
        p: &HeldPath,
        holder: Option<&HolderThread>,
        exe: &str,
        symbols: &mut dyn Symbols,
    ) -> NamedRoot {
        let of_thread = |what: &str| match (&p.thread, holder) {
            (Some(_), Some(h)) => {
                let site = h.spawned_at.as_ref().map(|f| format!("`{}`", f.function));
                format!("{what} of {}", thread_words(h, site.as_deref()))
            }
            _ => what.to_owned(),
        };
        let object = |o: &str| match o {
            "-" => exe.to_owned(),
            o => o.to_owned(),
        };
        let named = |kind, symbol, words| NamedRoot {
            kind,
            symbol,
            words,
            frame: None,
            definition: None,
        };
        match &p.root {
            RawRoot::Static { vaddr, object: o } => Self::of_static(&object(o), *vaddr, symbols),
            RawRoot::Tls { offset, object: o } => {
                let symbol = (symbols.data(&object(o), *offset, true)).map(|s| tls_name(&s));
                let words = match &symbol {
                    Some(s) => of_thread(&format!("thread-local `{s}`")),
                    None => of_thread("thread-local storage"),
                };
                named(RootKind::ThreadLocal, symbol, words)
            }
            RawRoot::Stack { frame: at } => {
                // A word in a frame of the tool's own runtime (a thread asleep in its clock)
                // is the program's: its caller passed it down. The frame says nothing of the
                // program's and is not shown.
                let f = at
                    .as_ref()
                    .filter(|k| !crate::evidence::symbols::is_runtime_object(&k.object))
                    .and_then(|k| symbols.code(&k.object, k.file_offset).first().cloned());
                let symbol = f.as_ref().and_then(|f| f.function.clone());
                NamedRoot {
                    frame: f.filter(|f| f.function.is_some()).map(|f| frame_report(&f)),
                    ..named(RootKind::Stack, symbol, of_thread("the stack"))
                }
            }
            // A register's name means nothing to the program's author.
            RawRoot::Register(name) => named(
                RootKind::Register,
                Some(name.clone()),
                of_thread("a register"),
            ),
            RawRoot::Unknown => named(RootKind::Unknown, None, "an unknown root".to_owned()),
        }
    }

    /// A static of `object` at `vaddr`: by its symbol and where it is defined, when known.
    fn of_static(object: &str, vaddr: u64, symbols: &mut dyn Symbols) -> NamedRoot {
        let symbol = symbols.data(object, vaddr, false);
        let definition = symbols
            .definition(object, vaddr)
            .map(|(file, line)| FrameReport {
                function: symbol.clone().unwrap_or_default(),
                file: Some(file),
                line: Some(line),
                inlined: false,
            });
        let words = match &symbol {
            Some(s) => format!("static `{s}`"),
            None => format!("static data of `{}` at {vaddr:#x}", file_name(object)),
        };
        NamedRoot {
            kind: RootKind::Static,
            symbol,
            words,
            frame: None,
            definition,
        }
    }
}

/// The task among the objects on a path's way (`on_the_way`, their stacks resolved) that
/// holds it, with what keeps that task.
fn holding_task(
    p: &HeldPath,
    on_the_way: &[Vec<Frame>],
    exe: &str,
    tasks_by_words: &TaskWords,
) -> Option<HoldingTask> {
    // An object whose stack was not sampled may still show what it is by its words.
    let known: Vec<Option<TaskReport>> = (0..on_the_way.len())
        .map(|i| match p.chain[i].is_empty() {
            true => tasks_by_words.task(p.words.get(i).map_or(&[][..], Vec::as_slice)),
            false => None,
        })
        .collect();
    let (via_index, mut task) = tasks::holding_task(on_the_way, &known, exe)?;
    tasks::read_state(&mut task, p.first_words.get(via_index).copied().flatten());
    // The object right before it says best; failing that (a container of a crate of its
    // own, such as `slab`), the runtime's structures further back do.
    let kept_by = via_index
        .checked_sub(1)
        .and_then(|before| tasks::kept_by(&on_the_way[before], &task.runtime))
        .or_else(|| task.listed.then(|| tasks::RUNTIME_STRUCTURES.to_owned()));
    Some(HoldingTask {
        task,
        via_index,
        kept_by,
    })
}

/// The thread a path starts in: the first frame of the program's own code that started it,
/// its own name when it set one, what it was doing.
fn holder_thread(p: &HeldPath, name: &str, exe: &str, symbols: &mut dyn Symbols) -> HolderThread {
    let spawn = p
        .spawned
        .as_ref()
        .map(|keys| resolve_stack(keys, symbols))
        .unwrap_or_default();
    let own_source = |f: &&Frame| f.file.as_deref().is_some_and(classify::is_own_source);
    let libtest = |f: &&Frame| {
        f.function
            .as_deref()
            .is_some_and(|n| n.starts_with("test::run_test"))
    };
    // The first frame that says who started it: the program's own code, or libtest's (a
    // thread the program started from inside a test has the test's frames further out).
    let starter = spawn
        .iter()
        .find(|f| (classify::is_user_frame(f, exe) && own_source(f)) || libtest(f));
    let runs_the_test = starter.is_some_and(|f| libtest(&f));
    let spawned_at = starter.filter(|_| !runs_the_test).map(frame_report);
    // Without a state, nothing says whether the name is its own: kept, as before. libtest
    // names the test's thread after the test, cut to 15 bytes: not shown.
    let named = p.thread_state.is_none_or(|s| s.named()) && !runs_the_test;
    HolderThread {
        spawned_at,
        name: named.then(|| name.to_owned()),
        runs_the_test,
        state: p.thread_state.and_then(state_words),
    }
}

/// A thread in words: `the test's own thread`, `a thread `worker-1` spawned at {site} that
/// never ended, running`. `site` is where it was spawned, as the caller shows a frame (the
/// renderers give paths relative to the workspace, which only they know).
pub fn thread_words(h: &HolderThread, site: Option<&str>) -> String {
    let mut text = match (&h.name, h.runs_the_test) {
        (_, true) => "the test's own thread".to_owned(),
        (Some(name), false) => format!("a thread `{name}`"),
        (None, false) => "a thread".to_owned(),
    };
    if let Some(site) = site {
        text.push_str(&format!(" spawned at {site} that never ended"));
    }
    if let Some(state) = &h.state {
        text.push_str(&format!(", {state}"));
    }
    text
}

/// When a timed wait ends at the latest, in words coarse enough to read the same in every
/// run (`/proc` gives a relative wait's whole length, an absolute one's time left):
/// `waking within 10 s`.
fn waking_within(ms: u64) -> String {
    const STEPS: [(u64, &str); 6] = [
        (1_000, "1 s"),
        (10_000, "10 s"),
        (60_000, "1 min"),
        (600_000, "10 min"),
        (3_600_000, "1 h"),
        (86_400_000, "a day"),
    ];
    match STEPS.iter().find(|(limit, _)| ms <= *limit) {
        Some((_, within)) => format!("waking within {within}"),
        None => "waking in more than a day".to_owned(),
    }
}

/// What a thread was doing, in words; None when it was not read.
pub fn state_words(s: leakcheck_protocol::paths::ThreadState) -> Option<String> {
    // x86-64 system call numbers.
    let blocked = |nr: u64| -> String {
        match nr {
            0 | 17 | 19 => "blocked reading".into(),
            1 | 18 | 20 => "blocked writing".into(),
            7 | 23 | 232 | 270 | 271 | 281 | 441 => "waiting for I/O".into(),
            34 => "paused".into(),
            35 | 230 => "asleep".into(),
            43 | 288 => "blocked in accept".into(),
            42 => "blocked in connect".into(),
            45 | 47 | 299 => "blocked receiving".into(),
            61 | 247 => "waiting for a child process".into(),
            202 => "waiting on a lock, a channel or a condition variable".into(),
            n => format!("blocked in system call {n}"),
        }
    };
    let words = match (s.letter(), s.syscall()) {
        (0, _) => return None,
        (b'R', _) => "running".to_owned(),
        (b'T' | b't', _) => "stopped".to_owned(),
        (b'Z' | b'X', _) => "ending".to_owned(),
        (_, Some(nr)) => match s.wake_ms() {
            Some(ms) => format!("{}, {}", blocked(nr), waking_within(ms)),
            None => blocked(nr),
        },
        (_, None) => "asleep".to_owned(),
    };
    Some(words)
}

/// What the task cells among the paths' objects showed at their first words (a task's
/// header points at its vtable, one per future type): an object whose stack was not
/// sampled with one of those words at the same place is such a task. A word seen in the
/// cells of more than one spawn site names none.
#[derive(Default)]
pub struct TaskWords(HashMap<(u8, FrameKey), Option<TaskReport>>);

impl TaskWords {
    /// From every object of `paths` whose allocation stack is a task cell's.
    pub fn of<'a>(
        paths: impl IntoIterator<Item = &'a HeldPath>,
        exe: &str,
        symbols: &mut dyn Symbols,
    ) -> TaskWords {
        let paths: Vec<&HeldPath> = paths.into_iter().collect();
        // Only an object without a stack (sampled stacks, under `run`) needs naming by its
        // words; with every stack taken there is nothing to learn, and nothing to resolve.
        if !paths.iter().any(|p| p.chain.iter().any(Vec::is_empty)) {
            return TaskWords::default();
        }
        let mut seen: HashMap<(u8, FrameKey), Option<TaskReport>> = HashMap::new();
        for p in paths {
            for (keys, words) in p.chain.iter().zip(&p.words) {
                if keys.is_empty() || words.is_empty() {
                    continue;
                }
                let Some(task) = tasks::task_of(&resolve_stack(keys, symbols), exe) else {
                    continue;
                };
                for w in words {
                    seen.entry(w.clone())
                        .and_modify(|known| {
                            if known
                                .as_ref()
                                .is_some_and(|k| k.spawned_at != task.spawned_at)
                            {
                                *known = None;
                            }
                        })
                        .or_insert_with(|| Some(task.clone()));
                }
            }
        }
        TaskWords(seen)
    }

    /// The task an object with these words is, when one of them names one.
    pub fn task(&self, words: &[(u8, FrameKey)]) -> Option<TaskReport> {
        words.iter().find_map(|w| self.0.get(w).cloned().flatten())
    }
}

/// The first word of the object a path holds (the held stack's own), when the scan read it.
pub fn held_first_word(p: &HeldPath) -> Option<u64> {
    p.first_words.last().copied().flatten()
}

/// Whether the way to a task's cell runs through its runtime `runtime`'s own structures
/// (see [`tasks::is_runtime_bookkeeping`]): the runtime still lists the task.
pub fn lists_task(p: &HeldPath, runtime: &str, symbols: &mut dyn Symbols) -> bool {
    p.chain[..p.chain.len() - 1]
        .iter()
        .any(|keys| tasks::is_runtime_bookkeeping(&resolve_stack(keys, symbols), runtime))
}

/// Where an object was allocated: the first frame in the program's own code (not std's,
/// nor a crate std vendors, nor the registry's), or of the binary, or the first.
pub(crate) fn allocation_site(frames: &[Frame], exe: &str) -> FrameReport {
    let own_source = |f: &&Frame| f.file.as_deref().is_some_and(classify::is_own_source);
    let user = |f: &&Frame| classify::is_user_frame(f, exe);
    frames
        .iter()
        .find(|f| user(f) && own_source(f))
        .or_else(|| frames.iter().find(user))
        .or(frames.first())
        .map_or_else(|| FrameReport::named("?"), frame_report)
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned())
}

/// A `thread_local!`'s own name from the symbol of the static its expansion declares
/// (`app::CACHE::{{constant}}::{{closure}}::VAL` → `app::CACHE`).
fn tls_name(symbol: &str) -> String {
    match symbol.find("::{{") {
        Some(i) => symbol[..i].to_owned(),
        None => symbol.to_owned(),
    }
}

#[cfg(test)]
mod tests;
