//! How the files the runtime writes beside a dump prefix are named. The prefix is the tool's
//! (`<work dir>/<job>-<stem>`); these suffixes are shared.

/// Between the prefix and the run number of the dump written after each run:
/// `<prefix>.r<k>.heap`, `k` = 0 for the test's own run.
pub const RUN_DUMP: &str = ".r";
/// The extension of every heap dump, jemalloc's own included.
pub const HEAP: &str = ".heap";
/// Appended to a dump's name: the objects of that dump the reachability scan found
/// unreachable, by stack.
pub const UNREACHED: &str = ".unreached";
/// Appended to a dump's name: how the scan found each stack's reachable objects held.
pub const PATHS: &str = ".paths";
/// Ends the name of a periodic dump the runtime names itself (`<prefix>.<pid>.<seq>.t.heap`,
/// in the shape of jemalloc's own periodic `<prefix>.<pid>.<seq>.m<n>.heap`): the tracker's,
/// and, beside a program's own jemalloc, both jemallocs' of one moment.
pub const TRACKED_PERIODIC: &str = ".t";
/// Appended to the dump prefix: the timeline of the periodic dumps (see [`crate::timeline`]).
pub const TIMELINE: &str = ".timeline";
