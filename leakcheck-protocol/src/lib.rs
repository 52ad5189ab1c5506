//! The contract between cargo-leakcheck and `leakcheck-runtime`, the library it preloads into
//! every test process. Both sides spell every name through this crate, and every text that
//! crosses the process boundary has one encoder and one decoder here:
//!
//! - [`env`]: the environment variables the tool sets and the runtime reads;
//! - [`children`]: what the processes a test starts say of themselves;
//! - [`record`]: the exit record the runtime writes line by line, and why a series of extra
//!   runs ended ([`record::End`]);
//! - [`died`]: the frame and signal an extra run died of, as the runtime saw them;
//! - [`drain`]: the deferred-reclamation runtimes the runtime drains before it measures;
//! - [`heap_v2`]: the lines of a heap dump, as jemalloc writes them and the runtime's tracker
//!   does;
//! - [`paths`]: the retention paths the reachability scan writes beside a dump;
//! - [`cycles`]: the reference cycles among the objects that scan found lost;
//! - [`files`]: the suffixes of the files the runtime writes beside a dump;
//! - [`settling`]: the rule that says whether extra runs settle a test;
//! - [`timeline`]: when each periodic heap dump was taken;
//! - [`slots`]: the table of where unoptimised functions keep their variables, which the
//!   tool writes from DWARF and the runtime reads when a test thread calls `exit`;
//! - [`collections`]: the table of the program's own collections (how to reach each one's
//!   length from a static or a thread-local), which the tool writes from DWARF and the
//!   runtime follows after every run.
//!
//! `no_std` and allocation-free: the runtime encodes from inside its exit handler, where the
//! allocator it replaces may be in any state.

#![no_std]

/// Where this crate's sources are (its manifest's directory), as cargo built it: the
/// registry's copy when the tool is installed from a registry, the workspace's in a checkout.
/// cargo-leakcheck's build script builds the runtime against the same sources through it.
pub const SOURCE_DIR: &str = env!("CARGO_MANIFEST_DIR");

pub mod children;
pub mod collections;
pub mod cycles;
pub mod died;
pub mod drain;
pub mod env;
pub mod files;
pub mod heap_v2;
pub mod paths;
pub mod record;
pub mod settling;
pub mod slots;
pub mod timeline;
mod words;

pub use words::{format_hex, format_u64, Sink};

/// The most extra runs one test process makes: the tool accepts no more in `leakcheck.toml`
/// or on the command line, and the runtime sizes its per-run tables with it.
pub const MAX_EXTRA_RUNS: u32 = 100;

#[cfg(test)]
extern crate std;
