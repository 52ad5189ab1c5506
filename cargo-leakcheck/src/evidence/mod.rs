//! The evidence a test process leaves, at the bottom of the layers: how it ended, the
//! runtime's exit record (read from the file the runtime writes line by line), its captured
//! output, and where the test's entry point is in its executable. `execution` collects it;
//! `analysis` judges it; neither is needed to read it.

pub mod cycles;
pub mod died;
pub mod growth_run;
pub mod identity;
pub mod load;
pub mod normalized;
pub mod paths;
pub mod profile;
pub mod sites;
pub mod symbols;
pub mod test_run;
pub mod unreached;

use leakcheck_protocol::record::Entry as RecordEntry;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a test process ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessEnd {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
    /// Ran past the timeout and was killed.
    TimedOut,
    /// Could not be started.
    SpawnFailed(String),
    /// Stopped, or never started, because the run was interrupted (Ctrl-C, SIGTERM).
    Interrupted,
}

impl ProcessEnd {
    /// Human description, e.g. "exit code 101" or "signal 11 (SIGSEGV)".
    pub fn describe(&self) -> String {
        match self {
            ProcessEnd::Exited(c) => format!("exit code {c}"),
            ProcessEnd::Signaled(s) => format!("signal {s} ({})", signal_name(*s)),
            ProcessEnd::TimedOut => "timed out".into(),
            ProcessEnd::SpawnFailed(e) => format!("could not start: {e}"),
            ProcessEnd::Interrupted => "interrupted".into(),
        }
    }
}

/// How far a run of a service (`cargo leakcheck run`) got.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceStage {
    /// It could not be started.
    NotStarted(String),
    /// It ended (how) before it was ready.
    EndedBeforeReady(ProcessEnd),
    /// It was not ready within the ready timeout.
    NeverReady,
    /// It ended (how) while under load (or during the --duration wait).
    EndedUnderLoad(ProcessEnd),
    /// The load command failed (its status) or did not finish in time (None).
    LoadFailed(Option<String>),
    /// It ran the whole load and was stopped by the tool; how it ended then.
    Completed(ProcessEnd),
    /// The run was interrupted (Ctrl-C, SIGTERM).
    Interrupted,
}

/// The name of a signal number on Linux.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// What one process left behind.
#[derive(Clone, Debug)]
pub struct ProcessResult {
    /// How it ended.
    pub end: ProcessEnd,
    /// Wall time.
    pub duration: Duration,
    /// The time limit it ran under.
    pub timeout: Duration,
    /// Peak resident set size of the process, in KiB, when it was reaped normally.
    pub peak_rss_kib: Option<u64>,
    /// The runtime's exit record (see [`Record`]), when its exit handler ran.
    pub record: Option<Record>,
    /// The file the record was read from, when the process was asked to write one.
    pub record_file: Option<PathBuf>,
    /// The runtime's dump(s) of the state the test's own run left (everything malloc saw):
    /// the dump taken before extra runs when there were any, else the exit dump.
    pub preload_dumps: Vec<PathBuf>,
    /// The same of a jemalloc linked into the test binary, when it has one with profiling.
    pub app_dumps: Vec<PathBuf>,
    /// The dumps taken after each extra run that finished (runtime's, then the test
    /// binary's jemalloc's when it has one).
    pub run_dumps: Vec<Vec<PathBuf>>,
    /// Captured stdout.
    pub stdout: PathBuf,
    /// Captured stderr.
    pub stderr: PathBuf,
    /// Processes of its process group still running when it ended (`pid N (name)`); they
    /// were killed.
    pub left_running: Vec<String>,
    /// The processes the test started, as each said what it was.
    pub children: Vec<ChildProcess>,
}

/// A process a test started, as its record said (see `leakcheck_protocol::children`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildProcess {
    /// Its executable.
    pub exe: String,
    /// The test's run under way when it started (0: its own run).
    pub run: u32,
    /// Whether it is the build's and was tracked.
    pub checked: bool,
    /// Its exit dump, beside which its scan's files are: when it ended through `exit`.
    pub dump: Option<PathBuf>,
}

impl ProcessResult {
    /// A process known only by how it ended and where its output went: no record, no dumps.
    pub fn ended(end: ProcessEnd, stdout: PathBuf, stderr: PathBuf) -> ProcessResult {
        ProcessResult {
            end,
            duration: Duration::ZERO,
            timeout: Duration::ZERO,
            peak_rss_kib: None,
            record: None,
            record_file: None,
            preload_dumps: Vec::new(),
            app_dumps: Vec::new(),
            run_dumps: Vec::new(),
            left_running: Vec::new(),
            children: Vec::new(),
            stdout,
            stderr,
        }
    }

    /// How the test's own run ended: the record's exit status when the runtime's exit
    /// handler ran (an extra run may have killed the process afterwards), else how the
    /// process ended.
    pub fn first_run_end(&self) -> ProcessEnd {
        match self.record.as_ref().and_then(|r| r.first) {
            Some(first) => ProcessEnd::Exited(first.status),
            None => self.end.clone(),
        }
    }
}

/// How much of a captured output is read back: a test may write gigabytes.
pub const CAPTURE_READ_LIMIT: u64 = 64 << 10;

/// The start of a captured output file (up to `limit` bytes), decoded lossily: a test may
/// write bytes that are not UTF-8, and what it wrote must still be shown.
pub fn capture_head(path: &Path, limit: u64) -> String {
    use std::io::Read;
    let mut bytes = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(limit).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The end of a captured output file (its last `limit` bytes, from the first whole line),
/// decoded lossily.
pub fn capture_tail(path: &Path, limit: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(limit);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = f.take(limit).read_to_end(&mut bytes);
    let from = if start > 0 {
        // Cut at a line boundary rather than in the middle of a line or character.
        bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1)
    } else {
        0
    };
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

/// The last lines of a captured output file, formatted to follow a message. Thread ids in
/// panic messages (`thread 'x' (1234) panicked`, Rust 1.89+) differ from run to run and
/// are removed, so the report stays deterministic.
pub fn stderr_tail(path: &Path) -> String {
    let text = capture_tail(path, CAPTURE_READ_LIMIT);
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(redact_thread_id)
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    // The last 15 lines, or from the line before the last panic's header when that is not
    // much further back (a backtrace follows the message).
    let mut start = lines.len().saturating_sub(15);
    if let Some(header) = lines
        .iter()
        .rposition(|l| l.starts_with("thread '") && l.contains("panicked at"))
    {
        if lines.len() - header <= 40 {
            start = start.min(header.saturating_sub(1));
        }
    }
    format!("; last lines of its stderr:\n{}", lines[start..].join("\n"))
}

/// `thread 'name' (1234) panicked at …` -> `thread 'name' panicked at …`.
fn redact_thread_id(line: &str) -> String {
    if let Some(rest) = line.strip_prefix("thread '") {
        if let Some((name, after)) = rest.split_once("' (") {
            if let Some((id, tail)) = after.split_once(") ") {
                if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
                    return format!("thread '{name}' {tail}");
                }
            }
        }
    }
    line.to_string()
}

/// Exact live counts from the runtime (counting mode): objects allocated off the main
/// thread's arena and still live, and their bytes.
pub use leakcheck_protocol::record::Counts as ExitCounts;
/// Why the runtime stopped making extra runs.
pub use leakcheck_protocol::record::End;

pub use leakcheck_protocol::drain::Reclaimer;

/// What the test's own run left when libtest's `main` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstRun {
    /// The status the process was exiting with.
    pub status: i32,
    /// Live counts (counting mode; zero otherwise).
    pub live: ExitCounts,
    /// Threads of the process at that point.
    pub threads: i64,
}

/// One extra run that returned normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtraRun {
    /// Live counts once it settled (counting mode; zero otherwise).
    pub live: ExitCounts,
    /// Threads of the process then.
    pub threads: i64,
    /// Whether the thread count came back down to what it was before the run.
    pub settled: bool,
    /// Counting mode: what the arenas of the extra runs up to this one held together right
    /// after it; `None` in a record that does not say.
    pub held: Option<ExitCounts>,
}

/// The runtime's exit record, written line by line (see the runtime's `rerun` module): what
/// the first run left, and how far the extra runs got. A line the process did not live to
/// finish is simply absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Counting mode: the main thread's own arena; `None` if binding failed (then counts
    /// prove nothing) or not counting.
    pub main_arena: Option<i64>,
    /// Counting mode, a program with a global allocator of its own: whether it reaches the
    /// runtime's `malloc` (false: counts prove nothing). None when the runtime was not
    /// asked.
    pub allocator_reaches_malloc: Option<bool>,
    /// The first run, when the exit handler ran.
    pub first: Option<FirstRun>,
    /// Extra runs that returned normally, in order.
    pub runs: Vec<ExtraRun>,
    /// The highest extra run that was started.
    pub started: u32,
    /// An extra run that returned an error: its message.
    pub failed: Option<String>,
    /// An extra run that outlived its deadline.
    pub timed_out: bool,
    /// Counting mode: what each extra run left behind (still live at the end), in order.
    pub left: Vec<ExitCounts>,
    /// Why the runtime stopped.
    pub end: Option<End>,
    /// What the test's own run cost: CPU and wall milliseconds.
    pub own_cost: Option<(u64, u64)>,
    /// The wait, once after the last extra run, for the threads the runs started.
    pub grace: Option<Grace>,
    /// What draining the program's deferred-reclamation runtimes freed before each run was
    /// measured, in order (run 0 is the test's own).
    pub drained: Vec<DrainRecord>,
    /// The run and the kind whose drain started and is the record's last word: the process
    /// ended during that drain (a deferred destructor of the program panicked, say).
    pub draining: Option<(u32, Reclaimer)>,
    /// The lengths of the program's own collections, as the runtime wrote them: after each
    /// run (`Some(k)`, 0 the test's own) or after the grace (`None`), each time one changed.
    pub lengths: Vec<Length>,
}

/// One reading of a collection's length in the record (see
/// `leakcheck_protocol::collections`): written when it differs from the reading before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Length {
    /// After run k (0: the test's own); `None`: after the grace.
    pub run: Option<u32>,
    /// The collection's index in its binary's table.
    pub index: u32,
    /// The length, or why there is none (`ABSENT`, `UNREADABLE`, `INCONSISTENT`).
    pub reading: i64,
}

/// One drain of a deferred-reclamation runtime's garbage, after a run and before it was
/// measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainRecord {
    /// The run it followed (0: the test's own).
    pub run: u32,
    /// The kind of reclaimer drained.
    pub kind: Reclaimer,
    /// What it freed (objects exact; bytes in counting mode only).
    pub freed: ExitCounts,
    /// What the drains' own arena held afterwards (counting mode).
    pub kept: ExitCounts,
}

impl Record {
    /// What draining freed over the whole process, for the report; None when it freed
    /// nothing. The report names one runtime: with several kinds drained, the one that
    /// freed the most objects, and what it freed.
    pub fn drained_total(&self) -> Option<crate::model::Drained> {
        Reclaimer::ALL
            .into_iter()
            .filter_map(|kind| {
                let of_kind = || self.drained.iter().filter(move |d| d.kind == kind);
                let objects: i64 = of_kind().map(|d| d.freed.objects.max(0)).sum();
                let bytes: i64 = of_kind().map(|d| d.freed.bytes.max(0)).sum();
                (objects > 0).then_some(crate::model::Drained {
                    runtime: crate::model::DrainedRuntime(kind),
                    objects: objects as u64,
                    bytes: bytes as u64,
                    runs: of_kind().count() as u32,
                })
            })
            .max_by_key(|d| d.objects)
    }
}

/// After the last extra run, the runtime waits a while for the threads the runs started
/// to end (a watchdog that sleeps a second is not a leak), and measures again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace {
    /// How long it waited.
    pub waited_ms: u64,
    /// Threads still running beyond those running before the extra runs.
    pub threads_running: u64,
    /// Live counts after the wait (counting mode; zero otherwise).
    pub live: ExitCounts,
}

impl Record {
    /// Parses a record; unknown or malformed lines are ignored, so a record cut short by a
    /// crash still gives what it has.
    pub fn parse(text: &str) -> Record {
        let mut r = Record::default();
        for entry in text.lines().filter_map(RecordEntry::decode) {
            r.draining = match entry {
                RecordEntry::Draining { run, kind } => Some((run, kind)),
                _ => None,
            };
            match entry {
                RecordEntry::Draining { .. } => {}
                RecordEntry::Arena(a) => r.main_arena = Some(a).filter(|&a| a >= 0),
                RecordEntry::Allocator { reaches_malloc } => {
                    r.allocator_reaches_malloc = Some(reaches_malloc)
                }
                RecordEntry::First {
                    status,
                    live,
                    threads,
                } => {
                    r.first = Some(FirstRun {
                        status: status as i32,
                        live,
                        threads,
                    })
                }
                RecordEntry::RunStart { run } => r.started = r.started.max(run),
                RecordEntry::RunOk {
                    live,
                    threads,
                    settled,
                    ..
                } => r.runs.push(ExtraRun {
                    live,
                    threads,
                    settled,
                    held: None,
                }),
                RecordEntry::Held { run, live } => {
                    let extra = run.checked_sub(1).and_then(|i| r.runs.get_mut(i as usize));
                    if let Some(extra) = extra {
                        extra.held = Some(live);
                    }
                }
                RecordEntry::RunFailed { message, .. } => r.failed = Some(message.to_string()),
                RecordEntry::RunTimeout { .. } => r.timed_out = true,
                RecordEntry::Left { live, .. } => r.left.push(live),
                // Only progress: the grace line that follows says how long it waited.
                RecordEntry::Waiting { .. } => {}
                RecordEntry::Drained {
                    run,
                    kind,
                    freed,
                    kept,
                } => r.drained.push(DrainRecord {
                    run,
                    kind,
                    freed,
                    kept,
                }),
                RecordEntry::Grace {
                    waited_ms,
                    threads,
                    live,
                } => {
                    r.grace = Some(Grace {
                        waited_ms: waited_ms.max(0) as u64,
                        threads_running: threads.max(0) as u64,
                        live,
                    })
                }
                RecordEntry::End(why) => r.end = Some(why),
                RecordEntry::Length {
                    run,
                    index,
                    reading,
                } => r.lengths.push(Length {
                    run,
                    index,
                    reading,
                }),
                RecordEntry::Cost { cpu_ms, wall_ms } => {
                    r.own_cost = Some((cpu_ms.max(0) as u64, wall_ms.max(0) as u64))
                }
            }
        }
        r
    }

    /// The first run's exact counts, when the record proves them (counting mode, the main
    /// thread on its own arena).
    pub fn counts(&self) -> Option<ExitCounts> {
        self.main_arena?;
        if self.allocator_reaches_malloc == Some(false) {
            return None;
        }
        self.first.map(|f| f.live)
    }
}

/// One of the program's own collections, found in its executable's DWARF under a static or
/// a thread-local (see `execution::collections`): what the runtime reads its length by, and
/// what a report says of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Collection {
    /// The static or thread-local it is under, demangled (`app::SEEN`).
    pub root: String,
    /// Whether that is a thread-local (`thread_local!`).
    pub thread_local: bool,
    /// Where the root is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The fields from the root to it (`.seen`), empty when it is the root's value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// Its type, as declared, paths and default parameters left out (`HashSet<u64>`).
    pub type_name: String,
    /// Its length counts bytes (a `String`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bytes: bool,
    /// One entry's size in bytes, when known (0: not known).
    pub entry_size: u64,
    /// Its entry of the runtime's table (`leakcheck_protocol::collections`), its root first.
    pub program: String,
}

/// The collections of one executable, in the order of the runtime's table (a collection's
/// index in the record is its place here).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CollectionTable {
    pub collections: Vec<Collection>,
    /// Why none could be read, when that is so (no type information).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CollectionTable {
    /// The table the runtime reads, for the executable with this build id: its first line
    /// names the build, then every collection's entry, in order.
    pub fn render(&self, build_id: &str) -> String {
        let mut s = format!("b {build_id}\n");
        for c in &self.collections {
            s.push_str(&c.program);
        }
        s
    }
}

/// A test's entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Its address in the executable image (a virtual address of the ELF file).
    pub address: u64,
    /// Its code, as offsets in the file: frames of heap dumps are keyed by file offset,
    /// and a frame in this range is the call that runs the test body.
    pub file_range: (u64, u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_are_read_in_part_and_lossily() {
        let dir = std::env::temp_dir().join(format!("leakcheck-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stderr");
        let mut bytes = b"first line\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', 1000));
        bytes.extend(b"\nnot utf-8: \xff\xfe end\nlast line\n");
        std::fs::write(&path, &bytes).unwrap();
        // The tail starts at a whole line and shows what is not UTF-8 as replacement
        // characters rather than losing it.
        let tail = capture_tail(&path, 40);
        assert_eq!(tail, "not utf-8: \u{fffd}\u{fffd} end\nlast line\n");
        assert!(capture_tail(&path, 1 << 20).starts_with("first line\n"));
        assert_eq!(capture_head(&path, 10), "first line");
        assert_eq!(capture_tail(&dir.join("missing"), 10), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn thread_ids_are_redacted_from_quoted_stderr() {
        assert_eq!(
            redact_thread_id("thread 'tests::x' (1894) panicked at src/lib.rs:3:5:"),
            "thread 'tests::x' panicked at src/lib.rs:3:5:"
        );
        assert_eq!(
            redact_thread_id("thread 'main' panicked at a.rs:1:1:"),
            "thread 'main' panicked at a.rs:1:1:"
        );
        assert_eq!(
            redact_thread_id("thread 'x' (abc) panicked"),
            "thread 'x' (abc) panicked"
        );
        assert_eq!(
            redact_thread_id("note: run with RUST_BACKTRACE=1"),
            "note: run with RUST_BACKTRACE=1"
        );
    }
}
