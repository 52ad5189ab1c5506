//! The tool's side of the contract with the runtime it preloads into test processes: dump
//! file naming and profiling settings. The names and texts both sides spell are in the
//! `leakcheck_protocol` crate.

pub use crate::evidence::Record;
use leakcheck_protocol::{env, files};
use std::path::{Path, PathBuf};

/// File-name stem of the runtime's dumps (everything malloc sees).
pub const PRELOAD_STEM: &str = "preload";
/// File-name stem of the dumps of a jemalloc linked into the test binary itself.
pub const APP_STEM: &str = "jemalloc";

/// What a test process is run for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProfileMode {
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
                let name = p.file_name()?.to_str()?;
                name.strip_prefix(&start)?;
                // The final dump is the last, whatever its number: when the runtime names
                // the periodic dumps itself, jemalloc's own count starts it at 0.
                let seq = match files::is_final(name) {
                    true => u64::MAX,
                    false => dump_seq(&p)?,
                };
                name.ends_with(files::HEAP).then_some((seq, p))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The variables that tell the runtime where a program's own jemalloc (tikv-jemallocator) is
/// (`_rjem_mallctl` at `mallctl` in the build `build_id`) and where its dumps go, beside the
/// job's (see [`snapshot_parts`]).
pub fn own_allocator_env(
    (mallctl, build_id): &(u64, String),
    work_dir: &Path,
    job: &str,
) -> [(env::Var, String); 3] {
    [
        (env::APP_MALLCTL, format!("{mallctl:x}")),
        (env::RERUN_BUILD_ID, build_id.clone()),
        (
            env::APP_PREFIX,
            dump_prefix(work_dir, job, APP_STEM).display().to_string(),
        ),
    ]
}

/// The dumps of one moment of a job's process: its runtime's `dump`, and the dump its own
/// jemalloc (tikv-jemallocator) wrote beside it under the same sequence number, when there
/// is one (`<job>-jemalloc.<pid>.<seq>.t.heap` beside `<job>-preload.<pid>.<seq>.t.heap`).
pub fn snapshot_parts(dump: &Path, job: &str) -> Vec<PathBuf> {
    let own = format!("{job}-{PRELOAD_STEM}.");
    let companion = dump
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(&own))
        .map(|rest| dump.with_file_name(format!("{job}-{APP_STEM}.{rest}")))
        .filter(|c| c.exists());
    std::iter::once(dump.to_path_buf())
        .chain(companion)
        .collect()
}

/// The timeline of a job's periodic dumps (`leakcheck_protocol::timeline`).
pub fn timeline(dir: &Path, job: &str) -> PathBuf {
    let mut path = dump_prefix(dir, job, PRELOAD_STEM).into_os_string();
    path.push(leakcheck_protocol::files::TIMELINE);
    path.into()
}

/// A dump's sequence number: the number after its pid (`<prefix>.<pid>.<seq>.<kind>.heap`,
/// counted from the end, since a prefix may hold dots).
pub fn dump_seq(path: &Path) -> Option<u64> {
    files::dump_seq(path.file_name()?.to_str()?)
}

/// How one test process is profiled. The runner picks this per process: a counting pass
/// over every test, then stacks only for the tests that need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileSettings {
    /// Counting or stacks.
    pub mode: ProfileMode,
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
        if self.mode == ProfileMode::Periodic {
            return format!(
                "prof:true,prof_active:true,lg_prof_sample:{},prof_final:true,prof_prefix:{}",
                self.lg_sample,
                dump_prefix(dir, job, APP_STEM).display()
            );
        }
        if self.mode == ProfileMode::Count {
            // Thread caches on: the runtime takes them out of the count where it measures
            // (see the runtime's `arenas` module).
            return "prof:false".into();
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
                    .is_some_and(|n| n.starts_with(&start) && files::is_final(n))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found
}

/// The heap dump the runtime writes after the first run (`k` = 0) and after each extra run
/// `k`, for a job's dumps of one kind (`stem`).
pub fn run_dump(dir: &Path, job: &str, stem: &str, k: u32) -> PathBuf {
    use leakcheck_protocol::files::{HEAP, RUN_DUMP};
    dir.join(format!("{job}-{stem}{RUN_DUMP}{k}{HEAP}"))
}

/// Where the processes a test process starts say what they are (see
/// `leakcheck_protocol::children`).
pub fn children_dir(dir: &Path, job: &str) -> PathBuf {
    dir.join(format!("{job}.children"))
}

/// The processes a test process started, as their records in `dir` say; a record that
/// cannot be read is left out (a process killed as it wrote it), its dump found beside it
/// when it wrote one.
pub fn children(dir: &Path) -> Vec<crate::evidence::ChildProcess> {
    use leakcheck_protocol::children::{Line, RECORD};
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(RECORD) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut child = crate::evidence::ChildProcess {
            exe: String::new(),
            run: 0,
            checked: false,
            dump: None,
        };
        for line in text.lines().filter_map(Line::parse) {
            match line {
                Line::Exe(exe) => child.exe = exe.to_string(),
                Line::Run(k) => child.run = k,
                Line::Checked => child.checked = true,
            }
        }
        if child.exe.is_empty() {
            continue;
        }
        // `<pid>.<n>`: its exit dump is `<pid>.<n>.<pid>.0.f.heap`, as jemalloc names one.
        let pid = stem.split('.').next().unwrap_or_default();
        let dump = dir.join(format!("{stem}.{pid}.0{}{}", files::FINAL, files::HEAP));
        if child.checked && dump.is_file() {
            child.dump = Some(dump);
        }
        found.push(child);
    }
    found.sort_by(|a, b| (a.run, &a.exe).cmp(&(b.run, &b.exe)));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{End, ExitCounts, ExtraRun, FirstRun};

    #[test]
    fn the_own_runs_cost_parses() {
        let r = Record::parse("arena 9\nfirst 0 2 208 1\ncost 2500 1300\nend kept\n");
        assert_eq!(r.own_cost, Some((2500, 1300)));
        assert_eq!(r.end, Some(End::Kept));
    }

    #[test]
    fn the_own_run_drained_counts_and_one_a_drain_never_finished_still_says_it_passed() {
        let r = Record::parse(
            "arena 9\nfirst 0 6 1088 1\ndrained 0 5 896 2 4096\nfirst 0 1 192 1\ncost 5 3\nend settled\n",
        );
        let first = r.first.expect("the own run");
        assert_eq!(
            (first.status, first.live),
            (
                0,
                ExitCounts {
                    objects: 1,
                    bytes: 192
                }
            )
        );
        assert_eq!(r.drained.len(), 1);
        assert_eq!(r.drained_total().map(|d| d.objects), Some(5));
        // A deferred destructor that panicked in the drain aborted the process: the own run
        // had passed, as written before the drain.
        let cut = Record::parse("arena 9\nfirst 0 6 1088 1\n");
        assert_eq!(cut.first.map(|f| f.status), Some(0));
        assert_eq!(cut.end, None);
    }

    #[test]
    fn the_exit_dump_is_listed_last_whatever_its_number() {
        let dir = std::env::temp_dir().join(format!("leakcheck-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "j-preload.9.0.f.heap",
            "j-preload.9.2.t.heap",
            "j-preload.9.1.t.heap",
        ] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let names: Vec<String> = all_dumps(&dir, "j", PRELOAD_STEM)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "j-preload.9.1.t.heap",
                "j-preload.9.2.t.heap",
                "j-preload.9.0.f.heap"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dumps_sequence_number_is_read_from_the_end_of_its_name() {
        let seq = |name: &str| dump_seq(Path::new(name));
        assert_eq!(seq("/w/service-preload.16853.15.t.heap"), Some(15));
        assert_eq!(seq("bench.v1.2-preload.7.3.m2.heap"), Some(3));
        assert_eq!(seq("x-preload.7.3.f.heap.paths"), None);
        assert_eq!(seq("x-preload.heap"), None);
    }

    #[test]
    fn a_complete_record_parses() {
        let r = Record::parse(
            "arena 9\nfirst 0 2 208 1\nrun 1 start\nrun 1 ok 3 320 2 1\nrun 2 start\nrun 2 ok 3 320 1 0\nleft 1 1 112\nleft 2 0 0\nend settled\n",
        );
        assert_eq!(r.main_arena, Some(9));
        assert_eq!(
            r.first,
            Some(FirstRun {
                status: 0,
                live: ExitCounts {
                    objects: 2,
                    bytes: 208
                },
                threads: 1
            })
        );
        assert_eq!(r.runs.len(), 2);
        assert_eq!(
            r.runs[1],
            ExtraRun {
                live: ExitCounts {
                    objects: 3,
                    bytes: 320
                },
                threads: 1,
                settled: false,
                held: None
            }
        );
        assert_eq!(r.started, 2);
        assert_eq!(
            r.left,
            [
                ExitCounts {
                    objects: 1,
                    bytes: 112
                },
                ExitCounts::default()
            ]
        );
        assert_eq!(r.end, Some(End::Settled));
        assert_eq!(
            r.counts(),
            Some(ExitCounts {
                objects: 2,
                bytes: 208
            })
        );
    }

    #[test]
    fn a_record_cut_short_keeps_what_it_has() {
        // The process aborted during the second extra run.
        let r =
            Record::parse("arena 3\nfirst 0 1 8 1\nrun 1 start\nrun 1 ok 2 16 1 1\nrun 2 start\n");
        assert_eq!(r.runs.len(), 1);
        assert_eq!(r.started, 2);
        assert_eq!(r.end, None);
        // A failed run keeps its message, spaces included.
        let f = Record::parse(
            "first 0 0 0 1\nrun 1 start\nrun 1 failed Error: \"second time\"\nend failed\n",
        );
        assert_eq!(f.failed.as_deref(), Some("Error: \"second time\""));
        assert_eq!(f.counts(), None, "not counting: no arena line");
        // Unbound main thread: the counts prove nothing.
        assert_eq!(Record::parse("arena -1\nfirst 0 0 0 1\n").counts(), None);
        assert_eq!(Record::parse("").first, None);
    }

    #[test]
    fn counting_turns_profiling_off_and_keeps_thread_caches() {
        let count = ProfileSettings {
            mode: ProfileMode::Count,
            lg_sample: 0,
        };
        assert_eq!(count.malloc_conf(Path::new("/d"), "j"), "prof:false");
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
