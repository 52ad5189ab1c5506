//! The frame an extra run died in. While a test's extra runs go, a fatal signal (a crash, an
//! `abort`) is met here first: the frames of the thread it stopped and the process's
//! mappings are written beside the record (`leakcheck_protocol::died`), the program's own
//! action for the signal is put back, and the signal then does what it would have done
//! without this module: a fault happens again as the handler returns and meets the
//! program's handler (std's stack-overflow check) or the default action; a signal a process
//! sent (`abort`, `kill`) is sent again, and delivered under the program's action once the
//! handler returns. Nothing here allocates; the buffers are static, and only the first
//! thread to die uses them.

use crate::sys::{self, FixedPath};
use leakcheck_protocol::died::{Death, HEADER, SUFFIX};
use leakcheck_protocol::heap_v2::MAPPED_LIBRARIES;
use leakcheck_protocol::Sink;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// The signals that end a process with a crash or an abort.
const FATAL: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// At most this many frames are written: the interrupted code is within the first few.
const DEPTH: usize = 48;

/// What the handler needs, prepared before the runs and used by the first thread that dies.
struct State {
    /// The file to write (the record's name and [`SUFFIX`]).
    path: FixedPath,
    /// The program's actions for [`FATAL`], as they were when the handlers were put in.
    previous: [libc::sigaction; FATAL.len()],
    /// The line being written.
    line: [u8; 1536],
    line_len: usize,
    /// A chunk of `/proc/self/maps` on its way to the file.
    chunk: [u8; 4096],
}

struct Shared(UnsafeCell<State>);

// SAFETY: `arm` and `disarm` run on the thread that makes the extra runs, before and after
// them, while the handlers are not in place; between them only the handler touches the
// state, and only the thread that set `TAKEN` first.
unsafe impl Sync for Shared {}

static STATE: Shared = Shared(UnsafeCell::new(State {
    path: FixedPath::new(),
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags, empty mask).
    previous: unsafe { std::mem::zeroed() },
    line: [0; 1536],
    line_len: 0,
    chunk: [0; 4096],
}));

/// Whether the handlers are in place.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Set by the first thread that dies: the others only put the program's action back.
static TAKEN: AtomicBool = AtomicBool::new(false);
/// The extra run under way.
static RUN: AtomicU32 = AtomicU32::new(0);
/// The dying thread's frames and their CFAs, and how many there are.
static FRAMES: [[AtomicUsize; 2]; DEPTH] =
    [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; DEPTH];
static N_FRAMES: AtomicUsize = AtomicUsize::new(0);

/// Puts the handlers in place for the extra runs of the process whose record is `record`;
/// they stay until the returned guard is dropped.
pub fn arm(record: &FixedPath) -> Armed {
    if record.is_empty() || ARMED.load(Ordering::Acquire) {
        return Armed { armed: false };
    }
    // SAFETY: the handlers are not in place (`ARMED` is false), so nothing else uses the
    // state.
    let state = unsafe { &mut *STATE.0.get() };
    state.path = FixedPath::new();
    if !(state.path.push(record.as_bytes()) && state.path.push(SUFFIX.as_bytes())) {
        return Armed { armed: false };
    }
    for (sig, previous) in FATAL.iter().zip(state.previous.iter_mut()) {
        // SAFETY: a zeroed sigaction is valid; the handler is this module's, which every
        // other signal may interrupt (it writes nothing another handler reads).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal as *const () as usize;
            // On the thread's alternate stack when it has one: a stack overflow is met there.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(*sig, &action, previous);
        }
    }
    ARMED.store(true, Ordering::Release);
    Armed { armed: true }
}

/// Notes the extra run under way.
pub fn set_run(run: u32) {
    RUN.store(run, Ordering::Relaxed);
}

/// The handlers' lifetime: dropping it puts back the program's actions, for each signal
/// whose handler is still this module's (the program may have set its own since).
pub struct Armed {
    armed: bool,
}

impl Drop for Armed {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        ARMED.store(false, Ordering::Release);
        // SAFETY: reading and setting signal actions; the previous ones were saved by `arm`
        // and only read by a handler, which puts back the same values.
        let state = unsafe { &*STATE.0.get() };
        for (sig, previous) in FATAL.iter().zip(state.previous.iter()) {
            restore_if_ours(*sig, previous);
        }
    }
}

fn restore_if_ours(sig: c_int, previous: &libc::sigaction) {
    // SAFETY: `current` is ours to fill; `previous` is a sigaction the kernel gave `arm`.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == on_fatal as *const () as usize
        {
            libc::sigaction(sig, previous, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_fatal(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel's errno slot of this thread; restored before returning.
    let errno = unsafe { *libc::__errno_location() };
    let Some(at) = FATAL.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: only the thread that wins `TAKEN` writes the state; every thread only reads
    // the saved actions, which `arm` wrote before any handler was in place.
    let state = unsafe { &mut *STATE.0.get() };
    if room_to_record() && !TAKEN.swap(true, Ordering::AcqRel) {
        // The unwinder is not async-signal-safe in general; what this relies on is said at
        // `crate::stop`'s `unwind`, which records the frames the same way.
        sys::record_frames(&FRAMES, &N_FRAMES);
        write(state, sig, interrupted_at(context));
    }
    // Put back even when the action in place is no longer this module's: a handler the
    // program installed during the runs, having saved this one as the one before it, calls
    // it for a signal it does not own, and the program's action from before the runs is
    // then what is left to do; keeping the newer handler in place would hand the fault
    // back to it, and then to this one, for good.
    // SAFETY: a sigaction the kernel gave `arm`, for this signal.
    unsafe { libc::sigaction(sig, &state.previous[at], std::ptr::null_mut()) };
    // A fault happens again as the handler returns; a signal a process sent (`abort`'s
    // `raise`, a `kill`) does not, so it is sent again, to be delivered under the program's
    // action once this handler returns (it is blocked until then).
    // SAFETY: the kernel's siginfo for this signal, or null; `raise` is async-signal-safe.
    unsafe {
        if info.is_null() || (*info).si_code <= 0 {
            libc::raise(sig);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Where the signal stopped the thread (the ucontext's instruction pointer), when known.
/// A handler of the program's own that passes the signal on calls this one with the
/// ucontext it was given, so this is the interrupted code even then.
#[cfg(target_arch = "x86_64")]
fn interrupted_at(context: *mut c_void) -> Option<usize> {
    if context.is_null() {
        return None;
    }
    // SAFETY: with SA_SIGINFO the third argument is the interrupted thread's ucontext_t.
    let gregs = unsafe { &(*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    Some(gregs[libc::REG_RIP as usize] as usize)
}

#[cfg(not(target_arch = "x86_64"))]
fn interrupted_at(_context: *mut c_void) -> Option<usize> {
    None
}

/// Whether the stack the handler runs on has room for the unwinder: on a thread's
/// alternate stack (where a stack overflow is met), at least [`ROOM`] bytes below here;
/// otherwise the signal goes on unrecorded, as it would without this module.
fn room_to_record() -> bool {
    // SAFETY: `current` is ours to fill; a null new stack only asks.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut current) } != 0 {
        return false;
    }
    if current.ss_flags & libc::SS_ONSTACK == 0 {
        return true;
    }
    let here = std::ptr::addr_of!(current) as usize;
    here.saturating_sub(current.ss_sp as usize) >= ROOM
}

/// What the unwinder and this module's calls need, with a margin.
const ROOM: usize = 4096;

/// Writes the file under a temporary name and renames it when whole, so that the tool never
/// reads half of one.
fn write(state: &mut State, sig: c_int, interrupted: Option<usize>) {
    let mut tmp = FixedPath::new();
    if !(tmp.push(state.path.as_bytes()) && tmp.push(b".tmp")) {
        return;
    }
    let fd = sys::create_file(&tmp);
    if fd < 0 {
        return;
    }
    let death = Death {
        signal: sig,
        run: RUN.load(Ordering::Relaxed),
    };
    let mut ok = {
        let mut line = Line { state: &mut *state };
        line.put(HEADER);
        line.put("\n");
        death.encode(&mut line);
        line.put("\n@");
        let n = N_FRAMES.load(Ordering::Relaxed).min(DEPTH);
        // From the interrupted frame outward when it is among them: the handlers and the
        // kernel's return to them (this one's, and any of the program's that called it) are
        // not where the thread was.
        let from = interrupted
            .and_then(|pc| {
                FRAMES[..n]
                    .iter()
                    .position(|f| f[0].load(Ordering::Relaxed) == pc)
            })
            .unwrap_or(0);
        for frame in &FRAMES[from..n] {
            let mut digits = [0u8; 16];
            let from = leakcheck_protocol::format_hex(
                frame[0].load(Ordering::Relaxed) as u64,
                &mut digits,
            );
            line.put(" 0x");
            // ASCII hex digits only.
            line.put(std::str::from_utf8(&digits[from..]).unwrap_or("0"));
        }
        // A blank line, then the mappings, as a dump ends.
        line.put("\n");
        line.put("\n");
        line.put(MAPPED_LIBRARIES);
        line.put("\n");
        line.flush(fd)
    };
    ok &= copy_mappings(state, fd);
    // SAFETY: closing the descriptor opened above; both paths are NUL-terminated.
    unsafe {
        libc::close(fd);
        if !(ok && libc::rename(tmp.as_ptr(), state.path.as_ptr()) == 0) {
            libc::unlink(tmp.as_ptr());
        }
    }
}

/// The line buffer as a [`Sink`]: what does not fit is cut, and the file then lacks frames
/// rather than being cut in a line.
struct Line<'a> {
    state: &'a mut State,
}

impl Sink for Line<'_> {
    fn put(&mut self, text: &str) {
        let s = &mut *self.state;
        let room = s.line.len() - s.line_len;
        let n = text.len().min(room);
        s.line[s.line_len..s.line_len + n].copy_from_slice(&text.as_bytes()[..n]);
        s.line_len += n;
    }
}

impl Line<'_> {
    /// Writes what the buffer holds; false when it could not.
    fn flush(&mut self, fd: c_int) -> bool {
        let s = &mut *self.state;
        let ok = write_all(fd, &s.line[..s.line_len]);
        s.line_len = 0;
        ok
    }
}

fn copy_mappings(state: &mut State, fd: c_int) -> bool {
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
    let ok = loop {
        // SAFETY: reading into the state's own buffer.
        let n = unsafe { libc::read(maps, state.chunk.as_mut_ptr().cast(), state.chunk.len()) };
        if n < 0 && sys::interrupted() {
            continue;
        }
        if n <= 0 {
            break n == 0;
        }
        if !write_all(fd, &state.chunk[..n as usize]) {
            break false;
        }
    };
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(maps) };
    ok
}

fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writing initialised bytes of a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 && sys::interrupted() {
            continue;
        }
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}
