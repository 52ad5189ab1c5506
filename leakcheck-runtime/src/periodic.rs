//! Benchmarks and services: a thread that writes heap dumps while the program runs, and the
//! timeline of when each was taken (`leakcheck_protocol::timeline`).
//!
//! When. The growth rule needs points in both quarters of the later half of a run, and a
//! bench may last a fraction of a second: on a fast machine the same bench is shorter, and
//! it must not get fewer points for it. So the dumps start close together and spread out to
//! the interval asked for ([`Schedule`]), and between two ticks a dump is taken early when
//! the live heap has moved by an eighth (and at least 1 MiB) since the last one, so a
//! program that grows fast gets points where it grows.
//!
//! Names. Every periodic dump is named here, `<prefix>.<pid>.<seq>.t.heap`: jemalloc's own
//! (`prof.dump` to that name), or the tracker's under exact tracking (`cargo leakcheck
//! run`). When the file `scan_request` exists, a tracked dump is followed by a reachability
//! scan (its `.unreached` and `.paths` files beside it) and the file is deleted.
//!
//! With each dump, the lengths of the program's own collections that changed since the last
//! one go to the timeline too (see `crate::lengths`).
//!
//! A program whose global allocator is its own jemalloc (tikv-jemallocator) allocates behind
//! malloc's back: when the tool names its `_rjem_mallctl` and the prefix for its dumps
//! (`LEAKCHECK_APP_MALLCTL`, `LEAKCHECK_RERUN_BUILD_ID`, `LEAKCHECK_APP_PREFIX`), each dump
//! is paired with one of that jemalloc, `<app prefix>.<pid>.<seq>.t.heap`, the same sequence
//! number, written first.

use crate::sys::{self, FixedPath};
use crate::{ctl, env, image, tracker};
use leakcheck_protocol::files;
use leakcheck_protocol::timeline::{Dump, Mark, MemoryAt, ResidentSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// The first dumps' gap.
const FIRST_GAP_MS: u64 = 10;
/// Dumps at one gap before it doubles.
const DUMPS_PER_GAP: u32 = 8;
/// The shortest gap, whatever the heap does.
const MIN_GAP_MS: u64 = 10;
/// The least move of the live heap that brings a dump forward.
const MIN_MOVE: u64 = 1 << 20;

/// When the next dump is due: gaps that start at [`FIRST_GAP_MS`] and double every
/// [`DUMPS_PER_GAP`] dumps up to the interval asked for, and a dump brought forward when the
/// live heap moved by an eighth since the last. Pure, so it is tested without a clock.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    interval_ms: u64,
    gap_ms: u64,
    at_this_gap: u32,
    last_ms: u64,
    last_live: u64,
}

impl Schedule {
    pub(crate) fn new(interval_ms: u64, now_ms: u64, live: u64) -> Self {
        let interval_ms = interval_ms.max(1);
        Schedule {
            interval_ms,
            gap_ms: interval_ms.min(FIRST_GAP_MS),
            at_this_gap: 0,
            last_ms: now_ms,
            last_live: live,
        }
    }

    /// How long to sleep before asking [`Schedule::due`] again.
    pub(crate) fn poll_ms(&self) -> u64 {
        self.gap_ms.min(MIN_GAP_MS)
    }

    /// Whether a dump is due now, with `live` bytes live.
    pub(crate) fn due(&self, now_ms: u64, live: u64) -> bool {
        let since = now_ms.saturating_sub(self.last_ms);
        let moved = live.abs_diff(self.last_live);
        since >= self.gap_ms
            || (since >= MIN_GAP_MS && moved >= MIN_MOVE && moved >= self.last_live / 8)
    }

    /// A dump was taken at `now_ms` with `live` bytes live.
    pub(crate) fn dumped(&mut self, now_ms: u64, live: u64) {
        self.last_ms = now_ms;
        self.last_live = live;
        self.at_this_gap += 1;
        if self.at_this_gap >= DUMPS_PER_GAP && self.gap_ms < self.interval_ms {
            self.gap_ms = (self.gap_ms * 2).min(self.interval_ms);
            self.at_this_gap = 0;
        }
    }
}

/// The timeline's file, once open (-1 before).
static TIMELINE: AtomicI32 = AtomicI32::new(-1);

/// Starts the dump thread, every dump at most `interval_ms` after the last.
pub(crate) fn start(
    interval_ms: u64,
    prefix: Option<&'static str>,
    scan_request: Option<&'static str>,
) {
    if let Some(prefix) = prefix {
        open_timeline(prefix);
    }
    let spawned = std::thread::Builder::new()
        .name("leakcheck-dumps".into())
        .spawn(move || {
            let app = app_allocator();
            let mut seq = 0u64;
            let mut schedule = Schedule::new(interval_ms, sys::now_ms(), live_bytes());
            loop {
                std::thread::sleep(std::time::Duration::from_millis(schedule.poll_ms()));
                let (now, live) = (sys::now_ms(), live_bytes());
                if !schedule.due(now, live) {
                    continue;
                }
                seq += 1;
                let micros = sys::now_us();
                if dump(prefix, seq, app, scan_request) {
                    mark(Dump::Periodic(seq), micros);
                    // The program's collections at the same moment, after its line.
                    let fd = TIMELINE.load(Ordering::SeqCst);
                    if fd >= 0 {
                        crate::lengths::sample(fd, seq);
                        write_memory(fd, seq);
                    }
                }
                schedule.dumped(now, live);
            }
        });
    // Without the thread there are only the start and exit dumps; nothing else to do.
    drop(spawned);
}

/// One moment's dump(s); whether this runtime's was written under a name of its own.
fn dump(
    prefix: Option<&str>,
    seq: u64,
    app: Option<(usize, &str)>,
    scan_request: Option<&str>,
) -> bool {
    let Some(prefix) = prefix else {
        // SAFETY: "prof.dump" with no new value dumps under the default name (jemalloc
        // manual, MALLCTL NAMESPACE).
        unsafe { crate::mallctl_do(c"prof.dump") };
        return false;
    };
    if let Some((mallctl, app_prefix)) = app {
        app_dump(mallctl, app_prefix, seq);
    }
    if tracker::enabled() {
        return tracked_dump(prefix, seq, scan_request);
    }
    let mut path = FixedPath::new();
    // SAFETY: "prof.dump" takes a `const char *` file name, NUL-terminated, that outlives
    // the call.
    periodic_name(&mut path, prefix, seq)
        && unsafe { ctl::raw::write(b"prof.dump\0", path.as_ptr()) }.is_ok()
}

/// Bytes live in this runtime's jemalloc (its statistics, refreshed); 0 when unavailable.
fn live_bytes() -> u64 {
    if ctl::epoch::advance().is_err() {
        return 0;
    }
    // SAFETY: "stats.allocated" is a size_t (jemalloc manual, MALLCTL NAMESPACE).
    unsafe { ctl::raw::read::<usize>(b"stats.allocated\0") }.map_or(0, |b| b as u64)
}

/// The allocator's figures and the program's own mappings now, as the timeline's `a` line
/// after dump `seq`.
fn write_memory(fd: c_int, seq: u64) {
    if ctl::epoch::advance().is_err() {
        return;
    }
    // SAFETY: each of these statistics is a size_t (jemalloc manual, MALLCTL NAMESPACE).
    let stat = |name: &[u8]| unsafe { ctl::raw::read::<usize>(name) }.map_or(0, |v| v as u64);
    // All arenas merged: MALLCTL_ARENAS_ALL (4096); page counts.
    let page = stat(b"arenas.page\0").max(1);
    let memory = MemoryAt {
        seq,
        allocated: stat(b"stats.allocated\0"),
        active: stat(b"stats.active\0"),
        resident: stat(b"stats.resident\0"),
        mapped: stat(b"stats.mapped\0"),
        retained: stat(b"stats.retained\0"),
        dirty: stat(b"stats.arenas.4096.pdirty\0") * page,
        muzzy: stat(b"stats.arenas.4096.pmuzzy\0") * page,
        program_mapped: crate::maps::all_live().bytes as u64,
        kernel: resident_set().unwrap_or_default(),
    };
    let mut line = sys::Line::empty();
    memory.encode(&mut line);
    line.write_to(fd);
}

/// The kernel's split of this process's resident set, from `/proc/self/smaps_rollup`.
fn resident_set() -> Option<ResidentSet> {
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/smaps_rollup".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reading into the unused part of our own buffer.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n < 0 && sys::interrupted() {
            continue;
        }
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    ResidentSet::parse(std::str::from_utf8(&buf[..len]).ok()?)
}

/// Opens `<prefix>.timeline` and has the exit dump's moment written to it at exit.
fn open_timeline(prefix: &str) {
    let mut path = FixedPath::new();
    if !(path.push(prefix.as_bytes()) && path.push(files::TIMELINE.as_bytes())) {
        return;
    }
    let fd = sys::create_file(&path);
    if fd < 0 {
        return;
    }
    TIMELINE.store(fd, Ordering::SeqCst);
    // Registered after jemalloc's own handler (it registers during its first allocation,
    // before any constructor), so it runs before jemalloc writes the exit dump.
    // SAFETY: registers a handler that takes no arguments.
    unsafe {
        libc::atexit(mark_exit);
    }
}

extern "C" fn mark_exit() {
    mark(Dump::Final, sys::now_us());
}

/// Appends one line to the timeline (one `write`, so a kill leaves whole lines).
fn mark(dump: Dump, micros: u64) {
    let fd: c_int = TIMELINE.load(Ordering::SeqCst);
    if fd >= 0 {
        let mut line = sys::Line::empty();
        Mark { dump, micros }.encode(&mut line);
        line.write_to(fd);
    }
}

/// The program's own jemalloc, when the tool named it: its `_rjem_mallctl` in this process
/// (checked to be code of the build the tool read) and the prefix for its dumps.
fn app_allocator() -> Option<(usize, &'static str)> {
    let vaddr = sys::var(env::APP_MALLCTL).and_then(sys::parse_hex)?;
    let build_id = sys::var(env::RERUN_BUILD_ID).unwrap_or("");
    let prefix = sys::var(env::APP_PREFIX)?;
    let address = image::resolve(vaddr as usize, build_id).ok()?;
    Some((address, prefix))
}

/// `<prefix>.<pid>.<seq>.t.heap` into `path`; false when it does not fit.
fn periodic_name(path: &mut FixedPath, prefix: &str, seq: u64) -> bool {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    path.push(prefix.as_bytes())
        && path.push(b".")
        && path.push_u64(pid)
        && path.push(b".")
        && path.push_u64(seq)
        && path.push(files::TRACKED_PERIODIC.as_bytes())
        && path.push(files::HEAP.as_bytes())
}

/// One periodic dump of the program's own jemalloc, named after this runtime's of the same
/// moment.
fn app_dump(mallctl: usize, prefix: &str, seq: u64) {
    let mut path = FixedPath::new();
    if periodic_name(&mut path, prefix, seq) {
        // SAFETY: `mallctl` was resolved from the tool's address of `_rjem_mallctl`.
        unsafe { crate::app_prof_dump(mallctl, &path) };
    }
}

/// One periodic dump of the tracker, and the scan when it was asked for; whether the dump
/// was written.
fn tracked_dump(prefix: &str, seq: u64, scan_request: Option<&str>) -> bool {
    let mut path = FixedPath::new();
    if !periodic_name(&mut path, prefix, seq) || !tracker::dump::dump(&path) {
        return false;
    }
    let Some(request) = scan_request else {
        return true;
    };
    let mut req = FixedPath::new();
    if !req.push(request.as_bytes()) {
        return true;
    }
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(req.as_ptr(), libc::F_OK) } != 0 {
        return true;
    }
    let mut unreached = FixedPath::new();
    let mut paths = FixedPath::new();
    // SAFETY: path holds len() initialised bytes before its NUL.
    let name = unsafe { std::slice::from_raw_parts(path.as_ptr().cast::<u8>(), path.len()) };
    if unreached.push(name)
        && unreached.push(files::UNREACHED.as_bytes())
        && paths.push(name)
        && paths.push(files::PATHS.as_bytes())
    {
        crate::scan::dump_unreached(&unreached, Some(&paths));
    }
    // SAFETY: a NUL-terminated path; deleting it tells the tool the scan is written.
    unsafe {
        libc::unlink(req.as_ptr());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The moments a schedule dumps at over `until_ms`, polled as the thread polls, with the
    /// live heap `live(t)`.
    fn moments(interval_ms: u64, until_ms: u64, live: impl Fn(u64) -> u64) -> Vec<u64> {
        let mut s = Schedule::new(interval_ms, 0, live(0));
        let (mut t, mut out) = (0, Vec::new());
        while t < until_ms {
            t += s.poll_ms();
            if s.due(t, live(t)) {
                out.push(t);
                s.dumped(t, live(t));
            }
        }
        out
    }

    #[test]
    fn a_short_run_gets_points_in_every_quarter_and_a_long_one_reaches_the_interval() {
        for until in [100, 300, 700] {
            let at = moments(250, until, |_| 0);
            for q in 0..4 {
                let (from, to) = (until * q / 4, until * (q + 1) / 4);
                assert!(
                    at.iter().filter(|&&t| t > from && t <= to).count() >= 2,
                    "{until} ms, quarter {q}: {at:?}"
                );
            }
        }
        let at = moments(250, 60_000, |_| 0);
        let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.last(), Some(&250));
        assert!(gaps.windows(2).all(|w| w[0] <= w[1]), "gaps only widen");
        // 60 s at 250 ms is 240 dumps; the ramp adds 30 in its first 2.5 s.
        assert!(at.len() <= 280, "{}", at.len());
    }

    #[test]
    fn a_heap_that_moves_fast_brings_dumps_forward_and_a_still_one_does_not() {
        // Still at 10 MB for 3 s, then growing by 100 MB/s: an eighth of the heap passes in
        // tens of milliseconds, where the clock alone would wait 320 ms.
        let burst = |t: u64| 10_000_000 + t.saturating_sub(3_000) * 100_000;
        let growing = moments(1000, 3_400, burst);
        let still = moments(1000, 3_400, |_| 10_000_000);
        let late = |at: &[u64]| at.iter().filter(|&&t| t > 3_000).count();
        assert!(late(&growing) >= 4, "{growing:?}");
        assert!(late(&still) <= 1, "{still:?}");
        // Small moves (under 1 MiB) do not count, however large a share of the heap.
        assert_eq!(
            moments(1000, 5_000, |t| t * 100),
            moments(1000, 5_000, |_| 0)
        );
    }

    #[test]
    fn an_interval_under_the_first_gap_is_kept() {
        let at = moments(3, 30, |_| 0);
        assert_eq!(at.first(), Some(&3));
        assert!(at.windows(2).all(|w| w[1] - w[0] == 3), "{at:?}");
    }
}
