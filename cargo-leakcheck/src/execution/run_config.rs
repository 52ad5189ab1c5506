//! What every test process of a run is started with, and which tests the run selects.

use crate::config::Layers;
use crate::execution::cargo::Workspace;
use crate::execution::partition::Partition;
use std::path::Path;
use std::time::Duration;

/// libtest options the user passed after `--`, split from plain filters.
#[derive(Clone, Debug, Default)]
pub struct TestFilter {
    /// Everything to pass to `--list` (filters, `--exact`, `--skip X`, …).
    pub list_args: Vec<String>,
    /// `--ignored`: run only ignored tests.
    pub ignored_only: bool,
    /// `--include-ignored`: run ignored tests too.
    pub include_ignored: bool,
    /// `--partition`: the share of the listed tests this run checks.
    pub partition: Option<Partition>,
}

impl TestFilter {
    /// Splits the arguments given after `--`.
    pub fn from_args(args: &[String]) -> Self {
        let mut f = TestFilter::default();
        for a in args {
            match a.as_str() {
                "--ignored" => f.ignored_only = true,
                "--include-ignored" => f.include_ignored = true,
                _ => f.list_args.push(a.clone()),
            }
        }
        f
    }
}

/// Settings for running.
pub struct RunConfig<'a> {
    /// The workspace (for package directories).
    pub workspace: &'a Workspace,
    /// The preloaded runtime.
    pub runtime: &'a Path,
    /// Where dumps and output go.
    pub work_dir: &'a Path,
    /// Parallel processes.
    pub jobs: usize,
    /// Timeout of processes that run no test (baselines); none: no limit.
    pub timeout: Option<Duration>,
    /// What each test's settings (timeout, extra runs, whether process-lifetime
    /// memory fails it) are computed from, once per test as it is listed.
    pub settings: Layers<'a>,
    /// Filters from the command line.
    pub filter: &'a TestFilter,
    /// A target runner every test binary runs under, program first (empty: none): the
    /// one a user configured for cargo (an emulator, a sandbox), kept under nextest.
    pub wrapper: &'a [String],
    /// Print commands.
    pub verbose: bool,
    /// Show progress on stderr (off where stderr is a test's own, under nextest).
    pub progress: bool,
    /// libtest's layout as another binary of the build proved it (see
    /// [`crate::execution::inspect::binaries`]).
    pub known_layout: Option<crate::execution::entry::Layout>,
    /// Where the processes of one nextest run keep what listing and reading a binary found
    /// (see [`crate::execution::memo`]); None: each run lists and reads for itself.
    pub memo: Option<&'a Path>,
    /// How long each test took in the previous run.
    pub history: &'a crate::execution::history::History,
}
