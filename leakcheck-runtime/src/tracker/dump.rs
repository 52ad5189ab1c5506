//! The tracker's table written as a dump in jemalloc's `heap_v2` format, and the writer
//! that never allocates ([`Out`]) which the scan's files are written with too.

use super::busy::Busy;
use super::{
    enabled, sample_period, sampling, with_state, E_ACCUM_BYTES, E_ACCUM_OBJS, E_DEPTH, E_FRAMES,
    E_LIVE_BYTES, E_LIVE_OBJS,
};
use crate::sys::{self, FixedPath};
use leakcheck_protocol::heap_v2;
use std::ffi::c_int;

/// A buffered writer to a file descriptor that never allocates.
pub(crate) struct Out {
    fd: c_int,
    buf: [u8; 16384],
    len: usize,
    ok: bool,
}

impl leakcheck_protocol::Sink for Out {
    fn put(&mut self, text: &str) {
        self.bytes(text.as_bytes());
    }
}

impl Out {
    /// A writer to `fd`, empty.
    pub(crate) fn to_fd(fd: c_int) -> Out {
        Out {
            fd,
            buf: [0; 16384],
            len: 0,
            ok: true,
        }
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        for chunk in b.chunks(self.buf.len()) {
            if self.len + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
    }

    pub(crate) fn dec(&mut self, v: u64) {
        let mut digits = [0u8; 20];
        let start = sys::format_u64(v, &mut digits);
        self.bytes(&digits[start..]);
    }

    pub(crate) fn counts(&mut self, objs: u64, bytes: u64, accum_objs: u64, accum_bytes: u64) {
        let counts = |objects, bytes| heap_v2::Counts { objects, bytes };
        heap_v2::encode_total(counts(objs, bytes), counts(accum_objs, accum_bytes), self);
        self.bytes(b"\n");
    }

    pub(crate) fn flush(&mut self) {
        let mut done = 0;
        while done < self.len {
            // SAFETY: writing initialised bytes of our own buffer.
            let n = unsafe {
                libc::write(
                    self.fd,
                    self.buf[done..self.len].as_ptr().cast(),
                    self.len - done,
                )
            };
            if n <= 0 {
                if n < 0 && sys::interrupted() {
                    continue;
                }
                self.ok = false;
                break;
            }
            done += n as usize;
        }
        self.len = 0;
    }
}

/// Writes the live allocations by stack to `path` in jemalloc's `heap_v2` format (sample
/// period 1), with the process's mappings; false when it could not. Written to a
/// temporary name and renamed, so a reader never sees half a dump.
pub fn dump(path: &FixedPath) -> bool {
    if !enabled() {
        return false;
    }
    let Some(_busy) = Busy::enter() else {
        return false;
    };
    write_dump(path, |out| {
        with_state(|s| {
            let arena: &[u64] = s.stacks.arena.words();
            let ids = || written_ids(arena, s.stacks.used);
            let (mut lo, mut lb, mut ao, mut ab) = (0, 0, 0, 0);
            for id in ids() {
                lo += arena[id + E_LIVE_OBJS];
                lb += arena[id + E_LIVE_BYTES];
                ao += arena[id + E_ACCUM_OBJS];
                ab += arena[id + E_ACCUM_BYTES];
            }
            write_header(out);
            out.counts(lo, lb, ao, ab);
            for id in ids() {
                write_stack(out, arena, id);
                out.counts(
                    arena[id + E_LIVE_OBJS],
                    arena[id + E_LIVE_BYTES],
                    arena[id + E_ACCUM_OBJS],
                    arena[id + E_ACCUM_BYTES],
                );
            }
            true
        })
    })
}

/// A dump's first line, with its sample period.
pub(crate) fn write_header(out: &mut Out) {
    heap_v2::encode_header(sample_period(), out);
    out.bytes(b"\n");
}

/// Whether the stack `id` is written: all are, but the empty stack of unsampled
/// allocations while sampling.
pub(crate) fn is_written(arena: &[u64], id: usize) -> bool {
    !(sampling() && arena[id + E_DEPTH] == 0)
}

/// The ids of the stacks a dump holds, in order.
fn written_ids(arena: &[u64], used: usize) -> impl Iterator<Item = usize> + '_ {
    entry_ids(arena, used).filter(move |&id| is_written(arena, id))
}

/// The ids (arena offsets) of the stored stacks, in order.
fn entry_ids(arena: &[u64], used: usize) -> impl Iterator<Item = usize> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        (at < used).then(|| {
            let id = at;
            at += E_FRAMES + arena[id + E_DEPTH] as usize;
            id
        })
    })
}

/// A stack's `@ pc pc …` line.
pub(crate) fn write_stack(out: &mut Out, arena: &[u64], id: usize) {
    let depth = arena[id + E_DEPTH] as usize;
    heap_v2::encode_stack(
        arena[id + E_FRAMES..id + E_FRAMES + depth].iter().copied(),
        out,
    );
    out.bytes(b"\n");
}

/// The `@ pc pc …` line of the stack that allocated the object at `ptr`, when it is tracked
/// with a stack of its own.
pub(crate) fn write_stack_of(out: &mut Out, ptr: usize) {
    if !enabled() {
        return;
    }
    let Some(_busy) = Busy::enter() else { return };
    with_state(|s| {
        let Some(id) = s.live.stack_of(ptr) else {
            return;
        };
        let arena: &[u64] = s.stacks.arena.words();
        if arena[id as usize + E_DEPTH] > 0 {
            write_stack(out, arena, id as usize);
        }
    });
}

/// The process's mappings, as a dump ends: a blank line, `MAPPED_LIBRARIES:` and
/// `/proc/self/maps`; false when they could not be read.
pub(crate) fn write_mappings(out: &mut Out) -> bool {
    out.bytes(b"\n");
    out.bytes(heap_v2::MAPPED_LIBRARIES.as_bytes());
    out.bytes(b"\n");
    // SAFETY: a NUL-terminated path.
    let maps = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if maps < 0 {
        return false;
    }
    let mut chunk = [0u8; 4096];
    loop {
        // SAFETY: reading into our own buffer.
        let n = unsafe { libc::read(maps, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n < 0 && sys::interrupted() {
            continue;
        }
        if n <= 0 {
            break;
        }
        out.bytes(&chunk[..n as usize]);
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(maps) };
    true
}

/// Writes a dump whose body `body` produces (false: give up), then the mappings, to a
/// temporary name renamed to `path` when all went well.
pub(crate) fn write_dump(path: &FixedPath, body: impl FnOnce(&mut Out) -> bool) -> bool {
    let mut tmp = FixedPath::new();
    // SAFETY: the path holds len() initialised bytes before its NUL.
    let name = unsafe { std::slice::from_raw_parts(path.as_ptr().cast::<u8>(), path.len()) };
    if !(tmp.push(name) && tmp.push(b".tmp")) {
        return false;
    }
    let fd = sys::create_file(&tmp);
    if fd < 0 {
        return false;
    }
    let mut out = Out {
        fd,
        buf: [0; 16384],
        len: 0,
        ok: true,
    };
    let complete = body(&mut out);
    out.ok &= complete;
    if out.ok {
        out.ok &= write_mappings(&mut out);
        out.flush();
    }
    // SAFETY: closing the descriptor opened above; both paths are NUL-terminated.
    unsafe {
        libc::close(fd);
        if out.ok && libc::rename(tmp.as_ptr(), path.as_ptr()) == 0 {
            return true;
        }
        libc::unlink(tmp.as_ptr());
        false
    }
}
