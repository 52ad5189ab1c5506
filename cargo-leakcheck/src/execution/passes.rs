//! Chooses how each test process is profiled, and runs the passes.
//!
//! Exact stack profiling costs tens of times a plain run, yet most tests leave nothing
//! behind. So every test first runs in counting mode (profiling off; the runtime counts
//! the objects allocated off the main thread that are still live at exit, exactly). libtest
//! runs the test body on its own thread and keeps the main thread for its bookkeeping, so
//! a count of zero objects proves the test retained nothing: it is clean, and needs no
//! second run. Only the tests that retained something, failed, or whose count is missing
//! are run again with exact stack profiling, together with their binary's baseline.
//! Binaries the counters cannot see into (no libtest harness, a custom global allocator)
//! go straight to stacks.
//!
//! Retained is not lost: a test that starts a pool, installs a logger or builds a table
//! once leaves memory behind that a second run would not add to. So a test that retains
//! something is run again in its own process, after its own run ([`crate::execution::extra_runs`]): in the
//! counting pass until one extra run leaves nothing behind, which settles it as clean
//! without stacks; otherwise its stacks are profiled with extra runs too, and only the
//! stacks that grow on every run are leaks. A test that cannot be run again (`#[should_panic]`,
//! `harness = false`, no entry point found, an extra run that panics, crashes, fails or
//! times out) is judged on its own run alone, as before, and the report says why.
//!
//! Tests run with `RUST_BACKTRACE=0` unless they failed in the counting pass: in a test
//! that passes, a panic is expected, and a backtrace std symbolizes for it is seconds of
//! allocations and a cache of tens of MiB. A test that fails is re-run with the user's
//! environment, so its failure message keeps the backtrace the user asked for.

use crate::analysis::next::{self, Counted};
use crate::errors::Error;
use crate::evidence::End;
use crate::execution::cancel::Cancel;
use crate::execution::cargo::{Harness, TestBinary};
use crate::execution::entry::Entry;
use crate::execution::extra_runs::{self, Status};
use crate::execution::history::StacksAsked;
use crate::execution::preload::{ProfileMode, ProfileSettings};
use crate::execution::runner::{
    self, Job, ProcessEnd, ProcessResult, RerunRequest, RunConfig, TestCase,
};

pub use crate::execution::beside::{Ahead, AheadOn, Beside};
pub use crate::model::Method;

/// Everything the passes produced.
pub struct PassResults {
    /// Every selected test that was judged, with how.
    pub tests: Vec<TestOutcome>,
    /// Tests matching the filters left out because they are `#[ignore]`d (binary, name).
    pub ignored: Vec<(usize, String)>,
    /// Tests left out because they belong to another shard of `--partition`.
    pub other_shards: usize,
    /// Tests an interruption left unjudged (see [`crate::execution::interrupt`]).
    pub not_finished: Vec<TestCase>,
    /// Binaries whose tests could not be listed, with the reason.
    pub list_errors: Vec<(usize, runner::ListError)>,
    /// Per binary: its harness-only baseline, when any of its tests was profiled.
    pub baselines: Vec<Option<ProcessResult>>,
}

/// One judged test: what ran and what its verdict is to be drawn from.
pub struct TestOutcome {
    /// The test.
    pub case: TestCase,
    /// The process result the verdict is drawn from. Its `end` is how the test's own run
    /// ended, even when an extra run later killed the process.
    pub result: ProcessResult,
    /// How the verdict is reached.
    pub method: Method,
    /// Its counting run, when it had one.
    pub counted: Option<ProcessResult>,
    /// The extra runs of the process its verdict is drawn from.
    pub extra_runs: extra_runs::ExtraRunsOutcome,
    /// The entry point its extra runs called, when found.
    pub entry: Option<Entry>,
    /// Whether its processes wanted every core (None: too short to tell); see
    /// [`crate::execution::slots`].
    pub wanted_every_core: Option<bool>,
    /// What its stacks process was asked for, when it had one after its counting process
    /// (the inner None: no extra runs); remembered for the next run.
    pub stacks_asked: Option<Option<StacksAsked>>,
    /// What became of a stacks process started beside its counting process, if one was.
    pub ahead: Option<Beside>,
}

/// Writes the binary's table of live stack slots into the work directory; None when the
/// executable cannot be read or describes none (the runtime then keeps whole frames).
fn write_live_slots(
    binary: &TestBinary,
    index: usize,
    config: &RunConfig,
) -> Option<std::path::PathBuf> {
    let data = std::fs::read(&binary.path).ok()?;
    let functions = crate::execution::live_slots::read(&data).ok()?;
    if functions.is_empty() {
        return None;
    }
    let path = config.work_dir.join(format!("b{index}.live-slots"));
    std::fs::write(&path, crate::execution::live_slots::render(&functions)).ok()?;
    Some(path)
}

/// How the test's own run ended: the record's exit status when the runtime's exit handler
/// ran (an extra run may have killed the process afterwards), else how the process ended.
pub fn first_run_end(result: &ProcessResult) -> ProcessEnd {
    result.first_run_end()
}

/// Whether the counting pass can judge this binary's tests: a libtest harness (or doc-tests
/// that can run again), and either
/// std's own global allocator or one the runtime can ask, at exit, whether it reaches its
/// `malloc` (a counting process whose answer is no goes on to the stacks pass; see
/// [`crate::execution::facts::BinaryFacts::alloc_probe`]).
pub fn countable(binary: &TestBinary) -> bool {
    // A doc-test runs on the main thread, which no count includes: counted through its
    // extra runs only, so only one that can run again.
    let runs_again = match binary.harness {
        Harness::Libtest => true,
        Harness::Doc => binary
            .facts
            .tests
            .as_ref()
            .is_some_and(|t| !t.entries.is_empty()),
        Harness::Trials | Harness::Whole => false,
    };
    runs_again
        && (!binary.facts.symbols.custom_global_allocator || binary.facts.alloc_probe().is_some())
}

/// Why a trial of a custom harness is not run again: the runtime calls libtest's entry point
/// of a test, and a harness of the target's own has none.
const TRIAL_HAS_NO_ENTRY: &str =
    "a trial of a harness = false target's own harness has no libtest entry point to call again in its process";

/// The extra runs a test can have, or why it can have none.
fn rerun_request(t: &TestCase, binary: &TestBinary, runs: u32) -> Result<RerunRequest, Status> {
    if runs == 0 {
        return Err(Status::Off);
    }
    // rustdoc says which doc-tests pass by panicking: they panic on every run.
    if t.passes_by_panicking {
        return Err(Status::ShouldPanic);
    }
    match binary.harness {
        Harness::Libtest | Harness::Doc => {}
        Harness::Whole => return Err(Status::NoHarness),
        Harness::Trials => return Err(Status::NoEntryPoint(TRIAL_HAS_NO_ENTRY.into())),
    }
    let Some(inspection) = binary.facts.tests.as_ref() else {
        return Err(Status::NoEntryPoint(
            "the executable was not inspected".into(),
        ));
    };
    let Some(entry) = inspection.entries.get(&t.name) else {
        let why = inspection.no_entry.get(&t.name).cloned();
        return Err(Status::NoEntryPoint(
            why.or(inspection.problem.clone())
                .unwrap_or_else(|| format!("`{}` is not in libtest's table of tests", t.name)),
        ));
    };
    Ok(RerunRequest {
        entry: entry.address,
        build_id: inspection.build_id.clone(),
        extra_runs: runs,
        app_mallctl: inspection.app_mallctl,
        exit_guard: inspection.exit_guard,
        panic_hook: inspection.panic_hook,
        collectors: inspection.collectors.clone(),
        grace_ms: extra_runs::GRACE_MS,
        unit_entry: inspection.unit_entries,
        entry_main: inspection.entry_mains.get(&t.name).copied(),
    })
}

/// Reads the extra runs off a finished process and records how the test's own run ended.
fn conclude(
    result: &mut ProcessResult,
    test: &TestCase,
    not_asked: Option<&Status>,
) -> extra_runs::ExtraRunsOutcome {
    // libtest's line for the test comes first on stdout; a panic of an extra run last on
    // stderr.
    let stdout = runner::capture_head(&result.stdout, runner::CAPTURE_READ_LIMIT);
    let stderr = runner::capture_tail(&result.stderr, runner::CAPTURE_READ_LIMIT);
    let outcome = extra_runs::interpret(
        result.record.as_ref(),
        not_asked,
        &next::ProcessOutput {
            end: &result.end,
            stdout: &stdout,
            stderr: &stderr,
            test: &test.name,
        },
    );
    result.end = first_run_end(result);
    if test.passes_by_panicking {
        return as_rustdoc_judges(result, outcome);
    }
    outcome
}

/// A doc-test that should panic ends its process with a failure status when it passes:
/// rustdoc, its harness outside the process, takes that status as the pass and a clean exit
/// as the failure, and so is its end read here. It cannot run again (it panics every time).
fn as_rustdoc_judges(
    result: &mut ProcessResult,
    outcome: extra_runs::ExtraRunsOutcome,
) -> extra_runs::ExtraRunsOutcome {
    match result.end {
        ProcessEnd::Exited(0) => {
            result.end = ProcessEnd::Exited(DID_NOT_PANIC);
            outcome
        }
        ProcessEnd::Exited(_) => {
            result.end = ProcessEnd::Exited(0);
            extra_runs::ExtraRunsOutcome::none(Status::ShouldPanic)
        }
        _ => outcome,
    }
}

/// The exit status given a doc-test that should have panicked and returned: a failure.
const DID_NOT_PANIC: i32 = 1;

/// Reads a counting process's extra runs (see [`conclude`]) and what counting settles of
/// its test ([`next::after_counting`]).
fn conclude_counting(
    result: &mut ProcessResult,
    test: &TestCase,
    not_asked: Option<&Status>,
    lifetime_fails: bool,
) -> Counted {
    let outcome = conclude(result, test, not_asked);
    next::after_counting(result, outcome, lifetime_fails)
}

/// Runs the counting pass (unless `stacks_for_all`), then exact stack profiling where
/// needed, each with extra runs where they can tell something.
pub fn run(
    binaries: &mut [TestBinary],
    config: &RunConfig,
    stacks_for_all: bool,
) -> Result<PassResults, Error> {
    let runner::Selected {
        tests,
        ignored,
        other_shards,
        errors: list_errors,
        names: _,
    } = crate::execution::memo::list_and_read(binaries, config);
    crate::execution::collections::write_tables(binaries, config.work_dir)?;
    let binaries = &*binaries;
    let plan = Plan::of(&tests, binaries, config);
    let mut ran = count_pass(binaries, &tests, &plan, config, stacks_for_all)?;
    let mut settled = settle_by_counting(&tests, &plan, &mut ran.counted);
    let profile = to_profile(&tests, &plan, &ran.counted, &settled);
    let baselines = stacks_pass(binaries, &tests, &plan, &profile, config, &mut ran)?;
    let unfinished = unfinished(binaries, &tests, &profile, &baselines, &ran);
    for (t, request) in profile {
        if unfinished[t] {
            continue;
        }
        if let Some(r) = ran.profiled[t].as_mut() {
            let outcome = conclude(r, &tests[t], request.as_ref().err());
            settled[t] = Some(Counted::Stacks {
                rerun: false,
                outcome,
            });
        }
    }
    let (judged, not_finished) = assemble(tests, plan.entries, ran, settled, &unfinished);
    Ok(PassResults {
        tests: judged,
        ignored,
        other_shards,
        not_finished,
        list_errors,
        baselines,
    })
}

/// What is known of each test before it runs.
struct Plan {
    /// Its extra runs, or why it has none.
    requests: Vec<Result<RerunRequest, Status>>,
    /// Its function in libtest's table.
    entries: Vec<Option<Entry>>,
    /// How long it took last time.
    expected: Vec<Option<f64>>,
    /// Whether it wanted every core last time: it runs alone (see
    /// `crate::execution::slots`).
    alone: Vec<bool>,
    /// Its binary.
    binary: Vec<usize>,
    /// What its stacks process was asked for, when its previous run had one after its
    /// counting process (see [`Plan::ahead_job`]).
    stacks_before: Vec<Option<Option<StacksAsked>>>,
}

impl Plan {
    /// Test `t`'s stacks process to start beside its counting process, as its previous
    /// run's was asked for; None when it had none, or when that does not fit what the test
    /// can have now (extra runs, or their absence), or the test runs alone (its two
    /// processes would not).
    fn ahead_job(&self, t: usize) -> Option<Job> {
        let before = self.stacks_before[t]?;
        if self.alone[t] {
            return None;
        }
        let request = match (&self.requests[t], before) {
            (Ok(r), Some(asked)) => Ok(RerunRequest {
                extra_runs: asked.runs,
                grace_ms: asked.grace_ms,
                ..r.clone()
            }),
            (Err(why), None) => Err(why.clone()),
            _ => return None,
        };
        let mut job = stacks_job(t, &request, None, self, None);
        job.first = false;
        job.ahead = Some(std::sync::Arc::new(Cancel::default()));
        Some(job)
    }

    /// Test `t`'s stacks process to start beside its counting process once that is headed
    /// for it (see [`next::headed_for_stacks`]), asked for what that counting process
    /// will ask for if it goes where it is headed: every extra run the test can have after
    /// a series that kept what its runs left; the rest of them, and no second wait for
    /// threads, after one whose runs left threads. None when the test runs alone or can
    /// have no extra runs.
    fn early_job(&self, t: usize, headed: next::Headed) -> Option<Job> {
        if self.alone[t] {
            return None;
        }
        let configured = self.requests[t].clone().ok()?;
        let request = Ok(match headed {
            next::Headed::Stacks => configured,
            next::Headed::StacksAfterThreadsLeft => RerunRequest {
                extra_runs: extra_runs::runs_after_threads_left(
                    configured.extra_runs,
                    leakcheck_protocol::settling::RUNS_LEAVING_THREADS,
                ),
                grace_ms: 0,
                ..configured
            },
        });
        let mut job = stacks_job(t, &request, None, self, None);
        job.first = false;
        job.ahead = Some(std::sync::Arc::new(Cancel::default()));
        Some(job)
    }

    fn of(tests: &[TestCase], binaries: &[TestBinary], config: &RunConfig) -> Plan {
        let id = |t: &TestCase| binaries[t.binary].id();
        Plan {
            requests: tests
                .iter()
                .map(|t| rerun_request(t, &binaries[t.binary], t.settings.extra_runs))
                .collect(),
            entries: tests
                .iter()
                .map(|t| {
                    binaries[t.binary]
                        .facts
                        .tests
                        .as_ref()
                        .and_then(|i| i.entries.get(&t.name).copied())
                })
                .collect(),
            expected: tests
                .iter()
                .map(|t| config.history.expected(&id(t), &t.name))
                .collect(),
            alone: tests
                .iter()
                .map(|t| config.history.alone(&id(t), &t.name))
                .collect(),
            binary: tests.iter().map(|t| t.binary).collect(),
            stacks_before: tests
                .iter()
                .map(|t| config.history.stacks_after_counting(&id(t), &t.name))
                .collect(),
        }
    }
}

/// What the passes ran, per test.
struct Concluded {
    /// Its counting process.
    counted: Vec<Option<ProcessResult>>,
    /// Its stacks process.
    profiled: Vec<Option<ProcessResult>>,
    /// Whether its processes wanted every core.
    wanted: Vec<Option<bool>>,
    /// Per binary: its baseline, when a stacks process of one of its tests followed its
    /// counting process during the counting pass.
    baselines: Vec<Option<ProcessResult>>,
    /// What its stacks process was asked for, when it had one after its counting process.
    asked: Vec<Option<Option<StacksAsked>>>,
    /// What became of its stacks process started beside its counting process.
    ahead: Vec<Option<Beside>>,
}

impl Concluded {
    /// Test `t`'s stacks process `job` came to `result`.
    fn profile(&mut self, t: usize, job: &Job, result: ProcessResult, wanted: Option<bool>) {
        self.profiled[t] = Some(result);
        self.wanted[t] = either_wanted(self.wanted[t], wanted);
        if !job.first {
            self.asked[t] = Some(job.rerun.as_ref().map(|r| StacksAsked {
                runs: r.extra_runs,
                grace_ms: r.grace_ms,
            }));
        }
    }
}

/// The counting pass: every test of a binary the counters can see into, with extra runs
/// (more than the stacks pass makes: a pool that warms over several runs settles here).
///
/// A test whose counting shows it needs its stacks gets its stacks process at once, before
/// the rest of the pass: a slow test's two processes then run one after the other, not the
/// second after every other test's first. A test whose previous run needed a stacks process
/// after its counting process gets it from the start, beside its counting process, with the
/// extra runs it was asked for then ([`Plan::ahead_job`]); it is kept only when the counting
/// process asks for exactly that process now, and called off otherwise. Either way what a
/// test is judged by is what the stacks pass would have run, decided by the same rules.
fn count_pass(
    binaries: &[TestBinary],
    tests: &[TestCase],
    plan: &Plan,
    config: &RunConfig,
    stacks_for_all: bool,
) -> Result<Concluded, Error> {
    let counting: Vec<bool> = binaries
        .iter()
        .map(|b| !stacks_for_all && countable(b))
        .collect();
    let (jobs, roles) = counting_jobs(binaries, tests, plan, &counting);
    let mut ran = Concluded {
        counted: vec![None; tests.len()],
        profiled: vec![None; tests.len()],
        wanted: vec![None; tests.len()],
        baselines: vec![None; binaries.len()],
        asked: vec![None; tests.len()],
        ahead: vec![None; tests.len()],
    };
    if jobs.is_empty() {
        return Ok(ran);
    }
    let ahead = std::sync::Mutex::new(AheadJobs::listed(&jobs, &roles, tests, binaries));
    let adopted = std::sync::Mutex::new(vec![false; tests.len()]);
    let follow = |job: &Job, result: &ProcessResult| -> Vec<Job> {
        let (Some(t), ProfileMode::Count) = (job.test, job.settings.mode) else {
            return Vec::new();
        };
        let mut ahead = ahead.lock().expect("no panic while held");
        ahead.decided[t] = true;
        // A counting process whose test's own run, or one of its extra runs, failed beside
        // its stacks process may have failed because of it (a fixed port, a lock file):
        // that process is called off and the counting process runs again, alone, before
        // anything is drawn from it.
        let beside = ahead.of[t].is_some() && !ahead.counted_alone[t];
        if beside && met_its_neighbour(result, &tests[t], plan, t) {
            ahead.counted_alone[t] = true;
            if let Some(cancel) = ahead.of[t].as_ref().and_then(|a| a.ahead.as_ref()) {
                cancel.call_off();
            }
            return vec![job.clone()];
        }
        let next = stacks_after_counting(t, tests, plan, result);
        if let (Some(early), Some(real), true) = (&ahead.of[t], &next, beside) {
            if early.rerun == real.rerun && early.quiet_backtraces == real.quiet_backtraces {
                adopted.lock().expect("no panic while held")[t] = true;
                return Vec::new();
            }
        }
        if let Some(cancel) = ahead.of[t].as_ref().and_then(|a| a.ahead.as_ref()) {
            cancel.call_off();
        }
        let Some(real) = next else {
            return Vec::new();
        };
        ahead.with_baseline(binaries, tests[t].binary, real)
    };
    // A counting process whose record shows it is headed for its stacks gets its stacks
    // process now, beside it, when the previous run did not start one already.
    let watch = |job: &Job, record: &std::path::Path| -> Vec<Job> {
        let (Some(t), ProfileMode::Count) = (job.test, job.settings.mode) else {
            return Vec::new();
        };
        let mut ahead = ahead.lock().expect("no panic while held");
        ahead.start_if_headed(t, record, plan, binaries)
    };
    let (done, followed) = runner::run_jobs_then(
        binaries,
        tests,
        &jobs,
        config,
        "Counting",
        &follow,
        Some(&watch),
    )?;
    let adopted = adopted.into_inner().expect("no panic while held");
    ran.take_counting(&jobs, &roles, done, followed, &adopted);
    Ok(ran)
}

/// Whether test `t`'s counting process, which ran beside its stacks process, ended as one
/// that met that process might (see [`next::may_have_met_its_neighbour`]).
fn met_its_neighbour(result: &ProcessResult, test: &TestCase, plan: &Plan, t: usize) -> bool {
    let mut concluded = result.clone();
    let outcome = conclude(&mut concluded, test, plan.requests[t].as_ref().err());
    next::may_have_met_its_neighbour(&concluded.end, &outcome)
}

/// The stacks processes started ahead of their counting processes' end, as the counting
/// pass goes.
struct AheadJobs {
    /// Per test: its stacks process started ahead, on the previous run's word or because
    /// its counting process was headed for it.
    of: Vec<Option<Job>>,
    /// Per test: its counting process ended, and what follows it is decided.
    decided: Vec<bool>,
    /// Per test: its counting process runs again, alone, its test having failed its own run
    /// beside its stacks process.
    counted_alone: Vec<bool>,
    /// Per binary: its baseline is queued already.
    baseline_handed_on: Vec<bool>,
}

impl AheadJobs {
    /// The counting pass's stacks processes started with it (`ProcessRole::Ahead`), and the
    /// baselines listed for them.
    fn listed(
        jobs: &[Job],
        roles: &[ProcessRole],
        tests: &[TestCase],
        binaries: &[TestBinary],
    ) -> Self {
        let mut ahead = AheadJobs {
            of: vec![None; tests.len()],
            decided: vec![false; tests.len()],
            counted_alone: vec![false; tests.len()],
            baseline_handed_on: vec![false; binaries.len()],
        };
        for (job, role) in jobs.iter().zip(roles) {
            match *role {
                ProcessRole::Ahead(t) => ahead.of[t] = Some(job.clone()),
                ProcessRole::Baseline(b) => ahead.baseline_handed_on[b] = true,
                ProcessRole::Count(_) => {}
            }
        }
        ahead
    }

    /// Test `t`'s stacks process (after its binary's baseline, when needed) to start now,
    /// beside its counting process, when the record that process has written so far
    /// (`record`) shows it is headed for it and none was started already.
    fn start_if_headed(
        &mut self,
        t: usize,
        record: &std::path::Path,
        plan: &Plan,
        binaries: &[TestBinary],
    ) -> Vec<Job> {
        if self.decided[t] || self.of[t].is_some() {
            return Vec::new();
        }
        let Ok(text) = std::fs::read_to_string(record) else {
            return Vec::new();
        };
        let Some(headed) = next::headed_for_stacks(&crate::evidence::Record::parse(&text)) else {
            return Vec::new();
        };
        let Some(early) = plan.early_job(t, headed) else {
            return Vec::new();
        };
        self.of[t] = Some(early.clone());
        self.with_baseline(binaries, plan.binary[t], early)
    }

    /// `job`, after binary `b`'s baseline when that is not queued yet and the binary has
    /// one.
    fn with_baseline(&mut self, binaries: &[TestBinary], b: usize, job: Job) -> Vec<Job> {
        let mut handed = Vec::new();
        if binaries[b].harness.lists() && !self.baseline_handed_on[b] {
            self.baseline_handed_on[b] = true;
            handed.push(baseline_job(b));
        }
        handed.push(job);
        handed
    }
}

impl Concluded {
    /// Takes what the counting pass's `jobs` (each of its role) and the jobs they handed on
    /// came to; a stacks process started ahead is kept when its test `adopted` it and ended
    /// as its counting process did.
    fn take_counting(
        &mut self,
        jobs: &[Job],
        roles: &[ProcessRole],
        done: runner::Ran,
        followed: Vec<runner::FollowedUp>,
        adopted: &[bool],
    ) {
        for (((job, role), r), w) in jobs
            .iter()
            .zip(roles)
            .zip(done.results)
            .zip(done.wanted_every_core)
        {
            match *role {
                ProcessRole::Count(t) => {
                    self.counted[t] = Some(r);
                    self.wanted[t] = either_wanted(self.wanted[t], w);
                }
                // Two processes of one test side by side may collide where one alone would
                // not (a fixed port, a fixed file): a stacks process whose test did not end as
                // its counting process's did is not used, and the stacks pass runs it again,
                // alone.
                ProcessRole::Ahead(t) => {
                    self.take_ahead(t, job, r, w, adopted[t], AheadOn::PreviousRun)
                }
                ProcessRole::Baseline(b) => self.baselines[b] = Some(r),
            }
        }
        // The counting processes' results are all in: a stacks process started ahead as
        // its counting process went (not listed) is judged against its counting process
        // as a listed one is.
        for (job, r, w) in followed {
            match (job.test, job.settings.mode) {
                (None, _) => self.baselines[job.binary] = Some(r),
                // Its counting process, run again alone (see `count_pass`).
                (Some(t), ProfileMode::Count) => {
                    self.counted[t] = Some(r);
                    self.wanted[t] = either_wanted(self.wanted[t], w);
                }
                (Some(t), _) if job.ahead.is_some() => {
                    self.take_ahead(t, &job, r, w, adopted[t], AheadOn::CountingHeaded)
                }
                (Some(t), _) => self.profile(t, &job, r, w),
            }
        }
    }

    /// Takes test `t`'s stacks process started ahead, `job`, which came to `r`: kept when
    /// its test `adopted` it and it ended as the counting process did.
    fn take_ahead(
        &mut self,
        t: usize,
        job: &Job,
        r: ProcessResult,
        w: Option<bool>,
        adopted: bool,
        on: AheadOn,
    ) {
        let same_end = self.counted[t]
            .as_ref()
            .is_some_and(|c| first_run_end(c) == first_run_end(&r));
        let came_to = match (adopted, same_end) {
            (true, true) => Ahead::Kept,
            (true, false) => Ahead::NotUsed,
            (false, _) => Ahead::CalledOff,
        };
        self.ahead[t] = Some(Beside { on, came_to });
        if came_to == Ahead::Kept {
            self.profile(t, job, r, w);
        }
    }
}

/// What a job of the counting pass is.
#[derive(Clone, Copy)]
enum ProcessRole {
    /// Test `t`'s counting process.
    Count(usize),
    /// Test `t`'s stacks process, started beside its counting process on the previous
    /// run's word.
    Ahead(usize),
    /// Binary `b`'s baseline, for the stacks processes started ahead.
    Baseline(usize),
}

/// The counting pass's jobs: each countable test's counting process, followed by its stacks
/// process where the previous run says it will need one, and the baselines those need.
fn counting_jobs(
    binaries: &[TestBinary],
    tests: &[TestCase],
    plan: &Plan,
    counting: &[bool],
) -> (Vec<Job>, Vec<ProcessRole>) {
    let count_mode = ProfileSettings {
        mode: ProfileMode::Count,
        lg_sample: 0,
    };
    let mut jobs = Vec::new();
    let mut roles = Vec::new();
    let mut baseline_needed = vec![false; binaries.len()];
    let doc = |t: usize| binaries[tests[t].binary].harness == Harness::Doc;
    let counted =
        |t: usize| counting[tests[t].binary] && next::can_settle(doc(t), &plan.requests[t]);
    for t in (0..tests.len()).filter(|&t| counted(t)) {
        jobs.push(Job {
            binary: tests[t].binary,
            test: Some(t),
            settings: count_mode,
            quiet_backtraces: true,
            rerun: plan.requests[t].clone().ok().map(|r| RerunRequest {
                extra_runs: r
                    .extra_runs
                    .saturating_mul(extra_runs::COUNTING_RUNS_FACTOR),
                ..r
            }),
            first: true,
            expected: plan.expected[t],
            alone: plan.alone[t],
            live_slots: None,
            ahead: None,
        });
        roles.push(ProcessRole::Count(t));
        if let Some(job) = plan.ahead_job(t) {
            baseline_needed[tests[t].binary] |= binaries[tests[t].binary].harness.lists();
            jobs.push(job);
            roles.push(ProcessRole::Ahead(t));
        }
    }
    for (b, _) in baseline_needed.iter().enumerate().filter(|(_, n)| **n) {
        jobs.push(baseline_job(b));
        roles.push(ProcessRole::Baseline(b));
    }
    (jobs, roles)
}

/// The stacks process test `t` needs after its counting process ended with `result`, None
/// when counting settled it, or when it ended the process itself (its stacks process needs
/// the binary's table of live stack slots, written by the stacks pass).
fn stacks_after_counting(
    t: usize,
    tests: &[TestCase],
    plan: &Plan,
    result: &ProcessResult,
) -> Option<Job> {
    let mut counted = result.clone();
    let settled = conclude_counting(
        &mut counted,
        &tests[t],
        plan.requests[t].as_ref().err(),
        tests[t].settings.one_time_fails,
    );
    let request = profile_request(t, plan, Some(&counted), Some(&settled))?;
    if exited_early(Some(&counted)) {
        return None;
    }
    Some(stacks_job(t, &request, Some(&counted), plan, None))
}

/// Whether a test wanted every core, from two of its processes.
fn either_wanted(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (a, b) => a.or(b),
    }
}

/// Whether the test ended the process itself in its counting run.
fn exited_early(counted: Option<&ProcessResult>) -> bool {
    counted
        .and_then(|c| c.record.as_ref())
        .is_some_and(|r| r.end == Some(End::ExitedEarly))
}

/// The harness-only baseline process of binary `b`.
fn baseline_job(b: usize) -> Job {
    Job {
        binary: b,
        test: None,
        settings: ProfileSettings::default(),
        quiet_backtraces: true,
        rerun: None,
        first: false,
        expected: None,
        alone: false,
        live_slots: None,
        ahead: None,
    }
}

/// Test `t`'s stacks process, after its counting process `counted` (None: it had none).
fn stacks_job(
    t: usize,
    request: &Result<RerunRequest, Status>,
    counted: Option<&ProcessResult>,
    plan: &Plan,
    live_slots: Option<std::path::PathBuf>,
) -> Job {
    let failed = counted.is_some_and(|c| c.end != ProcessEnd::Exited(0));
    Job {
        binary: plan.binary[t],
        test: Some(t),
        settings: ProfileSettings::default(),
        quiet_backtraces: !failed,
        // Only tests every counted run of which left memory behind come here (or every
        // test, with --stacks-for-all): their runs are what shows the growing stacks.
        rerun: request.as_ref().ok().cloned(),
        first: counted.is_none(),
        expected: plan.expected[t],
        alone: plan.alone[t],
        live_slots,
        ahead: None,
    }
}

/// Per test: what the counting pass settled.
fn settle_by_counting(
    tests: &[TestCase],
    plan: &Plan,
    counted: &mut [Option<ProcessResult>],
) -> Vec<Option<Counted>> {
    (0..tests.len())
        .map(|t| {
            let c = counted[t].as_mut()?;
            let lifetime_fails = tests[t].settings.one_time_fails;
            Some(conclude_counting(
                c,
                &tests[t],
                plan.requests[t].as_ref().err(),
                lifetime_fails,
            ))
        })
        .collect()
}

/// Tests to profile, with extra runs or with the reason they have none.
fn to_profile(
    tests: &[TestCase],
    plan: &Plan,
    counted: &[Option<ProcessResult>],
    settled: &[Option<Counted>],
) -> Vec<(usize, Result<RerunRequest, Status>)> {
    (0..tests.len())
        .filter_map(|t| {
            let request = profile_request(t, plan, counted[t].as_ref(), settled[t].as_ref())?;
            Some((t, request))
        })
        .collect()
}

/// Whether test `t` is profiled, given its counting process and what that settled: its
/// extra runs, or why it has none; None when counting settled it.
fn profile_request(
    t: usize,
    plan: &Plan,
    counted: Option<&ProcessResult>,
    settled: Option<&Counted>,
) -> Option<Result<RerunRequest, Status>> {
    match settled {
        Some(Counted::Clean(_)) | Some(Counted::Over(_)) => None,
        Some(Counted::Stacks { rerun, outcome }) => {
            // Threads the counting runs started that were still running after their
            // grace will not have ended in the stacks pass either: no second wait.
            let record = counted.and_then(|c| c.record.as_ref());
            let threads_stayed = record
                .and_then(|r| r.grace)
                .is_some_and(|g| g.threads_running > 0);
            Some(match (rerun, &plan.requests[t]) {
                (true, Ok(r)) => Ok(RerunRequest {
                    grace_ms: if threads_stayed { 0 } else { r.grace_ms },
                    extra_runs: extra_runs::stacks_runs(r.extra_runs, record),
                    ..r.clone()
                }),
                (_, Err(why)) => Err(why.clone()),
                (false, Ok(_)) => Err(outcome.status.clone()),
            })
        }
        None => Some(plan.requests[t].clone()),
    }
}

/// The stacks pass: each profiled test, and the harness-only baseline of each binary that
/// has one; the baselines, per binary.
fn stacks_pass(
    binaries: &[TestBinary],
    tests: &[TestCase],
    plan: &Plan,
    profile: &[(usize, Result<RerunRequest, Status>)],
    config: &RunConfig,
    ran: &mut Concluded,
) -> Result<Vec<Option<ProcessResult>>, Error> {
    let mut stack_jobs: Vec<Job> = Vec::new();
    // What followed a counting process during the counting pass has run already.
    let profile: Vec<&(usize, Result<RerunRequest, Status>)> = profile
        .iter()
        .filter(|(t, _)| ran.profiled[*t].is_none())
        .collect();
    let mut baselines = std::mem::take(&mut ran.baselines);
    for (b, binary) in binaries.iter().enumerate() {
        if binary.harness.lists()
            && baselines[b].is_none()
            && profile.iter().any(|(t, _)| tests[*t].binary == b)
        {
            stack_jobs.push(baseline_job(b));
        }
    }
    // Tests that ended the process themselves: their frames are judged by the binary's
    // table of live stack slots, written once per binary.
    let mut tables: Vec<Option<Option<std::path::PathBuf>>> = vec![None; binaries.len()];
    for (t, _) in profile
        .iter()
        .filter(|(t, _)| exited_early(ran.counted[*t].as_ref()))
    {
        let b = tests[*t].binary;
        if tables[b].is_none() {
            tables[b] = Some(write_live_slots(&binaries[b], b, config));
        }
    }
    stack_jobs.extend(profile.iter().map(|(t, request)| {
        let table = match exited_early(ran.counted[*t].as_ref()) {
            true => tables[tests[*t].binary].clone().flatten(),
            false => None,
        };
        stacks_job(*t, request, ran.counted[*t].as_ref(), plan, table)
    }));
    if stack_jobs.is_empty() || crate::execution::interrupt::requested().is_some() {
        return Ok(baselines);
    }
    let done = runner::run_jobs(binaries, tests, &stack_jobs, config, "Profiling")?;
    for ((job, r), w) in stack_jobs
        .iter()
        .zip(done.results)
        .zip(done.wanted_every_core)
    {
        match job.test {
            None => baselines[job.binary] = Some(r),
            Some(t) => ran.profile(t, job, r, w),
        }
    }
    Ok(baselines)
}

/// Per test: whether an interruption left it unjudged (killed or never started in the pass
/// that would judge it, or profiled without its binary's baseline).
fn unfinished(
    binaries: &[TestBinary],
    tests: &[TestCase],
    profile: &[(usize, Result<RerunRequest, Status>)],
    baselines: &[Option<ProcessResult>],
    ran: &Concluded,
) -> Vec<bool> {
    let interrupted = |r: &ProcessResult| r.end == ProcessEnd::Interrupted;
    let mut needs_profile = vec![false; tests.len()];
    for (t, _) in profile {
        needs_profile[*t] = true;
    }
    (0..tests.len())
        .map(|t| {
            if needs_profile[t] {
                let baseline_lost = binaries[tests[t].binary].harness.lists()
                    && baselines[tests[t].binary].as_ref().is_none_or(interrupted);
                ran.profiled[t].as_ref().is_none_or(interrupted) || baseline_lost
            } else {
                ran.counted[t].as_ref().is_none_or(interrupted)
            }
        })
        .collect()
}

/// Each finished test with the process its verdict is drawn from and how; the tests an
/// interruption left unjudged apart.
fn assemble(
    tests: Vec<TestCase>,
    entries: Vec<Option<Entry>>,
    ran: Concluded,
    mut settled: Vec<Option<Counted>>,
    unfinished: &[bool],
) -> (Vec<TestOutcome>, Vec<TestCase>) {
    let Concluded {
        counted,
        mut profiled,
        wanted,
        asked,
        ahead,
        ..
    } = ran;
    let mut not_finished = Vec::new();
    let mut judged = Vec::with_capacity(tests.len());
    for (t, ((case, counted), entry)) in tests.into_iter().zip(counted).zip(entries).enumerate() {
        if unfinished[t] {
            not_finished.push(case);
            continue;
        }
        let (result, method, extra_runs) = match (profiled[t].take(), &counted, settled[t].take()) {
            (Some(r), _, Some(Counted::Stacks { outcome, .. })) => (r, Method::Stacks, outcome),
            (None, Some(c), Some(Counted::Clean(outcome))) => {
                (c.clone(), Method::Counters, outcome)
            }
            (None, Some(c), Some(Counted::Over(outcome))) => {
                (c.clone(), Method::CountRunOnly, outcome)
            }
            _ => unreachable!("every test is counted or profiled"),
        };
        judged.push(TestOutcome {
            case,
            result,
            method,
            counted,
            extra_runs,
            entry,
            wanted_every_core: wanted[t],
            stacks_asked: match method {
                Method::Stacks => asked[t],
                _ => None,
            },
            ahead: ahead[t],
        });
    }
    (judged, not_finished)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::counting::tests::result;
    use crate::execution::preload::Record;

    #[test]
    fn every_extra_run_leaving_memory_goes_to_the_stacks_pass_whatever_it_cost() {
        // A test that costs seconds a run, each of whose three extra runs left something
        // behind while the process grew: the stacks decide, it is never judged on counts.
        let mut r = result(ProcessEnd::Exited(0), Some((1, 8)));
        r.record = Some(Record::parse(
            "arena 3\nfirst 0 1 8 1\ncost 9000 9000\nrun 1 start\nrun 1 ok 2 16 1 1\nrun 2 start\nrun 2 ok 3 24 1 1\nrun 3 start\nrun 3 ok 4 32 1 1\nleft 1 1 8\nleft 2 1 8\nleft 3 1 8\nend kept\n",
        ));
        let test = TestCase {
            binary: 0,
            name: "tests::slow".into(),
            ignored: false,
            passes_by_panicking: false,
            settings: crate::config::Config::default()
                .effective("tests::slow", &crate::config::SettingsLayer::default()),
        };
        match conclude_counting(&mut r, &test, None, false) {
            Counted::Stacks { rerun, outcome } => {
                assert!(rerun, "its stacks, with extra runs");
                assert_eq!((outcome.made, outcome.status), (3, Status::Completed));
            }
            _ => panic!("a leak's shape goes to the stacks pass"),
        }
    }

    fn plan_of_one(
        request: Result<RerunRequest, Status>,
        before: Option<Option<StacksAsked>>,
        alone: bool,
    ) -> Plan {
        Plan {
            requests: vec![request],
            entries: vec![None],
            expected: vec![Some(40.0)],
            alone: vec![alone],
            binary: vec![0],
            stacks_before: vec![before],
        }
    }

    fn request() -> RerunRequest {
        RerunRequest {
            entry: 0x1000,
            build_id: "ab".into(),
            extra_runs: 5,
            app_mallctl: None,
            exit_guard: None,
            panic_hook: None,
            collectors: Vec::new(),
            grace_ms: extra_runs::GRACE_MS,
            unit_entry: false,
            entry_main: None,
        }
    }

    #[test]
    fn a_stacks_process_starts_beside_counting_as_the_previous_run_asked_for_it() {
        let asked = StacksAsked {
            runs: 3,
            grace_ms: 0,
        };
        let job = plan_of_one(Ok(request()), Some(Some(asked)), false)
            .ahead_job(0)
            .expect("the previous run had one");
        let rerun = job.rerun.expect("with extra runs");
        assert_eq!((rerun.extra_runs, rerun.grace_ms), (3, 0), "as asked then");
        assert_eq!(rerun.entry, 0x1000, "the rest is this run's");
        assert!(job.ahead.is_some(), "it can be called off");
        assert!(!job.first && job.quiet_backtraces);
        assert_eq!(job.settings.mode, ProfileMode::Stacks);

        // A test that cannot run again had one without extra runs.
        let no_runs = plan_of_one(Err(Status::ShouldPanic), Some(None), false)
            .ahead_job(0)
            .expect("the previous run had one");
        assert!(no_runs.rerun.is_none());

        // Nothing to go by, what was asked no longer fits, or a test that runs alone.
        assert!(plan_of_one(Ok(request()), None, false)
            .ahead_job(0)
            .is_none());
        assert!(plan_of_one(Ok(request()), Some(None), false)
            .ahead_job(0)
            .is_none());
        assert!(plan_of_one(Err(Status::Off), Some(Some(asked)), false)
            .ahead_job(0)
            .is_none());
        assert!(plan_of_one(Ok(request()), Some(Some(asked)), true)
            .ahead_job(0)
            .is_none());
    }

    #[test]
    fn an_extra_run_that_kills_the_process_does_not_change_the_first_run() {
        // The record says the test passed; an extra run then aborted the process.
        let mut r = result(ProcessEnd::Signaled(6), Some((1, 8)));
        assert_eq!(first_run_end(&r), ProcessEnd::Exited(0));
        assert!(
            crate::analysis::counting::needs_stacks(&r),
            "judged on its own run: it retained something"
        );
        r.record = None;
        assert_eq!(first_run_end(&r), ProcessEnd::Signaled(6));
    }
}
