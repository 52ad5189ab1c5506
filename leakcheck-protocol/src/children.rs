//! The processes a test starts. The runtime is preloaded into every one of them (they inherit
//! `LD_PRELOAD`), and each says, in the directory [`crate::env::CHILDREN`] names, what it is:
//! a record `<pid>.<n>.child` (the first `n` free: a process that runs another executable
//! keeps its pid) with the [`Line`]s below. One started from an executable of the build
//! ([`crate::env::BUILT`]) is checked: it tracks its allocations, and at its exit writes a
//! dump of what it left and the reachability scan's files beside it, under the prefix
//! `<pid>.<n>` (`<pid>.<n>.<pid>.0.f.heap`, as jemalloc names an exit dump). The test's own
//! process writes the run under way (0 for its own run, `k` for extra run `k`) to the file
//! [`RUN_FILE`] of that directory before each run, which a process reads as it starts.
//!
//! A checked process that is to be stopped (a test kills the server it started, or leaves it
//! running and the tool ends it) is first asked, with a real-time signal
//! ([`SCAN_SIGNAL_BELOW_MAX`]), to write the same dump and scan as at its exit, and says it
//! has with the file [`SCANNED`]; whoever stops it waits for that.

use crate::words::{display_by_encode, put_num};
use crate::Sink;

/// The end of a process's record's name.
pub const RECORD: &str = ".child";
/// The end of the name of the file a checked process writes once the scan it was asked for
/// (with [`scan_signal`]) is written: the process may then be stopped.
pub const SCANNED: &str = ".scanned";

/// How far below the highest real-time signal the one is that asks a checked process to
/// dump and scan what it holds now, before it is stopped: a process killed (`SIGKILL`, as
/// `Child::kill` sends) never reaches its exit handler.
pub const SCAN_SIGNAL_BELOW_MAX: i32 = 5;
/// The file of the directory that says which run of the test is under way.
pub const RUN_FILE: &str = "run";

/// One line of a process's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// `exe <path>`: the executable it runs.
    Exe(&'a str),
    /// `run <k>`: the test's run under way when it started.
    Run(u32),
    /// `checked`: it is the build's and tracks its allocations.
    Checked,
}

impl Line<'_> {
    pub fn encode(&self, out: &mut impl Sink) {
        match self {
            Line::Exe(path) => {
                out.put("exe ");
                out.put(path);
            }
            Line::Run(k) => {
                out.put("run");
                put_num(out, i64::from(*k));
            }
            Line::Checked => out.put("checked"),
        }
    }

    /// Reads one line; None for a line of another kind (a later runtime's).
    pub fn parse(line: &str) -> Option<Line<'_>> {
        if let Some(path) = line.strip_prefix("exe ") {
            return Some(Line::Exe(path));
        }
        if let Some(k) = line.strip_prefix("run ") {
            return k.trim().parse().ok().map(Line::Run);
        }
        (line.trim() == "checked").then_some(Line::Checked)
    }
}

display_by_encode!(Line<'_>);

/// Whether an executable is one of the build's: under its target directory `built`.
pub fn is_built(exe: &[u8], built: &[u8]) -> bool {
    let built = match built.last() {
        Some(b'/') => &built[..built.len() - 1],
        _ => built,
    };
    !built.is_empty()
        && exe.len() > built.len() + 1
        && exe.starts_with(built)
        && exe[built.len()] == b'/'
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn lines_read_back_as_written() {
        for line in [
            Line::Exe("/w/target/debug/wc2"),
            Line::Run(3),
            Line::Checked,
        ] {
            let text = line.to_string();
            assert_eq!(Line::parse(&text), Some(line), "{text}");
        }
        assert_eq!(Line::Exe("/a b/c").to_string(), "exe /a b/c");
        assert_eq!(Line::parse("later 1"), None);
    }

    #[test]
    fn the_build_s_executables_are_those_under_its_target_directory() {
        assert!(is_built(b"/w/target/debug/wc2", b"/w/target"));
        assert!(is_built(b"/w/target/debug/wc2", b"/w/target/"));
        assert!(!is_built(b"/w/target2/debug/wc2", b"/w/target"));
        assert!(!is_built(b"/bin/sh", b"/w/target"));
        assert!(!is_built(b"/w/target", b"/w/target"));
        assert!(!is_built(b"/bin/sh", b""));
    }
}
