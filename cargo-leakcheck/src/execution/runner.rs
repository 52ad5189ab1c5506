//! Runs test processes: lists each binary's tests, then runs every test in a process of
//! its own with the profiling runtime preloaded, several at a time, and collects exit
//! status, output and heap dumps. Nothing here interprets a dump.

use crate::config::{Effective, Layers};
use crate::errors::Error;
pub use crate::evidence::{
    capture_head, capture_tail, ProcessEnd, ProcessResult, CAPTURE_READ_LIMIT,
};
use crate::execution::cargo::{TestBinary, Workspace};
use crate::execution::partition::{Dealer, Partition};
use crate::execution::protocol::{self, ProfileSettings};
use crate::execution::slots::{Slots, Ticket};
use leakcheck_protocol::env;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// The libtest name no test has: running it runs the harness alone, which is the
/// baseline every test of the binary is compared with.
pub const BASELINE_FILTER: &str = "__leakcheck_baseline__no_such_test__";

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

/// One test to run.
#[derive(Clone, Debug)]
pub struct TestCase {
    /// Index into the binaries list.
    pub binary: usize,
    /// The full libtest name (the target name for a `harness = false` target).
    pub name: String,
    /// Whether the test is `#[ignore]`d (then it needs `--include-ignored` to run).
    pub ignored: bool,
    /// Its settings, computed once when it was listed.
    pub settings: Effective,
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
    /// How long each test took in the previous run.
    pub history: &'a crate::execution::history::History,
}

/// The tests of one binary to run, and how many more match the filters but are
/// `#[ignore]`d (not run without `--include-ignored`).
pub struct Listing {
    /// The tests to run.
    pub tests: Vec<TestCase>,
    /// The ignored tests left out.
    pub ignored: Vec<String>,
    /// Every test of the binary, whatever the filters: the entry-point search reads
    /// libtest's layout from all of them (a lone selected test cannot pin it down).
    pub names: Vec<String>,
}

/// Why a binary's tests could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The executable could not be started.
    #[error("could not run `{}`: {source}", path.display())]
    Spawn {
        /// The executable.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--list` ended in failure.
    #[error("`{} --list` failed ({status}): {stderr}", path.display())]
    Failed {
        /// The executable.
        path: PathBuf,
        /// How it ended.
        status: std::process::ExitStatus,
        /// What it wrote to stderr, trimmed.
        stderr: String,
    },
}

/// Lists the tests of one binary.
pub fn list_tests(binary: &TestBinary, config: &RunConfig) -> Result<Listing, ListError> {
    if !binary.harness {
        return Ok(Listing {
            tests: vec![TestCase {
                binary: 0,
                name: binary.target.clone(),
                ignored: false,
                settings: config.settings.of(&binary.target),
            }],
            ignored: Vec::new(),
            names: Vec::new(),
        });
    }
    let list = |filters: &[String], extra: &[&str]| -> Result<Vec<String>, ListError> {
        let mut cmd = base_command(binary, config);
        cmd.arg("--list").arg("--format").arg("terse");
        cmd.args(filters).args(extra);
        let mut cmd = through_wrapper(cmd, config.wrapper);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let out =
            crate::execution::interrupt::output(&mut cmd).map_err(|source| ListError::Spawn {
                path: binary.path.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(ListError::Failed {
                path: binary.path.clone(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_suffix(": test"))
            .map(str::to_string)
            .collect())
    };
    let filters = &config.filter.list_args;
    let ignored = list(filters, &["--ignored"])?;
    let all = if config.filter.ignored_only {
        ignored.clone()
    } else {
        list(filters, &[])?
    };
    // libtest lists ignored tests too; without filters, `all` is every test already.
    let names = if filters.is_empty() && !config.filter.ignored_only {
        all.clone()
    } else {
        list(&[], &[])?
    };
    let mut left_out = Vec::new();
    let tests = all
        .into_iter()
        .filter_map(|name| {
            let is_ignored = ignored.contains(&name);
            let wanted = config.filter.ignored_only || config.filter.include_ignored || !is_ignored;
            if !wanted {
                left_out.push(name);
                return None;
            }
            Some(TestCase {
                binary: 0,
                settings: config.settings.of(&name),
                name,
                ignored: is_ignored,
            })
        })
        .collect();
    Ok(Listing {
        tests,
        ignored: left_out,
        names,
    })
}

/// A command for the binary with cargo's runtime environment, without profiling.
fn base_command(binary: &TestBinary, config: &RunConfig) -> Command {
    let mut cmd = Command::new(&binary.path);
    if let Some(member) = config.workspace.members.get(&binary.package) {
        // As under `cargo test`: tests run in their package's directory and see its metadata.
        cmd.current_dir(&member.dir)
            .env("CARGO_MANIFEST_DIR", &member.dir)
            .env("CARGO_PKG_NAME", &member.name)
            .env("CARGO_PKG_VERSION", &member.version)
            .env("CARGO_CRATE_NAME", binary.target.replace('-', "_"));
    }
    if let Some(deps) = binary.path.parent() {
        // As cargo does: the build's dynamic libraries, then the toolchain's (a proc-macro
        // crate's test binary links libstd-*.so), then whatever the user had.
        let mut paths = vec![deps.to_path_buf()];
        paths.extend(config.workspace.toolchain_libdir.clone());
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("LD_LIBRARY_PATH", joined);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// The same command run by the user's target runner, when there is one:
/// `RUNNER… env [-u K]… [K=V]… BINARY ARGS…`. The variables this tool set go through `env`
/// as arguments rather than in the runner's environment, so they reach the test binary
/// and not the runner (the runtime would otherwise load into the runner and, as it does
/// in any process, keep its settings from the processes that one starts).
fn through_wrapper(cmd: Command, wrapper: &[String]) -> Command {
    let [program, runner_args @ ..] = wrapper else {
        return cmd;
    };
    let mut out = Command::new(program);
    out.args(runner_args).arg("env");
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => {
                let mut pair = key.to_os_string();
                pair.push("=");
                pair.push(value);
                out.arg(pair);
            }
            None => {
                out.arg("-u").arg(key);
            }
        }
    }
    out.arg(cmd.get_program()).args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        out.current_dir(dir);
    }
    out.stdin(Stdio::null());
    out
}

/// One process to run.
#[derive(Clone, Debug)]
pub struct Job {
    /// Index into the binaries list.
    pub binary: usize,
    /// Index into the tests list; None for the binary's harness-only baseline.
    pub test: Option<usize>,
    /// How to profile it.
    pub settings: ProfileSettings,
    /// Run with `RUST_BACKTRACE=0`: for a test expected to pass, a panic is expected too
    /// (`#[should_panic]`, `catch_unwind`), and the backtrace std would symbolize for it is
    /// only noise: seconds of allocations and a symbol cache of tens of MiB.
    pub quiet_backtraces: bool,
    /// Extra runs of the test in its process, when wanted and possible.
    pub rerun: Option<RerunRequest>,
    /// This is the test's first process of the run: how it ends is news worth a log line
    /// (a later pass running it again would only repeat it).
    pub first: bool,
    /// Seconds the test took in the previous run, if known: the longest start first.
    pub expected: Option<f64>,
    /// The table of the binary's live stack slots, for a test that ends the process
    /// itself (see [`crate::execution::live_slots`]).
    pub live_slots: Option<std::path::PathBuf>,
}

/// What the runtime needs to run a test again after its own run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerunRequest {
    /// The entry point's address in the executable image.
    pub entry: u64,
    /// The executable's build id (hexadecimal), checked by the runtime.
    pub build_id: String,
    /// At most this many extra runs (counting mode stops as soon as the test is settled).
    pub runs: u32,
    /// `_rjem_mallctl` of a tikv-jemallocator in the binary, to dump its heap too.
    pub app_mallctl: Option<u64>,
    /// std's record of the thread ending the process (found by `entry::runtime_symbols`).
    pub exit_guard: Option<u64>,
    /// How long the runtime waits, once after the last run, for the runs' threads (see
    /// [`crate::execution::rerun::GRACE_MS`]).
    pub grace_ms: u64,
}

/// The tests of every binary, as far as the filters and the partition select them.
pub struct Selected {
    /// The tests to run, binary by binary.
    pub tests: Vec<TestCase>,
    /// Ignored tests left out, by binary index and name.
    pub ignored: Vec<(usize, String)>,
    /// Tests left out because they belong to another shard of `--partition`.
    pub other_shards: usize,
    /// The binaries that could not be listed, with the reason.
    pub errors: Vec<(usize, ListError)>,
    /// By binary: every test it has, whatever the filters (see [`Listing::names`]).
    pub names: Vec<Vec<String>>,
}

/// Lists every binary's tests and keeps those of this run's shard.
pub fn list_all(binaries: &[TestBinary], config: &RunConfig) -> Selected {
    let mut selected = Selected {
        tests: Vec::new(),
        ignored: Vec::new(),
        other_shards: 0,
        errors: Vec::new(),
        names: vec![Vec::new(); binaries.len()],
    };
    let mut dealer = config.filter.partition.map(Dealer::new);
    for (i, b) in binaries.iter().enumerate() {
        let listing = match list_tests(b, config) {
            Ok(listing) => listing,
            Err(e) => {
                selected.errors.push((i, e));
                continue;
            }
        };
        let (mut tests, mut ignored) = (listing.tests, listing.ignored);
        selected.names[i] = listing.names;
        if let Some(dealer) = dealer.as_mut() {
            // Ignored tests are dealt too, so the shards' counts add up to the suite's.
            let id = b.id();
            let listed = tests.len() + ignored.len();
            tests.retain(|t| dealer.keeps(&id, &t.name));
            ignored.retain(|name| dealer.keeps(&id, name));
            selected.other_shards += listed - tests.len() - ignored.len();
        }
        selected
            .ignored
            .extend(ignored.into_iter().map(|name| (i, name)));
        selected.tests.extend(tests.into_iter().map(|mut c| {
            c.binary = i;
            c
        }));
    }
    selected
}

/// Runs the jobs, `config.jobs` at a time, and returns one result per job in order.
/// `label` names the pass in progress output.
pub fn run_jobs(
    binaries: &[TestBinary],
    tests: &[TestCase],
    jobs: &[Job],
    config: &RunConfig,
    label: &str,
) -> Result<Vec<ProcessResult>, Error> {
    std::fs::create_dir_all(config.work_dir)
        .map_err(|e| Error::io(format!("create `{}`", config.work_dir.display()), e))?;
    let total = jobs.iter().filter(|j| j.test.is_some()).count();
    let order = crate::execution::history::longest_first(
        &jobs.iter().map(|j| j.expected).collect::<Vec<_>>(),
    );
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<ProcessResult>>> = Mutex::new(vec![None; jobs.len()]);
    let progress = Progress::new(total, label, config.progress);
    let places = Slots::new(config.jobs);
    let workers = places.most().min(jobs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                if crate::execution::interrupt::requested().is_some() {
                    break;
                }
                let place = places.acquire();
                let Some(&j) = order.get(next.fetch_add(1, Ordering::SeqCst)) else {
                    break;
                };
                let job = &jobs[j];
                let binary = &binaries[job.binary];
                let test = job.test.map(|t| &tests[t]);
                let mode = match job.settings.mode {
                    protocol::Mode::Count => "count",
                    protocol::Mode::Stacks => "stacks",
                    protocol::Mode::Periodic => "periodic",
                };
                let key = match job.test {
                    Some(t) => format!("b{}-t{t}-{mode}", job.binary),
                    None => format!("b{}-baseline-{mode}", job.binary),
                };
                let result = run_one(binary, test, &key, config, job, &place);
                drop(place);
                if let Some(t) = test {
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    progress.finished(n, binary, &t.name, &result, job.first);
                }
                results
                    .lock()
                    .expect("no worker panics while holding the lock")[j] = Some(result);
            });
        }
    });
    progress.clear();
    Ok(results
        .into_inner()
        .expect("workers ended")
        .into_iter()
        .map(|r| {
            // Only an interruption leaves a job unstarted.
            r.unwrap_or_else(|| {
                failed_result(ProcessEnd::Interrupted, PathBuf::new(), PathBuf::new())
            })
        })
        .collect())
}

fn run_one(
    binary: &TestBinary,
    test: Option<&TestCase>,
    key: &str,
    config: &RunConfig,
    job: &Job,
    place: &Ticket,
) -> ProcessResult {
    let mut args: Vec<String> = Vec::new();
    if binary.harness {
        let name = test.map(|t| t.name.as_str()).unwrap_or(BASELINE_FILTER);
        args.extend(["--exact".into(), name.into(), "--nocapture".into()]);
        if test.is_some_and(|t| t.ignored) {
            args.push("--include-ignored".into());
        }
    }
    let timeout = match test {
        Some(t) => t.settings.timeout.map(Duration::from_secs),
        None => config.timeout,
    };
    let mut extra: Vec<(env::Var, String)> = Vec::new();
    if let Some(r) = &job.rerun {
        extra.push((env::RERUN_ENTRY, format!("{:x}", r.entry)));
        extra.push((env::RERUN_BUILD_ID, r.build_id.clone()));
        extra.push((env::RERUNS, r.runs.to_string()));
        extra.push((
            env::RERUN_SETTLE_MS,
            crate::execution::rerun::SETTLE_MS.to_string(),
        ));
        extra.push((env::RERUN_GRACE_MS, r.grace_ms.to_string()));
        if let Some(g) = r.exit_guard {
            extra.push((env::RERUN_EXIT_GUARD, format!("{g:x}")));
        }
        if let Some(m) = r.app_mallctl {
            extra.push((env::APP_MALLCTL, format!("{m:x}")));
            extra.push((
                env::APP_PREFIX,
                protocol::dump_prefix(config.work_dir, key, protocol::APP_STEM)
                    .display()
                    .to_string(),
            ));
        }
    }
    if let Some(table) = &job.live_slots {
        extra.push((env::LIVE_SLOTS, table.display().to_string()));
    }
    let spec = ProcessSpec {
        args: &args,
        settings: job.settings,
        quiet_backtraces: job.quiet_backtraces,
        timeout,
        extra_env: &extra,
        place: Some(place),
    };
    run_process(binary, key, config, &spec)
}

/// How to run one profiled process.
pub struct ProcessSpec<'a> {
    /// Arguments after the binary.
    pub args: &'a [String],
    /// How to profile it.
    pub settings: ProfileSettings,
    /// Set `RUST_BACKTRACE=0`.
    pub quiet_backtraces: bool,
    /// Kill it when its own run takes longer than this (none: no limit).
    pub timeout: Option<Duration>,
    /// More environment.
    pub extra_env: &'a [(env::Var, String)],
    /// The place among the processes running at once this one takes, if any (see
    /// [`crate::execution::slots`]).
    pub place: Option<&'a Ticket<'a>>,
}

/// Runs one process of `binary` with the runtime preloaded; `key` names its files in the
/// work directory.
pub fn run_process(
    binary: &TestBinary,
    key: &str,
    config: &RunConfig,
    spec: &ProcessSpec,
) -> ProcessResult {
    let settings = spec.settings;
    let dir = config.work_dir;
    let stdout = dir.join(format!("{key}.stdout"));
    let stderr = dir.join(format!("{key}.stderr"));
    let started = Instant::now();
    let mut cmd = base_command(binary, config);
    cmd.args(spec.args);
    for (var, v) in spec.extra_env {
        cmd.env(var.name(), v);
    }
    let mut preload = config.runtime.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    if spec.quiet_backtraces {
        cmd.env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0");
    }
    let record_file = dir.join(format!("{key}.record"));
    if settings.mode != protocol::Mode::Periodic {
        cmd.env(env::RECORD.name(), &record_file);
    }
    if settings.mode == protocol::Mode::Count {
        cmd.env(env::COUNTING.name(), env::ON);
    }
    if settings.mode == protocol::Mode::Stacks {
        cmd.env(env::TRACK.name(), env::ON);
    }
    cmd.env("LD_PRELOAD", preload)
        .env(env::MALLOC_CONF.name(), settings.malloc_conf(dir, key))
        .env(
            env::RUNTIME_PREFIX.name(),
            protocol::dump_prefix(dir, key, protocol::PRELOAD_STEM),
        );
    let mut cmd = through_wrapper(cmd, config.wrapper);
    // Its own process group, so a timeout kills whatever the test spawned too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let files =
        std::fs::File::create(&stdout).and_then(|o| Ok((o, std::fs::File::create(&stderr)?)));
    let (out_file, err_file) = match files {
        Ok(f) => f,
        Err(e) => {
            return failed_result(
                ProcessEnd::SpawnFailed(format!(
                    "cannot create output files in `{}`: {e}",
                    dir.display()
                )),
                stdout,
                stderr,
            )
        }
    };
    cmd.stdout(out_file).stderr(err_file);
    if config.verbose {
        crate::say!("     Running `{:?}`", cmd);
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return failed_result(
                ProcessEnd::SpawnFailed(format!("`{}`: {e}", binary.path.display())),
                stdout,
                stderr,
            )
        }
    };
    let pid = child.id() as libc::pid_t;
    if let Some(place) = spec.place {
        place.started(pid);
    }
    let registration = crate::execution::interrupt::register(pid, libc::SIGKILL);
    // Set, under its lock, when the waiter reaps the child: until then the id (a zombie's at
    // worst) is ours, afterwards it may be another process's. The timeout's kill holds the
    // lock, so it never signals an id that was reaped meanwhile.
    let reaped = std::sync::Arc::new(Mutex::new(false));
    let (tx, rx) = mpsc::channel();
    let reaped_by_waiter = std::sync::Arc::clone(&reaped);
    std::thread::spawn(move || {
        crate::execution::interrupt::wait_ended(pid);
        drop(registration);
        let status = {
            let mut reaped = reaped_by_waiter.lock().unwrap_or_else(|e| e.into_inner());
            let status = wait_with_usage(pid);
            *reaped = true;
            status
        };
        let _ = tx.send(status);
        drop(child);
    });
    let waited = match wait_for(&rx, spec.timeout, &record_file) {
        Some(s) => Some(s),
        None => {
            let reaped = reaped.lock().unwrap_or_else(|e| e.into_inner());
            if !*reaped {
                // SAFETY: kill(2) on the process group we created for this child, whose
                // leader is not reaped (checked under the lock the waiter reaps under), so
                // the group id is still ours.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
            drop(reaped);
            let _ = rx.recv();
            None
        }
    };
    let left_running = match waited {
        Some(Ok(_)) => end_leftovers(pid),
        _ => Vec::new(),
    };
    let (end, peak_rss_kib) = match waited {
        None => (ProcessEnd::TimedOut, None),
        Some(Err(e)) => (
            ProcessEnd::SpawnFailed(format!("waiting for it failed: {e}")),
            None,
        ),
        Some(Ok((status, rss))) => {
            let end = if libc::WIFSIGNALED(status)
                && libc::WTERMSIG(status) == libc::SIGKILL
                && crate::execution::interrupt::requested().is_some()
            {
                ProcessEnd::Interrupted
            } else if libc::WIFEXITED(status) {
                ProcessEnd::Exited(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                ProcessEnd::Signaled(libc::WTERMSIG(status))
            } else {
                ProcessEnd::Exited(-1)
            };
            (end, Some(rss))
        }
    };
    let record = std::fs::read_to_string(&record_file)
        .ok()
        .map(|t| protocol::Record::parse(&t));
    // With extra runs, the state the test's own run left is the dump taken before them
    // (the exit dump has the extra runs in it, or is missing if one crashed).
    let first = |stem: &str| {
        let p = protocol::run_dump(dir, key, stem, 0);
        p.is_file().then_some(vec![p])
    };
    let (preload_dumps, app_dumps) = match first(protocol::PRELOAD_STEM) {
        Some(pre) => (pre, first(protocol::APP_STEM).unwrap_or_default()),
        None => (
            protocol::final_dumps(dir, key, protocol::PRELOAD_STEM, pid as u32),
            protocol::final_dumps(dir, key, protocol::APP_STEM, pid as u32),
        ),
    };
    let runs = record.as_ref().map_or(0, |r| r.runs.len() as u32);
    let run_dumps = (1..=runs)
        .map(|k| {
            [protocol::PRELOAD_STEM, protocol::APP_STEM]
                .iter()
                .map(|stem| protocol::run_dump(dir, key, stem, k))
                .filter(|p| p.is_file())
                .collect()
        })
        .collect();
    ProcessResult {
        left_running,
        end,
        duration: started.elapsed(),
        timeout: spec.timeout.unwrap_or_default(),
        peak_rss_kib,
        record,
        preload_dumps,
        app_dumps,
        run_dumps,
        stdout,
        stderr,
    }
}

/// Waits for the process's wait status. `timeout` bounds the test's own run, as it bounds a
/// test under `cargo test` or nextest: once the record says that run is over (its `first`
/// line), the extra runs are the runtime's to bound (each at most ten times the own run, at
/// least 10 s), so the wait goes on while the record keeps growing, each time for the
/// longest of the timeout, eleven times the own run and [`EXTRA_RUN_FLOOR`]. None: the time
/// ran out (the caller kills the process group).
fn wait_for(
    rx: &mpsc::Receiver<std::io::Result<(i32, u64)>>,
    timeout: Option<Duration>,
    record: &Path,
) -> Option<std::io::Result<(i32, u64)>> {
    let Some(timeout) = timeout else {
        return rx.recv().ok();
    };
    let mut limit = timeout;
    let mut seen = 0;
    loop {
        match rx.recv_timeout(limit) {
            Ok(status) => return Some(status),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let text = std::fs::read_to_string(record).unwrap_or_default();
                let parsed = protocol::Record::parse(&text);
                if parsed.first.is_none() || text.len() <= seen {
                    return None;
                }
                seen = text.len();
                let own = Duration::from_millis(parsed.own_cost.map_or(0, |(_, wall)| wall));
                limit = timeout.max(own.saturating_mul(11)).max(EXTRA_RUN_FLOOR);
            }
        }
    }
}

/// The least time the wait for a process in its extra runs is renewed by: more than the
/// runtime gives one extra run at least (10 s).
const EXTRA_RUN_FLOOR: Duration = Duration::from_secs(12);

/// At most `max` bytes of `line`, cut at a character boundary (a test name may hold
/// multi-byte characters).
fn cut_to_width(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Waits for a child and returns its wait status and peak resident set size (KiB), which
/// `std::process::Child::wait` does not report.
fn wait_with_usage(pid: libc::pid_t) -> std::io::Result<(i32, u64)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            return Ok((status, u64::try_from(usage.ru_maxrss).unwrap_or(0)));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Ends what is left of a test's process group once its leader (the test process) was
/// reaped: processes it started and did not wait for, which would otherwise run on
/// unseen (an orphan waiting in `pause()` lives until the machine reboots). Returns them as
/// `pid N (name)`. A process group's id is not given to a new process while the group has
/// members, so the signal reaches only the test's; once the group is empty the id may be
/// reused, and a new process that made itself leader of a group with that id between the
/// look and the signal would get it: a window of microseconds, after a test that left
/// processes behind.
fn end_leftovers(pgid: libc::pid_t) -> Vec<String> {
    // SAFETY: signal 0 only checks whether the group has members.
    if unsafe { libc::kill(-pgid, 0) } != 0 {
        return Vec::new();
    }
    let mut left = group_members(pgid);
    // SAFETY: see above: the group is the test's.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    left.sort();
    left
}

/// The live (not zombie) processes of process group `pgid`, from `/proc`.
fn group_members(pgid: libc::pid_t) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((name, state, group)) = parse_stat(&stat) {
            if group == pgid && state != "Z" {
                found.push(format!("pid {pid} ({name})"));
            }
        }
    }
    found
}

/// From `/proc/<pid>/stat` (`pid (comm) state ppid pgrp …`, where comm may hold spaces and
/// parentheses): the name, the state and the process group.
fn parse_stat(stat: &str) -> Option<(&str, &str, libc::pid_t)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let state = rest.next()?;
    let _ppid = rest.next()?;
    let group = rest.next()?.parse().ok()?;
    Some((stat.get(open + 1..close)?, state, group))
}

fn failed_result(end: ProcessEnd, stdout: PathBuf, stderr: PathBuf) -> ProcessResult {
    ProcessResult {
        end,
        duration: Duration::ZERO,
        timeout: Duration::ZERO,
        peak_rss_kib: None,
        record: None,
        preload_dumps: Vec::new(),
        app_dumps: Vec::new(),
        run_dumps: Vec::new(),
        left_running: Vec::new(),
        stdout,
        stderr,
    }
}

/// Progress on stderr, at a size that scales: a terminal gets one updating status line; a
/// log (CI) gets a progress line at most every few seconds. Either gets a line, as nextest
/// prints it, for each test whose process failed, crashed or timed out (every test with
/// `-v`); `--quiet` gets none of it.
struct Progress {
    enabled: bool,
    total: usize,
    label: String,
    terminal: bool,
    last_line: Mutex<Option<Instant>>,
}

/// A log gets a progress line at most this often.
const LOG_PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    fn new(total: usize, label: &str, enabled: bool) -> Self {
        Progress {
            enabled: enabled && crate::console::level() > crate::console::Level::Quiet,
            total,
            label: label.to_string(),
            terminal: std::io::stderr().is_terminal(),
            last_line: Mutex::new(None),
        }
    }

    fn finished(
        &self,
        n: usize,
        binary: &TestBinary,
        name: &str,
        result: &ProcessResult,
        first: bool,
    ) {
        if !self.enabled {
            return;
        }
        let verbose = crate::console::level() == crate::console::Level::Verbose;
        // An extra run that panics or crashes after the test passed is the extra run's
        // business (the report says so), not the test's.
        let end = result.first_run_end();
        let status = match &end {
            ProcessEnd::Exited(0) => "PASS",
            ProcessEnd::Exited(_) => "FAIL",
            ProcessEnd::Signaled(_) => "CRASH",
            ProcessEnd::TimedOut => "TIMEOUT",
            ProcessEnd::SpawnFailed(_) => "ERROR",
            ProcessEnd::Interrupted => "STOPPED",
        };
        if (first && status != "PASS") || verbose {
            let line = format!(
                "{status:>12} [{:>8.3}s] {} {name}",
                result.duration.as_secs_f64(),
                binary.id()
            );
            let detail = match status {
                "PASS" => String::new(),
                _ => format!(": {}", end.describe()),
            };
            if self.terminal {
                crate::say_raw!("\r\x1b[2K");
            }
            crate::say!("{line}{detail}");
        }
        if self.terminal {
            let line = format!(
                "{:>12} [{n}/{}] {} {name}",
                self.label,
                self.total,
                binary.id()
            );
            crate::say_raw!("\r\x1b[2K{}", cut_to_width(&line, 100));
        } else {
            let mut last = self.last_line.lock().expect("progress lock");
            let due = last.is_none_or(|t| t.elapsed() >= LOG_PROGRESS_EVERY);
            if due || n == self.total {
                *last = Some(Instant::now());
                crate::say!("{:>12} {n}/{} tests done", self.label, self.total);
            }
        }
    }

    fn clear(&self) {
        if self.enabled && self.terminal {
            crate::say_raw!("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_are_cut_between_characters() {
        let name = format!("{}größe", "x".repeat(97));
        // Byte 100 falls inside `ö`.
        assert_eq!(cut_to_width(&name, 100), format!("{}gr", "x".repeat(97)));
        assert_eq!(cut_to_width("short", 100), "short");
    }

    #[test]
    fn captures_are_read_in_part_and_lossily() {
        let dir = std::env::temp_dir().join(format!("leakcheck-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stderr");
        let mut bytes = b"first line\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', 1000));
        bytes.extend(b"\nnot utf-8: \xff\xfe end\nlast line\n");
        std::fs::write(&path, &bytes).unwrap();
        // The tail starts at a whole line and shows what is not UTF-8 as replacement
        // characters rather than losing it.
        let tail = capture_tail(&path, 40);
        assert_eq!(tail, "not utf-8: \u{fffd}\u{fffd} end\nlast line\n");
        assert!(capture_tail(&path, 1 << 20).starts_with("first line\n"));
        assert_eq!(capture_head(&path, 10), "first line");
        assert_eq!(capture_tail(&dir.join("missing"), 10), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
