//! Building and running, collecting evidence and deciding nothing: `cargo` builds the
//! executables; `inspect` reads each once (into `facts`; `entry` finds a test's function in
//! libtest's table, `reclaimers` the garbage collectors the runtime drains); `runtime`
//! provides the profiling runtime and `preload` what it is given and writes; `passes`
//! decides which runs a test gets and `runner` runs each test in its own process with the
//! runtime preloaded (`slots` decides how many run at once, `history` which start first,
//! `extra_runs` how long the runtime waits for a run's threads); `load` reads what a
//! process left into evidence and `verdicts` hands it to the analysis; `nextest_list` reads
//! which tests a nextest run selected, and `memo` keeps what listing and reading a binary found
//! for the other processes of one nextest run; `interrupt` stops every child on Ctrl-C and `lock`
//! keeps two runs off one target directory; `symbolize` and `data_symbols` read the
//! binaries' DWARF and symbol tables for the analysis (`binary_symbols::FromFiles`);
//! `capture` records golden cases.

pub(crate) mod beside;
pub(crate) mod binary_symbols;
pub(crate) mod cancel;
pub(crate) mod cargo;
pub(crate) mod collections;
pub(crate) mod data_symbols;
pub(crate) mod doctests;
pub(crate) mod entry;
pub(crate) mod extra_runs;
pub(crate) mod facts;
pub(crate) mod history;
pub(crate) mod inspect;
pub(crate) mod interrupt;
pub(crate) mod listing;
pub(crate) mod live_slots;
pub(crate) mod lock;
pub(crate) mod memo;
pub(crate) mod nextest_list;
pub(crate) mod partition;
pub(crate) mod passes;
pub(crate) mod preload;
pub(crate) mod process;
pub(crate) mod progress;
pub(crate) mod reclaimers;
pub(crate) mod run_config;
pub(crate) mod runner;
pub(crate) mod runtime;
pub(crate) mod service;
pub(crate) mod shared_file;
pub(crate) mod slots;
pub(crate) mod snapshots;
pub(crate) mod symbolize;
