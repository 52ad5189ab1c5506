use super::*;
use crate::evidence::cycles::parse;
use crate::evidence::symbols::{Captured, CodeAnswer, Replay};
use crate::report::text::{member_place, member_what, unreachable_line};

/// Six cycles alike, as the runtime wrote them for a cache whose eviction callback holds the
/// cell the cache is kept in: the cache's `Arc` (src/lib.rs:24), its callback's `Box`
/// (src/lib.rs:22), the cell's `Arc` (src/lib.rs:20); and a `Box::leak` (src/lib.rs:40).
const CYCLES: &str = "leakcheck-cycles/1
cycle 6 18
member 48 8 3
@ 0x55d0a0001010 0x55d0a0002020
words 0x1 0x1
member 8 0 3
@ 0x55d0a0003030 0x55d0a0004040
words 0x55d0a0ff0010
member 40 16 3
@ 0x55d0a0001010 0x55d0a0005050
words 0x2 0x1
unreached 6 0 0
@ 0x55d0a0001010 0x55d0a0002020
unreached 6 0 0
@ 0x55d0a0003030 0x55d0a0004040
unreached 6 0 0
@ 0x55d0a0001010 0x55d0a0005050
unreached 0 0 6
@ 0x55d0a0003030 0x55d0a0006060
cost 24 18 96 41

MAPPED_LIBRARIES:
55d0a0000000-55d0a0100000 r-xp 00001000 08:01 123 /ws/target/debug/deps/app-1
";

const EXE: &str = "/ws/target/debug/deps/app-1";

fn frame(function: &str, file: &str, line: u32, offset: u64) -> CodeAnswer {
    CodeAnswer {
        object: EXE.into(),
        offset,
        frames: vec![Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(line),
            column: None,
            object: EXE.into(),
            offset,
            inlined: false,
        }],
    }
}

fn symbols() -> Replay {
    let std = |f: &str, file: &str, offset| {
        frame(
            f,
            &format!("/rustc/abc/library/alloc/src/{file}"),
            1,
            offset,
        )
    };
    let own = |f: &str, line, offset| frame(f, "/ws/src/lib.rs", line, offset);
    Replay::new(Captured {
        code: vec![
            std("alloc::sync::Arc<T>::new", "sync.rs", 0x2010),
            own("app::cached", 24, 0x3020),
            std("alloc::boxed::Box<T>::new", "boxed.rs", 0x4030),
            own("app::cached", 22, 0x5040),
            own("app::cached", 20, 0x6050),
            own("app::leak_one", 40, 0x7060),
        ],
        ..Captured::default()
    })
}

fn place(f: &crate::model::FrameReport) -> String {
    format!(
        "{}:{}",
        f.file.as_deref().unwrap_or("?").trim_start_matches("/ws/"),
        f.line.unwrap_or(0)
    )
}

#[test]
fn a_cycles_file_gives_its_groups_and_how_each_stack_is_lost() {
    let cycles = parse(CYCLES).expect("a whole cycles file");
    assert_eq!(cycles.groups.len(), 1);
    let g = &cycles.groups[0];
    assert_eq!((g.count, g.objects, g.length), (6, 18, 3));
    assert_eq!(g.members[0].words, vec![1, 1]);
    assert_eq!((g.members[2].size, g.members[2].offset), (40, 16));
    assert_eq!(cycles.lost.len(), 4);
    assert_eq!(
        cycles.lost[3].1,
        How {
            cycle: 0,
            inside: 0,
            alone: 6
        }
    );
    assert!(!cycles.limited);
    // Cut short, or with a line of another kind: nothing.
    assert_eq!(parse(&CYCLES[..CYCLES.find("MAPPED").unwrap()]), None);
    assert_eq!(parse(&CYCLES.replace("member 8 0 3", "member 8 0")), None);
    assert!(
        parse(&CYCLES.replace("cost 24", "limit 96\ncost 24"))
            .unwrap()
            .limited
    );
}

#[test]
fn a_cycle_is_named_from_its_owner_with_the_pointer_to_make_weak() {
    let by = ByStack::new(parse(CYCLES).unwrap(), <[FrameKey]>::to_vec);
    let mut symbols = symbols();
    let key = |offsets: &[u64]| -> Vec<FrameKey> {
        offsets
            .iter()
            .map(|&o| FrameKey {
                object: std::sync::Arc::from(EXE),
                file_offset: o,
            })
            .collect()
    };
    let Some(Unreachable::Cycle(c)) = by.describe(&key(&[0x2010, 0x3020]), EXE, &mut symbols)
    else {
        panic!("the cache's stack is in a cycle");
    };
    assert_eq!((c.cycles, c.objects, c.length), (6, 18, 3));
    // The cell, allocated first (line 20), is the owner: the callback's pointer back to it
    // closes the cycle.
    let sites: Vec<u32> = c.members.iter().map(|m| m.site.line.unwrap()).collect();
    assert_eq!(sites, [20, 24, 22]);
    let what: Vec<String> = c.members.iter().map(member_what).collect();
    assert_eq!(what, ["an `Arc`", "an `Arc`", "a `Box`"]);
    assert_eq!((c.members[0].strong, c.members[0].weak), (Some(2), Some(1)));
    assert_eq!(c.members[2].strong, None, "a Box has no counts");
    assert_eq!(c.members[1].offset, 8);
    let text = unreachable_line(&Unreachable::Cycle(c), place);
    assert_eq!(
        text,
        "unreachable: a reference cycle of 3 objects — an `Arc` (src/lib.rs:20) → an `Arc` (src/lib.rs:24) → a `Box` (src/lib.rs:22) → back; 6 such cycles; one of these pointers should be `Weak`: likely a `Box`'s (src/lib.rs:22) back to an `Arc` (src/lib.rs:20)"
    );
    let leaked = by.describe(&key(&[0x4030, 0x7060]), EXE, &mut symbols);
    assert_eq!(leaked, Some(Unreachable::NoCycle));
    assert!(unreachable_line(&leaked.unwrap(), place)
        .starts_with("unreachable, no cycle: nothing points"));
    assert_eq!(by.describe(&key(&[0x9999]), EXE, &mut symbols), None);
    // A stack whose objects are in a cycle of the group, off the one cycle shown.
    let off = CYCLES.replace(
        "cost 24",
        "unreached 6 0 0\n@ 0x55d0a0003030 0x55d0a0008080\ncost 24",
    );
    let by = ByStack::new(parse(&off).unwrap(), <[FrameKey]>::to_vec);
    assert_eq!(
        by.describe(&key(&[0x4030, 0x9080]), EXE, &mut symbols),
        Some(Unreachable::InCycle)
    );
}

#[test]
fn a_type_is_read_from_a_constructor_s_generic_argument() {
    let f = |name: &str, file: &str| Frame {
        function: Some(name.into()),
        file: Some(file.into()),
        line: Some(1),
        column: None,
        object: EXE.into(),
        offset: 0,
        inlined: true,
    };
    let sync = "/rustc/abc/library/alloc/src/sync.rs";
    assert_eq!(
        allocated_by(&[f("new<std::sync::once_lock::OnceLock<app::Cache>>", sync)]),
        (Some("Arc".into()), Some("OnceLock<Cache>".into()))
    );
    assert_eq!(
        allocated_by(&[f(
            "alloc::rc::Rc<core::cell::RefCell<app::Node>>::new",
            "/rustc/abc/library/alloc/src/rc.rs"
        )]),
        (Some("Rc".into()), Some("Node".into()))
    );
    assert_eq!(
        allocated_by(&[f("alloc::sync::Arc<T>::new", sync)]),
        (Some("Arc".into()), None)
    );
    assert_eq!(
        allocated_by(&[f(
            "alloc::raw_vec::RawVecInner<A>::finish_grow",
            "/rustc/abc/library/alloc/src/raw_vec/mod.rs"
        )]),
        (Some("Vec".into()), None)
    );
    assert_eq!(
        allocated_by(&[f("app::make", "/ws/src/lib.rs")]),
        (None, None)
    );
}

/// A parent and its child, each an `Rc` made by the same constructor line (`Node::new`,
/// src/tree.rs:23) from two lines of a test (55: the parent, 56: the child); the parent's
/// children `Vec` (src/tree.rs:29) holds the child, whose parent field points back.
const TREE: &str = "leakcheck-cycles/1
cycle 6 18
member 96 40 3
@ 0x55d0a0001010 0x55d0a0008080 0x55d0a0009090
words 0x1 0x1
member 96 48 3
@ 0x55d0a0001010 0x55d0a0008080 0x55d0a000a0a0
words 0x2 0x1
member 8 0 3
@ 0x55d0a0004040 0x55d0a000b0b0
words 0x55d0a0ff0010
cost 24 18 96 41

MAPPED_LIBRARIES:
55d0a0000000-55d0a0100000 r-xp 00001000 08:01 123 /ws/target/debug/deps/app-1
";

#[test]
fn members_allocated_at_one_line_are_told_apart_by_the_call_further_out() {
    let cycles = parse(TREE).expect("a whole cycles file");
    let tree = |f: &str, line, offset| frame(f, "/ws/src/tree.rs", line, offset);
    let mut symbols = Replay::new(Captured {
        code: vec![
            frame(
                "alloc::rc::Rc<T>::new",
                "/rustc/abc/library/alloc/src/rc.rs",
                1,
                0x2010,
            ),
            tree("app::tree::Node::new", 23, 0x9080),
            tree("app::tree::tests::paths", 56, 0xa090),
            tree("app::tree::tests::paths", 55, 0xb0a0),
            frame(
                "alloc::raw_vec::RawVec<T>::grow_one",
                "/rustc/abc/library/alloc/src/raw_vec/mod.rs",
                1,
                0x5040,
            ),
            tree("app::tree::Node::add_child", 29, 0xc0b0),
        ],
        ..Captured::default()
    });
    let c = cycle_report(&cycles.groups[0], EXE, &mut symbols);
    let place_of = |m: &CycleMember| {
        member_place(m, &|f: &crate::model::FrameReport| {
            format!(
                "{}:{}",
                f.file.as_deref().unwrap_or("?").trim_start_matches("/ws/"),
                f.line.unwrap_or(0)
            )
        })
    };
    let places: Vec<String> = c.members.iter().map(place_of).collect();
    // The parent (made at line 55) owns the cycle; the child's pointer back to it closes it.
    assert_eq!(
        places,
        [
            "src/tree.rs:23 via src/tree.rs:55",
            "src/tree.rs:29",
            "src/tree.rs:23 via src/tree.rs:56"
        ]
    );
    assert_eq!(c.members[1].called_at, None, "its line is its own");
    let (from, to) = c.weak_edge().unwrap();
    assert_eq!(
        (place_of(from), place_of(to)),
        (places[2].clone(), places[0].clone())
    );
}
