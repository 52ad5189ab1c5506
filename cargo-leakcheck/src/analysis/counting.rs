//! The counting pass's rule: which tests its exact counts settle (clean, or process-lifetime
//! state its extra runs showed), and which go on to the stacks pass.

use crate::analysis::settling;
use crate::evidence::test_run::ExtraRunsOutcome;
use crate::evidence::{ProcessEnd, ProcessResult, Record};

/// Whether a counting run leaves the test's verdict open.
pub fn needs_stacks(result: &ProcessResult) -> bool {
    let counts = result.record.as_ref().and_then(|r| r.counts());
    // A run that retained nothing allocated can still have made one of the program's own
    // collections longer (its buffer came from elsewhere): the runtime then runs it again.
    let ran_again = result.record.as_ref().is_some_and(|r| !r.runs.is_empty());
    match (result.first_run_end(), counts) {
        (ProcessEnd::Exited(0), Some(c)) => c.objects != 0 || c.bytes != 0 || ran_again,
        // A failing test is analysed for leaks too; a missing count proves nothing.
        (ProcessEnd::Exited(_), _) => true,
        // Killed or never started: a second run would end the same way.
        _ => false,
    }
}

/// Extra runs after which a counting process that goes on is taken to be headed for its
/// stacks (see [`headed_for_stacks`]).
pub const HEADED_AFTER: u32 = 2;

/// Where a counting process still running is headed, from the record it has written so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Headed {
    /// To its test's stacks, with every extra run: the runtime went on to another extra
    /// run after [`HEADED_AFTER`], so neither of those settled the test. Most settled tests
    /// settle in their first extra run or two; a leak never does.
    Stacks,
    /// To its test's stacks after a series stopped because its runs left threads running
    /// (see `leakcheck_protocol::settling::Series::leaves_threads`): its first extra run
    /// raised the live total and left threads of its own running, as every run of a test
    /// that starts a thread per call and never ends it does. The series stops after its
    /// second such run, the stacks process then makes the rest of the runs, and the threads
    /// that stayed through the counting runs' grace get no second wait.
    StacksAfterThreadsLeft,
}

/// Where a counting process is headed, from the record it has written so far; None while
/// nothing says. Its stacks process may then start beside it, rather than after it; whether
/// that process is used is decided, as ever, by the finished record alone.
pub fn headed_for_stacks(record: &Record) -> Option<Headed> {
    if record.end.is_some() {
        return None;
    }
    let runs = record.runs.len() as u32;
    if runs >= HEADED_AFTER && record.started > HEADED_AFTER {
        return Some(Headed::Stacks);
    }
    let first = record.counts()?;
    match record.runs.as_slice() {
        [one] if record.started == 2 && !one.settled => {
            let live = one.live;
            let rose = live.objects >= first.objects && live.bytes >= first.bytes && live != first;
            rose.then_some(Headed::StacksAfterThreadsLeft)
        }
        _ => None,
    }
}

/// Whether a counting process can settle a test that can have these extra runs (`request`:
/// them, or why it has none). A doc-test's own run is on the main thread, which no count
/// includes, so only its extra runs can settle it: one that can have none (it passes by
/// panicking, or its entry point was not found) goes straight to its stacks process, which
/// judges it by reachability after its one run, where its counting process would have sent
/// it after a run that showed nothing.
pub fn can_settle<R>(doc_test: bool, request: &Result<R, settling::Status>) -> bool {
    !doc_test || request.is_ok()
}

/// Whether a counting process ended in a way another process of the same test running
/// beside it could have caused (both wanting one port, one lock file): the test's own run
/// failed (`own_run`), or an extra run panicked, crashed, failed, timed out or died in a
/// drain. Such a process says nothing until it has run again alone.
pub fn may_have_met_its_neighbour(own_run: &ProcessEnd, outcome: &ExtraRunsOutcome) -> bool {
    use settling::Status;
    *own_run != ProcessEnd::Exited(0)
        || matches!(
            outcome.status,
            Status::Panicked(_)
                | Status::Crashed(_)
                | Status::Failed(_)
                | Status::TimedOut
                | Status::DrainFailed(_)
        )
}

/// What the counting pass settled about one test.
pub enum Counted {
    /// Nothing retained, or nothing extra runs add to.
    Clean(ExtraRunsOutcome),
    /// Stacks needed; extra runs with them when the counting pass could make some.
    Stacks {
        rerun: bool,
        outcome: ExtraRunsOutcome,
    },
    /// Crashed or timed out while counting.
    Over(ExtraRunsOutcome),
}

/// What the counting pass settles about a test, from its counting run (its record read and
/// its end set to its own run's, see `ProcessResult::first_run_end`) and what its extra runs
/// showed.
pub fn after_counting(
    result: &ProcessResult,
    outcome: ExtraRunsOutcome,
    lifetime_fails: bool,
) -> Counted {
    let ended_normally = matches!(result.first_run_end(), ProcessEnd::Exited(_));
    if !ended_normally {
        return Counted::Over(outcome);
    }
    if !needs_stacks(result) {
        return Counted::Clean(outcome);
    }
    if result
        .record
        .as_ref()
        .is_some_and(|r| r.allocator_reaches_malloc == Some(false))
    {
        // The program's own global allocator does not reach the runtime's malloc: the
        // counts see none of its allocations, so its stacks decide, with extra runs when
        // its own run passed, as for a program the counters cannot see into at all.
        return Counted::Stacks {
            rerun: result.first_run_end() == ProcessEnd::Exited(0),
            outcome,
        };
    }
    let counts = result.record.as_ref().and_then(|r| r.counts());
    let settled = result.record.as_ref().is_some_and(|r| {
        counts.is_some_and(|first| {
            settling::settled(first, &r.runs, &r.left, r.grace.as_ref(), &r.lengths)
        })
    });
    match counts {
        Some(_) if outcome.usable() && !lifetime_fails && settled => Counted::Clean(outcome),
        // Every extra run left something behind: the stacks say what grows.
        _ if outcome.usable() => Counted::Stacks {
            rerun: true,
            outcome,
        },
        // No extra runs could be made (or the test failed): judged on its own run.
        _ => Counted::Stacks {
            rerun: false,
            outcome,
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_doc_test_that_cannot_run_again_is_not_counted() {
        let none: Result<(), settling::Status> = Err(settling::Status::ShouldPanic);
        assert!(!can_settle(true, &none), "its own run is not counted");
        assert!(can_settle(true, &Ok(())), "its extra runs are");
        // A test's own run is counted on its thread, extra runs or not.
        assert!(can_settle(false, &none));
    }
    use crate::evidence::Record;
    use std::path::PathBuf;
    use std::time::Duration;

    /// A counting run's result that ended as `end`, with a record of these first-run counts.
    pub(crate) fn result(end: ProcessEnd, counts: Option<(i64, i64)>) -> ProcessResult {
        let status = match end {
            ProcessEnd::Exited(c) => c,
            _ => 0,
        };
        let record = counts.map(|(objects, bytes)| {
            Record::parse(&format!("arena 3\nfirst {status} {objects} {bytes} 1\n"))
        });
        ProcessResult {
            end,
            duration: Duration::ZERO,
            timeout: Duration::ZERO,
            peak_rss_kib: None,
            record,
            record_file: None,
            preload_dumps: Vec::new(),
            app_dumps: Vec::new(),
            run_dumps: Vec::new(),
            left_running: Vec::new(),
            children: Vec::new(),
            stdout: PathBuf::new(),
            stderr: PathBuf::new(),
        }
    }

    #[test]
    fn only_a_passing_test_with_nothing_retained_skips_stack_profiling() {
        assert!(!needs_stacks(&result(ProcessEnd::Exited(0), Some((0, 0)))));
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), Some((1, 8)))),
            "a 4-byte leak"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), Some((0, 16)))),
            "bytes alone"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), Some((-1, -8)))),
            "freed what it did not allocate"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(0), None)),
            "no counts: prove nothing"
        );
        assert!(
            needs_stacks(&result(ProcessEnd::Exited(101), Some((0, 0)))),
            "failures are analysed"
        );
        assert!(!needs_stacks(&result(ProcessEnd::Signaled(11), None)));
        // Nothing allocated, yet a collection held entries and the test ran again: its
        // extra runs decide.
        let mut ran_again = result(ProcessEnd::Exited(0), Some((0, 0)));
        ran_again.record = Some(Record::parse(
            "arena 3\nfirst 0 0 0 1\nlen 0 0 1\nrun 1 start\nlen 1 0 2\nrun 1 ok 0 0 1 1\nend kept\n",
        ));
        assert!(needs_stacks(&ran_again));
        assert!(!needs_stacks(&result(ProcessEnd::TimedOut, None)));
    }

    #[test]
    fn a_counting_process_that_starts_a_third_extra_run_is_headed_for_stacks() {
        let so_far = |text: &str| Record::parse(&format!("arena 3\nfirst 0 2 32 1\n{text}"));
        let one = "run 1 start\nrun 1 ok 3 48 1 1\nheld 1 1 16\n";
        let two = format!("{one}run 2 start\nrun 2 ok 4 64 1 1\nheld 2 2 32\n");
        assert_eq!(headed_for_stacks(&so_far(one)), None);
        assert_eq!(
            headed_for_stacks(&so_far(&format!("{one}run 2 start\n"))),
            None,
            "its threads ended: run 2 may still settle it"
        );
        assert_eq!(headed_for_stacks(&so_far(&two)), None);
        assert_eq!(
            headed_for_stacks(&so_far(&format!("{two}run 3 start\n"))),
            Some(Headed::Stacks)
        );
        assert_eq!(
            headed_for_stacks(&so_far(&format!(
                "{two}run 3 start\nrun 3 ok 4 64 1 1\nend settled\n"
            ))),
            None,
            "a finished record is the counting pass's to judge"
        );
    }

    #[test]
    fn a_first_extra_run_that_grew_and_left_threads_heads_for_the_stacks_after_threads_left() {
        let so_far = |text: &str| Record::parse(&format!("arena 3\nfirst 0 240 89584 2\n{text}"));
        let left = "run 1 start\nrun 1 ok 261 140864 3 0\nheld 1 21 51280\nrun 2 start\n";
        assert_eq!(
            headed_for_stacks(&so_far(left)),
            Some(Headed::StacksAfterThreadsLeft)
        );
        // Threads left, but nothing grew (a pool started once), or they ended in time.
        let flat = "run 1 start\nrun 1 ok 240 89584 3 0\nheld 1 0 0\nrun 2 start\n";
        assert_eq!(headed_for_stacks(&so_far(flat)), None);
        let ended = "run 1 start\nrun 1 ok 261 140864 2 1\nheld 1 21 51280\nrun 2 start\n";
        assert_eq!(headed_for_stacks(&so_far(ended)), None);
    }

    #[test]
    fn a_failed_run_or_extra_run_may_have_met_a_process_beside_it() {
        use settling::Status;
        let ok = ProcessEnd::Exited(0);
        let done = ExtraRunsOutcome {
            made: 10,
            status: Status::Completed,
        };
        assert!(!may_have_met_its_neighbour(&ok, &done));
        assert!(may_have_met_its_neighbour(&ProcessEnd::Exited(101), &done));
        for status in [
            Status::Panicked("address in use".into()),
            Status::Crashed("signal 11 (SIGSEGV)".into()),
            Status::Failed("locked".into()),
            Status::TimedOut,
            Status::DrainFailed("crossbeam-epoch".into()),
        ] {
            let outcome = ExtraRunsOutcome { made: 2, status };
            assert!(may_have_met_its_neighbour(&ok, &outcome), "{outcome:?}");
        }
        // What the test is, not what ran beside it.
        for status in [Status::ShouldPanic, Status::NoHarness, Status::ExitedEarly] {
            assert!(!may_have_met_its_neighbour(
                &ok,
                &ExtraRunsOutcome::none(status)
            ));
        }
    }

    #[test]
    fn counts_of_an_allocator_that_serves_blocks_itself_prove_nothing() {
        // A program's own global allocator, asked at exit: some blocks were not malloc's.
        let mut own = result(ProcessEnd::Exited(0), None);
        own.record = Some(Record::parse(
            "arena 3\nallocator own\nfirst 0 0 0 1\ncost 1 1\nend own-allocator\n",
        ));
        assert!(needs_stacks(&own), "a zero count of it is no proof");
        let outcome =
            crate::evidence::test_run::ExtraRunsOutcome::none(settling::Status::Completed);
        match after_counting(&own, outcome, false) {
            Counted::Stacks { rerun, .. } => assert!(rerun, "its stacks, with extra runs"),
            _ => panic!("judged by its stacks"),
        }
        // One that reaches malloc with every block is counted as std's allocator is.
        let mut forwards = result(ProcessEnd::Exited(0), None);
        forwards.record = Some(Record::parse(
            "arena 3\nallocator malloc\nfirst 0 0 0 1\ncost 1 1\nend nothing-retained\n",
        ));
        assert!(!needs_stacks(&forwards));
    }
}
