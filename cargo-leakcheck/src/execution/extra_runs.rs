//! Extra runs of a test inside its own process: how long the runtime waits for a run's
//! threads. The rules that read the runs' evidence live in
//! [`crate::analysis::settling`]; this is how they work together.
//!
//! After libtest's `main` returns, the runtime calls the test's entry point again (see the
//! runtime's `rerun` module and [`crate::execution::entry`]) and measures after each extra run, once
//! the threads the run started are gone:
//! - **Counting pass**: each extra run's allocations, whichever thread makes them, go to an
//!   arena of that run, so what the run left behind is counted exactly, however much
//!   other memory comes and goes meanwhile. A test that leaks leaves something behind on
//!   every run. So the test is settled, without taking stacks, as soon as one extra run has
//!   left nothing behind and the process's live memory has not grown on every run either
//!   ([`crate::analysis::settling::settled`], applied by [`crate::analysis::counting`]):
//!   whatever its first run retained is state the process keeps (a pool, a logger, a table
//!   built once). Up to [`COUNTING_RUNS_FACTOR`] × N runs are made
//!   (N = `extra-runs`), so that state warming up over several runs (a pool whose workers
//!   each allocate on their first job) has time to settle. No clock ends a series: a test is
//!   run again whatever its runs cost, so its verdict does not depend on the machine's speed
//!   or load.
//! - **Stacks pass**, for the tests every extra run of which left something behind: a heap
//!   dump after the first run and after each of N extra runs. A stack is a leak when it
//!   holds more after *every* extra run than before it ([`grows_every_run`]); a stack that
//!   the first run filled and that then stops growing (a cache that warmed, a buffer reused
//!   at its size, garbage freed a run or two later) is process-lifetime state.
//!
//! Frames of the first run and of the extra runs differ outside the test body (libtest's
//! frames, then the runtime's), so stacks are compared cut at the call of the test's entry
//! point ([`cut_at_entry`]).

pub use crate::analysis::next::{interpret, runs_after_threads_left, stacks_runs};
pub use crate::evidence::test_run::ExtraRunsOutcome;
pub use crate::model::ExtraRunsStatus as Status;

/// How long the runtime waits after a run for the threads it started to be gone (once a
/// run's threads did not all end in that time, later runs wait 20 ms).
pub const SETTLE_MS: u64 = 200;

/// Once per test, after its last extra run, how long the runtime waits for the threads the
/// runs started to end before it measures what they left for the last time: a thread that
/// ends soon after its run (a watchdog, a timer) holds memory only until then; one still
/// running after this wait is taken to run for good.
pub const GRACE_MS: u64 = 2000;

/// The counting pass may make this many times the configured extra runs, to let state that
/// warms up over several runs (a pool whose workers each allocate on their first job) settle.
pub const COUNTING_RUNS_FACTOR: u32 = 2;
