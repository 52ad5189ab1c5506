use super::*;
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
    let mut symbols = crate::execution::binary_symbols::FromFiles::default();
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
    assert_eq!(tls.root, "thread-local storage of thread `pool-0`");
    let register = describe(&paths[3], exe, &mut symbols, &TaskWords::default());
    assert_eq!(register.root, "register r12 of thread `reader`");
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
    use crate::analysis::symbols::{Captured, CodeAnswer, Frame, Replay};
    let paths = parse(TASK_PATHS).expect("a whole paths file");
    // Only words inside a mapped file are kept, by their place in the object.
    assert_eq!(paths[0].words[1], vec![(2, key(0xf1000))]);
    assert_eq!(paths[1].words[0], vec![(2, key(0xf1000))]);
    assert!(paths[1].chain[0].is_empty(), "not sampled");
    let exe = "/work/prog";
    let frame = |function: &str, file: &str, line| Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line: Some(line),
        column: None,
        object: exe.into(),
        offset: 0,
        inlined: false,
    };
    let registry =
        "/root/.cargo/registry/src/index.crates.io-1/tokio-1.54.1/src/runtime/task/core.rs";
    let answer = |offset, frames| CodeAnswer {
        object: exe.into(),
        offset,
        frames,
    };
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
