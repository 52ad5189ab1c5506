//! Which live allocations nothing points to any more: the evidence for a test that cannot
//! be run again.
//!
//! Growth over extra runs is how cargo-leakcheck tells a leak from memory kept for the
//! process lifetime. A test that cannot run twice in one process (`#[should_panic]`, one
//! that initialises a global pool and asserts it did) gets no extra runs, so for it the
//! runtime answers the question a conservative collector answers: is the object still
//! reachable from a global variable, a live thread's stack or thread-local storage, through
//! other reachable objects? An object with no pointer left to it can never be freed: it is
//! lost. One still reachable is treated as kept on purpose (a pool's queues, a registry,
//! a lazily built table), which is the call that never fails a healthy suite; growth that
//! a second run would have shown cannot be seen in one run.
//!
//! The scan is conservative: every aligned word of the roots and of each reachable object
//! that points into a live allocation (at its start or anywhere inside it, as tagged and
//! interior pointers do) makes that allocation reachable. The roots are the writable
//! segments of every loaded object except this runtime, and the stacks of the threads the
//! `threads` module recorded, from their current stack pointer (the kernel's record of a
//! thread waiting in a system call) or, failing that, whole; the scanning thread's own stack
//! from the exit handler's frame up, and its callee-saved registers, when a test thread
//! called `exit`; and then the main thread's stack from where it waits (see [`add_thread_roots`]). A missing root only makes more memory
//! look unreachable, the verdict every stack had before this scan.

use crate::threads;
use std::ffi::{c_int, c_void};

/// One live allocation during a scan: `[start, end)`, its stack id in the tracker, and
/// whether the scan reached it.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Obj {
    pub start: usize,
    pub end: usize,
    pub id: u32,
    pub marked: bool,
}

/// Most root ranges kept: writable segments of loaded objects and thread stacks.
const MAX_ROOTS: usize = 1024 + threads::MAX_THREADS;

/// Address ranges whose words are roots.
pub struct Roots {
    ranges: [(usize, usize); MAX_ROOTS],
    n: usize,
}

impl Roots {
    pub const fn new() -> Roots {
        Roots {
            ranges: [(0, 0); MAX_ROOTS],
            n: 0,
        }
    }

    fn push(&mut self, lo: usize, hi: usize) {
        if lo < hi && self.n < MAX_ROOTS {
            self.ranges[self.n] = (lo, hi);
            self.n += 1;
        }
    }

    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges[..self.n]
    }
}

/// Marks every object in `objs` (sorted by start, not overlapping) that a word in `roots`
/// reaches, directly or through other marked objects. `work` must hold `objs.len()`
/// entries: each object is pushed at most once, when it is marked.
///
/// # Safety
/// Every root range and every object's `[start, end)` must be readable memory.
pub unsafe fn mark(objs: &mut [Obj], roots: &[(usize, usize)], work: &mut [u32]) {
    let mut pending = 0usize;
    for &(lo, hi) in roots {
        // SAFETY: the caller guarantees the range is readable.
        unsafe { scan(lo, hi, objs, work, &mut pending) };
    }
    while pending > 0 {
        pending -= 1;
        let o = objs[work[pending] as usize];
        // SAFETY: a live allocation, readable by the caller's guarantee.
        unsafe { scan(o.start, o.end, objs, work, &mut pending) };
    }
}

/// Marks (and queues) the objects the words of `[lo, hi)` point into.
unsafe fn scan(lo: usize, hi: usize, objs: &mut [Obj], work: &mut [u32], pending: &mut usize) {
    let (Some(first), Some(last)) = (objs.first(), objs.last()) else {
        return;
    };
    let (min, max) = (first.start, last.end);
    let word = std::mem::size_of::<usize>();
    let mut at = lo.next_multiple_of(word);
    while at + word <= hi {
        // SAFETY: `at` is an aligned word inside a range the caller guarantees readable.
        // Another thread may be writing it meanwhile, which Rust's memory model leaves
        // undefined; the volatile load stops the compiler from assuming anything about the
        // value, and on x86-64 an aligned word load reads one whole value, old or new. The
        // scan does not stop other threads yet, so this race is real.
        let value = unsafe { std::ptr::read_volatile(at as *const usize) };
        at += word;
        if value < min || value >= max {
            continue;
        }
        let i = objs.partition_point(|o| o.start <= value);
        if i == 0 {
            continue;
        }
        let o = &mut objs[i - 1];
        if value < o.end && !o.marked {
            o.marked = true;
            work[*pending] = (i - 1) as u32;
            *pending += 1;
        }
    }
}

/// The writable segments of every loaded object except this runtime (whose own data holds
/// nothing of the program's). Call before taking any lock malloc takes: the loader holds
/// its own lock while it calls back, and a thread in `dlopen` may be waiting in `malloc`.
pub fn add_image_roots(roots: &mut Roots) {
    struct Ctx<'a> {
        roots: &'a mut Roots,
        own: usize,
    }
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is the Ctx below.
        let (info, ctx) = unsafe { (&*info, &mut *data.cast::<Ctx>()) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let base = info.dlpi_addr as usize;
        let is_own = headers.iter().any(|h| {
            h.p_type == libc::PT_LOAD && {
                let lo = base + h.p_vaddr as usize;
                (lo..lo + h.p_memsz as usize).contains(&ctx.own)
            }
        });
        if is_own {
            return 0;
        }
        for h in headers {
            if h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W != 0 {
                let lo = base + h.p_vaddr as usize;
                ctx.roots.push(lo, lo + h.p_memsz as usize);
            }
        }
        0
    }
    let mut ctx = Ctx {
        roots,
        own: add_image_roots as *const () as usize,
    };
    // SAFETY: the callback only reads the headers and writes into `ctx`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut ctx).cast()) };
}

/// The stacks of the recorded threads and of the main thread. The caller holds the
/// registry lock, so none of them can end (and its stack go) while it is scanned.
///
/// A registered calling thread (a test thread that called `exit` itself, running the exit
/// handler) is scanned from the handler's frame up (see [`note_exit_frame`]), with its
/// registers as the handler started: the frames above the handler are the test's, and what
/// its locals hold is not lost. The main thread, when it
/// is not the caller, is scanned from where it waits in a system call (libtest's main waits
/// for that test thread); its stack's lower end is only where it has grown to, so it is not
/// scanned when the kernel does not say where it stopped.
#[inline(never)]
pub fn add_thread_roots(roots: &mut Roots, _held: &threads::RegistryGuard) {
    use std::sync::atomic::Ordering;
    // SAFETY: the gettid system call has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as usize;
    let exit_frame = EXIT_FRAME.load(std::sync::atomic::Ordering::Relaxed);
    for e in &threads::REGISTRY {
        let tid = e.tid.load(Ordering::Acquire);
        if tid == 0 {
            continue;
        }
        let (lo, hi) = (e.lo.load(Ordering::Relaxed), e.hi.load(Ordering::Relaxed));
        if tid == me {
            if (lo..hi).contains(&exit_frame) {
                let saved = std::ptr::addr_of!(SAVED) as usize;
                roots.push(saved, saved + std::mem::size_of_val(&SAVED));
                roots.push(exit_frame, hi);
            }
            continue;
        }
        match waiting_stack_pointer(tid) {
            Some(Waiting::At(sp)) if (lo..hi).contains(&sp) => roots.push(sp, hi),
            Some(Waiting::Gone) => {}
            _ => roots.push(lo, hi),
        }
    }
    // On the main thread itself the handler runs after `main` returned: nothing on that
    // stack is the test's, and the handler's frames reuse the slots `main`'s frames had,
    // whose stale words would keep lost objects reachable.
    if let Some((main, top)) = threads::main_thread().filter(|&(main, _)| main != me) {
        if let Some(Waiting::At(from)) = waiting_stack_pointer(main) {
            // A main thread's stack is at most its rlimit deep; anything else is not its.
            if from < top && top - from < MAIN_STACK_MAX {
                roots.push(from, top);
            }
        }
    }
}

/// The deepest main-thread stack scanned (glibc's default limit is 8 MiB).
const MAIN_STACK_MAX: usize = 1 << 30;

/// Where the exit handler's frame starts on the thread that runs it (0: not yet).
static EXIT_FRAME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// That thread's callee-saved registers as the handler started.
static SAVED: [std::sync::atomic::AtomicUsize; 6] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; 6];

/// Called first thing in the exit handler: records where its frame is and the calling
/// thread's callee-saved registers. When a test thread calls `exit` itself, the stack above
/// this frame holds the test's frames, and a pointer the test kept only in a register is
/// on no stack; below it are the handler's own frames, which reuse the slots of calls the
/// test made earlier, whose stale words must not count.
#[inline(never)]
pub fn note_exit_frame() {
    let here = std::hint::black_box(0usize);
    EXIT_FRAME.store(
        std::ptr::addr_of!(here) as usize,
        std::sync::atomic::Ordering::Relaxed,
    );
    save_registers();
}

/// Copies the calling thread's callee-saved registers into [`SAVED`].
fn save_registers() {
    use std::sync::atomic::Ordering;
    #[cfg(target_arch = "x86_64")]
    {
        let (rbx, rbp, r12, r13, r14, r15): (usize, usize, usize, usize, usize, usize);
        // SAFETY: only copies registers into outputs; touches no memory and no flags.
        unsafe {
            std::arch::asm!(
                "mov {0}, rbx", "mov {1}, rbp", "mov {2}, r12",
                "mov {3}, r13", "mov {4}, r14", "mov {5}, r15",
                out(reg) rbx, out(reg) rbp, out(reg) r12,
                out(reg) r13, out(reg) r14, out(reg) r15,
                options(nomem, nostack, preserves_flags),
            );
        }
        for (slot, value) in SAVED.iter().zip([rbx, rbp, r12, r13, r14, r15]) {
            slot.store(value, Ordering::Relaxed);
        }
    }
}

enum Waiting {
    /// Blocked in a system call with this stack pointer.
    At(usize),
    /// Not blocked in a system call (running, or the kernel would not say).
    Unknown,
    /// The thread no longer exists.
    Gone,
}

/// The stack pointer of a thread blocked in a system call, from
/// `/proc/self/task/<tid>/syscall` (`nr arg1 … arg6 sp pc`).
fn waiting_stack_pointer(tid: usize) -> Option<Waiting> {
    let mut path = crate::sys::FixedPath::new();
    if !(path.push(b"/proc/self/task/") && path.push_u64(tid as u64) && path.push(b"/syscall")) {
        return None;
    }
    let mut buf = [0u8; 512];
    // SAFETY: open/read/close on a NUL-terminated path into our own buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Some(if *libc::__errno_location() == libc::ENOENT {
                Waiting::Gone
            } else {
                Waiting::Unknown
            });
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return Some(Waiting::Unknown);
    }
    let text = std::str::from_utf8(&buf[..n as usize]).ok()?;
    let fields: [&str; 9] = {
        let mut f = [""; 9];
        let mut it = text.split_ascii_whitespace();
        for slot in &mut f {
            *slot = it.next()?;
        }
        if it.next().is_some() {
            return Some(Waiting::Unknown);
        }
        f
    };
    Some(match crate::sys::parse_hex(fields[7]) {
        Some(sp) if sp != 0 => Waiting::At(sp as usize),
        _ => Waiting::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objs_of(blocks: &[&[usize]]) -> Vec<Obj> {
        let mut objs: Vec<Obj> = blocks
            .iter()
            .map(|b| Obj {
                start: b.as_ptr() as usize,
                end: b.as_ptr() as usize + std::mem::size_of_val(*b),
                id: 0,
                marked: false,
            })
            .collect();
        objs.sort_unstable_by_key(|o| o.start);
        objs
    }

    fn marked(objs: &[Obj], block: &[usize]) -> bool {
        objs.iter()
            .find(|o| o.start == block.as_ptr() as usize)
            .unwrap()
            .marked
    }

    #[test]
    fn reaches_through_chains_and_interior_pointers_but_not_lost_blocks() {
        let mut a = vec![0usize; 4];
        let mut b = vec![0usize; 4];
        let c = vec![0usize; 4];
        let lost = vec![0usize; 4];
        let mut d = vec![0usize; 4];
        // a -> b (at its start), b -> c (into its middle, as a tagged or interior pointer
        // does), d -> lost's neighbour only by a value just past its end.
        a[1] = b.as_ptr() as usize;
        b[3] = c.as_ptr() as usize + 9;
        d[0] = lost.as_ptr() as usize + 4 * std::mem::size_of::<usize>() + 4096 * 1024;
        let root = [0usize, a.as_ptr() as usize + 8, 17];
        let mut objs = objs_of(&[&a, &b, &c, &lost, &d]);
        let mut work = vec![0u32; objs.len()];
        let roots = [(root.as_ptr() as usize, root.as_ptr() as usize + 24)];
        // SAFETY: the roots and objects are live vectors of this test.
        unsafe { mark(&mut objs, &roots, &mut work) };
        assert!(marked(&objs, &a) && marked(&objs, &b) && marked(&objs, &c));
        assert!(!marked(&objs, &lost) && !marked(&objs, &d));
        // A cycle with no root is lost as a whole.
        a[1] = 0;
        let mut objs = objs_of(&[&a, &b, &c, &d]);
        let root_d = [d.as_ptr() as usize];
        let roots = [(root_d.as_ptr() as usize, root_d.as_ptr() as usize + 8)];
        b[0] = a.as_ptr() as usize;
        // SAFETY: as above.
        unsafe { mark(&mut objs, &roots, &mut work) };
        assert!(marked(&objs, &d));
        assert!(!marked(&objs, &a) && !marked(&objs, &b) && !marked(&objs, &c));
        std::hint::black_box((&a, &b, &c, &lost, &d));
    }

    #[test]
    fn loaded_objects_are_roots_and_the_runtime_itself_is_not() {
        extern "C" {
            static mut environ: *const *const libc::c_char;
        }
        let mut roots = Roots::new();
        add_image_roots(&mut roots);
        let covered = |at: usize| {
            roots
                .ranges()
                .iter()
                .any(|&(lo, hi)| (lo..hi).contains(&at))
        };
        // libc's data is a root; the runtime's own (here: this test executable) is not.
        assert!(covered(&raw const environ as usize));
        static OWN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        assert!(!covered(&raw const OWN as usize));
    }

    #[test]
    fn a_waiting_thread_reports_its_stack_pointer() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as usize;
            let local = 0u8;
            tid_tx.send((tid, &raw const local as usize)).unwrap();
            rx.recv().unwrap();
        });
        let (tid, near) = tid_rx.recv().unwrap();
        let mut found = None;
        for _ in 0..2000 {
            if let Some(Waiting::At(sp)) = waiting_stack_pointer(tid) {
                found = Some(sp);
                break;
            }
            std::thread::yield_now();
        }
        tx.send(()).unwrap();
        t.join().unwrap();
        let sp = found.expect("a thread blocked in recv is in a system call");
        assert!(
            sp < near && near - sp < 1 << 20,
            "sp {sp:#x}, a local at {near:#x}"
        );
        assert!(matches!(waiting_stack_pointer(tid), Some(Waiting::Gone)));
    }
}
