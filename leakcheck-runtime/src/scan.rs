//! The reachability scan over the tracker's live allocations (see [`crate::reach`]): what
//! no root reaches, written beside a dump as `<dump>.unreached` (by stack and size), how the
//! reached ones are held (`<dump>.paths`, see [`crate::paths`]), the reference cycles among
//! the lost ones (`<dump>.cycles`, see [`crate::cycles`]) and what the scan cost
//! (`<paths>.scan`).

use crate::region::Region;
use crate::sys::{self, FixedPath};
use crate::tracker::busy::Busy;
use crate::tracker::dump::{is_written, write_dump, write_header, write_stack, Out};
use crate::tracker::{enabled, usable_size, with_state, State, SIZE_UNKNOWN};
use crate::{reach, stop, threads};
use std::ffi::c_void;

/// Writes, in the format of [`crate::tracker::dump::dump`], only the live allocations no root reaches
/// (see [`crate::reach`]): per stack, how many of its live objects are lost; and, when
/// `paths` is given, how each stack's reached objects are held there (see [`crate::paths`]).
/// False when it could not (then nothing is known about reachability, and no file is left).
pub fn dump_unreached(path: &FixedPath, paths: Option<&FixedPath>) -> bool {
    if !enabled() {
        return false;
    }
    let Some(_busy) = Busy::enter() else {
        return false;
    };
    let Some(mut roots_mem) = Region::map(std::mem::size_of::<reach::Roots>().div_ceil(8)) else {
        return false;
    };
    // SAFETY: a fresh zeroed mapping, 8-byte aligned and large enough; all-zero bytes are a
    // valid empty `Roots` (see its definition).
    let roots = unsafe { &mut *roots_mem.ptr.cast::<reach::Roots>() };
    reach::add_image_roots(roots);
    let held = threads::RegistryGuard::lock();
    let written = write_dump(path, |out| {
        with_state(|s| {
            // Stopped only now: a thread stopped while it held the tracker's lock would
            // stop the scan too.
            // What each thread is doing, read while it still does it.
            crate::sleepers::read_states(&held);
            let stop = stop::stop_others(&held);
            reach::add_thread_roots(roots, &held, &stop);
            write_unreached(out, s, roots, stop, paths, &cycles_file(path))
        })
    });
    roots_mem.unmap();
    written
}

/// Marks what the roots reach among the live allocations (resuming the stopped threads as
/// soon as that is done), then writes how the reached ones are held, the scan's cost, the
/// cycles among the lost ones, and the lost ones by stack to `out`.
fn write_unreached(
    out: &mut Out,
    s: &mut State,
    roots: &reach::Roots,
    stop: stop::Stop,
    paths: Option<&FixedPath>,
    cycles: &FixedPath,
) -> bool {
    let n = s.live.count;
    let obj_words = std::mem::size_of::<reach::Obj>() / 8;
    let (Some(mut objs_mem), Some(mut work_mem)) = (
        Region::map((n * obj_words).max(1)),
        Region::map((n / 2 + 1).max(1)),
    ) else {
        stop::resume(stop);
        return false;
    };
    // SAFETY: the regions are fresh, zeroed, 8-byte aligned and large enough; `Obj` is
    // plain data for which all-zero bytes are valid.
    let (objs, work) = unsafe {
        (
            std::slice::from_raw_parts_mut(objs_mem.ptr.cast::<reach::Obj>(), n),
            std::slice::from_raw_parts_mut(work_mem.ptr.cast::<u32>(), n),
        )
    };
    let k = collect_live(s, objs);
    let objs = &mut objs[..k];
    let started = sys::now_us();
    objs.sort_unstable_by_key(|o| o.start);
    // SAFETY: the roots are mapped writable segments and the stacks of threads that cannot
    // end meanwhile (registry held); the objects are live (the lock keeps them from being
    // freed: `forget` takes it before the allocator gets an object back).
    let reached = unsafe { reach::mark(objs, roots.ranges(), &|r| roots.lasting(r), work) };
    stop::resume(stop);
    let marked = sys::now_us();
    let arena: &[u64] = s.stacks.arena.words();
    let path_words = match paths.filter(|_| paths_wanted()) {
        Some(paths) => write_paths(paths, objs, &work[..reached], roots, arena, s.stacks.used),
        None => 0,
    };
    if let Some(p) = paths {
        let scan_words = (k * obj_words + n / 2 + 1) as u64;
        let cost = [
            k as u64,
            reached as u64,
            marked - started,
            sys::now_us() - marked,
            8 * scan_words,
            8 * path_words as u64,
        ];
        write_scan_cost(p, &cost);
    }
    // The cycles among the lost objects, while `objs` is still sorted by start.
    if !cycles.is_empty() {
        write_dump(cycles, |o| crate::cycles::write(o, objs, arena));
    }
    write_lost_by_stack(out, objs, arena);
    objs_mem.unmap();
    work_mem.unmap();
    true
}

/// Fills `objs` (at most its length) with the tracker's live allocations; returns how many.
fn collect_live(s: &mut State, objs: &mut [reach::Obj]) -> usize {
    let n = objs.len();
    let mut k = 0;
    for pair in s.live.table.words().chunks_exact(2) {
        if pair[0] == 0 || k == n {
            continue;
        }
        let size = match pair[1] & SIZE_UNKNOWN {
            SIZE_UNKNOWN => usable_size(pair[0] as *mut c_void),
            size => size,
        };
        objs[k] = reach::Obj {
            start: pair[0] as usize,
            end: (pair[0] + size) as usize,
            id: (pair[1] >> 32) as u32,
            ..reach::Obj::default()
        };
        k += 1;
    }
    k
}

/// Writes `paths` (how each stack's reached objects are held, see [`crate::paths`]) with a
/// table of votes mapped for it, `stacks_used` words of stacks; returns that table's words
/// (0 when it could not be mapped, and nothing was written).
fn write_paths(
    paths: &FixedPath,
    objs: &[reach::Obj],
    reached: &[u32],
    roots: &reach::Roots,
    arena: &[u64],
    stacks_used: usize,
) -> usize {
    let words = stacks_used.next_multiple_of(2).max(2);
    let Some(mut votes_mem) = Region::map(words) else {
        return 0;
    };
    // SAFETY: a fresh zeroed mapping of that many words.
    let votes = unsafe { std::slice::from_raw_parts_mut(votes_mem.ptr, words) };
    write_dump(paths, |o| {
        crate::paths::write(o, objs, reached, roots, arena, votes);
        true
    });
    votes_mem.unmap();
    words
}

/// Writes the lost objects of `objs` (the unmarked ones whose stacks are written), one
/// record per stack and object size, in the format of the dump. Reorders `objs`.
fn write_lost_by_stack(out: &mut Out, objs: &mut [reach::Obj], arena: &[u64]) {
    let mut lost = 0;
    for i in 0..objs.len() {
        if !objs[i].marked {
            objs.swap(lost, i);
            lost += 1;
        }
    }
    let lost = &mut objs[..lost];
    let bytes_of = |o: &reach::Obj| (o.end - o.start) as u64;
    // While stacks are sampled, only the sampled objects are counted, as in the dumps.
    let mut kept = 0;
    for i in 0..lost.len() {
        if is_written(arena, lost[i].id as usize) {
            lost.swap(kept, i);
            kept += 1;
        }
    }
    let lost = &mut lost[..kept];
    // One record per stack and object size: the analysis subtracts the harness's lost
    // objects from the test's object for object, which needs their sizes.
    lost.sort_unstable_by_key(|o| (o.id, bytes_of(o)));
    write_header(out);
    let total: u64 = lost.iter().map(bytes_of).sum();
    out.counts(lost.len() as u64, total, lost.len() as u64, total);
    for group in lost.chunk_by(|a, b| a.id == b.id && bytes_of(a) == bytes_of(b)) {
        let bytes: u64 = group.iter().map(bytes_of).sum();
        write_stack(out, arena, group[0].id as usize);
        let objects = group.len() as u64;
        out.counts(objects, bytes, objects, bytes);
    }
}

/// `<dump>.cycles` beside `<dump>.unreached` (empty when the name is not that).
fn cycles_file(unreached: &FixedPath) -> FixedPath {
    let mut name = FixedPath::new();
    // SAFETY: the path holds len() initialised bytes before its NUL.
    let bytes =
        unsafe { std::slice::from_raw_parts(unreached.as_ptr().cast::<u8>(), unreached.len()) };
    let suffix = leakcheck_protocol::files::UNREACHED.as_bytes();
    if let Some(dump) = bytes.strip_suffix(suffix) {
        if !(name.push(dump) && name.push(leakcheck_protocol::files::CYCLES.as_bytes())) {
            name.truncate(0);
        }
    }
    name
}

/// Whether retention paths are written (`LEAKCHECK_PATHS=0`, for the benchmark that
/// measures what they cost, turns them off).
fn paths_wanted() -> bool {
    sys::env(c"LEAKCHECK_PATHS") != Some("0")
}

/// Writes `<paths>.scan` beside the paths: objects, reached, marking µs, paths µs, the
/// scan's memory and the paths' memory in bytes, one line (read by `bench/scan_cost.sh`).
fn write_scan_cost(paths: &FixedPath, cost: &[u64; 6]) {
    let mut name = FixedPath::new();
    // SAFETY: the path holds len() initialised bytes before its NUL.
    let bytes = unsafe { std::slice::from_raw_parts(paths.as_ptr().cast::<u8>(), paths.len()) };
    if !(name.push(bytes) && name.push(b".scan")) {
        return;
    }
    let fd = sys::create_file(&name);
    if fd < 0 {
        return;
    }
    let mut out = Out::to_fd(fd);
    for (i, v) in cost.iter().enumerate() {
        if i > 0 {
            out.bytes(b" ");
        }
        out.dec(*v);
    }
    out.bytes(b"\n");
    out.flush();
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A (1280 B) pointing at B (1536 B).
    #[inline(never)]
    fn a_holding_b() -> Box<[usize; 160]> {
        let b = Box::into_raw(Box::new([0usize; 192]));
        let mut a = Box::new([0usize; 160]);
        a[0] = b as usize;
        a
    }

    /// C and D (2560 B each) pointing at each other and at nothing else; E (3584 B) pointed
    /// at by nothing. Every pointer lives in this function's frame only, gone once it
    /// returns.
    #[inline(never)]
    fn lost_objects() {
        let c = Box::into_raw(Box::new([0usize; 320]));
        let d = Box::into_raw(Box::new([0usize; 320]));
        // SAFETY: both were just allocated and are ours.
        unsafe {
            (*c)[0] = d as usize;
            (*d)[0] = c as usize;
        }
        std::mem::forget(std::hint::black_box(Box::new([0usize; 448])));
    }

    /// Overwrites the stack below the caller's frame, where `build_graph`'s pointers were.
    #[inline(never)]
    fn scrub_stack() {
        let mut zeros = [0u8; 64 << 10];
        std::hint::black_box(&mut zeros);
    }

    /// The lost objects of an `.unreached` file: (object size, count).
    fn lost_sizes(text: &str) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut after_stack = false;
        for line in text.lines() {
            if line.starts_with('@') {
                after_stack = true;
            } else if let Some(counts) = line.trim().strip_prefix("t*:").filter(|_| after_stack) {
                let mut n = counts
                    .split(':')
                    .map(|w| w.trim().split(' ').next().unwrap());
                let objects: u64 = n.next().unwrap().parse().unwrap();
                let bytes: u64 = n.next().unwrap().parse().unwrap();
                out.push((bytes / objects.max(1), objects));
                after_stack = false;
            }
        }
        out
    }

    /// The stop-the-world scan on a known object graph: what a stopped thread's stack reaches
    /// directly or through another object is kept, a cycle that nothing else reaches and an
    /// object nothing points to are lost. (The program's globals are roots too, but here the
    /// runtime is linked into the test binary, whose own globals the scan leaves out.) Run
    /// in a process of its own: it stops every registered thread.
    #[test]
    fn the_scan_keeps_what_a_thread_reaches_and_loses_a_cycle_and_a_forgotten_box() {
        crate::testing::in_own_process(
            "scan::tests::the_scan_keeps_what_a_thread_reaches_and_loses_a_cycle_and_a_forgotten_box",
            || {
                threads::start_registry();
                reach::record_tls_layout();
                crate::tracker::enable(1);
                // A thread (started through the registry) holds A on its stack, blocked in
                // a channel's receive: the scan stops it and reads its stack and registers.
                let (ready, holding) = mpsc::channel();
                let (release, released) = mpsc::channel::<()>();
                let holder = std::thread::spawn(move || {
                    let a = a_holding_b();
                    ready.send(()).unwrap();
                    released.recv().unwrap();
                    std::hint::black_box(&a);
                });
                holding.recv().unwrap();
                lost_objects();
                scrub_stack();
                let file = std::env::temp_dir()
                    .join(format!("leakcheck-scan-{}.unreached", std::process::id()));
                let mut path = FixedPath::new();
                assert!(path.push(file.to_str().unwrap().as_bytes()));
                assert!(dump_unreached(&path, None), "the scan ran");
                let text = std::fs::read_to_string(&file).unwrap();
                let _ = std::fs::remove_file(&file);
                let lost = lost_sizes(&text);
                let count = |size: u64| -> u64 {
                    lost.iter().filter(|(s, _)| *s == size).map(|(_, n)| n).sum()
                };
                assert_eq!(count(2560), 2, "the cycle is lost: {lost:?}");
                assert_eq!(count(3584), 1, "the forgotten box is lost: {lost:?}");
                assert_eq!(count(1280), 0, "what the thread holds is kept: {lost:?}");
                assert_eq!(count(1536), 0, "what A holds is kept: {lost:?}");
                release.send(()).unwrap();
                holder.join().unwrap();
            },
        );
    }
}
