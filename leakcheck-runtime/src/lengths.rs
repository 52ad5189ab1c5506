//! The lengths of the program's own collections, read after every run.
//!
//! A collection that gains an entry on every call (a `HashSet` of ids already seen, a map of
//! per-connection counters nobody prunes) allocates only when it doubles: most runs leave
//! nothing in their arena, and no allocation count tells it from a pool that warmed up. Its
//! length grows on every run. cargo-leakcheck finds, in the executable's DWARF, every
//! collection reachable from a static or a thread-local and passes the steps to each one's
//! length (`LEAKCHECK_COLLECTIONS`, the format in `leakcheck_protocol::collections`). Here
//! the table is mapped once, and after each run every entry is followed through the kernel
//! (`process_vm_readv`), so a pointer into nothing is an error, never a fault, and nothing
//! is written to the program. A reading that changed is written to the record, and whether
//! any collection grew decides, with the counts, whether the run settles anything.
//!
//! A thread-local's collection is read on every live thread (its lengths summed): threads
//! started after the runtime's constructor are in its registry (started here in counting
//! mode when the table has thread-locals), and the main thread is known from the
//! constructor.

use crate::sys;
use crate::threads;
use crate::tracker::dump::Out;
use leakcheck_protocol::collections::{self, Entries, Memory, MAX_COLLECTIONS};
use leakcheck_protocol::record::Entry;
use std::ffi::c_int;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The mapped table and its length (0: none).
static TABLE: AtomicUsize = AtomicUsize::new(0);
static TABLE_LEN: AtomicUsize = AtomicUsize::new(0);
/// The program's load bias, and how far below a thread pointer its thread-local block
/// starts (0: none).
static BASE: AtomicUsize = AtomicUsize::new(0);
static TLS_BELOW_TP: AtomicUsize = AtomicUsize::new(0);
/// Each collection's last reading written, and its buffer then.
static WRITTEN: [AtomicI64; MAX_COLLECTIONS] =
    [const { AtomicI64::new(collections::ABSENT) }; MAX_COLLECTIONS];
static BUFFERS: [AtomicU64; MAX_COLLECTIONS] = [const { AtomicU64::new(0) }; MAX_COLLECTIONS];
/// Whether a collection's reading ever changed (its buffer is worth a stack).
static CHANGED: [AtomicU64; MAX_COLLECTIONS / 64] =
    [const { AtomicU64::new(0) }; MAX_COLLECTIONS / 64];

/// Maps the table named by `LEAKCHECK_COLLECTIONS`, when its build id is the running
/// program's; starts the thread registry when the table reads thread-locals and nothing
/// started it (`tracking`: the tracker did). Called by the constructor, on the main thread,
/// before any other thread exists.
pub fn configure(tracking: bool) {
    let Some(path) = sys::var(leakcheck_protocol::env::COLLECTIONS) else {
        return;
    };
    let Some(table) = sys::map_file(path) else {
        return;
    };
    let Some(build_id) = collections::build_id(table) else {
        return;
    };
    let Ok((base, below_tp)) = crate::image::program(build_id, threads::thread_pointer()) else {
        return;
    };
    BASE.store(base, Relaxed);
    TLS_BELOW_TP.store(below_tp.unwrap_or(0), Relaxed);
    TABLE.store(table.as_ptr() as usize, Relaxed);
    TABLE_LEN.store(table.len(), Relaxed);
    let thread_locals = Entries::of(table).any(|e| e.thread_local);
    if thread_locals && below_tp.is_some() && !tracking {
        threads::start_registry();
    }
}

/// Whether there is a table to read.
pub fn configured() -> bool {
    TABLE_LEN.load(Relaxed) > 0
}

fn table() -> Option<&'static [u8]> {
    let (p, len) = (TABLE.load(Relaxed), TABLE_LEN.load(Relaxed));
    // SAFETY: `configure` mapped `len` readable bytes at `p`, never unmapped.
    (len > 0).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// This process's memory, read through the kernel.
struct Own;

impl Memory for Own {
    fn read(&mut self, address: u64, out: &mut [u8]) -> bool {
        let local = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: out.len(),
        };
        let remote = libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: out.len(),
        };
        // SAFETY: reads into `out`, which we own; the kernel checks the remote range and
        // fails with EFAULT instead of faulting.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        n == out.len() as isize
    }
}

/// One collection's reading now: a static's at its address, a thread-local's summed over
/// every live thread (the registry held still meanwhile).
fn read_one(entry: &collections::Entry) -> collections::Read {
    let steps = entry.steps();
    if !entry.thread_local {
        let base = BASE.load(Relaxed) as u64 + entry.address;
        return collections::evaluate(steps, base, &mut Own);
    }
    let below = TLS_BELOW_TP.load(Relaxed);
    if below == 0 {
        return collections::Read {
            reading: collections::UNREADABLE,
            buffer: 0,
        };
    }
    let mut total = collections::ABSENT;
    let mut buffer = 0;
    let mut add = |tp: usize| {
        if tp < below {
            return;
        }
        let r = collections::evaluate(steps, (tp - below) as u64 + entry.address, &mut Own);
        total = match (total, r.reading) {
            (_, n) if n < 0 && n != collections::ABSENT => total,
            (t, collections::ABSENT) => t,
            (collections::ABSENT, n) => {
                buffer = r.buffer;
                n
            }
            (t, n) => {
                buffer = 0;
                t.saturating_add(n)
            }
        };
    };
    add(threads::main_thread_pointer());
    let _registry = threads::RegistryGuard::lock();
    for e in &threads::REGISTRY {
        if e.tid.load(Relaxed) != 0 {
            add(e.tp.load(Relaxed));
        }
    }
    collections::Read {
        reading: total,
        buffer,
    }
}

/// Reads every collection after run `run` (0: the test's own; `None`: after the grace),
/// writes the readings that changed to the record `fd`, and says whether any collection
/// grew since the last reading.
pub fn read(fd: c_int, run: Option<u32>) -> bool {
    each_change(fd, |out, index, reading| {
        let entry = Entry::Length {
            run,
            index,
            reading,
        };
        entry.encode(out);
    })
}

/// Reads every collection as the periodic dump `seq` is taken (a bench's, a service's) and
/// appends the readings that changed to the timeline `fd` (see
/// `leakcheck_protocol::timeline::LengthAt`).
pub fn sample(fd: c_int, seq: u64) {
    each_change(fd, |out, index, reading| {
        let line = leakcheck_protocol::timeline::LengthAt {
            seq,
            index,
            reading,
        };
        line.encode(out);
    });
}

/// Reads every collection, writes a line (`line`) per reading that changed to `fd`, one
/// `write` for all of them where they fit; whether any collection grew.
fn each_change(fd: c_int, mut line: impl FnMut(&mut Out, u32, i64)) -> bool {
    let Some(table) = table() else { return false };
    let mut out = Out::to_fd(fd);
    let mut grew = false;
    for (index, entry) in Entries::of(table).enumerate().take(MAX_COLLECTIONS) {
        let now = read_one(&entry);
        let before = WRITTEN[index].load(Relaxed);
        if now.reading == before {
            continue;
        }
        grew |= collections::rose(before, now.reading);
        WRITTEN[index].store(now.reading, Relaxed);
        BUFFERS[index].store(now.buffer, Relaxed);
        CHANGED[index / 64].fetch_or(1 << (index % 64), Relaxed);
        line(&mut out, index as u32, now.reading);
        out.bytes(b"\n");
    }
    out.flush();
    grew
}

/// Whether some collection holds entries now (as last read).
pub fn any_entries() -> bool {
    let n = table().map_or(0, |t| Entries::of(t).count().min(MAX_COLLECTIONS));
    WRITTEN[..n].iter().any(|w| w.load(Relaxed) > 0)
}

/// Writes `<dump>.collections` beside the dump at `path` (see
/// `leakcheck_protocol::collections::SITES_HEADER`): for each collection whose length ever
/// changed and that has a buffer, its address and the stack that allocated it, when the
/// tracker has it.
pub fn write_sites(dump: &sys::FixedPath) {
    if !configured() || !crate::tracker::enabled() {
        return;
    }
    let mut path = sys::FixedPath::new();
    // SAFETY: dump holds len() initialised bytes before its NUL.
    let name = unsafe { std::slice::from_raw_parts(dump.as_ptr().cast::<u8>(), dump.len()) };
    if !(path.push(name) && path.push(leakcheck_protocol::files::COLLECTIONS.as_bytes())) {
        return;
    }
    let fd = sys::create_file(&path);
    if fd < 0 {
        return;
    }
    let mut out = Out::to_fd(fd);
    out.bytes(collections::SITES_HEADER.as_bytes());
    out.bytes(b"\n");
    for (index, buffer) in BUFFERS.iter().enumerate() {
        let buffer = buffer.load(Relaxed);
        let changed = CHANGED[index / 64].load(Relaxed) & (1 << (index % 64)) != 0;
        if buffer == 0 || !changed {
            continue;
        }
        let site = collections::Site {
            index: index as u32,
            buffer,
        };
        site.encode(&mut out);
        out.bytes(b"\n");
        crate::tracker::dump::write_stack_of(&mut out, buffer as usize);
    }
    crate::tracker::dump::write_mappings(&mut out);
    out.flush();
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
}
