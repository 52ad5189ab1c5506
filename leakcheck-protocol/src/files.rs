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
/// Appended to a dump's name: the reference cycles among the objects of that dump the
/// scan found unreachable (see [`crate::cycles`]).
pub const CYCLES: &str = ".cycles";
/// Appended to a dump's name: where the buffer of each collection of the table (see
/// [`crate::collections`]) is, and the stack that allocated it.
pub const COLLECTIONS: &str = ".collections";
/// Ends the name of a periodic dump the runtime names itself (`<prefix>.<pid>.<seq>.t.heap`,
/// in the shape of jemalloc's own periodic `<prefix>.<pid>.<seq>.m<n>.heap`): the tracker's,
/// and, beside a program's own jemalloc, both jemallocs' of one moment.
pub const TRACKED_PERIODIC: &str = ".t";
/// Appended to the dump prefix: the timeline of the periodic dumps (see [`crate::timeline`]).
pub const TIMELINE: &str = ".timeline";
/// Ends the name of an exit dump before [`HEAP`]: jemalloc's own
/// (`<prefix>.<pid>.<seq>.f.heap`), and the tracker's, named the same way.
pub const FINAL: &str = ".f";

/// Whether a dump's file name is an exit dump's.
pub fn is_final(name: &str) -> bool {
    name.strip_suffix(HEAP).is_some_and(|n| n.ends_with(FINAL))
}

/// The sequence number in a dump's file name: the number after its pid
/// (`<prefix>.<pid>.<seq>.<kind>.heap`), counted from the end, since a prefix may hold dots.
pub fn dump_seq(name: &str) -> Option<u64> {
    name.strip_suffix(HEAP)?.rsplit('.').nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_names_are_read_from_their_end() {
        assert_eq!(dump_seq("/w/service-preload.16853.15.t.heap"), Some(15));
        assert_eq!(dump_seq("bench.v1.2-preload.7.3.m2.heap"), Some(3));
        assert_eq!(dump_seq("x-preload.7.3.f.heap.paths"), None);
        assert_eq!(dump_seq("x-preload.heap"), None);
        assert!(is_final("j-preload.9.0.f.heap"));
        assert!(!is_final("j-preload.9.0.f.heap.paths"));
        assert!(!is_final("j-preload.9.1.t.heap"));
    }
}
