//! The results of a run: the schema of `report.json` (version 1), the types every stage
//! shares, with their serde attributes and the names they are written by. Field order and
//! sorting are fixed so the file is deterministic for the same results. What is worked out
//! from the fields is in `derived` (what fails the run in `gate`, which stacks a renderer
//! shows in `shown`), sizes and counts in words in `amounts`, and the reports tests start
//! from in `builders`; the renderers' words for these types are `report::text`'s.

use serde::{Deserialize, Serialize};

mod amounts;
#[cfg(test)]
mod builders;
mod cycles;
mod derived;
pub mod gate;
mod memory;
mod shown;
pub use amounts::{count_of, human_bytes};
pub use cycles::{CycleMember, CycleReport, Unreachable};
pub use gate::growth_exit_code;
pub use memory::{Memory, MemoryExplained, MemoryPart, MemoryPartFigures, MemoryPoint};

/// The run's HTML page, beside `report.json`.
pub const PAGE_FILE: &str = "index.html";

/// Schema version of `report.json`.
pub const REPORT_VERSION: u32 = 1;

/// The whole report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Always [`REPORT_VERSION`].
    pub version: u32,
    /// How the run was profiled and judged.
    pub settings: ReportSettings,
    /// Every test that was selected, sorted by binary then name.
    pub tests: Vec<TestReport>,
    /// Tests matching the filters that were not run because they are `#[ignore]`d (run
    /// them with `-- --include-ignored` or `-- --ignored`).
    pub ignored: usize,
    /// The shard this run checked (`--partition`), e.g. `slice:1/3`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub partition: Option<String>,
    /// Tests left out because they belong to other shards.
    #[serde(skip_serializing_if = "is_zero")]
    #[serde(default)]
    pub other_shards: usize,
    /// Test binaries whose tests could not be listed, so none of them ran (by id); the
    /// run fails as a failing test would.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub unlisted: Vec<String>,
    /// A failure the test runner reported that no verdict here explains (nextest exited
    /// 100 while every judged test passed): the run fails as the runner's did.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub runner_failed: Option<String>,
    /// Tests the filters selected that never ran to a verdict (a runner that stopped early,
    /// an interruption): how many, which, and why. The run proves nothing about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub not_run: Option<NotRun>,
    /// Every benchmark that was run (`cargo leakcheck bench`), sorted by binary then name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub benches: Vec<GrowthReport>,
    /// Run-wide remarks (skipped doc-tests, binaries that could not be listed, …).
    pub notes: Vec<String>,
    /// What changed against a base run (`--baseline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub baseline: Option<Baseline>,
}

/// What changed against a base run's report (`--baseline`): which leaks are new, grown,
/// unchanged or gone, and which other tests changed for the worse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    /// The base report, as given.
    pub path: String,
    /// `--fail-on new`: only new and grown leaks fail the run.
    pub fail_on_new: bool,
    /// Leaking tests whose leak is new (clean, or absent, in the base).
    pub new: usize,
    /// Leaking tests that leaked in the base too, more now (a stack new to them, or
    /// retaining more).
    pub grown: usize,
    /// Leaking tests that leaked as much in the base.
    pub unchanged: usize,
    /// Tests that leaked in the base and do not now (passing now, or no longer there).
    pub gone: Vec<String>,
    /// The tests that changed, or leak: by test, in report order.
    pub tests: Vec<TestChange>,
}

/// How one test compares with the base run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestChange {
    pub package: String,
    pub binary: String,
    pub name: String,
    pub change: Change,
    /// What changed, in words (`was clean`, `retained 2.0 KiB, was 1.0 KiB`).
    pub detail: String,
    /// Its failing stacks' changes, by their index in the test's `stacks`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub stacks: Vec<(usize, Change)>,
}

/// A leak or a test against the base run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// A leak the base did not have.
    New,
    /// A leak the base had, larger now.
    Grown,
    /// A leak the base had, as large.
    Unchanged,
    /// Not a leak, but worse than in the base: it became unsettled or failed, or it now
    /// keeps memory for the process lifetime that it did not.
    Changed,
}

impl Change {
    /// The lowercase name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::New => "new",
            Change::Grown => "grown",
            Change::Unchanged => "unchanged",
            Change::Changed => "changed",
        }
    }
}

/// Selected tests that were never judged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRun {
    /// How many.
    pub count: usize,
    /// Why they did not run, e.g. "nextest stopped at the first failure (fail-fast)".
    pub why: String,
    /// Which: `<binary id> <test name>`, sorted.
    pub tests: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// How a test's verdict was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The counting pass proved it retained nothing, or nothing that extra runs add to.
    Counters,
    /// Its stacks were profiled exactly.
    Stacks,
    /// Its counting run crashed or timed out: there is nothing more to learn.
    #[serde(rename = "count-run")]
    CountRunOnly,
}

/// Run-wide settings that decide what the numbers mean.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReportSettings {
    /// jemalloc's sampling period in bytes: 1 means every allocation was recorded exactly.
    pub sample_period: u64,
    /// A stack retaining more than this many bytes fails its test, where no `[[tests]]`
    /// entry says otherwise (see each test's `stack_threshold`).
    pub stack_threshold: u64,
    /// The configuration file used, if any.
    pub config: Option<String>,
}

/// A test's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Passed, and retained memory beyond a threshold.
    Leak,
    /// Passed, and retained nothing beyond the thresholds.
    Clean,
    /// The test itself failed (non-zero exit); its retained memory is still reported.
    Failed,
    /// Killed by a signal (abort, segfault, …): no exit dump exists.
    Crashed,
    /// Ran past `--timeout` and was killed.
    Timeout,
    /// Its dumps could not be read or it could not be started: see `message`.
    Error,
    /// Its allocations are invisible to the profiler (e.g. a custom global allocator).
    Unanalysable,
    /// Passed, and retained memory that it could not be run again to tell apart (its extra
    /// runs did not finish in time): not shown to leak, not shown to settle.
    Unsettled,
}

impl Verdict {
    /// The lowercase name used in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Leak => "leak",
            Verdict::Clean => "clean",
            Verdict::Failed => "failed",
            Verdict::Crashed => "crashed",
            Verdict::Timeout => "timeout",
            Verdict::Error => "error",
            Verdict::Unanalysable => "unanalysable",
            Verdict::Unsettled => "unsettled",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a retained stack is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StackKind {
    /// Memory the test allocated and never freed, reachable or not: counts against thresholds.
    Leak,
    /// One-time initialisation (OnceLock, LazyLock, lazy_static, once_cell, std's backtrace
    /// cache): listed, failing only with `one-time-fails`.
    OneTime,
    /// Kept for the process lifetime: retained by the test's run, and not added to by its
    /// extra runs (a pool, a logger, a table built once, a buffer reused at its size):
    /// listed, failing only with `one-time-fails`.
    ProcessLifetime,
    /// Memory the test harness, std or libc keep (no frame of the code under test, or
    /// glibc's cache of thread stacks): listed in the report only.
    Harness,
}

/// One source frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FrameReport {
    /// Demangled function name without hash, or `object+0xOFFSET` when unresolved.
    pub function: String,
    /// Source file, when debug info has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub file: Option<String>,
    /// Source line, when debug info has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub line: Option<u32>,
    /// Whether this frame was inlined into the next one.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[serde(default)]
    pub inlined: bool,
}

/// One allocation stack with memory still live at the end of the test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StackReport {
    /// Bytes retained (jemalloc size classes: a 100-byte Vec counts 112).
    pub bytes: u64,
    /// Objects retained.
    pub objects: u64,
    /// What the stack is.
    pub kind: StackKind,
    /// Why it was given that kind, e.g. the once-initialiser frame that matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub reason: Option<String>,
    /// Whether this stack makes the test fail (a leak above the threshold, not suppressed).
    pub fails: bool,
    /// What it holds: heap objects unless its objects are the program's own mappings.
    #[serde(skip_serializing_if = "Memory::is_heap")]
    #[serde(default)]
    pub memory: Memory,
    /// For a leak that does not fail: what allowed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub allowed: Option<Allowance>,
    /// Index into the configuration's suppressions, when one allowed this stack.
    #[serde(skip)]
    pub suppression: Option<usize>,
    /// What each extra run of the test added to this stack (present when extra runs were
    /// made): a leak grows in every one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub growth_per_run: Vec<RunGrowth>,
    /// Frames innermost first, allocator frames trimmed.
    pub frames: Vec<FrameReport>,
    /// Who keeps its objects alive, when the reachability scan reached them: one shortest
    /// path from a root (see [`RetainedBy`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub retained_by: Option<RetainedBy>,
    /// For a leak whose objects no root reaches: why nothing frees them, as the scan's
    /// search for reference cycles among lost objects found (see [`Unreachable`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub unreachable: Option<Unreachable>,
    /// When its objects are async tasks (their cells, allocated inside a spawn call): what
    /// spawned them. Its objects per run are then tasks per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub task: Option<TaskReport>,
    /// When its objects were lost by a process the test started: that process's executable
    /// (its file name); its frames are that executable's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub process: Option<String>,
}

/// The processes of one executable a test started (in any of its runs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessReport {
    /// The executable's file name.
    pub name: String,
    /// Its path.
    pub exe: String,
    /// How many were started.
    pub started: u64,
    /// Whether they are the build's own and were checked (tracked, scanned at their exit).
    pub checked: bool,
    /// How many of the checked ones ended through `exit` and were scanned.
    #[serde(default)]
    pub scanned: u64,
    /// Why they, or some of them, were not checked: not the build's, or they did not end
    /// through `exit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub not_checked: Option<String>,
}

/// An async task of tokio or of async-task (smol, async-std, async-executor), told from the
/// allocation stack of its cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskReport {
    /// `tokio` or `async-task`.
    pub runtime: String,
    /// The program's own frame that spawned it.
    pub spawned_at: FrameReport,
    /// The runtime's function that frame called (`tokio::runtime::runtime::Runtime::spawn`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub spawned_by: Option<String>,
    /// The future's type, when the symbols name it (inlined frames of a build with line
    /// tables carry the constructor's generic arguments): `app::subscribe::{async_block_env#0}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub future: Option<String>,
    /// As a holder: the way to it runs through its runtime's own structures (its scheduler's
    /// list of tasks, another of its tasks), which list a task until it has finished.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[serde(default)]
    pub listed: bool,
    /// What its state word said when the scan read it: `pending` (waiting to be woken),
    /// `scheduled`, `running`, `cancelled` or `finished` (its cell still referenced).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub state: Option<String>,
    /// Whether the runtime's version is one whose state word this tool knows how to read
    /// (not reported).
    #[serde(skip)]
    pub layout_known: bool,
}

/// The task that holds a stack's objects: the innermost task cell on the retention path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldingTask {
    #[serde(flatten)]
    pub task: TaskReport,
    /// Its cell's place in [`RetainedBy::via`].
    pub via_index: usize,
    /// What holds the task, in words, when the object before it on the path says: "its
    /// runtime's list of tasks", "a waker in a channel", "a timer".
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub kept_by: Option<String>,
}

/// A retention path: the root that holds the first object on the way to one of a stack's
/// objects, then the allocation site of each object on the way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetainedBy {
    /// What kind of root.
    pub root_kind: RootKind,
    /// The root in words: ``static `app::REGISTRY` ``, ``thread-local `app::CACHE` of thread
    /// `worker-1` ``, ``stack of thread `worker-1` `` (the frame is beside it), ``register rbx
    /// of thread `reader` ``.
    pub root: String,
    /// The static's or thread-local's symbol, the stack frame's function, or the register.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub symbol: Option<String>,
    /// The thread, for a thread-local, a stack or a register: its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub thread: Option<String>,
    /// For a stack root: the function whose frame holds the pointer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub frame: Option<FrameReport>,
    /// For a static: where it is defined, when the debug info says.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub definition: Option<FrameReport>,
    /// The objects between the root and this stack's, root-most first, each by where it
    /// was allocated (the first frame in the program's own code where there is one).
    pub via: Vec<FrameReport>,
    /// Objects of a long chain left out between the first and the last `via` entries.
    #[serde(skip_serializing_if = "is_zero")]
    #[serde(default)]
    pub skipped: u64,
    /// When an async task is on the way: the innermost one, which owns what it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub task: Option<HoldingTask>,
    /// For a thread's stack, register or thread-local: the thread, by what started it and
    /// what it was doing.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub holder: Option<HolderThread>,
}

/// The thread a retention path starts in, as a developer knows it: by the line of their
/// code that spawned it, its own name when it set one, and what it was doing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderThread {
    /// The first frame of the program's own code on the stack that called
    /// `pthread_create`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub spawned_at: Option<FrameReport>,
    /// The name it gave itself (a thread that never named itself carries its creator's,
    /// which says nothing about it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub name: Option<String>,
    /// Whether it is the thread libtest ran the test on.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[serde(default)]
    pub runs_the_test: bool,
    /// What it was doing before the scan stopped it: `running`, `asleep, waking within 1 h`,
    /// `blocked in accept`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub state: Option<String>,
}

/// Where a retention path starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RootKind {
    /// A global or static variable (a writable segment of a loaded object).
    Static,
    /// A thread's static thread-local storage.
    ThreadLocal,
    /// A thread's stack.
    Stack,
    /// A register of a stopped thread.
    Register,
    /// The scan could not say.
    Unknown,
}

impl StackReport {
    /// The least an extra run added to this stack, bytes; None without extra runs.
    pub fn min_growth(&self) -> Option<i64> {
        self.growth_per_run.iter().map(|g| g.bytes).min()
    }
}

/// What one extra run added to a stack (negative: freed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunGrowth {
    /// Objects.
    pub objects: i64,
    /// Bytes.
    pub bytes: i64,
}

/// The extra runs of a test in its own process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraRuns {
    /// How many extra runs the verdict measured: those of the process it is drawn from
    /// (for a test whose stacks were taken, that process's, each with its stacks).
    pub made: u32,
    /// Every run of the test beyond its own, in all its processes: its counting process's
    /// extra runs and, when its stacks were taken in a process of their own, that process's
    /// run from scratch and its extra runs. The summary's cost line counts these.
    #[serde(default)]
    pub in_all: u32,
    /// `status`: `completed`, or why there were none or fewer; `reason`: what the process
    /// said about it, for the statuses that carry one.
    #[serde(flatten)]
    pub status: ExtraRunsStatus,
    /// The reason in words, when there is more to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub detail: Option<String>,
}

/// What draining freed before a test's runs were measured, summed over its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drained {
    /// The runtime drained (its kind's name: `crossbeam-epoch`).
    pub runtime: DrainedRuntime,
    /// Objects freed.
    pub objects: u64,
    /// Their bytes (0 when the process profiled stacks, which counts objects only).
    pub bytes: u64,
    /// How many of the test's runs (its own and its extra runs) were drained.
    pub runs: u32,
}

/// A deferred-reclamation runtime the tool drains, written as its kind's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainedRuntime(pub leakcheck_protocol::drain::Reclaimer);

impl std::fmt::Display for DrainedRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

impl Serialize for DrainedRuntime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name())
    }
}

impl<'de> Deserialize<'de> for DrainedRuntime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        leakcheck_protocol::drain::Reclaimer::from_name(&name)
            .map(DrainedRuntime)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown drained runtime `{name}`")))
    }
}

/// Why a test had as many extra runs as it had: the one type the analysis decides and the
/// report says (the sentence for it is `ExtraRuns::detail`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum ExtraRunsStatus {
    /// Every extra run asked for was made (or the counts settled earlier).
    Completed,
    /// The first run retained nothing: there was nothing to tell apart.
    NotNeeded,
    /// Extra runs are switched off (`--extra-runs 0` or `extra-runs = 0`).
    Off,
    /// The test failed (or did not finish) its own run: it is judged on that run alone.
    TestFailed,
    /// The test ended the process itself (`exit` from its thread, before libtest's `main`
    /// returned): it cannot run again, and is judged on what its own code retained.
    ExitedEarly,
    /// A `#[should_panic]` test cannot run again in its process: it panics.
    ShouldPanic,
    /// A `harness = false` target has no libtest entry point.
    NoHarness,
    /// The test's entry point could not be found exactly (why).
    NoEntryPoint(String),
    /// An extra run panicked (the message).
    Panicked(String),
    /// The process died during an extra run (how).
    Crashed(String),
    /// The process died while the runtime drained the program's deferred-reclamation
    /// garbage, in a destructor the program had deferred (which runtime's, after which run,
    /// and how: `crossbeam-epoch after the test's own run: …`).
    DrainFailed(String),
    /// An extra run took more than ten times the test's own run (at least 10 s), or the runs
    /// did not fit in the test's timeout.
    TimedOut,
    /// An extra run returned an error (its message).
    Failed(String),
    /// The runtime could not make them (why).
    Unavailable(String),
}

/// Exact objects and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retained {
    /// Objects.
    pub objects: u64,
    /// Bytes (jemalloc size classes).
    pub bytes: u64,
}

/// Which rule allowed a leaked stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllowedBy {
    /// It retained no more than the stack threshold.
    StackThreshold,
    /// A `[[suppress]]` entry matched it.
    Suppression,
}

/// What allowed a leaked stack: nothing is dropped silently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowance {
    /// `stack-threshold` or `suppression`.
    pub by: AllowedBy,
    /// The rule: `<= 4096 bytes (stack-threshold from …)` or `[[suppress]] #2 frame "…" (file:line)`.
    pub rule: String,
    /// The suppression's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub reason: Option<String>,
}

/// Paths of a test's artifacts, relative to the report's directory.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Artifacts {
    /// Flame graph of the leaked stacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub flamegraph: Option<String>,
    /// The folded stacks the flame graph was drawn from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub folded: Option<String>,
    /// The same stacks as a gzipped pprof profile (`go tool pprof`, Pyroscope, speedscope).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub pprof: Option<String>,
}

/// What kind of target a test binary was built from; ordered as its name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// A bench target (`cargo leakcheck bench`).
    Bench,
    /// A binary target's unit tests.
    Bin,
    /// The library's doc-tests.
    Doc,
    /// The library's unit tests.
    Lib,
    /// An integration test target.
    Test,
}

impl TargetKind {
    /// Its name in reports and file names.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Bench => "bench",
            TargetKind::Bin => "bin",
            TargetKind::Doc => "doc",
            TargetKind::Lib => "lib",
            TargetKind::Test => "test",
        }
    }
}

impl std::fmt::Display for TargetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestReport {
    /// Package name.
    pub package: String,
    /// Test target name (the library's name for unit tests).
    pub binary: String,
    /// `lib`, `test` or `bin`.
    pub kind: TargetKind,
    /// libtest name, module path included.
    pub name: String,
    /// The outcome.
    pub verdict: Verdict,
    /// Bytes retained by stacks of kind `leak`.
    pub retained_bytes: u64,
    /// Objects retained by stacks of kind `leak`.
    pub retained_objects: u64,
    /// The stack threshold in force for this test, bytes.
    pub stack_threshold: u64,
    /// The test threshold in force for this test, bytes (none: no per-test total).
    pub test_threshold: Option<u64>,
    /// How the process ended: `exit code 0`, `signal 11 (SIGSEGV)`, `timed out`.
    pub exit: String,
    /// How the verdict was reached: `counters` (the exact counting pass proved nothing
    /// was retained; no stacks were taken), `stacks` (exact stack profiling), or
    /// `count-run` (the counting run crashed or timed out).
    pub method: Method,
    /// Why the verdict is `error`, `crashed`, `timeout`, `failed`, `unanalysable` or
    /// `unsettled`; for a leak, what more there is to say (held by threads still running,
    /// over the per-test total).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub message: Option<String>,
    /// Every retained stack, largest first.
    pub stacks: Vec<StackReport>,
    /// Flame graph and folded stacks (leaking tests only).
    pub artifacts: Artifacts,
    /// How many times the test ran again in its own process, and why not more.
    pub extra_runs: ExtraRuns,
    /// Everything the test's own run retained off the harness's main thread, exactly, as
    /// the counting pass measured it (present when it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub first_run_retained: Option<Retained>,
    /// What draining the program's deferred-reclamation runtimes (crossbeam-epoch's
    /// collectors, say) freed before the test's runs were measured: garbage the program had
    /// already scheduled to free, never memory it leaked (present when it freed anything).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub drained: Option<Drained>,
    /// The test passed its counting run and failed (crashed, timed out) only when its
    /// stacks were recorded, which slows every allocation: most likely a timing-sensitive
    /// test rather than a plain failure.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[serde(default)]
    pub passed_without_profiling: bool,
    /// Processes the test started and left running when its process ended (`pid N
    /// (name)`, in any of its runs); cargo-leakcheck killed them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub left_processes: Vec<String>,
    /// `unsettled-fails` was in force for this test: an `unsettled` verdict fails the run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unsettled_fails: bool,
    /// The program's own collections whose length changed over the test's runs, or could
    /// not be read: a collection that gained entries on every extra run is a leak, however
    /// little the allocator saw.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub collections: Vec<CollectionReport>,
    /// The processes it started, by executable: checked (the build's), or listed as not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub processes: Vec<ProcessReport>,
}

/// What a collection's length counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LengthUnit {
    /// Entries (a `Vec`'s elements, a map's keys).
    Entries,
    /// Bytes (a `String`).
    Bytes,
}

/// Which of the program's own collections (a `Vec`, a `HashMap`, a `String`, … reachable
/// from a static or a thread-local) a report speaks of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionId {
    /// The static or thread-local it is under (`app::SEEN`).
    pub root: String,
    /// `static` or `thread-local`.
    pub root_kind: RootKind,
    /// The fields from the root to it (`.seen`), when it is not the root's value itself.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[serde(default)]
    pub field: String,
    /// Its type, as declared (`HashSet<u64>`).
    pub type_name: String,
    /// Where the root is defined.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub line: Option<u32>,
    /// What its length counts.
    pub unit: LengthUnit,
    /// One entry's size, when the type information says.
    #[serde(skip_serializing_if = "is_zero")]
    #[serde(default)]
    pub entry_bytes: u64,
}

/// One of the program's own collections, as the test's runs changed its length.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionReport {
    /// Which collection.
    #[serde(flatten)]
    pub collection: CollectionId,
    /// Its length after the test's own run, then after each extra run (negative where it
    /// could not be read; see `problem`).
    pub lengths: Vec<i64>,
    /// What each extra run added to its length.
    pub growth_per_run: Vec<i64>,
    /// `leak` when it grew on every extra run, `process-lifetime` otherwise.
    pub kind: StackKind,
    /// Why it was given that kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub reason: Option<String>,
    /// Whether it makes the test fail.
    pub fails: bool,
    /// For a growing collection that does not fail: what allowed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub allowed: Option<Allowance>,
    /// Index into the configuration's suppressions, when one allowed it.
    #[serde(skip)]
    pub suppression: Option<usize>,
    /// The stack that allocated its buffer as it was after the last run: the call that made
    /// it grow, when it reallocated (empty when that is not known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub allocated_at: Vec<FrameReport>,
    /// What could not be read, when a reading failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub problem: Option<String>,
    /// The other statics and fields it is reached from, when several lead to it (an `Arc`
    /// shared by two statics): one collection, reported once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub also_held_by: Vec<CollectionId>,
}

impl CollectionReport {
    /// The smallest growth of one extra run.
    pub fn min_growth(&self) -> Option<i64> {
        self.growth_per_run.iter().copied().min()
    }
}

impl FrameReport {
    /// A frame known by its function's name alone (no file or line).
    pub fn named(function: &str) -> FrameReport {
        FrameReport {
            function: function.into(),
            file: None,
            line: None,
            inlined: false,
        }
    }
}

impl Report {
    /// A report of `settings` with nothing in it yet, for a command to fill in (so that a
    /// new field has one default, not one per command).
    pub fn new(settings: ReportSettings) -> Report {
        Report {
            version: REPORT_VERSION,
            settings,
            tests: Vec::new(),
            ignored: 0,
            partition: None,
            other_shards: 0,
            unlisted: Vec::new(),
            runner_failed: None,
            not_run: None,
            benches: Vec::new(),
            notes: Vec::new(),
            baseline: None,
        }
    }
}

/// A test binary's id as nextest writes it (and so its JUnit `classname`): `package` for the
/// library's unit tests, `package::target` for an integration test, `package::kind/target`
/// for a binary's or a bench's.
pub fn binary_id(package: &str, kind: TargetKind, target: &str) -> String {
    match kind {
        TargetKind::Lib => package.to_string(),
        TargetKind::Test => format!("{package}::{target}"),
        other => format!("{package}::{other}/{target}"),
    }
}

/// Identifies a test across the report and the metrics: package, kind, target, name.
pub type TestKey = (String, TargetKind, String, String);

impl TestReport {
    /// Its [`TestKey`].
    pub fn key(&self) -> TestKey {
        (
            self.package.clone(),
            self.kind,
            self.binary.clone(),
            self.name.clone(),
        )
    }

    /// Its binary's id, as nextest writes it (see [`binary_id`]).
    pub fn binary_id(&self) -> String {
        binary_id(&self.package, self.kind, &self.binary)
    }

    /// The stacks that make this test fail.
    pub fn failing_stacks(&self) -> impl Iterator<Item = &StackReport> {
        self.stacks.iter().filter(|s| s.fails)
    }
}

/// One stack of a benchmark: its retained bytes over time and its growth.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchStack {
    /// Bytes retained at the last snapshot.
    pub bytes: u64,
    /// Rise over the later half of the run, bytes (negative: it shrank).
    pub growth_bytes: i64,
    /// That rise per second.
    pub growth_bytes_per_second: f64,
    /// Whether the growth rule flags it.
    pub flagged: bool,
    /// What the stack is (leak, one-time, harness), as for tests.
    pub kind: StackKind,
    /// What it holds: heap objects unless its objects are the program's own mappings.
    #[serde(skip_serializing_if = "Memory::is_heap")]
    #[serde(default)]
    pub memory: Memory,
    /// Frames innermost first, allocator frames trimmed.
    pub frames: Vec<FrameReport>,
    /// (seconds since the first snapshot, retained bytes) at every snapshot.
    pub series: Vec<(f64, u64)>,
    /// Who holds its objects, from the reachability scan after the load (`run`, when the
    /// scan found a path).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub retained_by: Option<RetainedBy>,
    /// Objects live at the last snapshot (estimated from the samples when sampled).
    #[serde(default)]
    pub objects: u64,
    /// When its objects are async tasks: what spawned them (its objects are then the live
    /// tasks).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub task: Option<TaskReport>,
}

/// Paths of a bench's artifacts, relative to the report's directory.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BenchArtifacts {
    /// Flame graph of the growth.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub flamegraph: Option<String>,
    /// The folded stacks it was drawn from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub folded: Option<String>,
    /// Retained bytes over time of the top stacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub plot: Option<String>,
    /// The growth as a gzipped pprof profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub pprof: Option<String>,
    /// A service's resident set size and live heap over time (`run`, whatever its verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub memory_plot: Option<String>,
}

/// One benchmark (`bench`) or service (`run`): its memory over time and the stacks and
/// collections that grew, in the shape of a test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GrowthReport {
    /// Package name.
    pub package: String,
    /// Bench target name.
    pub binary: String,
    /// Benchmark name (criterion's id, or the target name for a plain `harness = false` bench).
    pub name: String,
    /// `leak` (a stack keeps growing), `clean`, `failed`, `crashed`, `error`.
    pub verdict: Verdict,
    /// How the process ended (`stopped at the time cap` for a bench the tool stopped).
    pub exit: String,
    /// Why the verdict is not leak or clean.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub message: Option<String>,
    /// Sampling period in bytes (one sample per this many bytes allocated, on average).
    pub sample_period: u64,
    /// Growth that fails a stack, bytes.
    pub growth_threshold: u64,
    /// Where that threshold was set.
    pub growth_threshold_source: String,
    /// Heap snapshots taken.
    pub snapshots: usize,
    /// Seconds from the first snapshot to the last.
    pub duration_seconds: f64,
    /// Flagged stacks first, then the largest others (at most 10 in all).
    pub stacks: Vec<BenchStack>,
    /// (seconds since the first snapshot, live heap bytes of all stacks) at every snapshot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub heap: Vec<(f64, u64)>,
    /// Where a service's resident memory went over the run (`run`): the kernel's split and
    /// the allocator's figures, the growth of each part.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub memory: Option<MemoryExplained>,
    /// (seconds since the first snapshot, resident set size in bytes) of a service (`run`),
    /// read by the tool as it ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub rss: Vec<(f64, u64)>,
    /// Flame graph and plot (flagged benches only).
    pub artifacts: BenchArtifacts,
    /// `unsettled-fails` applies to it: too short to judge fails the run.
    #[serde(skip_serializing_if = "is_false")]
    #[serde(default)]
    pub unsettled_fails: bool,
    /// A service under `run`, not a bench.
    #[serde(skip_serializing_if = "is_false")]
    #[serde(default)]
    pub service: bool,
    /// A service under `run` that was not checked (not started, never ready, its load
    /// failed, interrupted): `message` says why, and the run exits 2.
    #[serde(skip_serializing_if = "is_false")]
    #[serde(default)]
    pub not_checked: bool,
    /// The program's own collections whose length changed over the run, growing ones
    /// first: one whose length rose across both quarters of the later half, by more than
    /// the growth threshold (its entries times their size), is flagged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    pub collections: Vec<BenchCollection>,
}

/// One of the program's own collections over a bench's or a service's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchCollection {
    /// Which collection.
    #[serde(flatten)]
    pub collection: CollectionId,
    /// (seconds, length) at every snapshot where it could be read.
    pub series: Vec<(f64, i64)>,
    /// What its length rose by over the later half of the run.
    pub growth: i64,
    /// That rise divided by the later half's length.
    pub per_second: f64,
    /// Whether the growth rule flags it.
    pub flagged: bool,
    /// Its length after a service's load, when that snapshot was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub after: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_runs_say_their_status_by_name_and_keep_its_reason_through_a_merge() {
        let crashed = ExtraRuns {
            made: 2,
            in_all: 2,
            status: ExtraRunsStatus::Crashed("SIGSEGV".into()),
            detail: Some("the process died in the 3rd extra run: SIGSEGV".into()),
        };
        let json = serde_json::to_value(&crashed).unwrap();
        assert_eq!(json["status"], "crashed");
        assert_eq!(json["reason"], "SIGSEGV");
        assert_eq!(serde_json::from_value::<ExtraRuns>(json).unwrap(), crashed);

        let done = ExtraRuns {
            made: 3,
            in_all: 3,
            status: ExtraRunsStatus::Completed,
            detail: None,
        };
        let json = serde_json::to_value(&done).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"made": 3, "in_all": 3, "status": "completed"})
        );
        assert_eq!(serde_json::from_value::<ExtraRuns>(json).unwrap(), done);
    }
}
