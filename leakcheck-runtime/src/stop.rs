//! Stopping the other threads while the reachability scan reads memory.
//!
//! A thread that runs on while the scan marks can move the only pointer to an object from
//! a word not yet read to one already read, and the object looks lost. A stopped thread
//! also gives what a stack pointer sampled from `/proc` cannot: the registers it was
//! interrupted with (a pointer the compiler kept only in a register is on no stack), its
//! exact stack top and its red zone.
//!
//! Each registered thread (and the main thread) is sent [`signal`]; the handler saves the
//! interrupted registers from its `ucontext` and the frames the unwinder finds into the
//! thread's slot, says it stopped, and waits on a futex until [`resume`]. A thread that does
//! not answer within [`ANSWER_WAIT_MS`] (it blocks the signal, or sleeps uninterruptibly) is
//! scanned as before: from the stack pointer the kernel reports, or whole. The handler stays
//! installed once installed: a signal delivered late, after the scan, must find it and not
//! the default action, which would end the process.

use crate::threads;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// The general-purpose registers a stopped thread was interrupted with (x86-64: rax … r15),
/// then its stack pointer and its program counter.
pub const SAVED_WORDS: usize = 18;
/// Index of the stack pointer in a slot's `regs`.
pub const SP: usize = 16;
/// Index of the program counter in a slot's `regs`.
pub const PC: usize = 17;

/// Frames recorded per stopped thread.
pub const MAX_FRAMES: usize = 48;

/// One thread's stop: the registry slot's, or [`MAIN_SLOT`] for the main thread.
pub struct Slot {
    pub regs: [AtomicUsize; SAVED_WORDS],
    /// The scan generation this thread last stopped for.
    pub stopped: AtomicU32,
    /// Its frames as the unwinder found them from the handler, innermost first: the
    /// address each executes at (a return address, or where it was interrupted) and the
    /// CFA libgcc's backtrace reports beside it, which is that of the frame below (the
    /// callee's: this frame's stack pointer at the call). A stack word lies in the last
    /// frame whose reported CFA is at or below it.
    pub frames: [[AtomicUsize; 2]; MAX_FRAMES],
    pub n_frames: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    regs: [const { AtomicUsize::new(0) }; SAVED_WORDS],
    stopped: AtomicU32::new(0),
    frames: [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; MAX_FRAMES],
    n_frames: AtomicUsize::new(0),
};

impl Slot {
    /// Where the function whose frame holds the stack word at `at` executes, from the
    /// frames the unwinder found; None when no recorded frame holds it.
    pub fn frame_of(&self, at: usize) -> Option<usize> {
        let n = self.n_frames.load(Ordering::Acquire).min(MAX_FRAMES);
        let above = self.frames[..n]
            .iter()
            .position(|f| f[1].load(Ordering::Relaxed) > at)
            .unwrap_or(n);
        let holder = above.checked_sub(1)?;
        Some(self.frames[holder][0].load(Ordering::Relaxed))
    }
}

/// The main thread's slot, after the registry's.
pub const MAIN_SLOT: usize = threads::MAX_THREADS;

pub static SLOTS: [Slot; threads::MAX_THREADS + 1] = [FREE; threads::MAX_THREADS + 1];

/// The generation of the scan in progress (threads stop for it).
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// The generation threads may resume from (a futex word).
static RESUMED: AtomicU32 = AtomicU32::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicUsize = AtomicUsize::new(0);

/// How long the scan waits for all signalled threads to answer, in all.
const ANSWER_WAIT_MS: u64 = 500;

/// The signal that stops a thread: a real-time one near the top of the range, which
/// programs rarely use (glibc keeps the lowest for itself).
pub fn signal() -> c_int {
    crate::signals::stop()
}

/// Which threads a scan stopped (indexed by slot).
pub struct Stop {
    pub generation: u32,
}

impl Stop {
    /// Whether the thread of `slot` is stopped for this scan, its registers saved.
    pub fn stopped(&self, slot: usize) -> bool {
        SLOTS[slot].stopped.load(Ordering::Acquire) == self.generation
    }
}

/// Stops every registered thread and the main thread, except the caller; the registry lock
/// (`_held`) keeps the set of threads still. Call with no lock taken that a thread inside
/// `malloc` could be holding, other than the tracker's own (a thread waiting for it still
/// takes the signal).
pub fn stop_others(_held: &threads::RegistryGuard) -> Stop {
    let generation = GENERATION.load(Ordering::Relaxed).wrapping_add(1).max(1);
    GENERATION.store(generation, Ordering::Release);
    let stop = Stop { generation };
    if !install() {
        return stop;
    }
    let me = threads::gettid();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let sig = SIGNAL.load(Ordering::Relaxed) as c_int;
    let mut asked = [false; threads::MAX_THREADS + 1];
    let mut send = |slot: usize, tid: usize| {
        if tid == 0 || tid == me {
            return;
        }
        // SAFETY: tgkill to a thread of this process; a thread that ended meanwhile gives
        // ESRCH, which only means it does not answer.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                pid,
                tid as libc::c_long,
                sig as libc::c_long,
            )
        };
        asked[slot] = sent == 0;
    };
    for (slot, e) in threads::REGISTRY.iter().enumerate() {
        send(slot, e.tid.load(Ordering::Acquire));
    }
    if let Some((main, _)) = threads::main_thread() {
        send(MAIN_SLOT, main);
    }
    let give_up = crate::sys::now_ms() + ANSWER_WAIT_MS;
    loop {
        let waiting = asked
            .iter()
            .enumerate()
            .any(|(slot, &a)| a && !stop.stopped(slot));
        if !waiting || crate::sys::now_ms() >= give_up {
            break;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    stop
}

/// Lets every thread stopped by `stop` go on.
pub fn resume(stop: Stop) {
    RESUMED.store(stop.generation, Ordering::Release);
    // SAFETY: a futex wake on a static word; no other memory is touched.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            RESUMED.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

fn install() -> bool {
    if INSTALLED.load(Ordering::Acquire) {
        return true;
    }
    let sig = signal();
    // SAFETY: a zeroed sigaction is valid, and every signal is blocked while the handler
    // runs. The handler is not async-signal-safe as a whole: besides atomics, its own
    // ucontext, errno (saved and restored) and the gettid and futex system calls, it runs
    // libgcc's unwinder (`unwind`), which is not async-signal-safe in general. The code
    // relies instead on what `unwind` says of how libgcc finds a frame's table. Once the
    // frames are recorded, the thread only waits on the futex until `resume`: parked there,
    // it runs none of the program's code while the scanning thread reads its stack and the
    // registers it saved.
    let ok = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_stop as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut()) == 0
    };
    if ok {
        SIGNAL.store(sig as usize, Ordering::Relaxed);
        INSTALLED.store(true, Ordering::Release);
    }
    ok
}

extern "C" fn on_stop(_sig: c_int, _info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel's errno slot of this thread; restored before returning.
    let errno = unsafe { *libc::__errno_location() };
    let generation = GENERATION.load(Ordering::Acquire);
    if let Some(slot) = own_slot().filter(|_| RESUMED.load(Ordering::Acquire) != generation) {
        save(&SLOTS[slot], context);
        unwind(&SLOTS[slot]);
        SLOTS[slot].stopped.store(generation, Ordering::Release);
        while RESUMED.load(Ordering::Acquire) != generation {
            // SAFETY: a futex wait on a static word, woken by `resume`.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    RESUMED.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    RESUMED.load(Ordering::Relaxed),
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn own_slot() -> Option<usize> {
    let tid = threads::gettid();
    if threads::main_thread().is_some_and(|(main, _)| main == tid) {
        return Some(MAIN_SLOT);
    }
    threads::REGISTRY
        .iter()
        .position(|e| e.tid.load(Ordering::Acquire) == tid)
}

#[cfg(target_arch = "x86_64")]
fn save(slot: &Slot, context: *mut c_void) {
    // SAFETY: with SA_SIGINFO the third argument is the interrupted thread's ucontext_t.
    let gregs = unsafe { &(*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    let order = [
        libc::REG_RAX,
        libc::REG_RBX,
        libc::REG_RCX,
        libc::REG_RDX,
        libc::REG_RSI,
        libc::REG_RDI,
        libc::REG_RBP,
        libc::REG_R8,
        libc::REG_R9,
        libc::REG_R10,
        libc::REG_R11,
        libc::REG_R12,
        libc::REG_R13,
        libc::REG_R14,
        libc::REG_R15,
        libc::REG_RSP,
        libc::REG_RSP,
        libc::REG_RIP,
    ];
    for (word, reg) in slot.regs.iter().zip(order) {
        word.store(gregs[reg as usize] as usize, Ordering::Relaxed);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn save(_slot: &Slot, _context: *mut c_void) {}

/// Records the stopped thread's frames into its slot, from the handler through the signal
/// frame into the interrupted code (libgcc's unwinder knows the kernel's signal trampoline).
///
/// `_Unwind_Backtrace` is not async-signal-safe in general; what this relies on is how
/// libgcc finds the table of each frame's object. libgcc 12 and later, on glibc 2.35 and
/// later, ask `_dl_find_object`, which is async-signal-safe and takes no lock. An older one
/// walks the objects with `dl_iterate_phdr`, under the loader's lock, which is recursive: a
/// thread stopped inside the loader unwinds, though it may read the loader's list or
/// libgcc's cache of it mid-update; one that must wait for a thread stopped there answers
/// late, and is scanned as a thread that did not stop. Tables registered at run time with
/// `__register_frame_info` (a JIT's) are searched first, under a mutex of libgcc's that
/// older versions take whenever one is registered, and sorted with `malloc` on their first
/// search: a thread stopped holding that mutex or a lock of `malloc`'s would wait in its
/// handler for good. The code accepts that for programs that register tables, which
/// programs linked the usual way do not.
fn unwind(slot: &Slot) {
    crate::sys::record_frames(&slot.frames, &slot.n_frames);
}

/// The names of the saved general-purpose registers, in slot order.
pub const REGISTER_NAMES: [&str; 16] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15", "rsp",
];
