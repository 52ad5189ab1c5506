//! The exit handler: what the test's run left behind, then the same test body again.
//!
//! Memory a test retains at exit is not necessarily lost: a pool it started, a logger it
//! installed or a table it created lazily stays for the life of the process, and running
//! the test again adds nothing to it. A leak grows every time. So, once libtest's `main`
//! has returned (the test passed and its results are final), this handler records what the
//! first run retained and then calls the test's own entry point (the function libtest
//! called, found in the executable by cargo-leakcheck) again, a few times, each on a fresh
//! thread, measuring after each run once the threads the run started are gone. It runs as
//! `main` returns, before the program's `atexit` handlers and ELF destructors tear its
//! libraries' state down (see [`crate::start`]); registered with `on_exit`, it also runs for
//! a program that calls `exit` itself, once.
//!
//! Why in the test's own process, not in a forked copy: `fork` keeps only the calling
//! thread, so a pool's workers would be gone in the copy and a test that hands work to
//! them would wait forever. The first run's record is written before any extra run starts,
//! one whole line per `write`, so an extra run that panics (the unwind aborts at this
//! handler's `extern "C"` frame), crashes or hangs cannot change what the first run
//! showed: cargo-leakcheck reads the first run from the record, and how far the extra runs
//! got.
//!
//! In counting mode each extra run gets an arena of its own, and while it runs (until the
//! threads it started are gone) every allocation of the process goes there, whichever thread
//! makes it (see [`crate::arenas`]). That arena's live count is then exactly what the run
//! left behind, however much other memory comes and goes meanwhile (garbage of an
//! epoch-based collector, say). A test that leaks leaves something behind on every run; so
//! as soon as one extra run has left nothing behind, or a run after the first has left the
//! process's live objects and bytes exactly where the run before it had (a collector's
//! garbage: each run's arena holds what later runs free), and the process's live memory has
//! not grown on every run either (which would betray a leak made by a thread outside the
//! run, on its behalf, after it ended), the test is settled. Otherwise the runs go on up to the
//! maximum, and cargo-leakcheck takes the test's stacks. (The series is not cut sooner when
//! every run so far left something: a pool whose workers each warm a cache on their first
//! job leaves something on every run until each worker had one, however many runs that
//! takes. It is cut when every run also left threads of its own running: their memory is in
//! their run's arena until they end, so only the grace could still settle the series, and it
//! is given at once; see `leakcheck_protocol::settling`.)
//!
//! Evidence ends a series, never the clock: how many runs a test gets does not depend on
//! how long they take or how busy the machine is, so the same build gets the same verdicts.
//! Only a run that does not finish in time (ten times the test's own run, at least
//! [`RUN_FLOOR_MS`]) stops it.
//!
//! The record, one event per line:
//! The record's entries are `leakcheck_protocol::record::Entry`, one per line.
//! Counts are exact in counting mode and 0 otherwise; in stacks mode a heap dump
//! `<prefix>.r<k>.heap` is written after the first run (k = 0) and after each extra run.

use crate::arenas::{self, Live};
use crate::image;
use crate::sys::{self, FixedPath, Line};
use leakcheck_protocol::files;
use leakcheck_protocol::record::{End, Entry};
use std::ffi::{c_int, c_void};

/// What the environment asked for, read once by the constructor.
pub struct Settings {
    /// Where the record goes.
    pub record: FixedPath,
    /// Counting mode: counts from the arena statistics; otherwise heap dumps.
    pub counting: bool,
    /// The entry point's address in the executable image.
    pub entry: Option<u64>,
    /// The entry point is a `fn()` (a doc-test's `main`), not libtest's [`TestFn`].
    pub entry_unit: bool,
    /// With `entry_unit`: the doc-test's own `main`, which the entry (std's `lang_start`
    /// closure) calls and reports on.
    pub entry_main: Option<u64>,
    /// The test's own run is the program's `main`, on the main thread, whose arena no count
    /// includes: counted in an arena of its own from the test's first allocation (see
    /// [`main_starting`]), or, where that could not be done, run again whatever it seemed
    /// to retain.
    pub first_run_on_main: bool,
    /// The executable's build id, hexadecimal ("" when it has none).
    pub build_id: &'static str,
    /// At most this many extra runs.
    pub extra_runs: u32,
    /// How long to wait after a run for the thread count to come back down.
    pub settle_ms: u64,
    /// Stack size of the thread each extra run runs on.
    pub stack_size: usize,
    /// Prefix of this runtime's own dumps (stacks mode).
    pub dump_prefix: FixedPath,
    /// `mallctl` of a jemalloc linked into the test binary (tikv-jemallocator), whose heap
    /// is dumped beside ours, at the image address given.
    pub app_mallctl: Option<u64>,
    /// Prefix of that jemalloc's dumps.
    pub app_prefix: FixedPath,
    /// When the runtime started, in monotonic milliseconds.
    pub started_ms: u64,
    /// The process cargo-leakcheck started. A child the test forks inherits this handler
    /// (and runs it if it returns or calls `exit`); only this process may write the record
    /// and the dumps, or run the test again.
    pub pid: i32,
    /// Once, after the last extra run, how long to wait for the threads the runs started to
    /// end before what they left is measured for the last time.
    pub grace_ms: u64,
    /// std's record of the thread ending the process, an address in the executable image
    /// (see [`ExitGuard`]).
    pub exit_guard: Option<u64>,
    /// Counting mode, a program with a global allocator of its own: its allocation shims
    /// (`__rust_alloc`, `__rust_dealloc`), image addresses (see [`crate::probe`]).
    pub alloc_probe: Option<(u64, u64)>,
}

static mut SETTINGS: Settings = Settings {
    record: FixedPath::new(),
    counting: false,
    entry: None,
    entry_unit: false,
    entry_main: None,
    first_run_on_main: false,
    build_id: "",
    extra_runs: 0,
    settle_ms: 500,
    stack_size: 2 << 20,
    dump_prefix: FixedPath::new(),
    app_mallctl: None,
    app_prefix: FixedPath::new(),
    started_ms: 0,
    pid: 0,
    grace_ms: 0,
    exit_guard: None,
    alloc_probe: None,
};

fn settings() -> &'static Settings {
    // SAFETY: written only by the constructor, read-only afterwards. It writes them before
    // any other thread exists, except in a checked child process, whose scan thread exists
    // already but reads them only when asked for a scan, once the constructor is done (see
    // `crate::start_child`).
    unsafe { &*std::ptr::addr_of!(SETTINGS) }
}

/// The settings, for the constructor to fill in.
///
/// # Safety
/// Only from the constructor, before [`install`], while no other thread reads the settings:
/// while the process has a single thread, or in a checked child process until its record
/// is named (see `crate::start_child`).
pub unsafe fn settings_mut() -> &'static mut Settings {
    // SAFETY: the caller guarantees nothing else reads or writes them meanwhile.
    unsafe { &mut *std::ptr::addr_of_mut!(SETTINGS) }
}

extern "C" {
    // glibc: like atexit, but the handler receives the exit status.
    fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// Registers the exit handler. Called by the constructor, after jemalloc has initialised,
/// so this handler runs before jemalloc's own (`prof_final`) one.
pub fn install() {
    INSTALLED.store(true, std::sync::atomic::Ordering::Release);
    // SAFETY: registers a handler that lives as long as the library.
    unsafe { on_exit(at_exit, std::ptr::null_mut()) };
}

/// The exit handler was registered: this process is to be recorded at its end.
static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The handler's work was done (or begun): once per process.
static HANDLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The program's `main` is about to run (see [`crate::start`]). Where that `main` is the
/// test's own run (a doc-test: no harness, the main thread is the test), counting mode
/// counts the main thread from the test's first allocation (see [`crate::main_run`]), so
/// that a run that retained nothing is seen to, as a libtest test's is. That needs the
/// functions that run the test's code, the ones its extra runs call.
pub fn main_starting() {
    let s = settings();
    // SAFETY: getpid has no preconditions.
    if !INSTALLED.load(std::sync::atomic::Ordering::Acquire)
        || !s.counting
        || !s.first_run_on_main
        || unsafe { libc::getpid() } != s.pid
    {
        return;
    }
    let resolve = |vaddr: Option<u64>| image::resolve(vaddr? as usize, s.build_id).ok();
    let (Some(entry), main) = (resolve(s.entry), resolve(s.entry_main)) else {
        return;
    };
    arenas::count_main_run([entry, main.unwrap_or(0)]);
}

/// The program's `main` returned `status` (see [`crate::start`]): the exit handler's work
/// is done now, before `exit` runs the program's `atexit` handlers and ELF destructors.
pub fn main_returned(status: c_int) {
    arenas::main_run_over();
    if INSTALLED.load(std::sync::atomic::Ordering::Acquire) {
        at_exit(status, std::ptr::null_mut());
    }
}

fn on_main_thread() -> bool {
    // SAFETY: getpid and the gettid system call have no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) == libc::c_long::from(libc::getpid()) }
}

/// Writes one entry of the record as a line.
fn put(fd: c_int, entry: Entry<'_>) {
    Line::entry(&entry).write_to(fd);
}

fn end(fd: c_int, why: End) {
    put(fd, Entry::End(why));
}

extern "C" fn at_exit(status: c_int, arg: *mut c_void) {
    crate::reach::note_exit_frame();
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != settings().pid {
        return;
    }
    if HANDLED.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    if !on_main_thread() && crate::tracker::enabled() {
        // A test thread called `exit`: none of its frames runs again (see `crate::live`).
        crate::live::prepare();
    }
    record_then_rerun(status, arg);
    // The exit dump, named as jemalloc names its own (`<prefix>.<pid>.<seq>.f.heap`), last
    // thing in the handler (jemalloc writes its own, when profiling, from a handler that
    // runs after this one).
    let s = settings();
    if crate::tracker::enabled() && !s.dump_prefix.is_empty() {
        let mut path = FixedPath::new();
        // SAFETY: prefix holds len() initialised bytes before its NUL.
        let prefix = unsafe {
            std::slice::from_raw_parts(s.dump_prefix.as_ptr().cast::<u8>(), s.dump_prefix.len())
        };
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        if path.push(prefix)
            && path.push(b".")
            && path.push_u64(pid)
            && path.push(b".0")
            && path.push(files::FINAL.as_bytes())
            && path.push(files::HEAP.as_bytes())
        {
            crate::tracker::dump::dump(&path);
            // Without a dump of the test's own run before extra runs, this one stands for
            // it: say which of its objects are lost (see `crate::reach`).
            if !FIRST_DUMPED.load(std::sync::atomic::Ordering::Relaxed) {
                dump_unreached(&mut path);
            }
        }
    }
}

/// Writes the record: what the test's own run left, then, unless something rules it out,
/// the extra runs, until the series settles or ends (see the module's documentation).
fn record_then_rerun(status: c_int, _arg: *mut c_void) {
    let s = settings();
    HANDLER_STARTED_MS.store(sys::now_ms(), std::sync::atomic::Ordering::Relaxed);
    let fd = sys::create_file(&s.record);
    if fd < 0 {
        return;
    }
    wind_down();
    crate::maps::set_run(crate::maps::BETWEEN);
    let own_allocator = s.counting && start_counting(fd, s);
    let first = record_first_run(fd, status, own_allocator);
    let address = match entry_to_rerun(status, own_allocator, first) {
        Ok(address) => address,
        Err(why) => return end(fd, why),
    };
    if !s.counting {
        dump(0, true, true);
    }
    let _exit_guard = s.exit_guard.and_then(|g| ExitGuard::clear(g, s.build_id));
    let why = rerun(fd, status, address, first);
    end(fd, why);
}

/// Counting mode: counts exactly from now on, writes the main thread's arena and, for a
/// program with a global allocator of its own, whether it reaches this runtime's `malloc`.
/// Returns whether the program has one that does not.
fn start_counting(fd: c_int, s: &Settings) -> bool {
    arenas::exact_from_now();
    let arena = arenas::main_arena().map_or(-1, i64::from);
    put(fd, Entry::Arena(arena));
    let Some((alloc, dealloc)) = s.alloc_probe else {
        return false;
    };
    let reaches_malloc = crate::probe::reaches_malloc(alloc, dealloc, s.build_id);
    put(fd, Entry::Allocator { reaches_malloc });
    !reaches_malloc
}

/// What is live off the main thread's arena (counting mode; nothing otherwise).
fn live_now(counting: bool) -> Live {
    if counting {
        arenas::live_outside_main_arena()
    } else {
        Live::default()
    }
}

/// Writes what the test's own run left (drained first where that is allowed), what it cost
/// and the program's collections after it; returns what it left.
fn record_first_run(fd: c_int, status: c_int, own_allocator: bool) -> Live {
    let s = settings();
    // What the test's run let go of but a reclaimer still holds is freed before anything
    // is measured; never after a failure, when the program's state is not to be trusted.
    // A drain runs the program's deferred destructors, and one of them may panic (which
    // aborts the process here): the test's own run is written down first, as it was
    // without draining, and written again once drained (the reader keeps the last).
    if status == 0 && on_main_thread() && crate::drain::configured() && !own_allocator {
        put(
            fd,
            Entry::First {
                status: 0,
                live: live_now(s.counting),
                threads: threads(),
            },
        );
        drain_before_measuring(fd, 0);
    }
    let first = live_now(s.counting);
    put(
        fd,
        Entry::First {
            status: i64::from(status),
            live: first,
            threads: threads(),
        },
    );
    put(
        fd,
        Entry::Cost {
            cpu_ms: cpu_ms() as i64,
            wall_ms: first_run_ms() as i64,
        },
    );
    // The program's own collections after the test's own run (see `crate::lengths`).
    crate::lengths::read(fd, Some(0));
    first
}

/// The address of the test's entry point, to run it again; or why it is not run again.
fn entry_to_rerun(status: c_int, own_allocator: bool, first: Live) -> Result<usize, End> {
    let s = settings();
    if status != 0 {
        return Err(End::TestFailed);
    }
    if own_allocator {
        // The counts see none of the program's own allocations: extra runs counted here
        // could only look settled.
        return Err(End::OwnAllocator);
    }
    if !on_main_thread() {
        // The test called `exit` itself (libtest's `main` returns on the main thread):
        // libtest is still waiting for it, and running it again from here would call
        // `exit` inside `exit`.
        return Err(End::ExitedEarly);
    }
    // A collection that holds entries while the test's run left nothing allocated was
    // filled without an allocation of the run's (its capacity came from elsewhere): only
    // extra runs can show whether it grows on every run.
    // A panic hook the run left in place was freed by libtest before the run was measured
    // (see `crate::panic_hook`).
    if s.counting
        && first == Live::default()
        && (!s.first_run_on_main || arenas::main_run_counted())
        && !crate::lengths::any_entries()
        && !crate::panic_hook::seen()
    {
        return Err(End::NothingRetained);
    }
    let Some(entry) = s.entry else {
        return Err(End::NoEntry);
    };
    let refused = |refusal| match refusal {
        image::Refusal::NoImage => End::NoImage,
        image::Refusal::NotCode | image::Refusal::NotData => End::NotCode,
        image::Refusal::BuildId => End::BuildId,
    };
    if let Some(main) = s.entry_main {
        let main = image::resolve(main as usize, s.build_id).map_err(refused)?;
        ENTRY_MAIN.store(main, std::sync::atomic::Ordering::Release);
    }
    image::resolve(entry as usize, s.build_id).map_err(refused)
}

/// The resolved address of the `main` the `lang_start` closure entry calls (0: none).
static ENTRY_MAIN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The threads before the extra runs, for their grace.
struct BeforeRuns {
    threads: Option<u64>,
    tids: crate::sleepers::Tids,
}

/// Makes the extra runs of the entry at `address`, each written to the record, until the
/// series settles (counting mode), something stops it or the maximum is reached; returns
/// why the series ended.
fn rerun(fd: c_int, status: c_int, address: usize, first: Live) -> End {
    let s = settings();
    let mut runs = Runs {
        series: leakcheck_protocol::settling::Series::new(first),
        arenas: [0u32; MAX_RUNS],
        left: [Live::default(); MAX_RUNS],
        grew: [false; MAX_RUNS],
        before: BeforeRuns {
            threads: sys::thread_count(),
            tids: crate::sleepers::Tids::now(),
        },
    };
    let extra_runs = s.extra_runs.min(MAX_RUNS as u32);
    // A run that crashes or aborts says in which frame.
    let _armed = crate::died::arm(&s.record);
    // Once a run's threads have not all ended within the settle time, they are most likely
    // threads that never end (started on every run: a leak, which the counts show anyway);
    // waiting the full time again on every later run would only cost time.
    let mut settle_ms = s.settle_ms;
    for k in 1..=extra_runs {
        let i = (k - 1) as usize;
        let (route, live, settled) = match run_extra(fd, status, address, k, &mut settle_ms) {
            Ok(run) => run,
            Err(why) => return why,
        };
        runs.grew[i] = crate::lengths::read(fd, Some(k));
        put(
            fd,
            Entry::RunOk {
                run: k,
                live,
                threads: threads(),
                settled,
            },
        );
        if let Some(a) = route {
            if let Some(why) = runs.add(fd, k, a, live, settled, k == extra_runs) {
                return why;
            }
        }
    }
    if !s.counting && extra_runs > 0 {
        retake_last_dump(fd, extra_runs, &runs.before);
    }
    End::Done
}

/// Extra run `k`, on a thread of its own (its allocations routed to an arena of its own in
/// counting mode), until its threads are gone or the settle time passed; then drained and
/// measured (counting mode) or dumped. Returns its arena, what is live and whether its
/// threads were gone in time; or why the series stops. A run that outlives its deadline
/// ends the process.
fn run_extra(
    fd: c_int,
    status: c_int,
    address: usize,
    k: u32,
    settle_ms: &mut u64,
) -> Result<(Option<u32>, Live, bool), End> {
    let s = settings();
    let route = if s.counting {
        match arenas::create() {
            Some(a) => Some(a),
            None => return Err(End::NoArena),
        }
    } else {
        None
    };
    put(fd, Entry::RunStart { run: k });
    crate::children::set_run(k);
    crate::died::set_run(k);
    let before = sys::thread_count();
    let mut message = Message {
        bytes: [0; 400],
        len: 0,
    };
    let outcome = run_once(address, s, &mut message, route, k);
    stop_unless_passed(fd, status, k, outcome, &message)?;
    // What the run's threads free or allocate on their way out is still the run's.
    let settled = sys::settle_threads(before, *settle_ms);
    if !settled {
        *settle_ms = (*settle_ms).min(SETTLE_AFTER_UNSETTLED_MS);
    }
    arenas::route_to(None);
    crate::maps::set_run(crate::maps::BETWEEN);
    drain_before_measuring(fd, k);
    let live = if s.counting {
        arenas::live_outside_main_arena()
    } else {
        dump(k, false, true);
        Live::default()
    };
    Ok((route, live, settled))
}

/// Why the series stops after extra run `k` did not pass (written to the record with the
/// run's message or timeout). A run that timed out ends the process here.
fn stop_unless_passed(
    fd: c_int,
    status: c_int,
    k: u32,
    outcome: Outcome,
    message: &Message,
) -> Result<(), End> {
    match outcome {
        Outcome::Passed => Ok(()),
        Outcome::SpawnFailed => Err(End::SpawnFailed),
        Outcome::Failed => {
            arenas::route_to(None);
            crate::maps::set_run(crate::maps::BETWEEN);
            let text = std::str::from_utf8(&message.bytes[..message.len]).unwrap_or("");
            put(
                fd,
                Entry::RunFailed {
                    run: k,
                    message: text,
                },
            );
            Err(End::Failed)
        }
        Outcome::TimedOut => {
            put(fd, Entry::RunTimeout { run: k });
            end(fd, End::Timeout);
            // The run is still going on its thread and cannot be stopped; the first
            // run's record is complete, so leave now, with the test's own status.
            // SAFETY: _exit ends the process without running further handlers.
            unsafe { libc::_exit(status) }
        }
    }
}

/// The extra runs so far: in counting mode their series, each run's arena, what each left
/// and whether it grew a collection; the threads before them, for their grace.
struct Runs {
    series: leakcheck_protocol::settling::Series,
    arenas: [u32; MAX_RUNS],
    left: [Live; MAX_RUNS],
    grew: [bool; MAX_RUNS],
    before: BeforeRuns,
}

impl Runs {
    /// Adds extra run `k` (its arena `arena`, what is live after it, whether its threads
    /// were gone in time) to the series; returns why the series ends, if it does: settled,
    /// or, after the last run or once every run left threads, after the runs' threads had
    /// their grace.
    fn add(
        &mut self,
        fd: c_int,
        k: u32,
        arena: u32,
        live: Live,
        settled: bool,
        last: bool,
    ) -> Option<End> {
        let i = (k - 1) as usize;
        self.arenas[i] = arena;
        left_by_runs(&self.arenas[..=i], &mut self.left[..=i]);
        let held = self.left[..=i].iter().fold(Live::default(), |sum, l| Live {
            objects: sum.objects + l.objects,
            bytes: sum.bytes + l.bytes,
        });
        put(fd, Entry::Held { run: k, live: held });
        self.series
            .run_with_threads(live, held, settled, self.grew[i]);
        if self.settled(i) {
            write_left(fd, &self.left[..=i]);
            return Some(End::Settled);
        }
        let threads_left = self.series.leaves_threads();
        (last || threads_left).then(|| self.end_after_grace(fd, i, threads_left))
    }

    /// Whether the series of the first `i + 1` runs settled.
    fn settled(&self, i: usize) -> bool {
        self.series
            .settled(nothing_left(&self.left[..=i], &self.grew[..=i]))
    }

    /// Gives the runs' threads their grace, writes what each of the first `i + 1` runs left
    /// and returns why the series ends.
    fn end_after_grace(&mut self, fd: c_int, i: usize, threads_left: bool) -> End {
        let s = settings();
        if let Some(live) = grace(fd, self.before.threads, &self.before.tids, s.grace_ms, true) {
            left_by_runs(&self.arenas[..=i], &mut self.left[..=i]);
            write_left(fd, &self.left[..=i]);
            self.series.grace(live, crate::lengths::read(fd, None));
            if self.settled(i) {
                return End::Settled;
            }
        } else {
            write_left(fd, &self.left[..=i]);
        }
        if threads_left {
            End::ThreadsLeft
        } else {
            End::Kept
        }
    }
}

/// Stacks mode, after the last extra run `extra_runs`: the last dump is taken again once the
/// runs' threads had their grace, and scanned once, whether it was retaken or not.
fn retake_last_dump(fd: c_int, extra_runs: u32, before: &BeforeRuns) {
    let s = settings();
    let retake = grace(fd, before.threads, &before.tids, s.grace_ms, false).is_some();
    dump(extra_runs, true, retake);
    if retake {
        crate::lengths::read(fd, None);
    }
    let mut last = FixedPath::new();
    if !s.dump_prefix.is_empty() && dump_name(&mut last, &s.dump_prefix, extra_runs) {
        crate::lengths::write_sites(&last);
    }
}

/// What each extra run (the `i`th of `run_arenas`: run i + 1) left behind: in its arena, and
/// the mappings it made that are still there.
fn left_by_runs(run_arenas: &[u32], left: &mut [Live]) {
    arenas::live_in_each(run_arenas, left);
    for (i, l) in left.iter_mut().enumerate() {
        let mapped = crate::maps::left_by(i as u32 + 1);
        l.objects += mapped.objects;
        l.bytes += mapped.bytes;
    }
}

/// Whether some extra run left nothing behind and grew no collection.
fn nothing_left(left: &[Live], grew: &[bool]) -> bool {
    leakcheck_protocol::settling::nothing_left(left, grew)
}

/// Drains the program's deferred-reclamation runtimes (see [`crate::drain`]) after run `run`
/// (0: the test's own), one kind after the other, and records what each freed.
fn drain_before_measuring(fd: c_int, run: u32) {
    let s = settings();
    let counting = s.counting;
    for kind in crate::drain::kinds() {
        if !crate::drain::configured() {
            return;
        }
        put(fd, Entry::Draining { run, kind });
        let Some(drained) = crate::drain::drain(kind, s.build_id, counting, || {
            if counting {
                arenas::live_outside_main_arena()
            } else {
                Live {
                    objects: crate::tracker::live_objects() as i64,
                    bytes: 0,
                }
            }
        }) else {
            continue;
        };
        put(
            fd,
            Entry::Drained {
                run,
                kind,
                freed: drained.freed,
                kept: drained.kept,
            },
        );
    }
}

/// std lets one thread end the process: `main`'s return (and `exit`) records the calling
/// thread in a static, and any other thread that calls `exit` afterwards waits in `pause()`
/// for good. Extra runs happen after `main` returned, so a child one of them forks, ending
/// with `exit` on its only thread, would never end. For the runs, the record is cleared, as
/// it was while `main` ran; it is put back when they are over.
struct ExitGuard {
    record: &'static std::sync::atomic::AtomicUsize,
    saved: usize,
}

impl ExitGuard {
    fn clear(vaddr: u64, build_id: &str) -> Option<ExitGuard> {
        let address = image::resolve_data(vaddr as usize, build_id).ok()?;
        if address % std::mem::align_of::<usize>() != 0 {
            return None;
        }
        // SAFETY: cargo-leakcheck found an 8-byte data symbol of this very build (the build
        // id is checked) named std's `unique_thread_exit::EXITING_THREAD_ID`, an
        // `AtomicPtr` in a writable segment, aligned as checked above; std only ever
        // accesses it atomically, as this does.
        let record = unsafe { std::sync::atomic::AtomicUsize::from_ptr(address as *mut usize) };
        let saved = record.swap(0, std::sync::atomic::Ordering::SeqCst);
        Some(ExitGuard { record, saved })
    }
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.record
            .store(self.saved, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Threads the extra runs started that end soon after (a watchdog that sleeps a second,
/// a connection's reader that notices its peer is gone) hold what they hold only until
/// then, which is not a leak; a thread that never ends holds it for good. So, once per
/// test, after the last run: while the process has more threads than before the runs,
/// waits up to `grace_ms` for them to end, and then for those asleep until a deadline
/// (see [`crate::sleepers`]). Writes `grace <waited-ms> <threads-over> <objects> <bytes>`
/// (the threads still running beyond the count before the runs, and, in counting mode,
/// the live counts then) and returns the live counts, or `None` when there was nothing to
/// wait for or no wait was asked for (`grace_ms` 0).
fn grace(
    fd: c_int,
    before: Option<u64>,
    tids_before: &crate::sleepers::Tids,
    grace_ms: u64,
    counting: bool,
) -> Option<Live> {
    let before = before?;
    let over = |n: u64| n.saturating_sub(before);
    if sys::thread_count().is_none_or(|n| over(n) == 0) {
        return None;
    }
    let started = sys::now_ms();
    let (settled, early_ms) = match grace_ms {
        0 => (true, 0),
        _ => crate::sleepers::settle_or_still(before, grace_ms),
    };
    if !settled {
        crate::sleepers::wait_for_timed(tids_before, before, early_ms, |left_ms| {
            put(
                fd,
                Entry::Waiting {
                    for_ms: left_ms as i64,
                },
            )
        });
    }
    let waited = sys::now_ms().saturating_sub(started);
    let live = live_now(counting);
    put(
        fd,
        Entry::Grace {
            waited_ms: waited as i64,
            threads: sys::thread_count().map_or(-1, |n| over(n) as i64),
            live,
        },
    );
    // Without a wait (cargo-leakcheck already saw these threads stay), nothing changed.
    (grace_ms > 0).then_some(live)
}

/// CPU time the process has used so far, all threads, in milliseconds.
fn cpu_ms() -> u64 {
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let ms = |t: libc::timeval| (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// The most extra runs one process makes.
const MAX_RUNS: usize = leakcheck_protocol::MAX_EXTRA_RUNS as usize;

/// The least time an extra run is given, milliseconds.
const RUN_FLOOR_MS: u64 = 10_000;

/// How long later runs wait for their threads once a run's threads did not all end.
const SETTLE_AFTER_UNSETTLED_MS: u64 = 20;

/// When the exit handler started, in monotonic milliseconds (0: not yet).
static HANDLER_STARTED_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long the test's own run took: from the runtime's start to the exit handler.
fn first_run_ms() -> u64 {
    let s = settings();
    HANDLER_STARTED_MS
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(s.started_ms)
}

fn write_left(fd: c_int, left: &[Live]) {
    for (j, l) in left.iter().enumerate() {
        put(
            fd,
            Entry::Left {
                run: j as u32 + 1,
                live: *l,
            },
        );
    }
}

fn threads() -> i64 {
    sys::thread_count().map_or(-1, |n| n as i64)
}

/// Threads the test left that are on their way out (a pool dropped at the end of the test,
/// whose workers wake up and exit) hold memory only for the moment they take to end: waits
/// while the thread count keeps going down, until only this thread is left, no thread has
/// ended for [`WIND_DOWN_QUIET_MS`], or [`WIND_DOWN_MAX_MS`] passed. Threads that stay (a
/// global pool, a thread blocked for good) cost the quiet time once.
fn wind_down() {
    let Some(mut count) = sys::thread_count() else {
        return;
    };
    let start = sys::now_ms();
    let mut last_change = start;
    while count > 1 {
        let now = sys::now_ms();
        if now - last_change >= WIND_DOWN_QUIET_MS || now - start >= WIND_DOWN_MAX_MS {
            return;
        }
        sys::pause_briefly();
        match sys::thread_count() {
            Some(n) if n < count => {
                count = n;
                last_change = sys::now_ms();
            }
            Some(n) => count = n,
            None => return,
        }
    }
}

/// See [`wind_down`]: how long no thread may have ended before the test's own run is
/// measured, and the longest wait, in milliseconds.
const WIND_DOWN_QUIET_MS: u64 = 20;
const WIND_DOWN_MAX_MS: u64 = 500;

/// Writes `<prefix>.r<k>.heap` (when `write`) for this runtime's jemalloc, and for the test
/// binary's own when it has one; when `scan`, the tracker's dump also gets its reachability
/// scan: what is lost, after the test's own run, and how what is kept is held, after it and
/// after the last extra run.
fn dump(k: u32, scan: bool, write: bool) {
    let s = settings();
    let mut path = FixedPath::new();
    if !s.dump_prefix.is_empty() && dump_name(&mut path, &s.dump_prefix, k) {
        if crate::tracker::enabled() {
            if write {
                crate::tracker::dump::dump(&path);
            }
            if k == 0 {
                FIRST_DUMPED.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if scan {
                dump_unreached(&mut path);
            }
        } else if write {
            // SAFETY: "prof.dump" is a `const char *` file name, NUL-terminated, that
            // outlives the call.
            let _ = unsafe { tikv_jemalloc_ctl::raw::write(b"prof.dump\0", path.as_ptr()) };
        }
    }
    if !write {
        return;
    }
    let Some(mallctl) = s.app_mallctl else { return };
    let Ok(address) = image::resolve(mallctl as usize, s.build_id) else {
        return;
    };
    let mut app_path = FixedPath::new();
    if dump_name(&mut app_path, &s.app_prefix, k) {
        // SAFETY: `address` is the binary's `_rjem_mallctl`, checked above to be code of
        // the build cargo-leakcheck read it from.
        unsafe { crate::app_prof_dump(address, &app_path) };
    }
}

/// In a process the test started and the build's: writes its exit dump and the scan's files
/// now, as its exit handler would (it is asked before it is stopped).
pub(crate) fn scan_now() {
    let s = settings();
    let mut path = FixedPath::new();
    if crate::children::exit_dump_name(&mut path, &s.dump_prefix)
        && crate::tracker::dump::dump(&path)
    {
        dump_unreached(&mut path);
    }
}

/// Whether the dump of the test's own run (`r0`) was written.
static FIRST_DUMPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes `<dump>.unreached` beside the dump at `path` (its lost objects, by stack) and
/// `<dump>.paths` (how each stack's reached objects are held).
fn dump_unreached(path: &mut FixedPath) {
    let mut paths = FixedPath::new();
    // SAFETY: path holds len() initialised bytes before its NUL.
    let name = unsafe { std::slice::from_raw_parts(path.as_ptr().cast::<u8>(), path.len()) };
    let with_paths = paths.push(name) && paths.push(files::PATHS.as_bytes());
    if path.push(files::UNREACHED.as_bytes()) {
        crate::scan::dump_unreached(path, with_paths.then_some(&paths));
    }
}

fn dump_name(path: &mut FixedPath, prefix: &FixedPath, k: u32) -> bool {
    path.truncate(0);
    // SAFETY: prefix holds len() initialised bytes before its NUL.
    let bytes = unsafe { std::slice::from_raw_parts(prefix.as_ptr().cast::<u8>(), prefix.len()) };
    path.push(bytes)
        && path.push(files::RUN_DUMP.as_bytes())
        && path.push_u64(u64::from(k))
        && path.push(files::HEAP.as_bytes())
}

/// An error message returned by the test, cut to fit a record line.
struct Message {
    bytes: [u8; 400],
    len: usize,
}

enum Outcome {
    Passed,
    /// The entry returned an error, left in the slot's message.
    Failed,
    SpawnFailed,
    TimedOut,
}

/// Shared between the waiting thread and the run's thread.
struct Slot {
    entry: usize,
    /// Set once the run may start (allocations are routed from then on).
    go: std::sync::atomic::AtomicBool,
    passed: bool,
    /// The caller's message, which outlives the run: the caller reads it once the run has
    /// ended, or ends the process without returning when the run timed out.
    message: *mut Message,
}

/// The slot of the run under way. It is in static storage, not on `run_once`'s stack: a run
/// that outlives its deadline keeps writing to it while the process writes its record and
/// ends, and a stack frame would be gone by then.
struct RunSlot(std::cell::UnsafeCell<Slot>);

// SAFETY: one run uses the slot at a time: `run_once` is called for one run after another,
// and a run that timed out is followed by nothing but the process's end.
unsafe impl Sync for RunSlot {}

static RUN_SLOT: RunSlot = RunSlot(std::cell::UnsafeCell::new(Slot {
    entry: 0,
    go: std::sync::atomic::AtomicBool::new(false),
    passed: false,
    message: std::ptr::null_mut(),
}));

/// The test entry point's signature: libtest's `StaticTestFn(fn() -> Result<(), String>)`.
type TestFn = fn() -> Result<(), String>;
/// A doc-test's entry point: the `fn main()` rustdoc wraps its code in.
type UnitFn = fn();
/// std's `lang_start` closure, which `lang_start_internal` calls as `Fn() -> i32`: given what
/// it holds (the address of `main`), it calls `main`, reports its result as a `Termination`
/// and returns the exit code.
type StartFn = fn(&usize) -> i32;

extern "C" fn run_entry(arg: *mut c_void) -> *mut c_void {
    let slot_ptr = arg.cast::<Slot>();
    // SAFETY: `arg` is `RUN_SLOT`, static, which `run_once` filled before this thread
    // existed; it sets `go` and then leaves the slot alone until this thread has ended or
    // its deadline passed (then the process ends without another run).
    while !unsafe { &(*slot_ptr).go }.load(std::sync::atomic::Ordering::Acquire) {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    // SAFETY: as above; from here on only this thread touches the slot. Its message is the
    // caller's, alive until the run has ended or the process ends (see `Slot::message`).
    let slot = unsafe { &mut *slot_ptr };
    let message = unsafe { &mut *slot.message };
    // A panic unwinds to this `extern "C"` frame and aborts the process: the record says
    // which run was under way.
    let main = ENTRY_MAIN.load(std::sync::atomic::Ordering::Acquire);
    if settings().entry_unit && main != 0 {
        // SAFETY: `entry` is std's `lang_start::{{closure}}` of this very executable (see
        // cargo-leakcheck's `doctests` module), whose captured state is the `fn() -> T` it
        // calls, passed here by reference as std passes it; `main` is that function.
        let f: StartFn = unsafe { std::mem::transmute::<usize, StartFn>(slot.entry) };
        if f(&main) == 0 {
            slot.passed = true;
        } else {
            let text = b"its `main` reported a failure (a non-zero exit code)";
            let n = text.len().min(message.bytes.len());
            message.bytes[..n].copy_from_slice(&text[..n]);
            message.len = n;
        }
        return std::ptr::null_mut();
    }
    if settings().entry_unit {
        // SAFETY: `entry` is a doc-test's `main`, a `fn()` (see cargo-leakcheck's `doctests`
        // module), checked to be code of this very executable.
        let f: UnitFn = unsafe { std::mem::transmute::<usize, UnitFn>(slot.entry) };
        f();
        slot.passed = true;
        return std::ptr::null_mut();
    }
    // SAFETY: `entry` is the pointer libtest itself calls for this test (see
    // cargo-leakcheck's `entry` module), checked to be code of this very executable.
    let f: TestFn = unsafe { std::mem::transmute::<usize, TestFn>(slot.entry) };
    match f() {
        Ok(()) => slot.passed = true,
        Err(text) => {
            let n = text.len().min(message.bytes.len());
            message.bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
            message.len = n;
            // Allocated by the test binary's allocator, which may not be malloc.
            std::mem::forget(text);
        }
    }
    std::ptr::null_mut()
}

/// Runs the entry once on a new thread; `route` is the arena its allocations (and any other
/// thread's meanwhile) go to, from the moment the thread exists until the caller stops it.
fn run_once(
    entry: usize,
    s: &Settings,
    message: &mut Message,
    route: Option<u32>,
    run: u32,
) -> Outcome {
    let slot_ptr: *mut Slot = RUN_SLOT.0.get();
    // SAFETY: no run's thread is alive (the last one was joined, see `RunSlot`), so this
    // thread alone touches the slot until it starts the next.
    unsafe {
        *slot_ptr = Slot {
            entry,
            go: std::sync::atomic::AtomicBool::new(false),
            passed: false,
            message,
        };
    }
    // SAFETY: plain pthread calls on values we own and on the static slot. The thread is
    // joined before this returns, except when it timed out: then it may still write to the
    // slot and to `message`, both alive until the process ends, which the caller does
    // without returning (`stop_unless_passed`).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstacksize(&mut attr, s.stack_size.max(libc::PTHREAD_STACK_MIN));
        let mut thread: libc::pthread_t = 0;
        // The thread is created before routing starts: its stack and thread block are
        // glibc's, not the run's.
        let created = libc::pthread_create(&mut thread, &attr, run_entry, slot_ptr.cast());
        libc::pthread_attr_destroy(&mut attr);
        if created != 0 {
            return Outcome::SpawnFailed;
        }
        arenas::route_to(route);
        crate::maps::set_run(run);
        (*slot_ptr)
            .go
            .store(true, std::sync::atomic::Ordering::Release);
        // A run may take ten times what the test's own run took (at least RUN_FLOOR_MS): a
        // run that hangs (waiting for something that happens once per process) must not
        // hold the process for good. cargo-leakcheck's own timeout bounds the test's own
        // run only, and waits for the extra runs while they make progress.
        let remaining = first_run_ms().saturating_mul(10).max(RUN_FLOOR_MS);
        let mut until = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut until);
        let add_s = (remaining / 1000).min(i64::MAX as u64 / 2) as i64;
        until.tv_sec = until.tv_sec.saturating_add(add_s);
        until.tv_nsec += ((remaining % 1000) * 1_000_000) as i64;
        if until.tv_nsec >= 1_000_000_000 {
            until.tv_sec += 1;
            until.tv_nsec -= 1_000_000_000;
        }
        if libc::pthread_timedjoin_np(thread, std::ptr::null_mut(), &until) != 0 {
            return Outcome::TimedOut;
        }
    }
    // SAFETY: the thread has ended.
    if unsafe { (*slot_ptr).passed } {
        Outcome::Passed
    } else {
        Outcome::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Made before the runs, freed by one of them.
    static MADE_BEFORE: Mutex<Option<Vec<u8>>> = Mutex::new(None);

    fn keeps_one_here_and_one_in_a_helper() -> Result<(), String> {
        std::mem::forget(std::hint::black_box(vec![1u8; 100]));
        std::thread::spawn(|| std::mem::forget(std::hint::black_box(vec![2u8; 200])))
            .join()
            .unwrap();
        Ok(())
    }

    fn frees_what_it_made() -> Result<(), String> {
        let made: Vec<Vec<u8>> = (1..50).map(|n| vec![3u8; n * 7]).collect();
        std::thread::spawn(move || drop(std::hint::black_box(made)))
            .join()
            .unwrap();
        Ok(())
    }

    fn frees_what_was_made_before_it() -> Result<(), String> {
        drop(MADE_BEFORE.lock().unwrap().take());
        Ok(())
    }

    fn fails() -> Result<(), String> {
        Err("the message it fails with".into())
    }

    /// An extra run's window, as the exit handler opens it in counting mode: every
    /// allocation of the process goes to the run's arena while it runs, so that arena holds
    /// exactly what the run kept, by whichever thread, and nothing a run frees of what was
    /// there before it counts against it. Played out in a process of its own, as routing
    /// is process-wide.
    #[test]
    fn an_extra_run_s_arena_holds_exactly_what_the_run_kept() {
        crate::testing::in_own_process(
            "rerun::tests::an_extra_run_s_arena_holds_exactly_what_the_run_kept",
            || {
                arenas::exact_from_now();
                *MADE_BEFORE.lock().unwrap() = Some(vec![4u8; 1000]);
                // The runs happen once libtest's `main` is quiet, as after it returned.
                crate::testing::wait_until_main_thread_waits();
                let entries: [(TestFn, Live); 3] = [
                    (
                        keeps_one_here_and_one_in_a_helper,
                        Live {
                            objects: 2,
                            bytes: 112 + 224,
                        },
                    ),
                    (frees_what_it_made, Live::default()),
                    (frees_what_was_made_before_it, Live::default()),
                ];
                for (k, (entry, kept)) in entries.into_iter().enumerate() {
                    let arena = arenas::create().expect("an arena for the run");
                    let mut message = Message {
                        bytes: [0; 400],
                        len: 0,
                    };
                    let outcome =
                        run_once(entry as usize, settings(), &mut message, Some(arena), 1);
                    arenas::route_to(None);
                    assert!(matches!(outcome, Outcome::Passed), "run {k} passed");
                    let mut left = [Live::default()];
                    arenas::live_in_each(&[arena], &mut left);
                    assert_eq!(left[0], kept, "what run {k} kept");
                }
                let mut message = Message {
                    bytes: [0; 400],
                    len: 0,
                };
                let outcome = run_once(
                    fails as *const () as usize,
                    settings(),
                    &mut message,
                    None,
                    1,
                );
                assert!(matches!(outcome, Outcome::Failed));
                assert_eq!(
                    &message.bytes[..message.len],
                    b"the message it fails with",
                    "a failed run's message is kept"
                );
            },
        );
    }
}
