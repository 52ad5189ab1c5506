//! Reference cycles among the objects the reachability scan found lost (see [`crate::reach`]),
//! written beside the dump as `<dump>.cycles` in the format of `leakcheck_protocol::cycles`.
//!
//! An `Rc`/`Arc` cycle is lost memory that its own counts keep: each member holds a strong
//! count on the next, so none reaches zero. The scan already knows which objects no root
//! reaches; this reads their words once more, with the same rule the marking uses (an aligned
//! word pointing at an object's start or inside it), to find the pointers among them, then
//! the strongly connected groups those pointers make (Tarjan's algorithm, iterative), and
//! one shortest cycle through each group (breadth first). Groups whose cycles run through the
//! same allocation stacks in the same order are written once, with their count: a test that
//! makes one cycle per run writes one line.
//!
//! Allocation-free, like the rest of the scan: every table is an anonymous mapping. Lost
//! objects are few in a healthy suite; on a huge heap the search stops after reading
//! [`MAX_WORDS`] words of them and says so (`limit`).

use crate::reach::Obj;
use crate::region::Region;
use crate::tracker::dump::{is_written, write_stack, Out};
use leakcheck_protocol::cycles::{Line, MAX_MEMBERS, WORDS};

/// Most words of lost objects read (128 MiB): the bound on the search's time.
const MAX_WORDS: usize = 1 << 24;
/// Most groups of cycles told apart; cycles of further shapes are not written.
const MAX_GROUPS: usize = 1024;
/// No node.
const NONE: u32 = u32::MAX;
/// Words of one group in the group table: hash, count, objects, length, then the members'
/// object indices and their offsets, [`MAX_MEMBERS`] each.
const GROUP_WORDS: usize = 4 + 2 * MAX_MEMBERS;

/// `n` zeroed `u32`s in a mapping of their own, unmapped when dropped.
struct U32s(Region, usize);

impl U32s {
    fn map(n: usize) -> Option<U32s> {
        Region::map(n.div_ceil(2).max(1)).map(|r| U32s(r, n))
    }

    fn get(&mut self) -> &mut [u32] {
        // SAFETY: a zeroed mapping of at least `n` u32s, owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr.cast::<u32>(), self.1) }
    }
}

impl Drop for U32s {
    fn drop(&mut self) {
        self.0.unmap();
    }
}

/// The pointers among the lost objects: for node `k`, its edges are
/// `edges[off[k]..off[k + 1]]`, each `target | offset << 32` (the byte offset in `k` of the
/// word that points into `target`).
struct Graph<'a> {
    off: &'a [u32],
    edges: &'a [u64],
}

impl Graph<'_> {
    fn out(&self, k: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.edges[self.off[k] as usize..self.off[k + 1] as usize]
            .iter()
            .map(|&e| ((e & 0xffff_ffff) as usize, e >> 32))
    }
}

/// Writes the cycles file's body for `objs` (sorted by start, marked by the scan): the groups
/// of cycles among the unmarked ones, then their stacks by how their objects are lost, then
/// the cost. False when the tables could not be mapped.
pub fn write(out: &mut Out, objs: &[Obj], arena: &[u64]) -> bool {
    let started = crate::sys::now_us();
    line(out, Line::Header);
    let m = objs.iter().filter(|o| !o.marked).count();
    let tables = [0; 8].map(|_| U32s::map(m + 1));
    let Some(mut edges_mem) = Region::map(m.max(1)) else {
        return false;
    };
    let [Some(t0), Some(t1), Some(t2), Some(t3), Some(t4), Some(t5), Some(t6), Some(t7)] = tables
    else {
        edges_mem.unmap();
        return false;
    };
    let mut t = [t0, t1, t2, t3, t4, t5, t6, t7];
    let [lost, off, index, low, next, stk, call, comp] = t.each_mut().map(|t| t.get());
    list_lost(objs, lost);
    let nodes = Nodes {
        objs,
        lost: &lost[..m],
    };
    // `index` doubles as "pointed to by another lost object" until the search numbers nodes.
    let pointed = &mut *index;
    let (n_edges, read, limited) = find_edges(objs, nodes.lost, off, &mut edges_mem, pointed);
    // SAFETY: the first `n_edges` words of the mapping were written by `find_edges`.
    let edges = unsafe { std::slice::from_raw_parts(edges_mem.ptr, n_edges) };
    let g = Graph { off, edges };
    // Kind of each node: 1 pointed to by another lost object, 0 not; turned into 2 for
    // nodes in a cycle below.
    let kind = &mut *stk;
    kind[..m].copy_from_slice(&pointed[..m]);
    let n_comps = components(&g, m, index, low, next, call, comp);
    // Per group: its size (in `low`), and its first member by (stack, address) (`next`).
    let (size, first) = (&mut *low, &mut *next);
    size_and_first(nodes, comp, n_comps, size, first);
    let groups = Groups { comp, size, first };
    mark_cyclic(&g, &groups, kind, m);
    let Some(mut groups_mem) = Region::map(MAX_GROUPS * GROUP_WORDS) else {
        edges_mem.unmap();
        return false;
    };
    let table = groups_mem.words();
    // Breadth-first tables: `parent` (in `index`, reset to NONE), the queue (`call`), and
    // the offset of the pointer each node was reached by (`off` is still needed: `lost` is
    // not, once each node's object index is copied into the members).
    let (parent, queue) = (&mut *index, &mut *call);
    parent[..m].fill(NONE);
    let mut via = U32s::map(m + 1);
    let Some(via) = via.as_mut().map(|v| v.get()) else {
        edges_mem.unmap();
        groups_mem.unmap();
        return false;
    };
    let n_groups = tally_cycles(&g, nodes, &groups, parent, queue, via, table);
    write_shapes(out, objs, arena, &table[..n_groups * GROUP_WORDS]);
    groups_mem.unmap();
    write_lost_by_kind(out, nodes, kind, &mut *queue, arena);
    edges_mem.unmap();
    line(
        out,
        Line::Cost {
            objects: m as u64,
            pointers: n_edges as u64,
            words: read as u64,
            micros: crate::sys::now_us() - started,
        },
    );
    if limited {
        line(out, Line::Limit(read as u64));
    }
    true
}

/// The lost objects as the nodes of the graph: node `k` is `objs[lost[k]]`.
#[derive(Clone, Copy)]
struct Nodes<'a> {
    objs: &'a [Obj],
    lost: &'a [u32],
}

impl Nodes<'_> {
    /// Node `k`'s allocation stack.
    fn id(&self, k: u32) -> u32 {
        self.objs[self.lost[k as usize] as usize].id
    }
}

/// The strongly connected groups: node `v`'s is `comp[v]`; group `c` has `size[c]` nodes,
/// the first of them by (stack, address) `first[c]`.
struct Groups<'a> {
    comp: &'a [u32],
    size: &'a [u32],
    first: &'a [u32],
}

impl Groups<'_> {
    /// Whether group `c` has a cycle: more than one node, or one that points to itself.
    fn cyclic(&self, g: &Graph, c: usize) -> bool {
        let first = self.first[c] as usize;
        self.size[c] > 1 || g.out(first).any(|(w, _)| w == first)
    }
}

/// `lost[k]`: the index in `objs` of the `k`th unmarked object.
fn list_lost(objs: &[Obj], lost: &mut [u32]) {
    let mut k = 0;
    for (i, o) in objs.iter().enumerate() {
        if !o.marked {
            lost[k] = i as u32;
            k += 1;
        }
    }
}

/// Each of the `n_comps` groups' size, and its first member by (stack, address).
fn size_and_first(nodes: Nodes, comp: &[u32], n_comps: usize, size: &mut [u32], first: &mut [u32]) {
    size[..n_comps].fill(0);
    first[..n_comps].fill(NONE);
    let key = |v: u32| (nodes.id(v), v);
    for (v, &c) in comp[..nodes.lost.len()].iter().enumerate() {
        let c = c as usize;
        size[c] += 1;
        if first[c] == NONE || key(v as u32) < key(first[c]) {
            first[c] = v as u32;
        }
    }
}

/// Turns the kind of each of the `m` nodes in a cyclic group into 2.
fn mark_cyclic(g: &Graph, groups: &Groups, kind: &mut [u32], m: usize) {
    for (k, &c) in kind[..m].iter_mut().zip(&groups.comp[..m]) {
        if groups.cyclic(g, c as usize) {
            *k = 2;
        }
    }
}

/// One shortest cycle of a group, from its least rotation on: its length, and its first
/// [`MAX_MEMBERS`] members with the offset in each of the pointer to the next.
struct Cycle {
    len: usize,
    members: [u32; MAX_MEMBERS],
    offsets: [u32; MAX_MEMBERS],
}

impl Cycle {
    /// How many of its members are kept.
    fn shown(&self) -> usize {
        self.len.min(MAX_MEMBERS)
    }

    /// Its length and its members' stacks, hashed (FNV-1a).
    fn hash(&self, nodes: Nodes) -> u64 {
        let mut hash = 0xcbf2_9ce4_8422_2325u64 ^ self.len as u64;
        for &k in &self.members[..self.shown()] {
            hash = (hash ^ u64::from(nodes.id(k))).wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }
}

/// For each cyclic group, one shortest cycle through its first member, counted in `table`
/// by its shape (its length and its members' stacks; see [`GROUP_WORDS`]) together with the
/// group's objects. `parent`, `queue` and `via` are [`shortest_cycle`]'s. Returns how many
/// shapes the table holds.
fn tally_cycles(
    g: &Graph,
    nodes: Nodes,
    groups: &Groups,
    parent: &mut [u32],
    queue: &mut [u32],
    via: &mut [u32],
    table: &mut [u64],
) -> usize {
    let mut n_groups = 0;
    for v in 0..nodes.lost.len() {
        let c = groups.comp[v] as usize;
        if groups.first[c] != v as u32 || !groups.cyclic(g, c) {
            continue;
        }
        let mut cycle = Cycle {
            len: 0,
            members: [0u32; MAX_MEMBERS],
            offsets: [0u32; MAX_MEMBERS],
        };
        cycle.len = shortest_cycle(
            g,
            v,
            groups.comp,
            parent,
            queue,
            via,
            &mut cycle.members,
            &mut cycle.offsets,
        );
        rotate_to_least(&mut cycle, nodes);
        let Some(at) = shape_slot(table, &mut n_groups, nodes, &cycle) else {
            continue;
        };
        table[at * GROUP_WORDS + 1] += 1;
        table[at * GROUP_WORDS + 2] += u64::from(groups.size[c]);
    }
    n_groups
}

/// Rotates the cycle, when all its members are kept, to start from its least rotation by
/// stack.
fn rotate_to_least(cycle: &mut Cycle, nodes: Nodes) {
    let shown = cycle.shown();
    let turn = if cycle.len <= MAX_MEMBERS {
        least_rotation(&cycle.members[..shown], |a, b| {
            nodes.id(a).cmp(&nodes.id(b))
        })
    } else {
        0
    };
    cycle.members[..shown].rotate_left(turn);
    cycle.offsets[..shown].rotate_left(turn);
}

/// Where in `table` (`n_groups` shapes so far) the cycle's shape is counted: the same shape
/// already there, or a new one while there is room (`None` once there is not).
fn shape_slot(
    table: &mut [u64],
    n_groups: &mut usize,
    nodes: Nodes,
    cycle: &Cycle,
) -> Option<usize> {
    let (len, shown, hash) = (cycle.len, cycle.shown(), cycle.hash(nodes));
    let same = |g: &[u64]| {
        g[0] == hash
            && g[3] == len as u64
            && (0..shown).all(|i| nodes.objs[g[4 + i] as usize].id == nodes.id(cycle.members[i]))
    };
    if let Some(i) = (0..*n_groups).find(|&i| same(&table[i * GROUP_WORDS..])) {
        return Some(i);
    }
    if *n_groups == MAX_GROUPS {
        return None;
    }
    let g = &mut table[*n_groups * GROUP_WORDS..(*n_groups + 1) * GROUP_WORDS];
    g[0] = hash;
    g[3] = len as u64;
    for i in 0..shown {
        g[4 + i] = u64::from(nodes.lost[cycle.members[i] as usize]);
        g[4 + MAX_MEMBERS + i] = u64::from(cycle.offsets[i]);
    }
    *n_groups += 1;
    Some(*n_groups - 1)
}

/// Writes each shape of cycle in `table`: how many groups have it and their objects, then
/// each kept member's size, offset, stack and first words.
fn write_shapes(out: &mut Out, objs: &[Obj], arena: &[u64], table: &[u64]) {
    for g in table.chunks_exact(GROUP_WORDS) {
        line(
            out,
            Line::Cycle {
                count: g[1],
                objects: g[2],
            },
        );
        for i in 0..(g[3] as usize).min(MAX_MEMBERS) {
            let o = objs[g[4 + i] as usize];
            line(
                out,
                Line::Member {
                    size: (o.end - o.start) as u64,
                    offset: g[4 + MAX_MEMBERS + i],
                    length: g[3],
                },
            );
            write_stack(out, arena, o.id as usize);
            line(out, first_words(o));
        }
    }
}

/// The lost objects by stack, by how each is lost (`kind`); `order` is scratch of a node
/// each.
fn write_lost_by_kind(out: &mut Out, nodes: Nodes, kind: &[u32], order: &mut [u32], arena: &[u64]) {
    let m = nodes.lost.len();
    for (k, o) in order[..m].iter_mut().enumerate() {
        *o = k as u32;
    }
    let order = &mut order[..m];
    order.sort_unstable_by_key(|&k| nodes.id(k));
    for same in order.chunk_by(|&a, &b| nodes.id(a) == nodes.id(b)) {
        let id = nodes.id(same[0]) as usize;
        if !is_written(arena, id) {
            continue;
        }
        let count = |kind_of: u32| {
            same.iter()
                .filter(|&&k| kind[k as usize] == kind_of)
                .count() as u64
        };
        line(
            out,
            Line::Unreached {
                cycle: count(2),
                inside: count(1),
                alone: count(0),
            },
        );
        write_stack(out, arena, id);
    }
}

/// Reads every word of the lost objects `lost` (indices into `objs`, in address order) and
/// records each that points into one of them as an edge (`off`, `edges`, see [`Graph`]),
/// growing `edges` as needed; `pointed[t]` becomes 1 when another lost object points into
/// `t`. Returns the edges, the words read and whether [`MAX_WORDS`] (or memory) cut it short.
fn find_edges(
    objs: &[Obj],
    lost: &[u32],
    off: &mut [u32],
    edges: &mut Region,
    pointed: &mut [u32],
) -> (usize, usize, bool) {
    let m = lost.len();
    let (mut n, mut read, mut limited) = (0usize, 0usize, false);
    let obj = |k: usize| objs[lost[k] as usize];
    let (min, max) = match m {
        0 => (0, 0),
        _ => (obj(0).start, obj(m - 1).end),
    };
    for (k, at) in off[..m].iter_mut().enumerate() {
        *at = n as u32;
        let o = obj(k);
        let words = (o.end - o.start) / 8;
        if limited || read + words > MAX_WORDS {
            limited = true;
            continue;
        }
        read += words;
        for w in 0..words {
            // SAFETY: a live allocation of at least `words` words (its extent is the
            // tracker's); the tracker's lock keeps it from being freed while the scan
            // runs. Resumed threads may write to it: a data race by the language's rules,
            // left to the hardware, where an aligned word load reads one whole value.
            let value = unsafe { std::ptr::read_volatile((o.start as *const usize).add(w)) };
            if value < min || value >= max {
                continue;
            }
            let j = lost.partition_point(|&i| objs[i as usize].start <= value);
            if j == 0 || value >= obj(j - 1).end {
                continue;
            }
            let t = j - 1;
            if n == edges.len_words() && !edges.grow(2 * n) {
                limited = true;
                break;
            }
            edges.words()[n] = t as u64 | ((w * 8).min(u32::MAX as usize) as u64) << 32;
            n += 1;
            if t != k {
                pointed[t] = 1;
            }
        }
    }
    off[m] = n as u32;
    (n, read, limited)
}

/// Numbers the strongly connected groups of `g`'s `m` nodes (Tarjan's algorithm, with an
/// explicit call stack): `comp[v]` is `v`'s group. `index`, `low`, `next`, `call` are
/// scratch of `m` entries; `index` must be zero. Returns the number of groups.
fn components(
    g: &Graph,
    m: usize,
    index: &mut [u32],
    low: &mut [u32],
    next: &mut [u32],
    call: &mut [u32],
    comp: &mut [u32],
) -> usize {
    comp[..m].fill(NONE);
    index[..m].fill(0);
    let mut stack = U32s::map(m + 1);
    let Some(stack) = stack.as_mut().map(|s| s.get()) else {
        // Without room for the stack every node is a group of its own: no cycles are named.
        for (v, c) in comp[..m].iter_mut().enumerate() {
            *c = v as u32;
        }
        return m;
    };
    let (mut counter, mut sp, mut n_comps) = (0u32, 0usize, 0u32);
    for root in 0..m {
        if index[root] != 0 {
            continue;
        }
        let mut cs = 0;
        // Visits `v`: numbers it, opens it on both stacks.
        macro_rules! enter {
            ($v:expr) => {{
                let v = $v;
                counter += 1;
                index[v] = counter;
                low[v] = counter;
                next[v] = g.off[v];
                stack[sp] = v as u32;
                sp += 1;
                call[cs] = v as u32;
                cs += 1;
            }};
        }
        enter!(root);
        while cs > 0 {
            let v = call[cs - 1] as usize;
            if next[v] < g.off[v + 1] {
                let w = (g.edges[next[v] as usize] & 0xffff_ffff) as usize;
                next[v] += 1;
                if index[w] == 0 {
                    enter!(w);
                } else if comp[w] == NONE {
                    // On the stack: visited and in no closed group yet.
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            cs -= 1;
            if cs > 0 {
                let u = call[cs - 1] as usize;
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                loop {
                    sp -= 1;
                    let x = stack[sp] as usize;
                    comp[x] = n_comps;
                    if x == v {
                        break;
                    }
                }
                n_comps += 1;
            }
        }
    }
    n_comps as usize
}

/// One shortest cycle through `start` within its group (breadth first over the group's
/// edges): its members from `start` on and the offset in each of the pointer to the next, the
/// first [`MAX_MEMBERS`] of them. Returns its length. `parent` must be NONE throughout, and is
/// left so; `queue` and `via` are scratch of `m` entries.
#[allow(clippy::too_many_arguments)]
fn shortest_cycle(
    g: &Graph,
    start: usize,
    comp: &[u32],
    parent: &mut [u32],
    queue: &mut [u32],
    via: &mut [u32],
    members: &mut [u32; MAX_MEMBERS],
    offsets: &mut [u32; MAX_MEMBERS],
) -> usize {
    let c = comp[start];
    parent[start] = start as u32;
    queue[0] = start as u32;
    let (mut head, mut tail) = (0, 1);
    let mut closing = None;
    'search: while head < tail {
        let v = queue[head] as usize;
        head += 1;
        for (w, at) in g.out(v) {
            if comp[w] != c {
                continue;
            }
            if w == start {
                closing = Some((v, at as u32));
                break 'search;
            }
            if parent[w] == NONE {
                parent[w] = v as u32;
                via[w] = at as u32;
                queue[tail] = w as u32;
                tail += 1;
            }
        }
    }
    // A group with a cycle through `start` always closes one.
    let (last, at) = closing.unwrap_or((start, 0));
    let mut len = 1;
    let mut x = last;
    while x != start {
        len += 1;
        x = parent[x] as usize;
    }
    // From the last member back to `start`: member i points to member i + 1 by the word
    // at `via[member i + 1]`, the last back to `start` by `at`.
    let (mut x, mut i, mut offset) = (last, len - 1, at);
    loop {
        if i < MAX_MEMBERS {
            members[i] = x as u32;
            offsets[i] = offset;
        }
        if x == start {
            break;
        }
        offset = via[x];
        x = parent[x] as usize;
        i -= 1;
    }
    for &q in &queue[..tail] {
        parent[q as usize] = NONE;
    }
    len
}

/// The rotation of `items` that is least in lexicographic order (by `cmp`): how far to
/// rotate left. Cycles through the same stacks are then written from the same member.
fn least_rotation<T: Copy>(items: &[T], cmp: impl Fn(T, T) -> std::cmp::Ordering) -> usize {
    let n = items.len();
    let at = |r: usize, i: usize| items[(r + i) % n];
    (0..n)
        .min_by(|&a, &b| {
            (0..n)
                .map(|i| cmp(at(a, i), at(b, i)))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .unwrap_or(0)
}

/// A member's first words (an `Rc`/`Arc` allocation's strong and weak counts).
fn first_words(o: Obj) -> Line {
    let mut words = [0u64; WORDS];
    let n = ((o.end - o.start) / 8).min(WORDS);
    for (k, w) in words[..n].iter_mut().enumerate() {
        // SAFETY: as in `find_edges`.
        *w = unsafe { std::ptr::read_volatile((o.start as *const u64).add(k)) };
    }
    Line::Words { words, n }
}

/// One line and its newline.
fn line(out: &mut Out, line: Line) {
    line.encode(out);
    out.bytes(b"\n");
}

#[cfg(test)]
mod tests;
