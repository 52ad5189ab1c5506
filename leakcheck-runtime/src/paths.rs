//! Retention paths: for each allocation stack with objects the scan reached, how the first
//! of them was reached (the scan is breadth first, so that way is a shortest one), written
//! beside the dump as `<dump>.paths` in the format of `leakcheck_protocol::paths`, followed
//! by the process's mappings, as in a dump.

use crate::reach::{self, Obj, Root, Roots};
use crate::stop;
use crate::tracker::dump::{write_stack, Out};
use leakcheck_protocol::paths::{Line, Root as Written, ThreadState, PROGRAM, WORDS};

/// Objects written at each end of a long chain.
const CHAIN_END: usize = 8;
/// Most links followed up one chain (a chain is a tree path, so it ends; this bounds the
/// time on a million-node list).
const MAX_WALK: usize = 1 << 22;
/// How far below a pointer on a stack a return address is looked for.
const FRAME_SEARCH: usize = 64 * 1024;

/// Writes one path per stack id among the reached objects: that of an object reached the
/// way most of the stack's objects were (the same root range, directly or not: a majority
/// vote, in one pass), so that a stale copy of a pointer to the newest object, found first,
/// does not stand for the container that holds them all. `reached` lists the objects' indices in the order the scan reached
/// them; `votes` is a zeroed table of two words per two words of the stack arena (stack ids
/// are arena offsets, and a stored stack takes more than two words).
pub fn write(
    out: &mut Out,
    objs: &[Obj],
    reached: &[u32],
    roots: &Roots,
    arena: &[u64],
    votes: &mut [u64],
) {
    line(out, Line::Header);
    // Per stack: (candidate root << 32 | count), and its representative's index + 1.
    for &i in reached {
        let o = objs[i as usize];
        let slot = (o.id as usize / 2) * 2;
        if slot + 1 >= votes.len() {
            continue;
        }
        let way = u64::from(o.root) | (u64::from(o.direct) << 16);
        let (candidate, count) = (votes[slot] >> 32, votes[slot] as u32);
        if count == 0 {
            votes[slot] = (way << 32) | 1;
            votes[slot + 1] = u64::from(i) + 1;
        } else if candidate == way {
            votes[slot] += 1;
        } else {
            votes[slot] -= 1;
        }
    }
    for &i in reached {
        let slot = (objs[i as usize].id as usize / 2) * 2;
        if slot + 1 >= votes.len() || votes[slot + 1] == 0 {
            continue;
        }
        let representative = votes[slot + 1] as usize - 1;
        // The unsampled allocations' empty stack has no path of its own to show.
        if !crate::tracker::dump::is_written(arena, objs[representative].id as usize) {
            votes[slot + 1] = 0;
            continue;
        }
        // Once per stack.
        votes[slot + 1] = 0;
        write_path(out, objs, representative, roots, arena);
    }
}

fn write_path(out: &mut Out, objs: &[Obj], target: usize, roots: &Roots, arena: &[u64]) {
    // Up the chain: the CHAIN_END objects nearest the target, in walking order, and the
    // CHAIN_END nearest the root, in a ring.
    let mut near = [0usize; CHAIN_END];
    let mut far = [0usize; CHAIN_END];
    let mut depth = 0usize;
    let mut at = target;
    loop {
        if depth < CHAIN_END {
            near[depth] = at;
        }
        far[depth % CHAIN_END] = at;
        depth += 1;
        let o = objs[at];
        if o.direct || depth >= MAX_WALK {
            break;
        }
        at = o.from;
    }
    line(out, Line::Path);
    let top = objs[at];
    if top.direct {
        write_root(out, roots, arena, top.from);
    } else {
        line(out, Line::Root(Written::Unknown));
    }
    let stack = |out: &mut Out, i: usize| {
        write_stack(out, arena, objs[i].id as usize);
        write_words(out, objs[i]);
    };
    if depth <= 2 * CHAIN_END {
        // All of it: the ring holds the last min(depth, CHAIN_END), `near` the first.
        let mut chain = [0usize; 2 * CHAIN_END];
        let mut k = 0;
        let mut i = target;
        while k < depth {
            chain[k] = i;
            k += 1;
            if objs[i].direct {
                break;
            }
            i = objs[i].from;
        }
        for &c in chain[..k].iter().rev() {
            stack(out, c);
        }
        return;
    }
    for k in 0..CHAIN_END {
        // Root-most first: the ring's oldest entry is the one written last minus CHAIN_END.
        stack(out, far[(depth - 1 - k) % CHAIN_END]);
    }
    line(out, Line::Skip((depth - 2 * CHAIN_END) as u64));
    for &n in near.iter().rev() {
        stack(out, n);
    }
}

/// The object's first words (what it is, when its stack was not sampled: a task's header
/// points at its vtable).
fn write_words(out: &mut Out, o: Obj) {
    let mut words = [0u64; WORDS];
    let n = (o.end.saturating_sub(o.start) / 8).min(WORDS);
    for (k, w) in words[..n].iter_mut().enumerate() {
        // SAFETY: a live allocation of at least `n` words (its extent is the tracker's). It
        // cannot be freed while the paths are written: a free takes the tracker's lock
        // first (`tracker::forget`), and the scan holds it. Other threads have resumed and
        // may write to it: a data race by the language's rules, left to the hardware, where
        // an aligned word load reads one whole value, old or new.
        *w = unsafe { std::ptr::read_volatile((o.start as *const u64).add(k)) };
    }
    line(out, Line::Words { words, n });
}

/// One line and its newline.
fn line(out: &mut Out, line: Line) {
    line.encode(out);
    out.bytes(b"\n");
}

fn write_root(out: &mut Out, roots: &Roots, arena: &[u64], at: usize) {
    let Some(((lo, _), kind)) = roots.root_of(at) else {
        line(out, Line::Root(Written::Unknown));
        return;
    };
    let thread = match kind {
        Root::Static { module } => {
            let m = roots.modules[module as usize];
            let vaddr = (at - m.base) as u64;
            let object = module_name(m.name);
            line(out, Line::Root(Written::Static { vaddr, object }));
            return;
        }
        Root::Tls { thread, block } => {
            let offset = (at - lo) as u64;
            let object = module_name(reach::tls_name(block));
            line(out, Line::Root(Written::Tls { offset, object }));
            thread
        }
        Root::Registers { thread } | Root::ExitRegisters { thread } => {
            let names: &[&str] = match kind {
                Root::Registers { .. } => &stop::REGISTER_NAMES,
                _ => &reach::SAVED_NAMES,
            };
            let name = names.get((at - lo) / 8).copied().unwrap_or("?");
            line(out, Line::Root(Written::Register(name)));
            thread
        }
        Root::Stack { thread } => {
            let t = roots.threads[thread as usize];
            // Below the thread's stack pointer lie the red zone and stale words (an earlier
            // signal frame): the search stops at the pointer, when it is known.
            let floor = if t.sp != 0 { t.sp } else { lo };
            // The red zone, below the stack pointer, is the interrupted function's.
            let unwound = match t.stopped {
                true if at < t.sp => Some(t.pc),
                true => stop::SLOTS[t.slot].frame_of(at),
                false => None,
            };
            let frame = unwound
                .or_else(|| frame_of(roots, floor, at))
                .unwrap_or(t.pc);
            line(
                out,
                Line::Root(Written::Stack {
                    frame: frame as u64,
                }),
            );
            thread
        }
    };
    let t = roots.threads[thread as usize];
    let mut name = [0u8; 64];
    let name = crate::sys::task_name(t.tid as u64, &mut name);
    line(
        out,
        Line::Thread {
            tid: t.tid as u64,
            name,
        },
    );
    if t.state != 0 {
        line(out, Line::State(ThreadState(t.state)));
    }
    if let Some(id) = t.spawn.checked_sub(1).filter(|&id| id < arena.len()) {
        line(out, Line::Spawned);
        write_stack(out, arena, id);
    }
}

/// For a thread not stopped (so not unwound): the return address into the function whose
/// frame holds the stack word at `at`, guessed as the nearest word below it (down to `lo`)
/// that points into code just after a call
/// instruction (the call that function made last pushed it). Heuristic: a stale return
/// address left in an uninitialised slot of a live frame is taken for one too.
fn frame_of(roots: &Roots, lo: usize, at: usize) -> Option<usize> {
    let stop = lo.max(at.saturating_sub(FRAME_SEARCH));
    let mut p = at;
    while p >= stop + 8 {
        p -= 8;
        // SAFETY: inside the thread's stack range the scan read, still mapped (the registry
        // lock is held, so the thread cannot end). The thread runs and may write it: as for
        // an object's words, an aligned word load reads one whole value.
        let value = unsafe { std::ptr::read_volatile(p as *const usize) };
        if value > 7 && roots.is_code(value) && roots.is_code(value - 7) && after_call(value) {
            return Some(value);
        }
    }
    None
}

/// A loaded object's name (`-` for the program, whose name the loader leaves empty; `?`
/// for one that is not UTF-8).
fn module_name(name: *const std::ffi::c_char) -> &'static str {
    // SAFETY: the loader's NUL-terminated name of an object loaded when the scan began.
    // Nothing here keeps it loaded (the registry lock only keeps threads from ending): the
    // code relies on the program not unloading an object while a scan writes its paths.
    let bytes = if name.is_null() {
        &[][..]
    } else {
        unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes()
    };
    match std::str::from_utf8(bytes) {
        Ok("") => PROGRAM,
        Ok(name) => name,
        Err(_) => "?",
    }
}

/// Whether the instruction before `ret` is a call: `e8 rel32`, or `ff /2` through a
/// register or memory operand (2 to 7 bytes).
fn after_call(ret: usize) -> bool {
    // SAFETY: `ret - 7 .. ret` lies in an executable segment of a loaded object (checked by
    // the caller for both ends), which is mapped readable.
    let before = unsafe { std::slice::from_raw_parts((ret - 7) as *const u8, 7) };
    if before[2] == 0xe8 {
        return true;
    }
    (2..=7).any(|len| {
        let at = 7 - len;
        let modrm = before[at + 1];
        before[at] == 0xff && (modrm >> 3) & 7 == 2
    })
}
