//! Process control: one test process started with the runtime preloaded, in a process group
//! of its own, waited for with its peak memory, killed with whatever it left running when it
//! ends or outlives its time, and its evidence collected (exit status, output, dumps).

pub use crate::evidence::{ProcessEnd, ProcessResult};
use crate::execution::cancel::Cancel;
use crate::execution::cargo::TestBinary;
use crate::execution::preload::{self, ProfileSettings};
use crate::execution::run_config::RunConfig;
use crate::execution::slots::Ticket;
use leakcheck_protocol::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A command for the binary with cargo's runtime environment, without profiling.
pub(crate) fn base_command(binary: &TestBinary, config: &RunConfig) -> Command {
    let mut cmd = Command::new(&binary.path);
    if let Some(doc) = &binary.doc {
        // As rustdoc ran it: in its package's directory, with cargo's environment for it.
        cmd.current_dir(&doc.kept.cwd).envs(doc.kept.env_os());
        cmd.stdin(Stdio::null());
        return cmd;
    }
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
pub(crate) fn through_wrapper(cmd: Command, wrapper: &[String]) -> Command {
    let [program, runner_args @ ..] = wrapper else {
        return cmd;
    };
    let mut out = Command::new(program);
    out.args(runner_args).arg("env");
    // `env` reads its options before the first assignment: the removals go first.
    for (key, _) in cmd.get_envs().filter(|(_, v)| v.is_none()) {
        out.arg("-u").arg(key);
    }
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            let mut pair = key.to_os_string();
            pair.push("=");
            pair.push(value);
            out.arg(pair);
        }
    }
    out.arg(cmd.get_program()).args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        out.current_dir(dir);
    }
    out.stdin(Stdio::null());
    out
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
    /// Variables of the program's own (a merged doc-test executable's index).
    pub program_env: &'a [(&'a str, &'a str)],
    /// The place among the processes running at once this one takes, if any (see
    /// [`crate::execution::slots`]).
    pub place: Option<&'a Ticket<'a>>,
    /// How a process started ahead of need is called off (see
    /// [`crate::execution::cancel`]).
    pub cancel: Option<std::sync::Arc<Cancel>>,
}

/// Runs one process of `binary` with the runtime preloaded; `key` names its files in the
/// work directory.
pub fn run_process(
    binary: &TestBinary,
    key: &str,
    config: &RunConfig,
    spec: &ProcessSpec,
) -> ProcessResult {
    let dir = config.work_dir;
    let stdout = dir.join(format!("{key}.stdout"));
    let stderr = dir.join(format!("{key}.stderr"));
    let record_file = dir.join(format!("{key}.record"));
    let started = Instant::now();
    let mut cmd = command(binary, key, config, spec, &record_file);
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
    if spec.cancel.as_ref().is_some_and(|c| !c.begin()) {
        return failed_result(
            ProcessEnd::SpawnFailed("called off before it started".into()),
            stdout,
            stderr,
        );
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            if let Some(cancel) = &spec.cancel {
                cancel.ending();
            }
            return failed_result(
                ProcessEnd::SpawnFailed(format!("`{}`: {e}", binary.path.display())),
                stdout,
                stderr,
            );
        }
    };
    let pid = child.id() as libc::pid_t;
    if let Some(place) = spec.place {
        place.started(pid);
    }
    if let Some(cancel) = &spec.cancel {
        cancel.started(pid);
    }
    let waited = wait_or_kill(child, spec.timeout, &record_file, spec.cancel.clone());
    let left_running = match waited {
        Some(Ok(_)) => {
            if spec.settings.mode != preload::ProfileMode::Periodic {
                scan_left_children(&preload::children_dir(dir, key), pid);
            }
            end_leftovers(pid)
        }
        _ => Vec::new(),
    };
    let (end, peak_rss_kib) = ending(waited);
    let record = std::fs::read_to_string(&record_file)
        .ok()
        .map(|t| preload::Record::parse(&t));
    let dumps = dumps(dir, key, pid, record.as_ref());
    let children = match spec.settings.mode {
        preload::ProfileMode::Periodic => Vec::new(),
        _ => preload::children(&preload::children_dir(dir, key)),
    };
    ProcessResult {
        children,
        left_running,
        end,
        duration: started.elapsed(),
        timeout: spec.timeout.unwrap_or_default(),
        peak_rss_kib,
        record,
        record_file: (spec.settings.mode != preload::ProfileMode::Periodic).then_some(record_file),
        preload_dumps: dumps.preload,
        app_dumps: dumps.app,
        run_dumps: dumps.runs,
        stdout,
        stderr,
    }
}

/// The test process's command: the binary (under the user's target runner), the runtime
/// preloaded, and the variables that tell the runtime what to do.
fn command(
    binary: &TestBinary,
    key: &str,
    config: &RunConfig,
    spec: &ProcessSpec,
    record_file: &Path,
) -> Command {
    let (settings, dir) = (spec.settings, config.work_dir);
    let mut cmd = base_command(binary, config);
    cmd.args(spec.args);
    // What an outer run of the tool (this one checked as a test's process) handed down is
    // not this process's to follow.
    for var in env::ALL {
        cmd.env_remove(var.name());
    }
    for (var, v) in spec.extra_env {
        cmd.env(var.name(), v);
    }
    for (var, v) in spec.program_env {
        cmd.env(var, v);
    }
    let mut preload = config.runtime.as_os_str().to_owned();
    if let Some(old) = std::env::var_os(env::PRELOAD.name()).filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    if spec.quiet_backtraces {
        cmd.env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0");
    }
    if settings.mode != preload::ProfileMode::Periodic {
        cmd.env(env::RECORD.name(), record_file);
    }
    if settings.mode == preload::ProfileMode::Count {
        cmd.env(env::COUNTING.name(), env::ON);
    }
    if settings.mode == preload::ProfileMode::Stacks {
        cmd.env(env::TRACK.name(), env::ON);
    }
    if settings.mode != preload::ProfileMode::Periodic {
        // The processes the test starts say what they are there; those of the build's
        // executables are checked.
        let children = preload::children_dir(dir, key);
        let _ = std::fs::remove_dir_all(&children);
        if std::fs::create_dir_all(&children).is_ok() {
            let built = std::fs::canonicalize(&config.workspace.target_dir)
                .unwrap_or_else(|_| config.workspace.target_dir.clone());
            cmd.env(env::CHILDREN.name(), &children)
                .env(env::BUILT.name(), built);
        }
    }
    cmd.env(env::PRELOAD.name(), preload)
        .env(env::MALLOC_CONF.name(), settings.malloc_conf(dir, key))
        .env(
            env::RUNTIME_PREFIX.name(),
            preload::dump_prefix(dir, key, preload::PRELOAD_STEM),
        );
    let mut cmd = through_wrapper(cmd, config.wrapper);
    // Its own process group, so a timeout kills whatever the test spawned too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd
}

/// A wait status and peak RSS, an error of waiting, or `None`: the time ran out and the
/// process group was killed.
type Waited = Option<std::io::Result<(libc::c_int, u64)>>;

/// Waits for the child on a thread of its own (an interrupt kills it), killing its group
/// when the time runs out (see [`wait_for`]).
fn wait_or_kill(
    child: std::process::Child,
    timeout: Option<Duration>,
    record: &Path,
    cancel: Option<std::sync::Arc<Cancel>>,
) -> Waited {
    let pid = child.id() as libc::pid_t;
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
        if let Some(cancel) = cancel {
            cancel.ending();
        }
        let status = {
            let mut reaped = reaped_by_waiter.lock().unwrap_or_else(|e| e.into_inner());
            let status = wait_with_usage(pid);
            *reaped = true;
            status
        };
        let _ = tx.send(status);
        drop(child);
    });
    match wait_for(&rx, timeout, record) {
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
    }
}

/// How the process ended, and its peak RSS in KiB when it was reaped normally.
fn ending(waited: Waited) -> (ProcessEnd, Option<u64>) {
    match waited {
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
    }
}

/// A process's dumps, as [`ProcessResult`] holds them.
struct DumpPaths {
    preload: Vec<PathBuf>,
    app: Vec<PathBuf>,
    runs: Vec<Vec<PathBuf>>,
}

/// The dumps of the test's own run (the runtime's and the program's own jemalloc's), and of
/// each extra run the record lists.
fn dumps(dir: &Path, key: &str, pid: libc::pid_t, record: Option<&preload::Record>) -> DumpPaths {
    // With extra runs, the state the test's own run left is the dump taken before them
    // (the exit dump has the extra runs in it, or is missing if one crashed).
    let first = |stem: &str| {
        let p = preload::run_dump(dir, key, stem, 0);
        p.is_file().then_some(vec![p])
    };
    let (preload_dumps, app_dumps) = match first(preload::PRELOAD_STEM) {
        Some(pre) => (pre, first(preload::APP_STEM).unwrap_or_default()),
        None => (
            preload::final_dumps(dir, key, preload::PRELOAD_STEM, pid as u32),
            preload::final_dumps(dir, key, preload::APP_STEM, pid as u32),
        ),
    };
    let runs = record.map_or(0, |r| r.runs.len() as u32);
    let run_dumps = (1..=runs)
        .map(|k| {
            [preload::PRELOAD_STEM, preload::APP_STEM]
                .iter()
                .map(|stem| preload::run_dump(dir, key, stem, k))
                .filter(|p| p.is_file())
                .collect()
        })
        .collect();
    DumpPaths {
        preload: preload_dumps,
        app: app_dumps,
        runs: run_dumps,
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
                let parsed = preload::Record::parse(&text);
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
pub(crate) fn end_leftovers(pgid: libc::pid_t) -> Vec<String> {
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

/// Asks each checked process a test left running (records in `dir`, members of the test's
/// process group `pgid`) for its scan, and waits for them (a minute at most, less for those that end meanwhile), before they are killed:
/// a killed process never reaches its exit handler.
pub(crate) fn scan_left_children(dir: &Path, pgid: libc::pid_t) {
    use leakcheck_protocol::children::{Line, RECORD, SCANNED, SCAN_SIGNAL_BELOW_MAX};
    let members: Vec<libc::pid_t> = group_pids(pgid).into_iter().map(|(pid, _)| pid).collect();
    wait_for_records(dir, &members);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // The latest record of each pid: a process that ran another executable kept its pid.
    let mut latest: std::collections::BTreeMap<libc::pid_t, (u32, PathBuf)> = Default::default();
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        let Some(stem) =
            (path.file_name().and_then(|n| n.to_str())).and_then(|n| n.strip_suffix(RECORD))
        else {
            continue;
        };
        let Some((pid, n)) = stem.split_once('.') else {
            continue;
        };
        let (Ok(pid), Ok(n)) = (pid.parse::<libc::pid_t>(), n.parse::<u32>()) else {
            continue;
        };
        if !members.contains(&pid) {
            continue;
        }
        if latest.get(&pid).is_none_or(|(m, _)| n > *m) {
            latest.insert(pid, (n, dir.join(stem)));
        }
    }
    let signal = libc::SIGRTMAX() - SCAN_SIGNAL_BELOW_MAX;
    let mut waiting = Vec::new();
    for (pid, (_, prefix)) in latest {
        let record = std::fs::read_to_string(with_suffix(&prefix, RECORD)).unwrap_or_default();
        let checked = record
            .lines()
            .any(|l| Line::parse(l) == Some(Line::Checked));
        let done = with_suffix(&prefix, SCANNED);
        // SAFETY: a signal the process's runtime waits for, to a pid of the test's group.
        if checked && !done.exists() && unsafe { libc::kill(pid, signal) } == 0 {
            waiting.push((pid, done));
        }
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !waiting.is_empty() && std::time::Instant::now() < until {
        waiting.retain(|(pid, done)| !done.exists() && running(*pid));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Whether process `pid` still runs (exists and is not a zombie).
fn running(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|close| stat.get(close + 2..close + 3))
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Waits until each of `pids` that was started with the runtime handed down (its
/// environment names the test's process) has written its record, or ended: it may be in its
/// loader yet (a minute at most). One whose environment cannot be read yet (it is between
/// `execve` and its first instruction) is waited for as one that has the runtime.
fn wait_for_records(dir: &Path, pids: &[libc::pid_t]) {
    let marked = format!("{}=", env::PARENT.name());
    // Some(true): the runtime was handed down; Some(false): not; None: not known yet.
    let handed_down = |pid: libc::pid_t| -> Option<bool> {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        Some(
            environ
                .split(|&b| b == 0)
                .any(|v| v.starts_with(marked.as_bytes())),
        )
    };
    let has_record = |pid: libc::pid_t| {
        let start = format!("{pid}.");
        std::fs::read_dir(dir).is_ok_and(|d| {
            d.filter_map(|e| e.ok()).any(|e| {
                e.file_name().to_str().is_some_and(|n| {
                    n.starts_with(&start) && n.ends_with(leakcheck_protocol::children::RECORD)
                })
            })
        })
    };
    // A statically linked program never loads the runtime: the kernel maps no loader for it.
    let static_program = |pid: libc::pid_t| {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .is_ok_and(|maps| !maps.is_empty() && !maps.contains("/ld-linux"))
    };
    // Its environment and mappings are its new program's only once `execve` has set up its
    // stack: the test's `spawn` returns as soon as the old program is gone, before that.
    let settled = |pid: libc::pid_t| {
        !running(pid)
            || has_record(pid)
            || (exec_done(pid) && (handed_down(pid) == Some(false) || static_program(pid)))
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut left: Vec<libc::pid_t> = pids.to_vec();
    while !left.is_empty() && std::time::Instant::now() < until {
        left.retain(|&pid| !settled(pid));
        if !left.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// Whether process `pid`'s `execve` is over: its new program's environment is in place
/// (`env_end` in `/proc/<pid>/stat` is set once its stack is; a kernel that does not show it
/// counts as done).
fn exec_done(pid: libc::pid_t) -> bool {
    // `env_end` is field 51; fields from the state on (field 3) follow the command's `)`.
    const ENV_END: usize = 51 - 3;
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let fields = stat
            .rfind(')')
            .map(|close| stat[close + 1..].split_whitespace());
        fields
            .and_then(|mut f| f.nth(ENV_END))
            .is_none_or(|env_end| env_end != "0")
    })
}

/// The live (not zombie) processes of process group `pgid`, from `/proc`: pid and name.
fn group_pids(pgid: libc::pid_t) -> Vec<(libc::pid_t, String)> {
    // Reading every process's `stat` costs tens of milliseconds on a busy machine, after
    // every test; an empty group (the usual case) answers signal 0 with ESRCH. A member
    // the tool may not signal (EPERM) is still looked for.
    // SAFETY: signal 0 delivers nothing; it only checks whether the group has members.
    if unsafe { libc::kill(-pgid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((name, state, group)) = parse_stat(&stat) {
            if group == pgid && state != "Z" {
                found.push((pid, name.to_string()));
            }
        }
    }
    found
}

/// The live (not zombie) processes of process group `pgid`: `pid N (name)`.
fn group_members(pgid: libc::pid_t) -> Vec<String> {
    (group_pids(pgid).into_iter())
        .map(|(pid, name)| format!("pid {pid} ({name})"))
        .collect()
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

pub(crate) fn failed_result(end: ProcessEnd, stdout: PathBuf, stderr: PathBuf) -> ProcessResult {
    ProcessResult::ended(end, stdout, stderr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_program_is_past_its_exec_and_a_gone_one_is_not() {
        assert!(exec_done(std::process::id() as libc::pid_t));
        // Past the largest pid Linux gives.
        assert!(!exec_done(1 << 23));
    }

    #[test]
    fn a_users_runner_gets_the_removals_before_the_assignments() {
        let mut cmd = Command::new("/t/test-bin");
        cmd.arg("--exact")
            .env("LEAKCHECK_RECORD", "/w/r")
            .env_remove("LEAKCHECK_PARENT")
            .env("RUST_BACKTRACE", "0");
        let wrapped = through_wrapper(cmd, &["qemu".into(), "-L".into(), "/x".into()]);
        let args: Vec<String> = wrapped
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(wrapped.get_program(), "qemu");
        assert_eq!(
            args,
            [
                "-L",
                "/x",
                "env",
                "-u",
                "LEAKCHECK_PARENT",
                "LEAKCHECK_RECORD=/w/r",
                "RUST_BACKTRACE=0",
                "/t/test-bin",
                "--exact"
            ]
        );
    }
}
