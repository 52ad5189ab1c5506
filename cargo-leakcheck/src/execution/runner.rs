//! Runs test processes, several at a time, each with the profiling runtime preloaded
//! (`process`), in the order the history suggests, with progress on stderr (`progress`);
//! `listing` says which tests there are. Nothing here interprets a dump.

use crate::errors::Error;
pub use crate::evidence::{
    capture_head, capture_tail, ProcessEnd, ProcessResult, CAPTURE_READ_LIMIT,
};
use crate::execution::cancel::Cancel;
use crate::execution::cargo::TestBinary;
pub use crate::execution::listing::{ListError, Selected, TestCase, BASELINE_FILTER};
use crate::execution::preload::{self, ProfileSettings};
use crate::execution::process::failed_result;
pub use crate::execution::process::{run_process, ProcessSpec};
use crate::execution::progress::Progress;
pub use crate::execution::run_config::{RunConfig, TestFilter};
use crate::execution::slots::{Slots, Ticket};
use leakcheck_protocol::env;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

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
    /// The test kept every core busy in a previous run: it runs alone (see
    /// [`crate::execution::slots`]).
    pub alone: bool,
    /// The table of the binary's live stack slots, for a test that ends the process
    /// itself (see [`crate::execution::live_slots`]).
    pub live_slots: Option<std::path::PathBuf>,
    /// Started ahead of need, on the previous run's word: called off through this when the
    /// job it depends on shows it is not needed (see [`crate::execution::cancel`]). Such a
    /// job is not in the pass's progress count.
    pub ahead: Option<std::sync::Arc<Cancel>>,
}

/// What the runtime needs to run a test again after its own run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerunRequest {
    /// The entry point's address in the executable image.
    pub entry: u64,
    /// The executable's build id (hexadecimal), checked by the runtime.
    pub build_id: String,
    /// At most this many extra runs (counting mode stops as soon as the test is settled).
    pub extra_runs: u32,
    /// `_rjem_mallctl` of a tikv-jemallocator in the binary, to dump its heap too.
    pub app_mallctl: Option<u64>,
    /// std's record of the thread ending the process (found by `entry::runtime_symbols`).
    pub exit_guard: Option<u64>,
    /// std's panic hook, address and size (found by `entry::runtime_symbols`).
    pub panic_hook: Option<(u64, u64)>,
    /// The deferred-reclamation runtimes' collectors, each with its kind, drained before
    /// each run is measured.
    pub collectors: Vec<leakcheck_protocol::drain::Collector>,
    /// How long the runtime waits, once after the last run, for the runs' threads (see
    /// [`crate::execution::extra_runs::GRACE_MS`]).
    pub grace_ms: u64,
    /// The entry point is a `fn()` (a doc-test's `main`), not libtest's
    /// `fn() -> Result<(), String>`.
    pub unit_entry: bool,
    /// With `unit_entry`: the `main` std's `lang_start` closure (the entry) calls.
    pub entry_main: Option<u64>,
}

/// What a pass's jobs came to, one entry per job in order.
pub struct Ran {
    pub results: Vec<ProcessResult>,
    /// Whether each job's process wanted every core (None: too short to tell); see
    /// [`crate::execution::slots`].
    pub wanted_every_core: Vec<Option<bool>>,
}

/// Runs the jobs, `config.jobs` at a time. `label` names the pass in progress output.
pub fn run_jobs(
    binaries: &[TestBinary],
    tests: &[TestCase],
    jobs: &[Job],
    config: &RunConfig,
    label: &str,
) -> Result<Ran, Error> {
    let nothing = |_: &Job, _: &ProcessResult| Vec::new();
    run_jobs_then(binaries, tests, jobs, config, label, &nothing, None).map(|(ran, _)| ran)
}

/// A job `then` handed on, with what it came to and whether it wanted every core.
pub type FollowedUp = (Job, ProcessResult, Option<bool>);

/// As [`run_jobs`]; besides, as each job ends, `then` may hand on jobs that follow from it
/// (a test's stacks process once its counting process shows it needs one). They start
/// before any job of the list not yet started, so a slow test's next process does not wait
/// for the rest of the pass, and come back apart, in the order they ended. They are not in
/// the pass's progress count. `watch`, when given, is asked about each running job's record
/// as it is written, and may hand on jobs too (see [`Pass::watch`]); without it no record
/// is read while the jobs run.
pub fn run_jobs_then(
    binaries: &[TestBinary],
    tests: &[TestCase],
    jobs: &[Job],
    config: &RunConfig,
    label: &str,
    then: &(dyn Fn(&Job, &ProcessResult) -> Vec<Job> + Sync),
    watch: Option<&Watch<'_>>,
) -> Result<(Ran, Vec<FollowedUp>), Error> {
    std::fs::create_dir_all(config.work_dir)
        .map_err(|e| Error::io(format!("create `{}`", config.work_dir.display()), e))?;
    let pass = Pass::new(binaries, tests, jobs, config, label, then);
    let workers = pass.places.most().min(jobs.len().max(1));
    let over = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers).map(|_| scope.spawn(|| pass.work())).collect();
        if let Some(watch) = watch {
            scope.spawn(|| pass.watch(watch, &over));
        }
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
        over.store(true, Ordering::SeqCst);
    });
    pass.progress.clear();
    Ok(pass.into_ran())
}

/// What a pass asks about a running job's record as it is written (see [`Pass::watch`]).
pub type Watch<'a> = dyn Fn(&Job, &Path) -> Vec<Job> + Sync + 'a;

/// How often the records of running processes are read (see [`Pass::watch`]).
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Locks what the workers share (none of them panics while holding it).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().expect("no worker panics while holding the lock")
}

/// A pass under way: its jobs and what its workers share.
struct Pass<'a> {
    binaries: &'a [TestBinary],
    tests: &'a [TestCase],
    jobs: &'a [Job],
    config: &'a RunConfig<'a>,
    then: &'a (dyn Fn(&Job, &ProcessResult) -> Vec<Job> + Sync),
    queue: Mutex<Queue>,
    changed: Condvar,
    /// Listed tests finished, for the progress count.
    done: AtomicUsize,
    results: Mutex<Vec<Option<ProcessResult>>>,
    wanted: Mutex<Vec<Option<bool>>>,
    followed_up: Mutex<Vec<FollowedUp>>,
    /// The jobs whose processes run now, with when each started (see [`Pass::watch`]).
    running: Mutex<Vec<(Job, std::time::SystemTime)>>,
    progress: Progress,
    places: Slots,
}

impl<'a> Pass<'a> {
    fn new(
        binaries: &'a [TestBinary],
        tests: &'a [TestCase],
        jobs: &'a [Job],
        config: &'a RunConfig<'a>,
        label: &str,
        then: &'a (dyn Fn(&Job, &ProcessResult) -> Vec<Job> + Sync),
    ) -> Self {
        let total = jobs
            .iter()
            .filter(|j| j.test.is_some() && j.ahead.is_none())
            .count();
        // Tests that run alone go first, while nothing else runs that they would wait for
        // (each is short once alone); then the longest first.
        let mut order = crate::execution::history::longest_first(
            &jobs.iter().map(|j| j.expected).collect::<Vec<_>>(),
        );
        order.sort_by_key(|&j| !jobs[j].alone);
        let places = Slots::new(config.jobs);
        // Handed out first (see `order`), so each is asked for before any other test starts.
        places.reserve_alone(jobs.iter().filter(|j| j.alone).count());
        Pass {
            binaries,
            tests,
            jobs,
            config,
            then,
            queue: Mutex::new(Queue {
                waiting: order.into_iter().map(Next::Listed).collect(),
                followed: Vec::new(),
                in_flight: 0,
            }),
            changed: Condvar::new(),
            done: AtomicUsize::new(0),
            results: Mutex::new(vec![None; jobs.len()]),
            wanted: Mutex::new(vec![None; jobs.len()]),
            followed_up: Mutex::new(Vec::new()),
            running: Mutex::new(Vec::new()),
            progress: Progress::new(total, label, config.progress),
            places,
        }
    }

    /// One worker: takes the next job until none is left, runs it in a place of its own,
    /// records what it came to and queues what it hands on.
    fn work(&self) {
        while let Some(next) = take_next(&self.queue, &self.changed) {
            let job = match next {
                Next::Listed(j) => self.jobs[j].clone(),
                Next::Followed(j) => lock(&self.queue).followed[j].clone(),
            };
            let called_off = || job.ahead.as_ref().is_some_and(|c| c.called_off());
            if called_off() {
                finish_called_off(&self.queue, &self.changed, &self.results, next);
                continue;
            }
            let place = match job.alone {
                true => self.places.acquire_alone(),
                false => self.places.acquire(),
            };
            if called_off() {
                drop(place);
                finish_called_off(&self.queue, &self.changed, &self.results, next);
                continue;
            }
            let binary = &self.binaries[job.binary];
            let test = job.test.map(|t| &self.tests[t]);
            let key = job_key(&job);
            lock(&self.running).push((job.clone(), std::time::SystemTime::now()));
            let result = run_one(binary, test, &key, self.config, &job, &place);
            lock(&self.running).retain(|(j, _)| job_key(j) != key);
            let wanted_every_core = place.wanted_every_core();
            drop(place);
            let more = (self.then)(&job, &result);
            self.record(next, job, result, wanted_every_core);
            self.hand_on(more);
        }
    }

    /// Keeps what a job came to: a listed job's in its place (and counted in the
    /// progress), a followed one's with the others.
    fn record(&self, next: Next, job: Job, result: ProcessResult, wanted_every_core: Option<bool>) {
        match next {
            Next::Listed(j) => {
                if let (Some(t), None) = (job.test, &job.ahead) {
                    let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
                    let binary = &self.binaries[job.binary];
                    (self.progress).finished(n, binary, &self.tests[t], &result, job.first);
                }
                lock(&self.wanted)[j] = wanted_every_core;
                lock(&self.results)[j] = Some(result);
            }
            Next::Followed(_) => lock(&self.followed_up).push((job, result, wanted_every_core)),
        }
    }

    /// Queues the jobs a finished job hands on ahead of the rest, and frees its turn.
    fn hand_on(&self, more: Vec<Job>) {
        let mut q = lock(&self.queue);
        queue_first(&mut q, more);
        q.in_flight -= 1;
        self.changed.notify_all();
    }

    /// Until the pass is `over`: reads, every [`WATCH_EVERY`], the record each running
    /// process has written so far, and queues ahead of the rest what `watch` hands on for
    /// it. A record older than its process's start is a previous run's, not read.
    fn watch(&self, watch: &Watch<'_>, over: &AtomicBool) {
        while !over.load(Ordering::SeqCst) {
            std::thread::sleep(WATCH_EVERY);
            let running = lock(&self.running).clone();
            for (job, started) in running {
                let record = self
                    .config
                    .work_dir
                    .join(format!("{}.record", job_key(&job)));
                let fresh = std::fs::metadata(&record)
                    .and_then(|m| m.modified())
                    .is_ok_and(|written| written >= started);
                if !fresh {
                    continue;
                }
                let more = watch(&job, &record);
                if !more.is_empty() {
                    // Queued while the watched job still runs, so the pass cannot end
                    // before these are taken.
                    queue_first(&mut lock(&self.queue), more);
                    self.changed.notify_all();
                }
            }
        }
    }

    /// What the pass came to, once every worker ended.
    fn into_ran(self) -> (Ran, Vec<FollowedUp>) {
        let results = (self.results.into_inner())
            .expect("workers ended")
            .into_iter()
            .map(|r| {
                // Only an interruption leaves a job unstarted.
                r.unwrap_or_else(|| {
                    failed_result(ProcessEnd::Interrupted, PathBuf::new(), PathBuf::new())
                })
            })
            .collect();
        let ran = Ran {
            results,
            wanted_every_core: self.wanted.into_inner().expect("workers ended"),
        };
        (ran, self.followed_up.into_inner().expect("workers ended"))
    }
}

/// Puts `more` at the head of the waiting jobs (the last of them first).
fn queue_first(q: &mut Queue, more: Vec<Job>) {
    for job in more {
        q.followed.push(job);
        let j = q.followed.len() - 1;
        q.waiting.push_front(Next::Followed(j));
    }
}

/// The name of a job's files in the work directory.
fn job_key(job: &Job) -> String {
    let mode = match job.settings.mode {
        preload::ProfileMode::Count => "count",
        preload::ProfileMode::Stacks => "stacks",
        preload::ProfileMode::Periodic => "periodic",
    };
    match job.test {
        Some(t) => format!("b{}-t{t}-{mode}", job.binary),
        None => format!("b{}-baseline-{mode}", job.binary),
    }
}

/// Records a job called off before it started (its result is never read) and frees its
/// turn.
fn finish_called_off(
    queue: &Mutex<Queue>,
    changed: &Condvar,
    results: &Mutex<Vec<Option<ProcessResult>>>,
    next: Next,
) {
    if let Next::Listed(j) = next {
        results
            .lock()
            .expect("no worker panics while holding the lock")[j] = Some(called_off_result());
    }
    let mut q = queue
        .lock()
        .expect("no worker panics while holding the lock");
    q.in_flight -= 1;
    changed.notify_all();
}

/// What a job called off before it started comes to: nothing to read.
fn called_off_result() -> ProcessResult {
    failed_result(
        ProcessEnd::SpawnFailed("called off before it started".into()),
        PathBuf::new(),
        PathBuf::new(),
    )
}

/// A job to start: one of the pass's list, or one handed on by a job that ended.
#[derive(Clone, Copy)]
enum Next {
    Listed(usize),
    Followed(usize),
}

/// The jobs not yet started, and how many are running (each may still hand on more).
struct Queue {
    waiting: std::collections::VecDeque<Next>,
    followed: Vec<Job>,
    in_flight: usize,
}

/// The next job to start, counted as running; None once nothing is waiting and nothing
/// running could hand on more, or when the run is interrupted.
fn take_next(queue: &Mutex<Queue>, changed: &Condvar) -> Option<Next> {
    let mut q = queue
        .lock()
        .expect("no worker panics while holding the lock");
    loop {
        if crate::execution::interrupt::requested().is_some() {
            return None;
        }
        if let Some(next) = q.waiting.pop_front() {
            q.in_flight += 1;
            return Some(next);
        }
        if q.in_flight == 0 {
            return None;
        }
        // The interruption is noticed within this time even if nothing ends.
        q = changed
            .wait_timeout(q, Duration::from_millis(200))
            .expect("no worker panics while holding the lock")
            .0;
    }
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
    if binary.harness.lists() {
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
    if binary.harness == crate::execution::cargo::Harness::Doc {
        extra.push((env::FIRST_RUN_ON_MAIN, env::ON.into()));
    }
    if let Some(r) = &job.rerun {
        extra.push((env::RERUN_ENTRY, format!("{:x}", r.entry)));
        if r.unit_entry {
            extra.push((env::RERUN_ENTRY_UNIT, env::ON.into()));
        }
        if let Some(main) = r.entry_main {
            extra.push((env::RERUN_ENTRY_MAIN, format!("{main:x}")));
        }
        extra.push((env::RERUN_BUILD_ID, r.build_id.clone()));
        extra.push((env::EXTRA_RUNS, r.extra_runs.to_string()));
        extra.push((
            env::RERUN_SETTLE_MS,
            crate::execution::extra_runs::SETTLE_MS.to_string(),
        ));
        extra.push((env::RERUN_GRACE_MS, r.grace_ms.to_string()));
        if let Some(g) = r.exit_guard {
            extra.push((env::RERUN_EXIT_GUARD, format!("{g:x}")));
        }
        if let Some((address, size)) = r.panic_hook {
            extra.push((env::PANIC_HOOK, format!("{address:x} {size:x}")));
        }
        if !r.collectors.is_empty() {
            extra.push((
                env::DRAIN,
                leakcheck_protocol::drain::List(&r.collectors).to_string(),
            ));
        }
        if let Some(m) = r.app_mallctl {
            extra.push((env::APP_MALLCTL, format!("{m:x}")));
            extra.push((
                env::APP_PREFIX,
                preload::dump_prefix(config.work_dir, key, preload::APP_STEM)
                    .display()
                    .to_string(),
            ));
        }
    }
    if job.settings.mode == preload::ProfileMode::Count {
        let probe = binary.facts.alloc_probe();
        let build_id = binary.facts.tests.as_ref().map(|i| i.build_id.clone());
        if let (Some((alloc, dealloc)), Some(build_id)) = (probe, build_id) {
            extra.push((env::ALLOC_PROBE, format!("{alloc:x} {dealloc:x}")));
            if job.rerun.is_none() {
                extra.push((env::RERUN_BUILD_ID, build_id));
            }
        }
    }
    if let Some(table) = &job.live_slots {
        extra.push((env::LIVE_SLOTS, table.display().to_string()));
    }
    if job.test.is_some() && !binary.facts.collections.collections.is_empty() {
        let table = crate::execution::collections::table_file(config.work_dir, job.binary);
        extra.push((env::COLLECTIONS, table.display().to_string()));
    }
    // A merged doc-test executable runs one of its doc-tests by its index.
    let index = test
        .and_then(|t| binary.doc.as_ref()?.test(&t.name)?.index)
        .map(|i| i.to_string());
    let program_env: Vec<(&str, &str)> = index
        .as_deref()
        .map(|i| (crate::execution::doctests::held::RUN_ONE, i))
        .into_iter()
        .collect();
    let spec = ProcessSpec {
        args: &args,
        program_env: &program_env,
        settings: job.settings,
        quiet_backtraces: job.quiet_backtraces,
        timeout,
        extra_env: &extra,
        place: Some(place),
        cancel: job.ahead.clone(),
    };
    run_process(binary, key, config, &spec)
}
