//! The rules that read a test's extra runs: why a test had as many as it had ([`Status`],
//! from its process's evidence: [`interpret`]), whether the counting pass settles it
//! ([`settled`]), and whether a stack grew in every run ([`grows_every_run`]), compared up
//! to the call of the test's entry point ([`cut_at_entry`]).

use crate::evidence::normalized::FrameKey;
use crate::evidence::test_run::ExtraRunsOutcome;
use crate::evidence::{
    signal_name, End, ExitCounts, ExtraRun, Grace, Length, ProcessEnd, Reclaimer, Record,
};

pub use crate::model::ExtraRunsStatus as Status;

/// The sentence for a status, for the report and the summary, when it is not
/// self-explanatory; `made` extra runs were measured.
pub fn detail(status: &Status, made: u32) -> Option<String> {
    let nth = ordinal(made + 1);
    match status {
            Status::Completed | Status::NotNeeded => None,
            Status::Off => Some("extra runs are switched off (extra-runs = 0)".into()),
            Status::TestFailed => Some("the test did not pass its own run".into()),
            Status::ExitedEarly => Some(
                "the test ended the process itself (exit before libtest finished), so it cannot run again; what libtest had in flight is not counted"
                    .into(),
            ),
            Status::ShouldPanic => Some(
                "a #[should_panic] test panics on every run, so it cannot run again in its process"
                    .into(),
            ),
            Status::NoHarness => Some("a harness = false target has no libtest entry point".into()),
            Status::NoEntryPoint(why) => Some(format!("no usable entry point: {why}")),
            Status::Panicked(message) => Some(format!("the {nth} extra run panicked: {message}")),
            Status::Crashed(how) => Some(format!("the process died in the {nth} extra run: {how}")),
            Status::DrainFailed(how) => Some(format!(
                "the process ended while the runtime drained the garbage of {how}; it is judged without its extra runs"
            )),
            Status::TimedOut => Some(format!(
                "the {nth} extra run did not finish in time (ten times the test's own run, at least 10 s)"
            )),
            Status::Failed(message) => Some(format!("the {nth} extra run failed: {message}")),
            Status::Unavailable(why) => Some(format!("extra runs could not be made: {why}")),
        }
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What the process showed besides its record.
pub struct ProcessOutput<'a> {
    /// How the process really ended (an extra run may have killed it).
    pub end: &'a ProcessEnd,
    /// Its captured stdout: libtest marks a `#[should_panic]` test there.
    pub stdout: &'a str,
    /// Its captured stderr: a panic message.
    pub stderr: &'a str,
    /// The test's libtest name.
    pub test: &'a str,
}

/// Whether libtest reported the test as `#[should_panic]` (`test NAME - should panic ... ok`).
pub fn is_should_panic(stdout: &str, test: &str) -> bool {
    let marker = format!("test {test} - should panic ...");
    stdout.lines().any(|l| l.starts_with(&marker))
}

/// Reads the extra runs off a process's record. `not_asked` is why none were requested, if
/// they were not.
pub fn interpret(
    record: Option<&Record>,
    not_asked: Option<&Status>,
    evidence: &ProcessOutput,
) -> ExtraRunsOutcome {
    let Some(record) = record else {
        return ExtraRunsOutcome::none(Status::TestFailed);
    };
    let Some(first) = record.first else {
        return ExtraRunsOutcome::none(Status::TestFailed);
    };
    if first.status != 0 {
        return ExtraRunsOutcome::none(Status::TestFailed);
    }
    if record.end == Some(End::ExitedEarly) {
        return ExtraRunsOutcome::none(Status::ExitedEarly);
    }
    if is_should_panic(evidence.stdout, evidence.test) {
        return ExtraRunsOutcome::none(Status::ShouldPanic);
    }
    if record.end == Some(End::NothingRetained) {
        return ExtraRunsOutcome::none(Status::NotNeeded);
    }
    let made = record.runs.len() as u32;
    let status = if let Some(why) = not_asked {
        why.clone()
    } else if let Some(message) = &record.failed {
        Status::Failed(message.clone())
    } else if record.timed_out
        || record.end == Some(End::Timeout)
        || (*evidence.end == ProcessEnd::TimedOut && record.started > made)
    {
        Status::TimedOut
    } else if let (None, Some((run, kind))) = (record.end, record.draining) {
        died_draining(run, kind, evidence)
    } else if record.started > made {
        died_during_run(evidence)
    } else {
        match record.end {
            Some(End::Settled | End::Kept | End::ThreadsLeft | End::Done) => Status::Completed,
            Some(End::NoArena) => Status::Unavailable("jemalloc refused a new arena".into()),
            Some(End::SpawnFailed) => Status::Unavailable("no thread could be started".into()),
            Some(End::BuildId) => {
                Status::Unavailable("the running executable is not the one analysed".into())
            }
            Some(End::NotCode | End::NoImage) => {
                Status::Unavailable("the entry point is not code of the running executable".into())
            }
            Some(End::NoEntry) => Status::NoEntryPoint("none was passed".into()),
            Some(End::OwnAllocator) => Status::Unavailable(
                "the program's own global allocator does not reach malloc, so the counts prove nothing"
                    .into(),
            ),
            // Ends the checks above have taken already; reaching here means the record
            // contradicts itself (a failed run without its message, say).
            Some(
                other @ (End::TestFailed
                | End::ExitedEarly
                | End::NothingRetained
                | End::Failed
                | End::Timeout),
            ) => Status::Unavailable(format!("the runtime stopped: {other}")),
            None => died_during_run(evidence),
        }
    };
    ExtraRunsOutcome { made, status }
}

/// The process ended in the drain of `kind` after run `run` (0: the test's own): in a
/// destructor the program had deferred, which the drain ran, not in the test's code.
fn died_draining(run: u32, kind: Reclaimer, evidence: &ProcessOutput) -> Status {
    let after = match run {
        0 => "the test's own run".to_string(),
        k => format!("the {} extra run", ordinal(k)),
    };
    let how = match died_during_run(evidence) {
        Status::Panicked(message) => format!("a deferred destructor panicked: {message}"),
        Status::Crashed(how) => how,
        other => format!("{other:?}"),
    };
    Status::DrainFailed(format!("{kind} after {after}: {how}"))
}

fn died_during_run(evidence: &ProcessOutput) -> Status {
    // The test's own panic hook prints `thread '…' panicked at FILE:LINE:` and the message
    // on the lines after (an assertion's `left:` and `right:` too); the unwind then aborts
    // at the runtime's frame. A test may catch panics of its own before (`catch_unwind`):
    // the last one is what ended the run.
    let lines: Vec<&str> = evidence.stderr.lines().collect();
    // The abort that follows an unwind into the runtime's frame reports a panic of its own.
    const ABORT: [&str; 3] = [
        "panic in a function that cannot unwind",
        "panic in a destructor during cleanup",
        "thread caused non-unwinding panic",
    ];
    let message_at = |at: usize| -> String {
        lines[at + 1..]
            .iter()
            .take_while(|l| {
                !l.is_empty()
                    && !l.starts_with("note: ")
                    && !l.starts_with("stack backtrace:")
                    && !l.starts_with("thread '")
                    && !ABORT.iter().any(|a| l.starts_with(a))
            })
            .take(4)
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let panic = (0..lines.len())
        .rev()
        .filter(|&at| lines[at].starts_with("thread '") && lines[at].contains("panicked at"))
        .map(message_at)
        .find(|m| !m.is_empty());
    match (evidence.end, panic) {
        (ProcessEnd::Signaled(6), Some(message)) => Status::Panicked(message),
        (ProcessEnd::Signaled(s), _) => {
            Status::Crashed(format!("signal {s} ({})", signal_name(*s)))
        }
        (ProcessEnd::Exited(c), _) => Status::Crashed(format!("it exited with code {c}")),
        (other, _) => Status::Crashed(other.describe()),
    }
}

/// Whether the counting pass settles a test: the rule of
/// [`leakcheck_protocol::settling`], the one the runtime stops its runs by, applied to the
/// record (`first`: the own run's live total; `left`: what each run's arena still held;
/// `lengths`: the program's collections, a run that made one longer settling nothing).
pub fn settled(
    first: ExitCounts,
    runs: &[ExtraRun],
    left: &[ExitCounts],
    grace: Option<&Grace>,
    lengths: &[Length],
) -> bool {
    let (grew, grew_in_grace) = crate::analysis::lengths::growth_by_run(lengths, runs.len());
    let mut series = leakcheck_protocol::settling::Series::new(first);
    for (r, &grew) in runs.iter().zip(&grew) {
        series.run(r.live, r.held, grew);
    }
    if let Some(g) = grace {
        series.grace(g.live, grew_in_grace);
    }
    series.settled(leakcheck_protocol::settling::nothing_left(left, &grew))
}

/// How many extra runs the stacks process of a test makes, having made `configured` (the
/// test's `extra-runs`) in counting mode as far as `counting` shows. A series that stopped
/// because every run left threads running (`End::ThreadsLeft`) already showed that shape
/// on each of its runs: its stacks process makes the rest of the configured runs, two at
/// least, so the test runs `configured` extra times in all. Any other series gets every
/// configured run again: what its stacks show must hold over all of them.
pub fn stacks_runs(configured: u32, counting: Option<&Record>) -> u32 {
    match counting {
        Some(r) if r.end == Some(End::ThreadsLeft) => {
            runs_after_threads_left(configured, r.runs.len() as u32)
        }
        _ => configured,
    }
}

/// The stacks process's extra runs after a counting series of `counted` runs that stopped
/// because each left threads running (see [`stacks_runs`]).
pub fn runs_after_threads_left(configured: u32, counted: u32) -> u32 {
    configured.saturating_sub(counted).max(2).min(configured)
}

/// Whether a stack leaks: its bytes rose across every extra run. `series` holds its live
/// bytes after the first run and after each extra run.
pub fn grows_every_run(series: &[u64]) -> bool {
    series.len() >= 2 && series.windows(2).all(|w| w[1] > w[0])
}

/// A stack as far as the call of the test's entry point: its frames up to and including the
/// first one whose return address lies in the entry function (`exe`, file offsets
/// `range`). Allocations of the first run and of the extra runs meet there; stacks that do
/// not pass through the entry (other threads) are kept whole.
pub fn cut_at_entry<'a>(frames: &'a [FrameKey], exe: &str, range: (u64, u64)) -> &'a [FrameKey] {
    let (start, end) = range;
    match frames
        .iter()
        .position(|f| &*f.object == exe && f.file_offset > start && f.file_offset <= end)
    {
        Some(i) => &frames[..=i],
        None => frames,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn live(objects: i64, bytes: i64) -> ExitCounts {
        ExitCounts { objects, bytes }
    }

    fn run(objects: i64, bytes: i64) -> ExtraRun {
        ExtraRun {
            live: live(objects, bytes),
            threads: 1,
            settled: true,
            held: None,
        }
    }

    fn record_ending(end: End, runs: usize) -> Record {
        Record {
            runs: vec![run(2, 16); runs],
            end: Some(end),
            ..Record::default()
        }
    }

    #[test]
    fn a_series_that_left_threads_leaves_its_stacks_process_the_rest_of_the_runs() {
        let threads = record_ending(End::ThreadsLeft, 2);
        assert_eq!(stacks_runs(5, Some(&threads)), 3);
        assert_eq!(stacks_runs(3, Some(&threads)), 2, "two at least");
        assert_eq!(
            stacks_runs(1, Some(&threads)),
            1,
            "never more than configured"
        );
        let kept = record_ending(End::Kept, 10);
        assert_eq!(stacks_runs(5, Some(&kept)), 5);
        assert_eq!(stacks_runs(5, None), 5);
    }

    #[test]
    fn a_run_that_left_nothing_behind_settles_the_test() {
        let nothing = live(0, 0);
        // A pool started by the first run; the extra run added and left nothing.
        assert!(settled(
            live(40, 9000),
            &[run(40, 9000)],
            &[nothing],
            None,
            &[]
        ));
        // Garbage of an epoch-based collector: the totals go up and down, but what the
        // first extra run retired has been freed by the end.
        assert!(settled(
            live(14, 24960),
            &[run(261, 41632), run(48, 112000), run(60, 142720)],
            &[nothing, live(30, 4096), live(60, 9000)],
            None,
            &[]
        ));
        // A leak leaves something behind on every run.
        assert!(!settled(
            live(1, 8),
            &[run(2, 16), run(3, 24), run(4, 32)],
            &[live(1, 8), live(1, 8), live(1, 8)],
            None,
            &[]
        ));
        // A run left nothing in its arena, yet the process grew on every run: something
        // allocated for the test outside the run's arena (a worker, after the run ended).
        assert!(!settled(
            live(1, 8),
            &[run(2, 16), run(3, 24)],
            &[nothing, nothing],
            None,
            &[]
        ));
        // No extra run, nothing settled.
        assert!(!settled(live(1, 8), &[], &[], None, &[]));
    }

    #[test]
    fn an_equal_total_does_not_settle_a_leak_offset_by_memory_of_the_own_run() {
        // rayon's `sort_panic_safe`, a panic hook chained on every call (16 B a run): in
        // its third run a 16-byte object of the test's own run was freed, so the total
        // stood still while the runs' arenas held one object more.
        let record = Record::parse(concat!(
            "arena 3\nfirst 0 36 99120 3\n",
            "run 1 start\nrun 1 ok 37 99136 3 1\nheld 1 1 16\n",
            "run 2 start\nrun 2 ok 38 99152 3 1\nheld 2 2 1552\n",
            "run 3 start\nrun 3 ok 38 99152 3 1\nheld 3 4 1584\n",
            "left 1 1 16\nleft 2 1 16\nleft 3 2 1552\nend kept\n",
        ));
        let first = record.counts().unwrap();
        assert!(!settled(first, &record.runs, &record.left, None, &[]));
        // The same totals from the series' own garbage (what run 3 left is what it freed
        // of run 2's) settle.
        let garbage = Record::parse(concat!(
            "arena 3\nfirst 0 36 99120 3\n",
            "run 1 start\nrun 1 ok 37 99136 3 1\nheld 1 1 16\n",
            "run 2 start\nrun 2 ok 38 99152 3 1\nheld 2 2 1552\n",
            "run 3 start\nrun 3 ok 38 99152 3 1\nheld 3 2 1552\n",
            "left 1 1 16\nleft 2 0 0\nleft 3 1 1536\nend settled\n",
        ));
        let first = garbage.counts().unwrap();
        assert!(settled(
            first,
            &garbage.runs,
            &[live(1, 16), live(1, 16), live(1, 1536)],
            None,
            &[]
        ));
    }

    #[test]
    fn a_run_that_made_a_collection_longer_settles_nothing_here_either() {
        // A set given a new id on every run, which never reallocates: every arena is
        // empty, the total does not move, and the record says the set grew each time.
        let record = Record::parse("len 0 0 3\nlen 1 0 4\nlen 2 0 5\nlen 3 0 6\n");
        let runs = [run(2, 96), run(2, 96), run(2, 96)];
        let nothing = [live(0, 0); 3];
        assert!(settled(live(2, 96), &runs, &nothing, None, &[]));
        assert!(!settled(
            live(2, 96),
            &runs,
            &nothing,
            None,
            &record.lengths
        ));
        // It stopped growing after the first run: the later runs settle it.
        let warmed = Record::parse("len 0 0 3\nlen 1 0 4\n");
        assert!(settled(live(2, 96), &runs, &nothing, None, &warmed.lengths));
    }

    #[test]
    fn a_later_run_that_leaves_the_total_where_it_was_settles_the_test() {
        // rayon-core's join_counter_overflow: every run's threads register with
        // crossbeam-epoch's collector, whose entries the next runs free; no arena is
        // empty after two runs, yet the second left the process exactly as the first did.
        let series = [run(12, 24320), run(12, 24320)];
        assert!(settled(
            live(8, 14080),
            &series,
            &[live(4, 10240), live(1, 2560)],
            None,
            &[]
        ));
        // The first extra run alone is not enough: it frees the own run's garbage.
        assert!(!settled(
            live(12, 24320),
            &[run(12, 24320)],
            &[live(4, 10240)],
            None,
            &[]
        ));
        // A leak of one object per run on top of steady garbage: the total rises each run.
        assert!(!settled(
            live(8, 14080),
            &[run(13, 24328), run(14, 24336), run(15, 24344)],
            &[live(5, 10248), live(2, 2568), live(5, 10248)],
            None,
            &[]
        ));
        // The same objects but not the same bytes is not the same total.
        assert!(!settled(
            live(8, 14080),
            &[run(12, 24320), run(12, 24328)],
            &[live(4, 10240), live(2, 2568)],
            None,
            &[]
        ));
    }

    #[test]
    fn threads_that_end_within_the_grace_settle_the_test_and_threads_that_stay_do_not() {
        let nothing = live(0, 0);
        // Each run left a watchdog thread holding a channel; during the grace they all
        // ended, freeing what they held: every run's arena is empty, and the process is
        // back where the first run left it.
        let ended = Grace {
            waited_ms: 1000,
            threads_running: 0,
            live: live(1, 8),
        };
        let runs = [run(2, 16), run(3, 24), run(4, 32)];
        assert!(settled(
            live(1, 8),
            &runs,
            &[nothing, nothing, nothing],
            Some(&ended),
            &[]
        ));
        // Threads that never end: after the grace the counts still rise and every run's
        // arena still holds its part.
        let stayed = Grace {
            waited_ms: 2000,
            threads_running: 3,
            live: live(5, 40),
        };
        assert!(!settled(
            live(1, 8),
            &runs,
            &[live(1, 8), live(1, 8), live(1, 8)],
            Some(&stayed),
            &[]
        ));
    }

    #[test]
    fn a_stack_leaks_only_when_it_grows_in_every_extra_run() {
        assert!(grows_every_run(&[8, 16, 24, 32, 40, 48]));
        assert!(
            grows_every_run(&[0, 8, 16]),
            "nothing in the first run, then growth"
        );
        // Filled once, then flat: process-lifetime state.
        assert!(!grows_every_run(&[4096, 4096, 4096, 4096]));
        // Garbage freed two runs later: rises twice, then flat.
        assert!(!grows_every_run(&[64, 128, 192, 192, 192, 192]));
        // A Vec that doubles now and then.
        assert!(!grows_every_run(&[64, 128, 128, 256, 256, 256]));
        assert!(!grows_every_run(&[64]), "no extra run, no judgement");
    }

    fn key(object: &str, file_offset: u64) -> FrameKey {
        FrameKey {
            object: Arc::from(object),
            file_offset,
        }
    }

    #[test]
    fn stacks_are_cut_after_the_call_of_the_entry_point() {
        let exe = "/t/deps/leaky-1";
        let first_run = [
            key("/rt.so", 0x10),
            key(exe, 0x500),  // the test body
            key(exe, 0x910),  // return address in the entry function [0x900, 0x940)
            key(exe, 0x7000), // libtest
            key("/libc.so", 0x30),
        ];
        let extra_run = [
            key("/rt.so", 0x10),
            key(exe, 0x500),
            key(exe, 0x910),
            key("/rt.so", 0x2000), // the runtime's thread
        ];
        let range = (0x900, 0x940);
        assert_eq!(
            cut_at_entry(&first_run, exe, range),
            cut_at_entry(&extra_run, exe, range)
        );
        assert_eq!(cut_at_entry(&first_run, exe, range).len(), 3);
        // A stack of another thread does not pass through the entry: kept whole.
        let worker = [key(exe, 0x500), key("/libc.so", 0x30)];
        assert_eq!(cut_at_entry(&worker, exe, range), &worker);
        // The entry's first byte is never a return address inside it.
        let at_start = [key(exe, 0x900), key(exe, 0x7000)];
        assert_eq!(cut_at_entry(&at_start, exe, range).len(), 2);
    }

    fn evidence<'a>(end: &'a ProcessEnd, stdout: &'a str, stderr: &'a str) -> ProcessOutput<'a> {
        ProcessOutput {
            end,
            stdout,
            stderr,
            test: "tests::t",
        }
    }

    #[test]
    fn a_process_that_ended_in_a_drain_says_so_not_that_a_run_panicked() {
        let abort = ProcessEnd::Signaled(6);
        let panic = "thread '<unnamed>' panicked at src/lib.rs:9:5:\nboom in a deferred drop\n";
        // After the own run: `first`, then the drain that never finished.
        let own = Record::parse("arena 1\nfirst 0 3 48 1\ndraining 0\n");
        assert_eq!(
            interpret(Some(&own), None, &evidence(&abort, "", panic)),
            ExtraRunsOutcome {
                made: 0,
                status: Status::DrainFailed(
                    "crossbeam-epoch after the test's own run: a deferred destructor panicked: boom in a deferred drop"
                        .into()
                )
            }
        );
        // After the second extra run.
        let second = Record::parse(
            "arena 1\nfirst 0 3 48 1\ndraining 0\ndrained 0 1 8 0 0\nfirst 0 2 40 1\nrun 1 start\nrun 1 ok 2 40 1 1\nrun 2 start\nrun 2 ok 2 40 1 1\ndraining 2\n",
        );
        let out = interpret(
            Some(&second),
            None,
            &evidence(&ProcessEnd::Signaled(11), "", ""),
        );
        assert_eq!(out.made, 2);
        assert_eq!(
            out.status,
            Status::DrainFailed(
                "crossbeam-epoch after the 2nd extra run: signal 11 (SIGSEGV)".into()
            )
        );
        assert!(detail(&out.status, out.made)
            .unwrap()
            .starts_with("the process ended while the runtime drained"));
        // A drain that finished, then a run that panicked: the run's.
        let run = Record::parse(
            "arena 1\nfirst 0 3 48 1\ndraining 0\ndrained 0 1 8 0 0\nfirst 0 2 40 1\nrun 1 start\n",
        );
        assert_eq!(
            interpret(Some(&run), None, &evidence(&abort, "", panic)).status,
            Status::Panicked("boom in a deferred drop".into())
        );
    }

    #[test]
    fn the_record_tells_how_far_extra_runs_got_and_why_they_stopped() {
        let ok = ProcessEnd::Exited(0);
        let rec = |text: &str| Record::parse(text);
        let done = rec("arena 1\nfirst 0 1 8 1\nrun 1 start\nrun 1 ok 1 8 1 1\nrun 2 start\nrun 2 ok 1 8 1 1\nleft 1 0 0\nleft 2 0 0\nend settled\n");
        assert_eq!(
            interpret(Some(&done), None, &evidence(&ok, "", "")),
            ExtraRunsOutcome {
                made: 2,
                status: Status::Completed
            }
        );
        assert_eq!(
            interpret(
                Some(&rec("arena 1\nfirst 0 0 0 1\nend nothing-retained\n")),
                None,
                &evidence(&ok, "", "")
            )
            .status,
            Status::NotNeeded
        );
        assert_eq!(
            interpret(
                Some(&rec("arena 1\nfirst 101 3 30 1\nend test-failed\n")),
                None,
                &evidence(&ProcessEnd::Exited(101), "", "")
            )
            .status,
            Status::TestFailed
        );
        assert_eq!(
            interpret(
                Some(&rec("arena 1\nfirst 0 2 16 2\nend exited-early\n")),
                None,
                &evidence(&ok, "", "")
            )
            .status,
            Status::ExitedEarly
        );
        // Aborted by a panic in the second run: the message is the panic's.
        let aborted = rec("arena 1\nfirst 0 1 8 1\nrun 1 start\nrun 1 ok 2 16 1 1\nrun 2 start\n");
        let stderr = "thread '<unnamed>' panicked at src/lib.rs:9:5:\nsecond run\npanic in a function that cannot unwind\n";
        let aborted_by = |end: ProcessEnd, stderr: &str| {
            interpret(Some(&aborted), None, &evidence(&end, "", stderr))
        };
        assert_eq!(
            aborted_by(ProcessEnd::Signaled(6), stderr),
            ExtraRunsOutcome {
                made: 1,
                status: Status::Panicked("second run".into())
            }
        );
        // A panic the test caught before (`catch_unwind`) is not what ended the run, and
        // the abort's own report is not either; an assertion's values are kept.
        let caught_then_failed = "thread '<unnamed>' panicked at src/lib.rs:3:9:\nexpected caught panic\nthread '<unnamed>' panicked at src/lib.rs:7:5:\nassertion `left == right` failed\n  left: 11\n right: 10\nnote: run with `RUST_BACKTRACE=1`\nthread '<unnamed>' panicked at library/core/src/panicking.rs:225:5:\npanic in a function that cannot unwind\nthread caused non-unwinding panic. aborting.\n";
        assert_eq!(
            aborted_by(ProcessEnd::Signaled(6), caught_then_failed).status,
            Status::Panicked("assertion `left == right` failed left: 11 right: 10".into())
        );
        assert_eq!(
            aborted_by(ProcessEnd::Signaled(11), "").status,
            Status::Crashed("signal 11 (SIGSEGV)".into())
        );
        assert_eq!(
            aborted_by(ProcessEnd::TimedOut, "").status,
            Status::TimedOut
        );
        // libtest's own line marks a #[should_panic] test, whatever happened next.
        let stdout = "\nrunning 1 test\ntest tests::t - should panic ... ok\n";
        assert_eq!(
            interpret(
                Some(&aborted),
                None,
                &evidence(&ProcessEnd::Signaled(6), stdout, stderr)
            )
            .status,
            Status::ShouldPanic
        );
        let failed =
            rec("arena 1\nfirst 0 1 8 1\nrun 1 start\nrun 1 failed Error: \"no\"\nend failed\n");
        assert_eq!(
            interpret(Some(&failed), None, &evidence(&ok, "", "")).status,
            Status::Failed("Error: \"no\"".into())
        );
        assert_eq!(
            interpret(None, None, &evidence(&ProcessEnd::Signaled(9), "", "")).status,
            Status::TestFailed
        );
        assert_eq!(
            interpret(
                Some(&done),
                Some(&Status::NoHarness),
                &evidence(&ok, "", "")
            )
            .status,
            Status::NoHarness
        );
        assert_eq!(
            detail(&Status::Panicked("boom".into()), 1).unwrap(),
            "the 2nd extra run panicked: boom"
        );
    }
}
