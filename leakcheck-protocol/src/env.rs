//! The environment variables cargo-leakcheck sets for a test process and the runtime reads.

use core::ffi::CStr;

/// One variable's name, NUL-terminated for `getenv` in the runtime and as text for the tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var(&'static CStr);

impl Var {
    /// The name as the runtime passes it to `getenv`.
    pub const fn c_name(self) -> &'static CStr {
        self.0
    }

    /// The name as the tool sets it.
    pub const fn name(self) -> &'static str {
        match core::str::from_utf8(self.0.to_bytes()) {
            Ok(name) => name,
            Err(_) => panic!("variable names are ASCII"),
        }
    }
}

/// The value of a switch that is on (`LEAKCHECK_COUNTING=1`).
pub const ON: &str = "1";

/// The dynamic loader's list of libraries to load first: the tool puts the runtime in it, and
/// the runtime takes itself out of it so that the test's own child processes run plain.
pub const PRELOAD: Var = Var(c"LD_PRELOAD");
/// The configuration variable of every prefixed (`_rjem_`) jemalloc: the runtime's, and a
/// tikv-jemallocator global allocator's in the test binary.
pub const MALLOC_CONF: Var = Var(c"_RJEM_MALLOC_CONF");
/// The `prof_prefix` of the runtime's own jemalloc. The runtime moves its dumps there with the
/// `prof.prefix` mallctl, so they never collide with those of a tikv-jemallocator global
/// allocator, which reads the same `_RJEM_MALLOC_CONF`.
pub const RUNTIME_PREFIX: Var = Var(c"LEAKCHECK_RUNTIME_PREFIX");
/// The file the runtime writes its exit record to (see [`crate::record`]).
pub const RECORD: Var = Var(c"LEAKCHECK_RECORD");
/// [`ON`] in counting mode: the runtime binds the main thread to an arena of its own and
/// records exact live counts.
pub const COUNTING: Var = Var(c"LEAKCHECK_COUNTING");
/// [`ON`] in stacks mode: the runtime tracks every allocation with its stack itself and
/// writes the dumps in jemalloc's format.
pub const TRACK: Var = Var(c"LEAKCHECK_TRACK");
/// With [`TRACK`]: the mean number of bytes allocated between two allocations whose stack is
/// taken, decimal (`cargo leakcheck run`; absent or `1`: every stack). Every allocation is
/// still tracked by address, so the reachability scan walks the whole heap; the dumps count
/// the sampled ones only, as jemalloc's sampled dumps do (`heap_v2/<mean>`).
pub const TRACK_SAMPLE: Var = Var(c"LEAKCHECK_TRACK_SAMPLE");
/// The test's entry point, a hexadecimal address in the executable image.
pub const RERUN_ENTRY: Var = Var(c"LEAKCHECK_RERUN_ENTRY");
/// [`ON`] when the entry point is a `fn()` (a doc-test's `main`), not libtest's
/// `fn() -> Result<(), String>`.
pub const RERUN_ENTRY_UNIT: Var = Var(c"LEAKCHECK_RERUN_ENTRY_UNIT");
/// With [`RERUN_ENTRY_UNIT`]: the address of a doc-test's own `main`, hexadecimal in the
/// executable image, when the entry point is std's `lang_start` closure that calls it (a
/// `main` that returns a value); the closure is called with this address as what it holds.
pub const RERUN_ENTRY_MAIN: Var = Var(c"LEAKCHECK_RERUN_ENTRY_MAIN");
/// [`ON`] when the test's own run is on the process's main thread (a doc-test), whose arena
/// no count includes: what that run retained is not known, so the extra runs are made
/// whatever its count says.
pub const FIRST_RUN_ON_MAIN: Var = Var(c"LEAKCHECK_FIRST_RUN_ON_MAIN");
/// The executable's build id, hexadecimal: the runtime refuses an entry point of another file.
pub const RERUN_BUILD_ID: Var = Var(c"LEAKCHECK_RERUN_BUILD_ID");
/// How many extra runs to make at most, decimal.
pub const EXTRA_RUNS: Var = Var(c"LEAKCHECK_EXTRA_RUNS");
/// How long to wait after a run for its threads to be gone, milliseconds.
pub const RERUN_SETTLE_MS: Var = Var(c"LEAKCHECK_RERUN_SETTLE_MS");
/// Once, after the last extra run, how long to wait for the runs' threads, milliseconds.
pub const RERUN_GRACE_MS: Var = Var(c"LEAKCHECK_RERUN_GRACE_MS");
/// Where std records the thread ending the process (hexadecimal address in the image), for
/// the runtime to clear during extra runs.
pub const RERUN_EXIT_GUARD: Var = Var(c"LEAKCHECK_RERUN_EXIT_GUARD");
/// std's panic hook (`std::panicking::HOOK`), `ADDRESS SIZE` in hexadecimal (an address in
/// the image): libtest puts the default hook back once its tests have run, freeing a hook a
/// test installed before anything is measured, so the runtime looks at the hook itself as
/// the test's thread is joined.
pub const PANIC_HOOK: Var = Var(c"LEAKCHECK_PANIC_HOOK");
/// The table of live stack slots (see [`crate::slots`]) for the scan of a thread that called
/// `exit`.
pub const LIVE_SLOTS: Var = Var(c"LEAKCHECK_LIVE_SLOTS");
/// The address of the test binary's own `_rjem_mallctl` (tikv-jemallocator), hexadecimal.
pub const APP_MALLCTL: Var = Var(c"LEAKCHECK_APP_MALLCTL");
/// Where that jemalloc's dumps between runs go (a prefix, like `prof_prefix`).
pub const APP_PREFIX: Var = Var(c"LEAKCHECK_APP_PREFIX");
/// The interval of the runtime's periodic dumps, milliseconds (benchmarks).
pub const DUMP_INTERVAL_MS: Var = Var(c"LEAKCHECK_DUMP_INTERVAL_MS");
/// A file the tool creates to ask a process with periodic dumps under exact tracking
/// (`cargo leakcheck run`) to scan for reachability after its next dump; the runtime
/// deletes it once the scan's files are written.
pub const SCAN_REQUEST: Var = Var(c"LEAKCHECK_SCAN_REQUEST");
/// The deferred-reclamation runtimes' collectors in the test binary, each with its kind (see
/// [`crate::drain`]), whose garbage the runtime drains before it measures a run.
pub const DRAIN: Var = Var(c"LEAKCHECK_DRAIN");
/// `0` leaves retention paths out of the reachability scan (for the benchmark that measures
/// what they cost).
pub const PATHS: Var = Var(c"LEAKCHECK_PATHS");
/// Counting mode, for a test binary with a `#[global_allocator]` of its own: Rust's
/// allocation shims `__rust_alloc` and `__rust_dealloc` (hexadecimal addresses in the image,
/// `ALLOC DEALLOC`), which the runtime calls at exit to find out whether that allocator
/// reaches this runtime's `malloc` (see [`crate::record::Entry::Allocator`]).
pub const ALLOC_PROBE: Var = Var(c"LEAKCHECK_ALLOC_PROBE");

/// The directory where the processes a test starts say what they are and, when they are
/// the build's, what they left at their exit (see [`crate::children`]). The test's process
/// keeps it, and [`BUILT`], for them, and takes its own variables out of their way.
pub const CHILDREN: Var = Var(c"LEAKCHECK_CHILDREN");
/// The build's target directory: a process the test starts from an executable under it is
/// checked.
pub const BUILT: Var = Var(c"LEAKCHECK_BUILT");
/// Set by the test's process, in the environment of the processes it starts: its pid. A
/// process that finds it is not the one the tool started, whatever other variables of the
/// tool it inherited. The tool never hands it to a process of its own.
pub const PARENT: Var = Var(c"LEAKCHECK_PARENT");

/// The table of the program's own collections (see [`crate::collections`]), whose lengths
/// the runtime reads after every run (and with every periodic dump).
pub const COLLECTIONS: Var = Var(c"LEAKCHECK_COLLECTIONS");

/// Every variable of the contract.
pub const ALL: [Var; 28] = [
    MALLOC_CONF,
    RUNTIME_PREFIX,
    RECORD,
    COUNTING,
    TRACK,
    TRACK_SAMPLE,
    RERUN_ENTRY,
    RERUN_ENTRY_UNIT,
    RERUN_ENTRY_MAIN,
    FIRST_RUN_ON_MAIN,
    RERUN_BUILD_ID,
    EXTRA_RUNS,
    RERUN_SETTLE_MS,
    RERUN_GRACE_MS,
    RERUN_EXIT_GUARD,
    PANIC_HOOK,
    LIVE_SLOTS,
    APP_MALLCTL,
    APP_PREFIX,
    DUMP_INTERVAL_MS,
    SCAN_REQUEST,
    PATHS,
    DRAIN,
    ALLOC_PROBE,
    COLLECTIONS,
    CHILDREN,
    BUILT,
    PARENT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_the_text_matches_the_c_name() {
        for (i, a) in ALL.iter().enumerate() {
            assert_eq!(a.name().as_bytes(), a.c_name().to_bytes());
            assert!(a
                .name()
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b == b'_'));
            for b in &ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
    }
}
