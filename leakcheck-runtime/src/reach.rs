//! Which live allocations nothing points to any more, and how the others are held: the
//! evidence for a test that cannot be run again, and the retention paths of every test
//! whose stacks are taken.
//!
//! Growth over extra runs is how cargo-leakcheck tells a leak from memory kept for the
//! process lifetime. A test that cannot run twice in one process (`#[should_panic]`, one
//! that initialises a global pool and asserts it did) gets no extra runs, so for it the
//! runtime answers the question a conservative collector answers: is the object still
//! reachable from a global variable, a thread's stack, registers or thread-local storage,
//! through other reachable objects? An object to which no pointer was found is lost. One
//! still reachable is treated as kept on purpose (a pool's queues, a registry, a lazily built
//! table), which is the call that never fails a healthy suite; growth that a second run
//! would have shown cannot be seen in one run.
//!
//! The scan is conservative: every aligned word of the roots and of each reachable object
//! that points into a live allocation (at its start or anywhere inside it, as tagged and
//! interior pointers do) makes that allocation reachable. The roots are the writable
//! segments of every loaded object except this runtime; every known thread's static
//! thread-local storage; the registers and stacks of the threads `crate::stop` stopped
//! (from the interrupted stack pointer less the red zone), or of those that did not stop,
//! from the kernel's record of a thread waiting in a system call or, failing that, whole;
//! the scanning thread's own stack from the exit handler's frame up, and its callee-saved
//! registers, when a test thread called `exit`; and the main thread's stack from its stack
//! pointer (see [`add_thread_roots`]). The marking is breadth first and records how each
//! object was first reached, for `crate::paths`. A missing root only makes more memory look
//! unreachable, the verdict every stack had before this scan.

use crate::stop::{self, Stop};
use crate::threads;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::AtomicUsize;

/// One live allocation during a scan: `[start, end)`, its stack id in the tracker, whether
/// the scan reached it, and how: through the root word at address `from` (`direct`), or
/// from the object with index `from`; `root` is the index of the root range its way starts
/// in (saturated at `u16::MAX`).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Obj {
    pub start: usize,
    pub end: usize,
    pub from: usize,
    pub id: u32,
    pub root: u16,
    pub marked: bool,
    pub direct: bool,
}

/// Most root ranges kept: writable segments of loaded objects, thread stacks, their
/// thread-local storage and registers.
const MAX_ROOTS: usize = 1024 + 4 * (threads::MAX_THREADS + 1);
/// Most loaded objects named.
const MAX_MODULES: usize = 1024;
/// Most executable segments kept, to tell return addresses on a stack.
const MAX_CODE: usize = 1024;

/// What a root range is (all-zero bytes: a static of module 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Root {
    /// A writable segment of loaded object `module`.
    Static { module: u16 },
    /// The static thread-local block `block` (of one loaded object, see [`tls_name`]) of
    /// [`Roots::threads`]).
    Tls { thread: u16, block: u16 },
    /// The registers of a stopped thread.
    Registers { thread: u16 },
    /// A thread's stack.
    Stack { thread: u16 },
    /// The exiting thread's callee-saved registers as the exit handler started.
    ExitRegisters { thread: u16 },
}

/// A thread whose memory is a root.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRoot {
    pub tid: usize,
    /// Its stack pointer when known (stopped, waiting, or the exit frame), else 0.
    pub sp: usize,
    /// Where it was interrupted, when stopped (else 0).
    pub pc: usize,
    /// Whether it is stopped, its registers saved in `stop::SLOTS[slot]`.
    pub stopped: bool,
    pub slot: usize,
    /// The tracker's stack id of the call that started it, plus one (0: not known).
    pub spawn: usize,
    /// What it was doing before the scan stopped it (a `leakcheck_protocol::paths::ThreadState`).
    pub state: u64,
}

/// A loaded object: its name (NUL-terminated, the loader's; empty for the program) and
/// load bias.
#[derive(Clone, Copy, Debug)]
pub struct Module {
    pub name: *const c_char,
    pub base: usize,
}

/// Address ranges whose words are roots, what each is, and the threads and objects they
/// belong to. All-zero bytes are a valid, empty `Roots` (the scan maps it zeroed: it is
/// too large for a stack).
#[repr(C)]
pub struct Roots {
    ranges: [(usize, usize); MAX_ROOTS],
    kinds: [Root; MAX_ROOTS],
    n: usize,
    pub threads: [ThreadRoot; threads::MAX_THREADS + 1],
    pub n_threads: usize,
    pub modules: [Module; MAX_MODULES],
    pub n_modules: usize,
    code: [(usize, usize); MAX_CODE],
    n_code: usize,
}

impl Roots {
    #[cfg(test)]
    pub fn new() -> Box<Roots> {
        Box::new(Roots::EMPTY)
    }

    #[cfg(test)]
    const EMPTY: Roots = {
        Roots {
            ranges: [(0, 0); MAX_ROOTS],
            kinds: [Root::Static { module: 0 }; MAX_ROOTS],
            n: 0,
            threads: [ThreadRoot {
                tid: 0,
                sp: 0,
                pc: 0,
                stopped: false,
                slot: 0,
                spawn: 0,
                state: 0,
            }; threads::MAX_THREADS + 1],
            n_threads: 0,
            modules: [Module {
                name: std::ptr::null(),
                base: 0,
            }; MAX_MODULES],
            n_modules: 0,
            code: [(0, 0); MAX_CODE],
            n_code: 0,
        }
    };

    fn push(&mut self, lo: usize, hi: usize, kind: Root) {
        if lo < hi && self.n < MAX_ROOTS {
            self.ranges[self.n] = (lo, hi);
            self.kinds[self.n] = kind;
            self.n += 1;
        }
    }

    fn thread(&mut self, t: ThreadRoot) -> Option<u16> {
        let i = self.n_threads;
        (i < self.threads.len()).then(|| {
            self.threads[i] = t;
            self.n_threads += 1;
            i as u16
        })
    }

    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges[..self.n]
    }

    /// Whether root range `i` lasts beyond what a thread is doing now: a static or a
    /// thread-local (see [`mark`]).
    pub fn lasting(&self, i: usize) -> bool {
        matches!(self.kinds[i], Root::Static { .. } | Root::Tls { .. })
    }

    /// The root range holding the word at `at` (the first, in scan order), and its kind.
    pub fn root_of(&self, at: usize) -> Option<((usize, usize), Root)> {
        (0..self.n)
            .find(|&i| (self.ranges[i].0..self.ranges[i].1).contains(&at))
            .map(|i| (self.ranges[i], self.kinds[i]))
    }

    /// Whether `value` points into the code of a loaded object.
    pub fn is_code(&self, value: usize) -> bool {
        self.code[..self.n_code]
            .iter()
            .any(|&(lo, hi)| (lo..hi).contains(&value))
    }
}

/// Marks every object in `objs` (sorted by start, not overlapping) that a word in `roots`
/// reaches, directly or through other marked objects, and records how each was first
/// reached. Breadth first: what the roots point to first, then what those point to, so the
/// way recorded to each object is a shortest one; but from the roots that last
/// (`lasting(r)`: statics, thread-locals) to the end first, then from the others (stacks,
/// registers). An object a static holds is named by the static even when a stack also points
/// to it: a stale copy left in a frame, or a local that holds it only for now, is not what
/// keeps it. `work` must hold `objs.len()` entries: each object is queued at most once, when
/// it is marked. Returns how many were marked; `work[..that]` lists them in the order they
/// were reached.
///
/// # Safety
/// Every root range and every object's `[start, end)` must be readable memory.
pub unsafe fn mark(
    objs: &mut [Obj],
    roots: &[(usize, usize)],
    lasting: &dyn Fn(usize) -> bool,
    work: &mut [u32],
) -> usize {
    let mut queued = 0usize;
    let mut next = 0usize;
    for phase in [true, false] {
        for (r, &(lo, hi)) in roots.iter().enumerate() {
            if lasting(r) != phase {
                continue;
            }
            let root = r.min(u16::MAX as usize) as u16;
            // SAFETY: the caller guarantees the range is readable.
            unsafe { scan(lo, hi, Err(root), objs, work, &mut queued) };
        }
        while next < queued {
            let i = work[next] as usize;
            next += 1;
            let o = objs[i];
            // SAFETY: a live allocation, readable by the caller's guarantee.
            unsafe { scan(o.start, o.end, Ok(i), objs, work, &mut queued) };
        }
    }
    queued
}

/// Marks (and queues) the objects the words of `[lo, hi)` point into; `parent` is the
/// object the range is, or (Err) the index of the root range it is.
unsafe fn scan(
    lo: usize,
    hi: usize,
    parent: Result<usize, u16>,
    objs: &mut [Obj],
    work: &mut [u32],
    queued: &mut usize,
) {
    let (Some(first), Some(last)) = (objs.first(), objs.last()) else {
        return;
    };
    let (min, max) = (first.start, last.end);
    let root = match parent {
        Ok(p) => objs[p].root,
        Err(r) => r,
    };
    let word = std::mem::size_of::<usize>();
    let mut visit = |at: usize| {
        // SAFETY: `at` is an aligned word inside a range the caller guarantees readable.
        // The other threads are stopped while the scan reads (see `crate::stop`), but one
        // that did not answer may still write: a data race by the language's rules, which
        // the code leaves to the hardware instead: on x86-64 an aligned word load reads one
        // whole value, old or new.
        let value = unsafe { std::ptr::read_volatile(at as *const usize) };
        if value < min || value >= max {
            return;
        }
        let i = objs.partition_point(|o| o.start <= value);
        if i == 0 {
            return;
        }
        let o = &mut objs[i - 1];
        if value < o.end && !o.marked {
            o.marked = true;
            o.root = root;
            match parent {
                Ok(p) => o.from = p,
                Err(_) => {
                    o.from = at;
                    o.direct = true;
                }
            }
            work[*queued] = (i - 1) as u32;
            *queued += 1;
        }
    };
    let words = (lo.next_multiple_of(word)..hi.saturating_sub(word - 1)).step_by(word);
    if parent.is_err() {
        // A root range is read from its top down: on a stack, the outermost frame that
        // points to an object names who holds it (a local of a frame that lives on), not a
        // copy in whichever frame the thread happened to be stopped in, so the same
        // program gives the same path on every run.
        words.rev().for_each(&mut visit);
    } else {
        words.for_each(&mut visit);
    }
}

/// Whether the loaded object at `base` with these program headers is this runtime.
fn is_runtime(base: usize, headers: &[libc::Elf64_Phdr]) -> bool {
    let own = is_runtime as *const () as usize;
    headers.iter().any(|h| {
        h.p_type == libc::PT_LOAD && {
            let lo = base + h.p_vaddr as usize;
            (lo..lo + h.p_memsz as usize).contains(&own)
        }
    })
}

/// The writable segments of every loaded object except this runtime (whose own data holds
/// nothing of the program's), and where code is. Call before taking any lock malloc takes:
/// the loader holds its own lock while it calls back, and a thread in `dlopen` may be
/// waiting in `malloc`.
pub fn add_image_roots(roots: &mut Roots) {
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is the Roots below.
        let (info, roots) = unsafe { (&*info, &mut *data.cast::<Roots>()) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let base = info.dlpi_addr as usize;
        let is_own = is_runtime(base, headers);
        for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD) {
            let lo = base + h.p_vaddr as usize;
            if h.p_flags & libc::PF_X != 0 && roots.n_code < MAX_CODE {
                roots.code[roots.n_code] = (lo, lo + h.p_memsz as usize);
                roots.n_code += 1;
            }
        }
        if is_own || roots.n_modules == MAX_MODULES {
            return 0;
        }
        let module = roots.n_modules as u16;
        roots.modules[roots.n_modules] = Module {
            name: info.dlpi_name,
            base,
        };
        roots.n_modules += 1;
        for h in headers {
            if h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W != 0 {
                let lo = base + h.p_vaddr as usize;
                roots.push(lo, lo + h.p_memsz as usize, Root::Static { module });
            }
        }
        0
    }
    // SAFETY: the callback only reads the headers and writes into `roots`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut *roots).cast()) };
}

/// Where each loaded object's static thread-local storage lies below a thread's thread
/// pointer (the same distance in every thread: glibc places static TLS at fixed offsets
/// from it), its size, and the object's name; recorded by the constructor, on the main
/// thread, for the objects loaded with the program.
struct TlsBlock {
    below_tp: AtomicUsize,
    size: AtomicUsize,
    name: AtomicUsize,
}

const MAX_TLS: usize = 64;
#[allow(clippy::declare_interior_mutable_const)]
const NO_TLS: TlsBlock = TlsBlock {
    below_tp: AtomicUsize::new(0),
    size: AtomicUsize::new(0),
    name: AtomicUsize::new(0),
};
static TLS: [TlsBlock; MAX_TLS] = [NO_TLS; MAX_TLS];
static N_TLS: AtomicUsize = AtomicUsize::new(0);

/// Records [`TLS`]; called by the constructor on the main thread.
pub fn record_tls_layout() {
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is the thread pointer below.
        let (info, tp) = unsafe { (&*info, *data.cast::<usize>()) };
        let block = info.dlpi_tls_data as usize;
        if info.dlpi_phdr.is_null() || block == 0 || block > tp {
            return 0;
        }
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let Some(tls) = headers.iter().find(|h| h.p_type == libc::PT_TLS) else {
            return 0;
        };
        // The runtime's own thread-locals (jemalloc's thread state among them) hold nothing
        // of the program's, only words the allocator keeps for itself.
        if is_runtime(info.dlpi_addr as usize, headers) {
            return 0;
        }
        let n = N_TLS.load(Relaxed);
        if n < MAX_TLS {
            TLS[n].below_tp.store(tp - block, Relaxed);
            TLS[n].size.store(tls.p_memsz as usize, Relaxed);
            TLS[n].name.store(info.dlpi_name as usize, Relaxed);
            N_TLS.store(n + 1, Relaxed);
        }
        0
    }
    use std::sync::atomic::Ordering::Relaxed;
    let mut tp = threads::thread_pointer();
    if tp == 0 {
        return;
    }
    // SAFETY: the callback only reads the headers and stores atomics.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut tp).cast()) };
}

/// The static thread-local storage of the thread whose thread pointer is `tp`, one root
/// range per loaded object's block.
fn add_tls(roots: &mut Roots, tp: usize, thread: u16) {
    use std::sync::atomic::Ordering::Relaxed;
    if tp == 0 {
        return;
    }
    for (block, b) in TLS[..N_TLS.load(Relaxed).min(MAX_TLS)].iter().enumerate() {
        let (below, size) = (b.below_tp.load(Relaxed), b.size.load(Relaxed));
        if below <= tp {
            let block = block as u16;
            roots.push(tp - below, tp - below + size, Root::Tls { thread, block });
        }
    }
}

/// The name of the loaded object whose thread-local block `block` is (see [`Root::Tls`]).
pub fn tls_name(block: u16) -> *const c_char {
    TLS.get(usize::from(block)).map_or(std::ptr::null(), |b| {
        b.name.load(std::sync::atomic::Ordering::Relaxed) as *const c_char
    })
}

/// The stacks, thread-local storage and registers of the recorded threads and of the main
/// thread. The caller holds the registry lock, so none of them can end (and its stack go)
/// while it is scanned, and has stopped them (`stop`) where it could.
///
/// A stopped thread is scanned from its interrupted stack pointer less the 128-byte red
/// zone, with its registers. One that did not stop is scanned from where it waits in a
/// system call, or whole. A registered calling thread (a test thread that called `exit`
/// itself, running the exit handler) is scanned from the handler's frame up (see
/// [`note_exit_frame`]), with its registers as the handler started: the frames above the
/// handler are the test's. The main thread's stack, when the main thread is not the
/// caller, is scanned from its stack pointer; its lower end is only where it has grown to,
/// so without one it is not scanned. On the main thread itself the handler runs after
/// `main` returned: nothing on that stack is the test's, and the handler's frames reuse the
/// slots `main`'s frames had, whose stale words would keep lost objects reachable. Every
/// thread's static thread-local storage is a root, the caller's and the main thread's too
/// (theirs is not on a stack the scan reads).
#[inline(never)]
pub fn add_thread_roots(roots: &mut Roots, _held: &threads::RegistryGuard, stop: &Stop) {
    let me = threads::gettid();
    // Thread-local storage first: a word there is named by its variable, though a thread's
    // stack range covers it as well.
    let mut stacks = StackRanges {
        ranges: [(0, 0, 0); threads::MAX_THREADS + 1],
        n: 0,
    };
    let exiting = add_registered_threads(roots, stop, me, &mut stacks);
    add_main_thread(roots, stop, me, &mut stacks);
    add_stopped_registers(roots);
    add_stacks(roots, &stacks, exiting);
}

/// The stack ranges found while the threads are added, each with its thread's index: they
/// are added last, after every thread's thread-local storage.
struct StackRanges {
    ranges: [(usize, usize, u16); threads::MAX_THREADS + 1],
    n: usize,
}

impl StackRanges {
    fn push(&mut self, from: usize, to: usize, thread: u16) {
        self.ranges[self.n] = (from, to, thread);
        self.n += 1;
    }
}

/// Adds each registered thread and its thread-local storage (and, for the calling thread
/// scanned from its exit frame, its registers as the handler started); its stack range, if
/// it has one to scan, goes to `stacks`. Returns the calling thread's index when its stack
/// is scanned from the exit frame.
fn add_registered_threads(
    roots: &mut Roots,
    stop: &Stop,
    me: usize,
    stacks: &mut StackRanges,
) -> Option<u16> {
    use std::sync::atomic::Ordering;
    let exit_frame = EXIT_FRAME.load(Ordering::Relaxed);
    // The thread that called `exit` and runs this scan: its frames are reduced to their
    // live slots (see `crate::live`).
    let mut exiting: Option<u16> = None;
    for (slot, e) in threads::REGISTRY.iter().enumerate() {
        let tid = e.tid.load(Ordering::Acquire);
        if tid == 0 {
            continue;
        }
        let (lo, hi) = (e.lo.load(Ordering::Relaxed), e.hi.load(Ordering::Relaxed));
        let mut t = ThreadRoot {
            tid,
            spawn: e.spawn.load(Ordering::Relaxed),
            state: e.state.load(Ordering::Relaxed),
            ..ThreadRoot::default()
        };
        let range = registered_stack(&mut t, slot, (lo, hi), me, exit_frame, stop);
        let Some(index) = roots.thread(t) else { break };
        if tid == me && range.is_some() {
            exiting = Some(index);
        }
        add_tls(roots, e.tp.load(Ordering::Relaxed), index);
        if let Some((from, to)) = range {
            stacks.push(from, to, index);
        }
        if tid == me && t.sp != 0 {
            let saved = std::ptr::addr_of!(SAVED) as usize;
            roots.push(
                saved,
                saved + std::mem::size_of_val(&SAVED),
                Root::ExitRegisters { thread: index },
            );
        }
    }
    exiting
}

/// The part of registered thread `t`'s stack (`lo..hi`, registry slot `slot`) to scan, if
/// any, noting in `t` where it stands: the caller's from its exit frame, a stopped thread's
/// from its stack pointer less the red zone, a waiting one's from where it waits, any other
/// whole.
fn registered_stack(
    t: &mut ThreadRoot,
    slot: usize,
    (lo, hi): (usize, usize),
    me: usize,
    exit_frame: usize,
    stop: &Stop,
) -> Option<(usize, usize)> {
    use std::sync::atomic::Ordering;
    if t.tid == me {
        (lo..hi).contains(&exit_frame).then(|| {
            t.sp = exit_frame;
            (exit_frame, hi)
        })
    } else if stop.stopped(slot) {
        let sp = stop::SLOTS[slot].regs[stop::SP].load(Ordering::Relaxed);
        t.sp = sp;
        t.pc = stop::SLOTS[slot].regs[stop::PC].load(Ordering::Relaxed);
        t.stopped = true;
        t.slot = slot;
        Some((sp.saturating_sub(RED_ZONE).max(lo), hi))
    } else {
        match waiting_stack_pointer(t.tid) {
            Some(Waiting::At(sp)) if (lo..hi).contains(&sp) => {
                t.sp = sp;
                Some((sp, hi))
            }
            Some(Waiting::Gone) => None,
            _ => Some((lo, hi)),
        }
    }
}

/// Adds the main thread and its thread-local storage; its stack range, when it is not the
/// caller and its stack pointer is known, goes to `stacks`.
fn add_main_thread(roots: &mut Roots, stop: &Stop, me: usize, stacks: &mut StackRanges) {
    let Some((main, top)) = threads::main_thread() else {
        return;
    };
    let mut t = ThreadRoot {
        tid: main,
        ..ThreadRoot::default()
    };
    let exit_frame = EXIT_FRAME.load(std::sync::atomic::Ordering::Relaxed);
    let range = if main != me {
        main_stack(&mut t, top, stop)
    } else if MAIN_FROM_EXIT.load(std::sync::atomic::Ordering::Relaxed)
        && exit_frame < top
        && top - exit_frame < MAIN_STACK_MAX
    {
        // A program's own exit, from `main` or below it (`process::exit`): its frames above
        // the handler are live, and a pointer it kept only in a register is on no stack.
        t.sp = exit_frame;
        Some((exit_frame, top))
    } else {
        None
    };
    if let Some(index) = roots.thread(t) {
        add_tls(roots, threads::main_thread_pointer(), index);
        if let Some((from, to)) = range {
            stacks.push(from, to, index);
        }
        if main == me && t.sp != 0 {
            let saved = std::ptr::addr_of!(SAVED) as usize;
            roots.push(
                saved,
                saved + std::mem::size_of_val(&SAVED),
                Root::ExitRegisters { thread: index },
            );
        }
    }
}

/// Whether the main thread's stack above the exit handler is scanned when it runs the
/// handler: in a process the test started, whose `main` may call `exit` with its data still
/// on its stack (see [`scan_main_from_exit`]).
static MAIN_FROM_EXIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Has the main thread's stack scanned from the exit handler's frame up, as a thread that
/// called `exit` has: in a program (not a test binary, whose `main` returned before its
/// handler runs) the frames above may be `main`'s own.
pub fn scan_main_from_exit() {
    MAIN_FROM_EXIT.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The part of the main thread `t`'s stack (whose top is `top`) to scan: from its stack
/// pointer, stopped or waiting, less the red zone; noting in `t` where it stands.
fn main_stack(t: &mut ThreadRoot, top: usize, stop: &Stop) -> Option<(usize, usize)> {
    use std::sync::atomic::Ordering;
    let sp = if stop.stopped(stop::MAIN_SLOT) {
        t.pc = stop::SLOTS[stop::MAIN_SLOT].regs[stop::PC].load(Ordering::Relaxed);
        t.stopped = true;
        t.slot = stop::MAIN_SLOT;
        Some(stop::SLOTS[stop::MAIN_SLOT].regs[stop::SP].load(Ordering::Relaxed))
    } else if let Some(Waiting::At(sp)) = waiting_stack_pointer(t.tid) {
        Some(sp)
    } else {
        None
    };
    // A main thread's stack is at most its rlimit deep; anything else is not its.
    let sp = sp.filter(|&sp| sp < top && top - sp < MAIN_STACK_MAX)?;
    t.sp = sp;
    Some((sp.saturating_sub(RED_ZONE), top))
}

/// The saved registers of every stopped thread.
fn add_stopped_registers(roots: &mut Roots) {
    for i in 0..roots.n_threads {
        let t = roots.threads[i];
        if t.stopped {
            let regs = stop::SLOTS[t.slot].regs.as_ptr() as usize;
            let words = stop::REGISTER_NAMES.len() * std::mem::size_of::<usize>();
            roots.push(regs, regs + words, Root::Registers { thread: i as u16 });
        }
    }
}

/// The stacks, the `exiting` thread's reduced to the live slots of its frames.
fn add_stacks(roots: &mut Roots, stacks: &StackRanges, exiting: Option<u16>) {
    // The program's load bias, for the table of live slots (link-time addresses).
    let bias = (roots.n_modules > 0)
        .then(|| roots.modules[0])
        // SAFETY: the first module is the program itself, never unloaded; the loader's
        // name for it is a NUL-terminated string.
        .filter(|m| !m.name.is_null() && unsafe { *m.name } == 0)
        .map_or(0, |m| m.base);
    for &(from, to, thread) in &stacks.ranges[..stacks.n] {
        if exiting == Some(thread) {
            crate::live::stack_ranges(from, to, bias, |lo, hi| {
                roots.push(lo, hi, Root::Stack { thread })
            });
        } else {
            roots.push(from, to, Root::Stack { thread });
        }
    }
}

/// What the System V x86-64 ABI lets a function keep below its stack pointer.
const RED_ZONE: usize = 128;

/// The deepest main-thread stack scanned (glibc's default limit is 8 MiB).
const MAIN_STACK_MAX: usize = 1 << 30;

/// Where the exit handler's frame starts on the thread that runs it (0: not yet).
static EXIT_FRAME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The names of [`SAVED`]'s registers, in order.
pub const SAVED_NAMES: [&str; 6] = ["rbx", "rbp", "r12", "r13", "r14", "r15"];
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
    let mut buf = [0u8; 512];
    let text = match crate::sys::task_syscall(tid as u64, &mut buf) {
        crate::sys::TaskSyscall::Text(text) => text,
        crate::sys::TaskSyscall::Gone => return Some(Waiting::Gone),
        crate::sys::TaskSyscall::Unreadable => return Some(Waiting::Unknown),
    };
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
                ..Obj::default()
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
        unsafe { mark(&mut objs, &roots, &|_| true, &mut work) };
        assert!(marked(&objs, &a) && marked(&objs, &b) && marked(&objs, &c));
        assert!(!marked(&objs, &lost) && !marked(&objs, &d));
        // A cycle with no root is lost as a whole.
        a[1] = 0;
        let mut objs = objs_of(&[&a, &b, &c, &d]);
        let root_d = [d.as_ptr() as usize];
        let roots = [(root_d.as_ptr() as usize, root_d.as_ptr() as usize + 8)];
        b[0] = a.as_ptr() as usize;
        // SAFETY: as above.
        unsafe { mark(&mut objs, &roots, &|_| true, &mut work) };
        assert!(marked(&objs, &d));
        assert!(!marked(&objs, &a) && !marked(&objs, &b) && !marked(&objs, &c));
        std::hint::black_box((&a, &b, &c, &lost, &d));
    }

    #[test]
    fn each_object_records_a_shortest_way_it_was_reached() {
        let mut a = vec![0usize; 2];
        let mut b = vec![0usize; 2];
        let c = vec![0usize; 2];
        // root1 -> a -> b -> c, and root2 -> c: c is one step from a root, b two.
        a[0] = b.as_ptr() as usize;
        b[1] = c.as_ptr() as usize;
        let root1 = [a.as_ptr() as usize];
        let root2 = [0usize, c.as_ptr() as usize];
        let mut objs = objs_of(&[&a, &b, &c]);
        let mut work = vec![0u32; objs.len()];
        let roots = [
            (root1.as_ptr() as usize, root1.as_ptr() as usize + 8),
            (root2.as_ptr() as usize, root2.as_ptr() as usize + 16),
        ];
        // SAFETY: the roots and objects are live vectors of this test.
        let reached = unsafe { mark(&mut objs, &roots, &|_| true, &mut work) };
        assert_eq!(reached, 3);
        let find = |v: &[usize]| {
            objs.iter()
                .position(|o| o.start == v.as_ptr() as usize)
                .unwrap()
        };
        let (ia, ib, ic) = (find(&a), find(&b), find(&c));
        assert!(objs[ia].direct && objs[ia].from == root1.as_ptr() as usize);
        assert!(objs[ic].direct && objs[ic].from == root2.as_ptr() as usize + 8);
        assert!(!objs[ib].direct && objs[ib].from == ia);
        // Reached in order: what the roots point to, then what those point to.
        assert_eq!(work[2] as usize, ib);
        // When root2 is a stack and root1 a static, c is named by the static, through a
        // and b, though the stack points to it directly: lasting roots go first.
        let mut objs = objs_of(&[&a, &b, &c]);
        // SAFETY: as above.
        let reached = unsafe { mark(&mut objs, &roots, &|r| r == 0, &mut work) };
        assert_eq!(reached, 3);
        assert!(!objs[ic].direct && objs[ic].from == ib && objs[ic].root == 0);
        std::hint::black_box((&a, &b, &c));
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
    fn the_runtime_s_own_thread_locals_are_no_root() {
        thread_local! {
            static OWN: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
        }
        record_tls_layout();
        let mut roots = Roots::new();
        add_tls(&mut roots, threads::thread_pointer(), 0);
        // The runtime here is this test executable: its thread-locals, jemalloc's thread
        // state among them, keep words of the allocator's, never the program's.
        let own = OWN.with(|c| c as *const _ as usize);
        assert!(!roots
            .ranges()
            .iter()
            .any(|&(lo, hi)| (lo..hi).contains(&own)));
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
        // `join` returns once the kernel cleared the thread's id, which it does before it
        // takes the task out of /proc: the entry may outlive the join by a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !matches!(waiting_stack_pointer(tid), Some(Waiting::Gone)) {
            assert!(
                std::time::Instant::now() < deadline,
                "thread {tid} still in /proc/self/task 10 s after it was joined"
            );
            std::thread::yield_now();
        }
    }
}
