use super::*;
use crate::evidence::paths::{by_stack, parse};
use std::sync::Arc;

const PATHS: &str = "leakcheck-paths/2
path
root static 0x1a2b0 -
@ 0x55d0a0001010 0x55d0a0002020
@ 0x55d0a0003030
path
root tls 0x38 /usr/lib/libc.so.6
thread 4242 pool-0
@ 0x55d0a0004040
path
root stack 0x55d0a0005050
thread 4243 worker
@ 0x55d0a0006060
skip 12
@ 0x55d0a0007070
path
root register r12
thread 4244 reader
@ 0x55d0a0008080

MAPPED_LIBRARIES:
55d0a0000000-55d0a0100000 r-xp 00001000 08:01 123 /work/prog
";

fn key(offset: u64) -> FrameKey {
    FrameKey {
        object: Arc::from("/work/prog"),
        file_offset: offset,
    }
}

#[test]
fn a_paths_file_gives_each_path_its_root_thread_and_chain_as_frame_keys() {
    let paths = parse(PATHS).expect("a whole paths file");
    assert_eq!(paths.len(), 4);
    assert_eq!(
        paths[0].root,
        RawRoot::Static {
            vaddr: 0x1a2b0,
            object: "-".into()
        }
    );
    assert_eq!(paths[0].thread, None);
    assert_eq!(
        paths[0].chain,
        vec![vec![key(0x2010), key(0x3020)], vec![key(0x4030)]]
    );
    assert_eq!(
        paths[1].root,
        RawRoot::Tls {
            offset: 0x38,
            object: "/usr/lib/libc.so.6".into()
        }
    );
    assert_eq!(paths[1].thread, Some((4242, "pool-0".into())));
    assert_eq!(
        paths[2].root,
        RawRoot::Stack {
            frame: Some(key(0x6050))
        }
    );
    assert_eq!(paths[2].skipped, 12);
    assert_eq!(paths[2].chain.len(), 2);
    assert_eq!(paths[3].root, RawRoot::Register("r12".into()));
}

#[test]
fn a_paths_file_cut_short_or_of_another_kind_gives_nothing() {
    let cut = &PATHS[..PATHS.find("MAPPED").unwrap()];
    assert_eq!(parse(cut), None);
    assert_eq!(parse("heap_v2/1\n\nMAPPED_LIBRARIES:\n"), None);
    assert_eq!(
        parse(&PATHS.replace("root tls", "what tls")),
        None,
        "an unknown line"
    );
}

#[test]
fn paths_are_found_by_the_stack_they_hold_and_the_shortest_stands_after_a_cut() {
    let paths = parse(PATHS).unwrap();
    let whole = by_stack(paths.clone(), <[FrameKey]>::to_vec);
    assert_eq!(whole.len(), 4);
    assert_eq!(whole[&vec![key(0x4030)]].root, paths[0].root);
    // Cut to nothing, all four hold the same stack: the one with the shortest chain stands.
    let cut = by_stack(paths, |_| Vec::new());
    assert_eq!(cut.len(), 1);
    assert_eq!(cut[&Vec::new()].chain.len(), 1);
}

#[test]
fn roots_are_named_in_words_with_their_thread() {
    let paths = parse(PATHS).unwrap();
    let mut symbols = crate::evidence::symbols::Replay::new(Default::default());
    let exe = "/nonexistent/leakcheck/prog";
    let static_root = describe(&paths[0], exe, &mut symbols, &TaskWords::default());
    assert_eq!(static_root.root_kind, RootKind::Static);
    assert_eq!(static_root.root, "static data of `prog` at 0x1a2b0");
    assert_eq!(
        static_root.via.len(),
        1,
        "one object between the root and the stack's"
    );
    let tls = describe(&paths[1], exe, &mut symbols, &TaskWords::default());
    assert_eq!(tls.root, "thread-local storage of a thread `pool-0`");
    let register = describe(&paths[3], exe, &mut symbols, &TaskWords::default());
    // A register's name says nothing to the program's author: kept as the symbol only.
    assert_eq!(register.root, "a register of a thread `reader`");
    assert_eq!(register.symbol.as_deref(), Some("r12"));
    assert!(register.via.is_empty());
    assert_eq!(register.thread.as_deref(), Some("reader"));
    let stack = describe(&paths[2], exe, &mut symbols, &TaskWords::default());
    assert_eq!((stack.root_kind, stack.skipped), (RootKind::Stack, 12));
}

#[test]
fn a_thread_local_is_named_by_its_macro_s_name() {
    assert_eq!(
        tls_name("app::cache::CACHE::{{constant}}::{{closure}}::VAL"),
        "app::cache::CACHE"
    );
    assert_eq!(tls_name("app::PLAIN"), "app::PLAIN");
}

/// Two paths of a sampled run: one reaches a task cell whose stack was sampled, the other
/// reaches a buffer through an object whose stack was not, with the same vtable word.
const TASK_PATHS: &str = "leakcheck-paths/2
path
root static 0x1a2b0 -
@ 0x55d0a0001010
words 0x1 0x0
@ 0x55d0a0009090
words 0xcc 0x0 0x55d0a00f0000 0x1
path
root static 0x1a2c0 -
@
words 0xcd 0x7f0000001000 0x55d0a00f0000 0x1
@ 0x55d0a000a0a0
words 0x0 0x400

MAPPED_LIBRARIES:
55d0a0000000-55d0a0100000 r-xp 00001000 08:01 123 /work/prog
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
";

#[test]
fn an_object_whose_stack_was_not_sampled_is_a_task_when_its_words_say_so() {
    use crate::evidence::symbols::{Captured, Replay};
    let paths = parse(TASK_PATHS).expect("a whole paths file");
    // Only words inside a mapped file are kept, by their place in the object.
    assert_eq!(paths[0].words[1], vec![(2, key(0xf1000))]);
    assert_eq!(paths[1].words[0], vec![(2, key(0xf1000))]);
    assert!(paths[1].chain[0].is_empty(), "not sampled");
    let exe = "/work/prog";
    let frame = |function: &str, file: &str, line| frame(function, file, line, 0);
    let registry =
        "/root/.cargo/registry/src/index.crates.io-1/tokio-1.54.1/src/runtime/task/core.rs";
    let mut symbols = Replay::new(Captured {
        code: vec![
            answer(
                0xa090,
                vec![
                    frame("tokio::runtime::task::core::Cell<T,S>::new", registry, 261),
                    frame("tokio::runtime::runtime::Runtime::spawn", registry, 255),
                    frame("app::subscribe", "/ws/src/main.rs", 31),
                ],
            ),
            answer(0xb0a0, vec![frame("app::subscribe", "/ws/src/main.rs", 26)]),
        ],
        ..Captured::default()
    });
    let words = TaskWords::of(&paths, exe, &mut symbols);
    let held = describe(&paths[1], exe, &mut symbols, &words);
    let task = held.task.expect("held by a task known by its words");
    assert_eq!(task.via_index, 0);
    assert_eq!(task.task.runtime, "tokio");
    assert_eq!(task.task.spawned_at.line, Some(31));
    // Without the sampled cell's words, nothing says what that object is.
    let alone = TaskWords::of(&paths[1..], exe, &mut symbols);
    assert_eq!(describe(&paths[1], exe, &mut symbols, &alone).task, None);
}

/// A thread that inherited its name from the test's thread, spawned by the program's own
/// code, looping in `read`: named by its spawn line and its state, not by a name it never
/// set nor by a register.
const THREAD_PATHS: &str = "leakcheck-paths/3
path
root register r14
thread 4245 clone_churn
state 0x153
spawned
@ 0x55d0a0009090 0x55d0a000a0a0 0x55d0a000b0b0
@ 0x55d0a0008080
path
root stack 0x55d0a0005050
thread 4246 tests::clone_ch
state 0x8000000000000052
spawned
@ 0x55d0a0009090 0x55d0a000c0c0
@ 0x55d0a0006060

MAPPED_LIBRARIES:
55d0a0000000-55d0a0100000 r-xp 00001000 08:01 123 /work/prog
";

/// What the symbols of `/work/prog` say at `offset`.
fn answer(offset: u64, frames: Vec<Frame>) -> crate::evidence::symbols::CodeAnswer {
    crate::evidence::symbols::CodeAnswer {
        object: "/work/prog".into(),
        offset,
        frames,
    }
}

fn frame(function: &str, file: &str, line: u32, offset: u64) -> Frame {
    Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line: Some(line),
        column: None,
        object: "/work/prog".into(),
        offset,
        inlined: false,
    }
}

#[test]
fn a_thread_is_named_by_the_line_that_spawned_it_and_what_it_was_doing() {
    use crate::evidence::symbols::{Captured, Replay};
    let paths = parse(THREAD_PATHS).expect("a whole paths file");
    assert_eq!(paths.len(), 2);
    assert_eq!(paths[0].chain.len(), 1, "the spawn stack is not an object");
    assert_eq!(paths[0].spawned.as_ref().map(Vec::len), Some(3));
    let mut symbols = Replay::new(Captured {
        code: vec![
            answer(
                0xa090,
                vec![frame(
                    "std::thread::Builder::spawn",
                    "/rustc/abc/library/std/src/thread/mod.rs",
                    400,
                    0xa090,
                )],
            ),
            answer(
                0xb0a0,
                vec![frame("lib::clone_churn", "/work/tests/lib.rs", 648, 0xb0a0)],
            ),
            answer(
                0xc0b0,
                vec![frame(
                    "test::run_test",
                    "/rustc/abc/library/test/src/lib.rs",
                    600,
                    0xc0b0,
                )],
            ),
            answer(
                0xd0c0,
                vec![frame(
                    "test::run_test::run_test_inner",
                    "/rustc/abc/library/test/src/lib.rs",
                    620,
                    0xd0c0,
                )],
            ),
        ],
        ..Captured::default()
    });
    let exe = "/work/prog";
    let held = describe(&paths[0], exe, &mut symbols, &TaskWords::default());
    let h = held.holder.expect("the thread is described");
    assert_eq!(h.spawned_at.as_ref().and_then(|f| f.line), Some(648));
    assert_eq!(
        h.spawned_at.as_ref().map(|f| f.function.as_str()),
        Some("lib::clone_churn")
    );
    assert_eq!(
        h.name, None,
        "it never named itself: its creator's name says nothing"
    );
    assert!(!h.runs_the_test);
    assert_eq!(h.state.as_deref(), Some("blocked reading"));
    assert_eq!(
        held.root,
        "a register of a thread spawned at `lib::clone_churn` that never ended, blocked reading"
    );
    // libtest's own thread for the test: said so, without libtest's cut of the test's name.
    let test_thread = describe(&paths[1], exe, &mut symbols, &TaskWords::default());
    let h = test_thread.holder.expect("the thread is described");
    assert!(h.runs_the_test);
    assert_eq!((h.spawned_at, h.name), (None, None));
    assert_eq!(
        test_thread.root,
        "the stack of the test's own thread, running"
    );
}

#[test]
fn a_threads_state_is_said_in_words() {
    use leakcheck_protocol::paths::ThreadState;
    let words = |letter: u8, nr: Option<u64>, ms: Option<u64>| {
        state_words(ThreadState::new(letter, nr, ms, false))
    };
    assert_eq!(words(b'R', None, None).as_deref(), Some("running"));
    assert_eq!(
        words(b'S', Some(43), None).as_deref(),
        Some("blocked in accept")
    );
    assert_eq!(
        words(b'S', Some(230), Some(1500)).as_deref(),
        Some("asleep, waking within 10 s")
    );
    assert_eq!(
        words(b'S', Some(202), None).as_deref(),
        Some("waiting on a lock, a channel or a condition variable")
    );
    assert_eq!(words(b'S', None, None).as_deref(), Some("asleep"));
    // r2d2's reaper, due 30 s on; an hour's sleep; a week's.
    assert_eq!(
        words(b'S', Some(202), Some(30_000)).as_deref(),
        Some("waiting on a lock, a channel or a condition variable, waking within 1 min")
    );
    assert_eq!(
        words(b'S', Some(35), Some(3_600_000)).as_deref(),
        Some("asleep, waking within 1 h")
    );
    assert_eq!(
        words(b'S', Some(35), Some(604_800_000)).as_deref(),
        Some("asleep, waking in more than a day")
    );
    assert_eq!(state_words(ThreadState(0)), None, "not read");
}

#[test]
fn a_word_in_a_frame_of_the_tool_s_runtime_names_no_frame() {
    let runtime = "/cache/runtime-1/libleakcheck_runtime.so";
    let text = PATHS.replace(
        "MAPPED_LIBRARIES:\n",
        &format!(
            "MAPPED_LIBRARIES:\n7f0000000000-7f0000100000 r-xp 00002000 08:01 124 {runtime}\n"
        ),
    );
    let text = text.replace("root stack 0x55d0a0005050", "root stack 0x7f0000005050");
    let paths = parse(&text).unwrap();
    let captured: crate::evidence::symbols::Captured = serde_json::from_value(serde_json::json!({
        "code": [{"object": runtime, "offset": 0x7050, "frames": [{
            "function": "leakcheck_runtime::clock::futex_call", "file": null, "line": null,
            "column": null, "object": runtime, "offset": 0x7050, "inlined": false
        }]}],
        "data": [], "definitions": []
    }))
    .unwrap();
    let mut symbols = crate::evidence::symbols::Replay::new(captured);
    let stack = describe(&paths[2], "/work/prog", &mut symbols, &TaskWords::default());
    assert_eq!(stack.root_kind, RootKind::Stack);
    assert_eq!((stack.frame, stack.symbol), (None, None), "{}", stack.root);
}
