//! A long-running program under the runtime, for `cargo leakcheck run`: started in a
//! process group of its own with sampled heap profiling and a heap snapshot every interval,
//! waited for until it is ready, put under the user's load, then stopped. It collects what
//! happened and decides nothing: [`crate::analysis::service`] judges it.
//!
//! The service is never left running: every way out of [`run`] (the load failing or hanging,
//! the service dying, an interruption, an error of the tool) ends its process group, and the
//! group is checked to be gone.

use crate::evidence::{ProcessEnd, ServiceStage};
use crate::execution::preload::{self, ProfileSettings};
use leakcheck_protocol::env;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// When the service counts as ready.
#[derive(Clone, Debug)]
pub enum Ready {
    /// Something accepts connections on 127.0.0.1:PORT.
    Port(u16),
    /// It printed a line containing this text.
    Line(String),
    /// This shell command succeeds.
    Command(String),
    /// At once.
    Started,
}

/// What to run and how.
pub struct ServiceSpec<'a> {
    /// The program and its arguments.
    pub program: &'a Path,
    pub args: &'a [String],
    /// Its working directory.
    pub dir: &'a Path,
    /// The runtime to preload.
    pub runtime: &'a Path,
    /// Where its files go, and their names' prefix.
    pub work_dir: &'a Path,
    pub key: &'a str,
    pub snapshot_interval: Duration,
    /// Every allocation is tracked by address, so the reachability scan after the load can
    /// say who holds what grew; its stack is taken for one allocation per 2^`lg_sample`
    /// bytes on average, or for every one when `exact` (exact snapshots, less throughput).
    pub exact: bool,
    pub lg_sample: u8,
    /// The program's own jemalloc (tikv-jemallocator), when it has one: its `_rjem_mallctl`
    /// and the program's build id. Its allocations bypass malloc; the runtime asks it for a
    /// sampled dump beside each tracked one.
    pub own_allocator: Option<(u64, String)>,
    /// The table of the program's own collections, whose lengths go with each snapshot.
    pub collections: Option<std::path::PathBuf>,
    pub ready: Ready,
    pub ready_timeout: Duration,
    /// The load command; without one, the service runs for `duration` once ready.
    pub load: Option<&'a str>,
    pub load_timeout: Duration,
    pub duration: Duration,
    pub settle: Duration,
    /// A graceful shutdown command; otherwise SIGTERM.
    pub stop: Option<&'a str>,
    pub grace: Duration,
    pub verbose: bool,
}

/// Microseconds on the monotonic clock: the time axis of the runtime's timeline of
/// snapshots (`leakcheck_protocol::timeline`), so the window and the snapshots compare
/// without file times.
pub type Micros = u64;

/// Now, on the monotonic clock.
pub fn now_micros() -> Micros {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1000
}

/// The moments a run's snapshots are judged by.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub ready: Micros,
    pub loaded: Micros,
    pub settled: Micros,
}

/// What one run of a service left.
pub struct ServiceRun {
    pub stage: ServiceStage,
    /// How long it took to get ready.
    pub ready_after: Option<Duration>,
    /// When it was ready, when its load ended, and when the settle pause after it ended.
    pub window: Option<Window>,
    /// Its heap snapshots, oldest first.
    pub dumps: Vec<PathBuf>,
    /// The snapshot the reachability scan followed (its `.paths` beside it), when it ran.
    pub scanned: Option<PathBuf>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// Its process group's members still running after it was stopped (killed).
    pub left_running: Vec<String>,
    /// Peak resident set size seen, KiB.
    pub peak_rss_kib: Option<u64>,
    /// Its resident set size over the run, KiB, at most [`RSS_POINTS`] points spread
    /// over it.
    pub rss: Vec<(Micros, u64)>,
}

/// The most RSS readings kept: past it, every other one is dropped and readings are taken
/// half as often, so a long run keeps an even spread in bounded memory.
const RSS_POINTS: usize = 1024;

/// The least time between two RSS readings at the start, whatever the snapshot interval: a
/// load that ends in a fraction of a second (on a fast machine) still gets a resident-set
/// series with points all along it, as the snapshots start close together for the same
/// reason.
const FIRST_RSS_GAP: Duration = Duration::from_millis(10);

/// Starts the service, waits until it is ready, runs the load, stops it.
pub fn run(spec: &ServiceSpec) -> ServiceRun {
    let stdout = spec.work_dir.join(format!("{}.stdout", spec.key));
    let stderr = spec.work_dir.join(format!("{}.stderr", spec.key));
    let mut out = ServiceRun {
        stage: ServiceStage::NeverReady,
        ready_after: None,
        window: None,
        dumps: Vec::new(),
        scanned: None,
        stdout: stdout.clone(),
        stderr: stderr.clone(),
        left_running: Vec::new(),
        peak_rss_kib: None,
        rss: Vec::new(),
    };
    let mut child = match start(spec, &stdout, &stderr) {
        Ok(c) => c,
        Err(why) => {
            out.stage = ServiceStage::NotStarted(why.to_string());
            return out;
        }
    };
    let pid = child.id() as libc::pid_t;
    let registration = crate::execution::interrupt::register(pid, libc::SIGTERM);
    let mut service = Running {
        child: &mut child,
        pid,
        peak_rss_kib: None,
        rss: Vec::new(),
        rss_every: FIRST_RSS_GAP,
    };
    out.stage = drive(spec, &mut service, &mut out);
    out.peak_rss_kib = service.peak_rss_kib;
    out.rss = std::mem::take(&mut service.rss);
    // Stopped in every case: ready or not, loaded or not.
    let end = stop(spec, &mut service);
    out.left_running = end_group(pid);
    drop(registration);
    if let ServiceStage::Completed(_) = out.stage {
        out.stage = ServiceStage::Completed(end);
    } else if crate::execution::interrupt::requested().is_some() {
        out.stage = ServiceStage::Interrupted;
    }
    out.dumps = preload::all_dumps(spec.work_dir, spec.key, preload::PRELOAD_STEM);
    out
}

struct Running<'a> {
    child: &'a mut Child,
    pid: libc::pid_t,
    peak_rss_kib: Option<u64>,
    rss: Vec<(Micros, u64)>,
    /// The least time between two kept RSS readings.
    rss_every: Duration,
}

impl Running<'_> {
    /// How it ended, if it has.
    fn ended(&mut self) -> Option<ProcessEnd> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(end_of(status)),
            Ok(None) => {
                if let Some(rss) = rss_kib(self.pid) {
                    self.peak_rss_kib = Some(self.peak_rss_kib.map_or(rss, |p| p.max(rss)));
                    self.keep_rss(now_micros(), rss);
                }
                None
            }
            Err(e) => Some(ProcessEnd::SpawnFailed(format!(
                "waiting for it failed: {e}"
            ))),
        }
    }
}

impl Running<'_> {
    /// Keeps a reading taken at `now` when the last kept one is old enough.
    fn keep_rss(&mut self, now: Micros, kib: u64) {
        let due = self
            .rss
            .last()
            .is_none_or(|(at, _)| now.saturating_sub(*at) >= self.rss_every.as_micros() as u64);
        if !due {
            return;
        }
        self.rss.push((now, kib));
        if self.rss.len() >= RSS_POINTS {
            thin_by_half(&mut self.rss);
            self.rss_every *= 2;
        }
    }
}

/// Keeps every other element, the first included.
fn thin_by_half<T>(v: &mut Vec<T>) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        i % 2 == 1
    });
}

fn end_of(status: std::process::ExitStatus) -> ProcessEnd {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ProcessEnd::Exited(c),
        (None, Some(s)) => ProcessEnd::Signaled(s),
        _ => ProcessEnd::Exited(-1),
    }
}

/// Why the service could not be started.
#[derive(Debug, thiserror::Error)]
enum StartError {
    /// Its stdout or stderr file could not be created in the work directory.
    #[error("cannot create output files in `{}`: {source}", dir.display())]
    Output {
        /// The work directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The program could not be spawned.
    #[error("`{}`: {source}", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn start(spec: &ServiceSpec, stdout: &Path, stderr: &Path) -> Result<Child, StartError> {
    // The configuration of the program's own jemalloc, if it has one (the runtime's own
    // profiler is off while it tracks): sampled even when exact, since jemalloc gives every
    // sampled object a page of its own.
    let settings = ProfileSettings {
        mode: preload::ProfileMode::Periodic,
        lg_sample: spec.lg_sample,
    };
    let files = std::fs::File::create(stdout)
        .and_then(|o| Ok((o, std::fs::File::create(stderr)?)))
        .map_err(|source| StartError::Output {
            dir: spec.work_dir.to_path_buf(),
            source,
        })?;
    let mut preload = spec.runtime.as_os_str().to_owned();
    if let Some(old) = std::env::var_os(env::PRELOAD.name()).filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    let mut cmd = Command::new(spec.program);
    cmd.args(spec.args)
        .current_dir(spec.dir)
        .stdin(Stdio::null())
        .stdout(files.0)
        .stderr(files.1)
        .env(env::PRELOAD.name(), preload)
        .env(
            env::MALLOC_CONF.name(),
            settings.malloc_conf(spec.work_dir, spec.key),
        )
        .env(
            env::RUNTIME_PREFIX.name(),
            preload::dump_prefix(spec.work_dir, spec.key, preload::PRELOAD_STEM),
        )
        .env(
            env::DUMP_INTERVAL_MS.name(),
            spec.snapshot_interval.as_millis().max(1).to_string(),
        );
    // Every allocation tracked, so the scan after the load can say who holds what grew;
    // stacks sampled unless exact.
    cmd.env(env::TRACK.name(), env::ON)
        .env(
            env::TRACK_SAMPLE.name(),
            (1u64 << lg_sample(spec)).to_string(),
        )
        .env(env::SCAN_REQUEST.name(), scan_request(spec));
    if let Some(own) = &spec.own_allocator {
        for (var, value) in preload::own_allocator_env(own, spec.work_dir, spec.key) {
            cmd.env(var.name(), value);
        }
    }
    if let Some(table) = &spec.collections {
        cmd.env(env::COLLECTIONS.name(), table);
    }
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    if spec.verbose {
        crate::say!("     Running `{:?}`", cmd);
    }
    cmd.spawn().map_err(|source| StartError::Spawn {
        program: spec.program.to_path_buf(),
        source,
    })
}

/// Waits for readiness, runs the load, settles; returns how far it got.
fn drive(spec: &ServiceSpec, service: &mut Running, out: &mut ServiceRun) -> ServiceStage {
    if let Err(stage) = wait_until_ready(spec, service, out) {
        return stage;
    }
    let ready_at = now_micros();
    let result = put_under_load(spec, service);
    if result != ServiceStage::Completed(ProcessEnd::Exited(0)) {
        return result;
    }
    match settle(spec, service, out, ready_at) {
        Ok(()) => result,
        Err(stage) => stage,
    }
}

/// Waits until the service is ready (and records after how long), or the stage it stopped
/// at before.
fn wait_until_ready(
    spec: &ServiceSpec,
    service: &mut Running,
    out: &mut ServiceRun,
) -> Result<(), ServiceStage> {
    let started = Instant::now();
    loop {
        if crate::execution::interrupt::requested().is_some() {
            return Err(ServiceStage::Interrupted);
        }
        if let Some(end) = service.ended() {
            return Err(ServiceStage::EndedBeforeReady(end));
        }
        if is_ready(&spec.ready, &out.stdout, &out.stderr) {
            break;
        }
        if started.elapsed() > spec.ready_timeout {
            return Err(ServiceStage::NeverReady);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    out.ready_after = Some(started.elapsed());
    Ok(())
}

/// Runs the load command (or waits the duration without one) until it ends, the service
/// ends or the run is interrupted; the load's process group does not outlive it.
fn put_under_load(spec: &ServiceSpec, service: &mut Running) -> ServiceStage {
    let loaded = Instant::now();
    let mut load = match spec.load {
        Some(command) => match shell(command).spawn() {
            Ok(c) => Some(c),
            Err(e) => return ServiceStage::LoadFailed(Some(format!("could not start it: {e}"))),
        },
        None => None,
    };
    let load_registration = load
        .as_ref()
        .and_then(|c| crate::execution::interrupt::register(c.id() as libc::pid_t, libc::SIGTERM));
    let result = watch_load(spec, service, &mut load, loaded);
    if let Some(mut c) = load {
        // The load's own process group: whatever it started goes with it.
        if c.try_wait().ok().flatten().is_none() {
            // SAFETY: kill(2) on the process group of a child not reaped yet.
            unsafe {
                libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL);
            }
        }
        let _ = c.wait();
    }
    drop(load_registration);
    result
}

/// Polls the service and its load (started at `loaded`) until one of them ends, reporting
/// progress and pruning old snapshots meanwhile.
fn watch_load(
    spec: &ServiceSpec,
    service: &mut Running,
    load: &mut Option<Child>,
    loaded: Instant,
) -> ServiceStage {
    let mut last_report = Instant::now();
    let mut last_prune = Instant::now();
    let mut keep_every = 1;
    loop {
        if crate::execution::interrupt::requested().is_some() {
            return ServiceStage::Interrupted;
        }
        if let Some(end) = service.ended() {
            return ServiceStage::EndedUnderLoad(end);
        }
        if let Some(stage) = load_ended(spec, load, loaded) {
            return stage;
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            progress(spec, service, loaded.elapsed());
            last_report = Instant::now();
        }
        if last_prune.elapsed() >= Duration::from_secs(1) {
            prune(spec.work_dir, spec.key, &mut keep_every);
            last_prune = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How the load (started at `loaded`) ended, once it has: the command's exit, its timeout,
/// or, without a command, the duration passing.
fn load_ended(
    spec: &ServiceSpec,
    load: &mut Option<Child>,
    loaded: Instant,
) -> Option<ServiceStage> {
    match load {
        Some(c) => match c.try_wait() {
            Ok(Some(status)) if status.success() => {
                Some(ServiceStage::Completed(ProcessEnd::Exited(0)))
            }
            Ok(Some(status)) => Some(ServiceStage::LoadFailed(Some(status.to_string()))),
            Ok(None) if loaded.elapsed() > spec.load_timeout => {
                Some(ServiceStage::LoadFailed(None))
            }
            Ok(None) => None,
            Err(e) => Some(ServiceStage::LoadFailed(Some(format!(
                "waiting for it failed: {e}"
            )))),
        },
        None if loaded.elapsed() >= spec.duration => {
            Some(ServiceStage::Completed(ProcessEnd::Exited(0)))
        }
        None => None,
    }
}

/// Waits the settle pause (and a snapshot after it), records the window (from `ready_at`)
/// and has the runtime scan; Err with the stage when the service ended meanwhile.
fn settle(
    spec: &ServiceSpec,
    service: &mut Running,
    out: &mut ServiceRun,
    ready_at: u64,
) -> Result<(), ServiceStage> {
    let loaded_at = now_micros();
    let settled_at = loaded_at + spec.settle.as_micros() as u64;
    // One snapshot at least after the settle pause.
    let settle_until = Instant::now() + spec.settle + spec.snapshot_interval * 2;
    while Instant::now() < settle_until {
        if let Some(end) = service.ended() {
            return Err(ServiceStage::EndedUnderLoad(end));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out.window = Some(Window {
        ready: ready_at,
        loaded: loaded_at,
        settled: settled_at,
    });
    out.scanned = scan(spec, service).map_err(ServiceStage::EndedUnderLoad)?;
    Ok(())
}

/// The log2 of the mean bytes between sampled stacks: 0 when every stack is taken.
fn lg_sample(spec: &ServiceSpec) -> u8 {
    if spec.exact {
        0
    } else {
        spec.lg_sample
    }
}

/// The file whose existence asks the runtime for a reachability scan after its next dump.
fn scan_request(spec: &ServiceSpec) -> PathBuf {
    spec.work_dir.join(format!("{}.scan-request", spec.key))
}

/// Asks for a reachability scan after the next snapshot and waits for it (the runtime
/// deletes the request once it is written): the snapshot it followed, or None when it did
/// not come within a minute; Err when the service ended meanwhile.
fn scan(spec: &ServiceSpec, service: &mut Running) -> Result<Option<PathBuf>, ProcessEnd> {
    let request = scan_request(spec);
    if std::fs::write(&request, b"").is_err() {
        return Ok(None);
    }
    let deadline = Instant::now() + Duration::from_secs(60) + spec.snapshot_interval;
    while request.exists() {
        if let Some(end) = service.ended() {
            return Err(end);
        }
        if Instant::now() > deadline || crate::execution::interrupt::requested().is_some() {
            let _ = std::fs::remove_file(&request);
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dumps = preload::all_dumps(spec.work_dir, spec.key, preload::PRELOAD_STEM);
    Ok(dumps
        .into_iter()
        .rev()
        .find(|d| crate::evidence::paths::paths_file(d).exists()))
}

/// The most snapshots kept on disk under load: past it, every other one goes, and from then
/// on only every other one is kept, so a long run's snapshots stay evenly spread over it in
/// bounded space (the judge thins them to fewer still).
const KEPT_SNAPSHOTS: usize = 512;

/// Deletes the snapshots taken under load that an even spread of at most
/// [`KEPT_SNAPSHOTS`] does not need: those whose sequence number is not a multiple of
/// `keep_every`, which doubles whenever that many are kept. The newest stays, whatever its
/// number, for the progress line.
fn prune(work_dir: &Path, key: &str, keep_every: &mut u64) {
    let dumps = preload::all_dumps(work_dir, key, preload::PRELOAD_STEM);
    let Some((newest, older)) = dumps.split_last() else {
        return;
    };
    let seq = |d: &PathBuf| preload::dump_seq(d).unwrap_or(0);
    loop {
        let kept = older.iter().filter(|d| seq(d) % *keep_every == 0).count();
        if kept < KEPT_SNAPSHOTS {
            break;
        }
        *keep_every *= 2;
    }
    for d in older.iter().filter(|d| seq(d) % *keep_every != 0) {
        // With the program's own jemalloc's dump of the same moment.
        for part in preload::snapshot_parts(d, key) {
            let _ = std::fs::remove_file(part);
        }
    }
    debug_assert!(newest.exists());
}

fn progress(spec: &ServiceSpec, service: &Running, elapsed: Duration) {
    let dumps = preload::all_dumps(spec.work_dir, spec.key, preload::PRELOAD_STEM);
    let taken = dumps.last().and_then(|d| preload::dump_seq(d)).unwrap_or(0);
    // The newest snapshot, its own jemalloc's part included.
    let heap: Option<u64> = dumps.last().and_then(|d| {
        preload::snapshot_parts(d, spec.key)
            .iter()
            .map(|p| {
                crate::evidence::load::heap_profile(p).ok().map(|p| {
                    p.unbiased()
                        .stacks
                        .iter()
                        .map(|s| s.live.bytes)
                        .sum::<u64>()
                })
            })
            .sum()
    });
    let of = match spec.load {
        Some(_) => format!("under load (at most {}s)", spec.load_timeout.as_secs()),
        None => format!("of {}s", spec.duration.as_secs()),
    };
    crate::info!(
        "{:>12} {:.0}s {of}, {} snapshots taken ({} kept), live heap {}, RSS {}",
        "Running",
        elapsed.as_secs_f64(),
        taken,
        dumps.len(),
        heap.map_or("?".into(), crate::model::human_bytes),
        rss_kib(service.pid).map_or("?".into(), |k| crate::model::human_bytes(k * 1024)),
    );
}

fn shell(command: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(command).stdin(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd
}

fn is_ready(ready: &Ready, stdout: &Path, stderr: &Path) -> bool {
    match ready {
        Ready::Started => true,
        Ready::Port(port) => std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], *port)),
            Duration::from_millis(200),
        )
        .is_ok(),
        Ready::Line(text) => [stdout, stderr].iter().any(|p| {
            crate::evidence::capture_head(p, 1 << 20)
                .lines()
                .any(|l| l.contains(text.as_str()))
        }),
        Ready::Command(command) => shell(command)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

/// Asks the service to stop (its stop command, else SIGTERM), waits up to the grace, then
/// kills its group; how it ended.
fn stop(spec: &ServiceSpec, service: &mut Running) -> ProcessEnd {
    if let Some(end) = service.ended() {
        return end;
    }
    match spec.stop {
        Some(command) => {
            let _ = shell(command).stdout(Stdio::null()).status();
        }
        // SAFETY: kill(2) on the group of our child, not reaped yet (checked just above).
        None => unsafe {
            libc::kill(service.pid, libc::SIGTERM);
        },
    }
    let deadline = Instant::now() + spec.grace;
    while Instant::now() < deadline {
        if let Some(end) = service.ended() {
            return end;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above; the child is still not reaped.
    unsafe {
        libc::kill(-service.pid, libc::SIGKILL);
    }
    match service.child.wait() {
        Ok(status) => end_of(status),
        Err(e) => ProcessEnd::SpawnFailed(format!("waiting for it failed: {e}")),
    }
}

/// Kills what is left of the process group `pgid` and says what it was.
fn end_group(pgid: libc::pid_t) -> Vec<String> {
    crate::execution::process::end_leftovers(pgid)
}

fn rss_kib(pid: libc::pid_t) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_readings_stay_bounded_and_evenly_spread_however_long_the_run() {
        // Busy for a while: reads the process's memory thousands of times.
        let _busy = crate::CORES.read().unwrap_or_else(|e| e.into_inner());
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as libc::pid_t;
        let mut running = Running {
            child: &mut child,
            pid,
            peak_rss_kib: None,
            rss: Vec::new(),
            rss_every: Duration::ZERO,
        };
        // A reading every 10 ms for 100 s, kept at most every 10 ms at first.
        running.rss_every = Duration::from_millis(10);
        for i in 0..10_000u64 {
            running.keep_rss(10_000 * i, i);
        }
        let kept: Vec<u64> = running.rss.iter().map(|r| r.1).collect();
        assert!(
            kept.len() < RSS_POINTS && kept.len() >= RSS_POINTS / 2,
            "{}",
            kept.len()
        );
        // From the start to the end, evenly: no gap more than twice another.
        assert_eq!(kept[0], 0);
        assert!(*kept.last().unwrap() > 9_000, "{kept:?}");
        let gaps: Vec<u64> = kept.windows(2).map(|w| w[1] - w[0]).collect();
        let (min, max) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
        assert!(max <= &(2 * min), "gaps from {min} to {max}");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn snapshots_on_disk_stay_bounded_and_evenly_spread_however_long_the_run() {
        // Busy for a while: reads the process's memory thousands of times.
        let _busy = crate::CORES.read().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("leakcheck-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut keep_every = 1;
        // 5,000 snapshots, pruned every 10 as they come (a second at 100 ms).
        for seq in 1..=5_000u64 {
            for stem in [preload::PRELOAD_STEM, preload::APP_STEM] {
                std::fs::write(dir.join(format!("svc-{stem}.42.{seq}.t.heap")), b"").unwrap();
            }
            if seq % 10 == 0 {
                prune(&dir, "svc", &mut keep_every);
            }
        }
        let kept: Vec<u64> = preload::all_dumps(&dir, "svc", preload::PRELOAD_STEM)
            .iter()
            .map(|d| preload::dump_seq(d).unwrap())
            .collect();
        assert!(kept.len() <= KEPT_SNAPSHOTS + 10, "{}", kept.len());
        assert!(kept.len() >= KEPT_SNAPSHOTS / 2, "{}", kept.len());
        // Evenly: the same step all along, and the newest kept.
        assert_eq!(*kept.last().unwrap(), 5_000);
        let older = &kept[..kept.len() - 1];
        let step = older[1] - older[0];
        assert!(older.windows(2).all(|w| w[1] - w[0] == step), "{older:?}");
        assert!(older[0] <= step, "{older:?}");
        // The program's own jemalloc's dumps go with them.
        let companions: Vec<u64> = preload::all_dumps(&dir, "svc", preload::APP_STEM)
            .iter()
            .map(|d| preload::dump_seq(d).unwrap())
            .collect();
        assert_eq!(companions, kept);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
