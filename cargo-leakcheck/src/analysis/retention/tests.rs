use super::*;
use std::sync::Arc;

const PATHS: &str = "leakcheck-paths/1
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
    let static_root = describe(&paths[0], exe, &mut symbols);
    assert_eq!(static_root.root_kind, RootKind::Static);
    assert_eq!(static_root.root, "static data of `prog` at 0x1a2b0");
    assert_eq!(
        static_root.via.len(),
        1,
        "one object between the root and the stack's"
    );
    let tls = describe(&paths[1], exe, &mut symbols);
    assert_eq!(tls.root, "thread-local storage of thread `pool-0`");
    let register = describe(&paths[3], exe, &mut symbols);
    assert_eq!(register.root, "register r12 of thread `reader`");
    assert!(register.via.is_empty());
    assert_eq!(register.thread.as_deref(), Some("reader"));
    let stack = describe(&paths[2], exe, &mut symbols);
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
