//! What a test's processes left, read: everything its verdict is drawn from, and what is
//! known about its binary, shared by all its tests.

use crate::evidence::normalized::NormalizedProfile;
use crate::evidence::unreached::Lost;
use crate::evidence::{cycles, profile};
use crate::evidence::{Entry, ProcessResult};
use crate::model::{ExtraRunsStatus as Status, Method};
use std::collections::{BTreeMap, HashMap};

/// What is known about one test binary, shared by all its tests.
pub struct BinaryEvidence {
    /// The executable's path as it appears in /proc/pid/maps (canonical).
    pub exe: String,
    /// The harness-only baseline, when it could be taken and read.
    pub baseline: Option<NormalizedProfile>,
    /// The objects of the baseline nothing pointed to at its exit.
    pub baseline_unreached: Option<Lost>,
    /// Who hands out its Rust allocations.
    pub allocator: Allocator,
    /// Its collections, in the order of the runtime's table.
    pub collections: std::sync::Arc<crate::evidence::CollectionTable>,
}

/// Who hands out a binary's Rust allocations.
pub enum Allocator {
    /// The system allocator: malloc, which the runtime profiles.
    Malloc,
    /// A `#[global_allocator]` of its own. `own_jemalloc`: its baseline wrote dumps of its
    /// own jemalloc (tikv-jemallocator), which are read with the runtime's. `ever_allocated`:
    /// every stack its baseline ever allocated at, with its accumulated counts as its live
    /// ones (empty without a baseline), where a call into malloc from it would show.
    Own {
        own_jemalloc: bool,
        ever_allocated: Vec<NormalizedProfile>,
    },
}

/// Why a process's heap dumps could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The process ended without writing its exit dump.
    #[error("the process wrote no heap dump")]
    NoExitDump,
    /// An extra run's dump is missing (1-based run number).
    #[error("the heap dump after extra run {0} is missing")]
    NoRunDump(usize),
    /// A dump could not be read or parsed (the error names the file and line).
    #[error(transparent)]
    Unreadable(#[from] profile::ProfileError),
}

/// A profiled process's dumps and what the runtime wrote beside them, read.
pub struct Dumps {
    /// After the test's own run: the runtime's dump merged with the binary's own jemalloc's.
    pub own: NormalizedProfile,
    /// After each extra run, in order; an error when one is missing or unreadable.
    pub runs: Result<Vec<NormalizedProfile>, DumpError>,
    /// The objects of the own run's dump that nothing pointed to, when the scan wrote them
    /// and saw every object (not so for a binary with its own jemalloc).
    pub own_lost: Option<Lost>,
    /// Retention paths of the own run's dump.
    pub own_paths: Option<Vec<crate::evidence::paths::HeldPath>>,
    /// Retention paths of the last extra run's dump.
    pub last_run_paths: Option<Vec<crate::evidence::paths::HeldPath>>,
    /// The reference cycles among the own run's dump's lost objects.
    pub own_cycles: Option<cycles::Cycles>,
    /// The same after the last extra run.
    pub last_run_cycles: Option<cycles::Cycles>,
    /// The stack that allocated each collection's buffer as the last run left it, by the
    /// collection's index (see [`crate::evidence::sites::parse_sites`]).
    pub sites: HashMap<u32, crate::evidence::sites::BufferSite>,
}

/// Everything one test's verdict is drawn from.
pub struct TestEvidence<'a> {
    /// The process the verdict is drawn from (its `end` is how the test's own run ended).
    pub result: &'a ProcessResult,
    /// How the verdict is reached.
    pub method: Method,
    /// How its extra runs went.
    pub extra_runs: &'a ExtraRunsOutcome,
    /// The entry point its extra runs called, when found.
    pub entry: Option<&'a Entry>,
    /// Its counting-pass process, when it had one apart from `result`.
    pub counting: Option<&'a ProcessResult>,
    /// The last lines of its stderr, formatted to follow a message (see
    /// [`crate::evidence::stderr_tail`]).
    pub stderr_tail: String,
    /// Its dumps, for a profiled test.
    pub dumps: Option<Result<Dumps, DumpError>>,
    /// The processes its processes started (see [`children`]).
    pub children: Vec<ChildEvidence>,
    /// The processes of the build's executables that every test of the run started, with
    /// what each lost: what a loss of this test's processes is compared with.
    pub suite: &'a SuiteProcesses,
    /// Where an extra run of one of its processes died, when the runtime saw it.
    pub died: Option<crate::evidence::died::Died>,
}

/// The scanned processes of the build's executables that the run's tests started, by
/// executable: a loss the same in every one of them, whichever test started it and for
/// what, is the program's loss once per process, not one that grows with its work.
#[derive(Debug, Default)]
pub struct SuiteProcesses {
    by_exe: BTreeMap<String, Vec<SuiteProcess>>,
}

/// One scanned process of the run.
#[derive(Debug)]
pub struct SuiteProcess {
    /// The test that started it (its binary's id and its name).
    pub test: String,
    /// What nothing reached when it ended.
    pub lost: Lost,
}

impl SuiteProcesses {
    /// No process of the run to compare with (a golden case's replay): each test's own
    /// processes are all there is.
    #[cfg(test)]
    pub fn none() -> &'static SuiteProcesses {
        static NONE: SuiteProcesses = SuiteProcesses {
            by_exe: BTreeMap::new(),
        };
        &NONE
    }

    /// Adds the scanned processes of the build's executables that test `test` started.
    pub fn add(&mut self, test: &str, children: Vec<ChildEvidence>) {
        for c in children {
            if let (true, Some(lost)) = (c.checked, c.lost) {
                self.by_exe.entry(c.exe).or_default().push(SuiteProcess {
                    test: test.to_string(),
                    lost,
                });
            }
        }
    }

    /// The run's scanned processes of `exe`.
    pub fn of(&self, exe: &str) -> &[SuiteProcess] {
        self.by_exe.get(exe).map_or(&[], Vec::as_slice)
    }

    /// Every executable the run's scanned processes ran.
    pub fn executables(&self) -> impl Iterator<Item = &str> {
        self.by_exe.keys().map(String::as_str)
    }

    /// Adds one scanned process of `exe`, started by `test` (read back from a file).
    pub fn add_process(&mut self, exe: &str, test: &str, lost: Lost) {
        self.by_exe
            .entry(exe.to_string())
            .or_default()
            .push(SuiteProcess {
                test: test.to_string(),
                lost,
            });
    }
}

/// What the extra runs of one process came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraRunsOutcome {
    /// Extra runs that returned normally (each measured).
    pub made: u32,
    /// Why no more.
    pub status: Status,
}

impl ExtraRunsOutcome {
    /// No extra runs, for this reason.
    pub fn none(status: Status) -> ExtraRunsOutcome {
        ExtraRunsOutcome { made: 0, status }
    }

    /// Whether every extra run asked for was made, so the measurements can be judged.
    pub fn usable(&self) -> bool {
        self.status == Status::Completed && self.made > 0
    }
}

/// One process a test started, as its record and its scan said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildEvidence {
    /// Its executable, as `/proc/<pid>/exe` named it.
    pub exe: String,
    /// The test's run under way when it started: 0 for its own run, `k` for extra run `k`,
    /// in the process `pass` of the test's processes.
    pub run: u32,
    /// Which of the test's processes started it (0: the first, the counting one when there
    /// were two), so that runs of two processes are not taken for one.
    pub pass: u32,
    /// It is the build's, and was tracked.
    pub checked: bool,
    /// What nothing reached when it ended (at its exit, or when it was asked before it was
    /// stopped): `None` when it left no scan (killed by a signal it was not asked to scan
    /// before, crashed, or did not answer), or the scan could not be read.
    pub lost: Option<Lost>,
}
