use super::*;
use std::io::{Read, Seek};
use std::os::fd::AsRawFd;

/// A stack arena of `n` stacks of one frame each (frame `0x1000 + k`); stack `k`'s id is
/// `k * 7`.
fn arena(n: usize) -> Vec<u64> {
    (0..n)
        .flat_map(|k| [0, 1, 0, 0, 0, 0, 0x1000 + k as u64])
        .collect()
}

/// The objects of `blocks`, sorted by start: block `k` allocated at stack `stacks[k]`, lost
/// unless `reached[k]`.
fn objs_of(blocks: &[&[usize]], stacks: &[u32], reached: &[bool]) -> Vec<Obj> {
    let mut objs: Vec<Obj> = blocks
        .iter()
        .zip(stacks)
        .zip(reached)
        .map(|((b, &s), &r)| Obj {
            start: b.as_ptr() as usize,
            end: b.as_ptr() as usize + std::mem::size_of_val(*b),
            id: s * 7,
            marked: r,
            ..Obj::default()
        })
        .collect();
    objs.sort_unstable_by_key(|o| o.start);
    objs
}

/// What `write` wrote, as lines.
fn written(objs: &[Obj], arena: &[u64]) -> Vec<String> {
    let mut file = tempfile();
    let mut out = Out::to_fd(file.as_raw_fd());
    assert!(write(&mut out, objs, arena));
    out.flush();
    let mut text = String::new();
    file.rewind().unwrap();
    file.read_to_string(&mut text).unwrap();
    text.lines().map(str::to_owned).collect()
}

fn tempfile() -> std::fs::File {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "leakcheck-cycles-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    file
}

fn addr(b: &[usize]) -> usize {
    b.as_ptr() as usize
}

#[test]
fn cycles_alike_are_one_group_and_each_lost_object_says_how_it_is_lost() {
    // Two cycles alike (stacks 0 → 1 → 2 → back), each a strong count pair first, the
    // pointer to the next member at word 2; a lost object only a cycle member points to
    // (stack 3, inside); one nothing points to (stack 4); one reached (stack 5).
    let mut blocks: Vec<Vec<usize>> = (0..9).map(|_| vec![0usize; 4]).collect();
    for cycle in [0, 3] {
        for i in 0..3 {
            let next = addr(&blocks[cycle + (i + 1) % 3]);
            let b = &mut blocks[cycle + i];
            b[0] = 1;
            b[1] = 1;
            // Interior pointers count as the marking counts them.
            b[2] = next + 8;
        }
    }
    let inside = addr(&blocks[6]);
    blocks[1][3] = inside;
    let refs: Vec<&[usize]> = blocks.iter().map(Vec::as_slice).collect();
    let objs = objs_of(
        &refs,
        &[0, 1, 2, 0, 1, 2, 3, 4, 5],
        &[false, false, false, false, false, false, false, false, true],
    );
    let lines = written(&objs, &arena(6));
    assert_eq!(lines[0], "leakcheck-cycles/1");
    assert_eq!(lines[1], "cycle 2 6", "{lines:#?}");
    // Written from the member of the least stack, each pointing to the next at offset 16.
    assert_eq!(
        lines[2..11],
        [
            "member 32 16 3",
            "@ 0x1000",
            "words 0x1 0x1",
            "member 32 16 3",
            "@ 0x1001",
            "words 0x1 0x1",
            "member 32 16 3",
            "@ 0x1002",
            "words 0x1 0x1",
        ]
    );
    assert_eq!(
        lines[11..21],
        [
            "unreached 2 0 0",
            "@ 0x1000",
            "unreached 2 0 0",
            "@ 0x1001",
            "unreached 2 0 0",
            "@ 0x1002",
            "unreached 0 1 0",
            "@ 0x1003",
            "unreached 0 0 1",
            "@ 0x1004",
        ]
    );
    assert!(lines[21].starts_with("cost 8 7 32 "), "{}", lines[21]);
    assert_eq!(lines.len(), 22);
    std::hint::black_box(&blocks);
}

#[test]
fn a_group_names_one_shortest_cycle_and_an_object_pointing_to_itself_is_one() {
    // Parent (stack 0) → its children's buffer (1) → child a (2) and child b (2), each child
    // → parent: one group of four objects, its shortest cycle three long. And a lone object
    // (stack 3) whose word 1 points to itself.
    let mut parent = vec![1usize, 1, 0, 0];
    let mut buffer = vec![0usize; 2];
    let mut a = vec![1usize, 1, 0];
    let mut b = vec![1usize, 1, 0];
    let mut own = vec![0usize; 2];
    parent[3] = addr(&buffer);
    buffer[0] = addr(&a);
    buffer[1] = addr(&b);
    a[2] = addr(&parent);
    b[2] = addr(&parent);
    own[1] = addr(&own);
    let objs = objs_of(
        &[&parent, &buffer, &a, &b, &own],
        &[0, 1, 2, 2, 3],
        &[false; 5],
    );
    let lines = written(&objs, &arena(4));
    let members: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("member") || l.starts_with("cycle"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        members,
        [
            "cycle 1 4",
            "member 32 24 3",
            "member 16 0 3",
            "member 24 16 3",
            "cycle 1 1",
            "member 16 8 1",
        ],
        "{lines:#?}"
    );
    let i = lines
        .iter()
        .position(|l| l.starts_with("unreached"))
        .unwrap();
    assert_eq!(
        lines[i..i + 8],
        [
            "unreached 1 0 0",
            "@ 0x1000",
            "unreached 1 0 0",
            "@ 0x1001",
            "unreached 2 0 0",
            "@ 0x1002",
            "unreached 1 0 0",
            "@ 0x1003",
        ]
    );
    std::hint::black_box((&parent, &buffer, &a, &b, &own));
}

#[test]
fn without_lost_objects_only_the_cost_is_written() {
    let a = vec![0usize; 2];
    let objs = objs_of(&[&a], &[0], &[true]);
    let lines = written(&objs, &arena(1));
    assert_eq!(lines[0], "leakcheck-cycles/1");
    assert!(lines[1].starts_with("cost 0 0 0 "));
    assert_eq!(lines.len(), 2);
}

#[test]
fn the_least_rotation_starts_every_cycle_alike_at_the_same_member() {
    let cmp = |a: u32, b: u32| a.cmp(&b);
    assert_eq!(least_rotation(&[3, 1, 2], cmp), 1);
    assert_eq!(least_rotation(&[1, 2, 1, 1], cmp), 2);
    assert_eq!(least_rotation(&[5], cmp), 0);
}

#[test]
fn strongly_connected_groups_of_a_graph() {
    // 0 → 1 → 2 → 0, 2 → 3, 3 → 4 → 3, 5 alone.
    let adjacency: [&[usize]; 6] = [&[1], &[2], &[0, 3], &[4], &[3], &[]];
    let mut off = vec![0u32];
    let mut edges = Vec::new();
    for targets in adjacency {
        edges.extend(targets.iter().map(|&t| t as u64));
        off.push(edges.len() as u32);
    }
    let g = Graph {
        off: &off,
        edges: &edges,
    };
    let m = adjacency.len();
    let mut t: Vec<Vec<u32>> = (0..5).map(|_| vec![0u32; m]).collect();
    let [index, low, next, call, comp] = &mut t[..] else {
        unreachable!()
    };
    let n = components(&g, m, index, low, next, call, comp);
    assert_eq!(n, 3);
    assert!(comp[0] == comp[1] && comp[1] == comp[2]);
    assert!(comp[3] == comp[4] && comp[3] != comp[0]);
    assert!(comp[5] != comp[0] && comp[5] != comp[3]);
}
