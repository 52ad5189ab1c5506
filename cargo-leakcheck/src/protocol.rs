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

/// How one test process is profiled. The runner picks this per process, so a cheaper
/// first pass can be added without changing the rest of the pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileSettings {
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
