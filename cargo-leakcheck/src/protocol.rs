//! The contract between cargo-leakcheck and the runtime it preloads into test processes:
//! environment variable names, dump file naming and profiling settings.

use std::path::{Path, PathBuf};

/// Names the `prof_prefix` of the preloaded runtime's own jemalloc. The runtime moves its
/// dumps there with the `prof.prefix` mallctl, so they never collide with the dumps of a
/// tikv-jemallocator global allocator in the test binary, which reads the same
/// `_RJEM_MALLOC_CONF`.
pub const RUNTIME_PREFIX_ENV: &str = "LEAKCHECK_RUNTIME_PREFIX";

/// The configuration variable of every prefixed (`_rjem_`) jemalloc: the runtime's, and
/// a tikv-jemallocator global allocator's.
pub const MALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

/// File-name stem of the runtime's dumps (everything malloc sees).
pub const PRELOAD_STEM: &str = "preload";
/// File-name stem of the dumps of a jemalloc linked into the test binary itself.
pub const APP_STEM: &str = "jemalloc";

/// Names the file the runtime writes its exit counters to (counting mode).
pub const COUNTS_ENV: &str = "LEAKCHECK_COUNTS_FILE";

/// What a test process is run for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Profiling off; the runtime reports how many objects and bytes allocated off the
    /// main thread are still live at exit (exact, nearly free).
    Count,
    /// Heap profiling with stacks; jemalloc writes an exit dump.
    #[default]
    Stacks,
    /// Sampled heap profiling (`lg_sample`) with dumps every `interval` milliseconds, for
    /// benchmarks: growth accumulates, so sampling is enough.
    Periodic,
}

/// Names the dump interval (milliseconds) of the runtime's periodic dumps.
pub const INTERVAL_ENV: &str = "LEAKCHECK_DUMP_INTERVAL_MS";

/// Every dump the process of a job wrote under a prefix (periodic `.m<n>.heap` and final
/// `.f.heap`; `<prefix>.<pid>.<seq>.…`), in the order jemalloc wrote them (its sequence
/// number). Only the job's own process writes under its prefix: the runtime stops the
/// preload from reaching child processes.
pub fn all_dumps(dir: &Path, job: &str, stem: &str) -> Vec<PathBuf> {
    let start = format!("{job}-{stem}.");
    let mut found: Vec<(u64, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.to_string();
                let rest = name.strip_prefix(&start)?;
                let seq: u64 = rest.split('.').nth(1)?.parse().ok()?;
                name.ends_with(".heap").then_some((seq, p))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// How one test process is profiled. The runner picks this per process: a counting pass
/// over every test, then stacks only for the tests that need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileSettings {
    /// Counting or stacks.
    pub mode: Mode,
    /// log2 of the mean sampling interval in bytes; 0 (the default) records every
    /// allocation exactly.
    pub lg_sample: u8,
}

impl ProfileSettings {
    /// The `_RJEM_MALLOC_CONF` value for a process whose dumps go to `dir/<job>-<stem>.*`.
    ///
    /// `prof_accum` keeps counts of allocations that were freed again: that is how the
    /// analysis tells "this process allocated through malloc and freed everything" apart
    /// from "this process's Rust allocations never reached malloc" (a custom allocator).
    pub fn malloc_conf(&self, dir: &Path, job: &str) -> String {
        if self.mode == Mode::Periodic {
            return format!(
                "prof:true,prof_active:true,lg_prof_sample:{},prof_final:true,prof_prefix:{}",
                self.lg_sample,
                dump_prefix(dir, job, APP_STEM).display()
            );
        }
        if self.mode == Mode::Count {
            // No thread caches: the per-arena statistics the count is read from then see
            // every allocation and free as it happens.
            return "prof:false,tcache:false".into();
        }
        format!(
            "prof:true,prof_active:true,prof_accum:true,lg_prof_sample:{},prof_final:true,prof_prefix:{}",
            self.lg_sample,
            dump_prefix(dir, job, APP_STEM).display()
        )
    }
}

/// The `prof_prefix` a job's dumps of one kind are written under.
pub fn dump_prefix(dir: &Path, job: &str, stem: &str) -> PathBuf {
    dir.join(format!("{job}-{stem}"))
}

/// The final (`prof_final`) dumps a process wrote under a prefix: jemalloc names them
/// `<prefix>.<pid>.<seq>.f.heap`.
pub fn final_dumps(dir: &Path, job: &str, stem: &str, pid: u32) -> Vec<PathBuf> {
    let start = format!("{job}-{stem}.{pid}.");
    let mut found: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&start) && n.ends_with(".f.heap"))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found
}

/// Exit counters written by the runtime in counting mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitCounts {
    /// Objects allocated off the main thread and still live at exit.
    pub objects: i64,
    /// Their bytes (jemalloc size classes).
    pub bytes: i64,
}

/// Parses the counters file: `<objects> <bytes> <main arena>`. None when it is missing,
/// malformed, or the runtime could not give the main thread an arena of its own (then the
/// counts prove nothing).
pub fn parse_counts(text: &str) -> Option<ExitCounts> {
    let mut it = text.split_whitespace().map(str::parse::<i64>);
    let (objects, bytes, arena) = (it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?);
    if it.next().is_some() || arena < 0 {
        return None;
    }
    Some(ExitCounts { objects, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_only_when_complete_and_bound() {
        assert_eq!(
            parse_counts("0 0 4\n"),
            Some(ExitCounts {
                objects: 0,
                bytes: 0
            })
        );
        assert_eq!(
            parse_counts("1 8 4\n"),
            Some(ExitCounts {
                objects: 1,
                bytes: 8
            })
        );
        assert_eq!(
            parse_counts("0 0 -1\n"),
            None,
            "the main thread was not bound"
        );
        assert_eq!(parse_counts("0 0"), None);
        assert_eq!(parse_counts(""), None);
        assert_eq!(parse_counts("0 x 4"), None);
        assert_eq!(parse_counts("0 0 4 9"), None);
    }

    #[test]
    fn counting_turns_profiling_and_thread_caches_off() {
        let count = ProfileSettings {
            mode: Mode::Count,
            lg_sample: 0,
        };
        assert_eq!(
            count.malloc_conf(Path::new("/d"), "j"),
            "prof:false,tcache:false"
        );
        let stacks = ProfileSettings::default();
        let conf = stacks.malloc_conf(Path::new("/d"), "j");
        assert!(
            conf.starts_with("prof:true,")
                && conf.contains("lg_prof_sample:0")
                && conf.ends_with("prof_prefix:/d/j-jemalloc"),
            "{conf}"
        );
    }
}
