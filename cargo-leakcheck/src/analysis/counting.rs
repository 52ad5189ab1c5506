//! The counting pass's rule: which tests its exact counts settle (clean, or process-lifetime
//! state its extra runs showed), and which go on to the stacks pass.

use crate::analysis::diff::NormalizedProfile;
use crate::analysis::settling::{self, Reruns};
use crate::evidence::{ProcessEnd, ProcessResult};

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

/// What the counting pass settled about one test.
pub enum Counted {
    /// Nothing retained, or nothing extra runs add to.
    Clean(Reruns),
    /// Stacks needed; extra runs with them when the counting pass could make some.
    Stacks { rerun: bool, outcome: Reruns },
    /// Crashed or timed out while counting.
    Over(Reruns),
    /// Every extra run was made and the series did not settle, and the runs from
    /// `Record::stacks_from` on took stacks: the counting process is the stacks evidence.
    StacksTaken(Reruns),
}

/// Whether the counting process took stacks from a run on, its series ran to its end, and
/// the scan after its last run reached every object the runs with stacks left.
///
/// What the runs allocated before stacks were taken is not known to that scan: an object
/// held only through such memory (a registry's buffer allocated in the test's own run) is
/// not reached, and neither is one nothing points to. Only a stacks process that tracks the
/// whole run tells the two apart, so a scan that did not reach everything sends the test to
/// one, where who holds what is named as before.
fn stacks_taken(result: &ProcessResult, grown_unreached: Option<bool>) -> bool {
    result.record.as_ref().is_some_and(|r| {
        (r.unreached == Some(0) || grown_unreached == Some(false))
            && r.stacks_from
                .is_some_and(|from| r.runs.len() as u32 >= from)
            && matches!(
                r.end,
                Some(
                    leakcheck_protocol::record::End::Kept
                        | leakcheck_protocol::record::End::ThreadsLeft
                )
            )
    })
}

/// Of a counting process that took stacks from a run on: whether a stack whose bytes rose
/// in every run with stacks (`series`: the dump before the first of them, then one after
/// each) has objects the scan after the last run did not reach (`unreached`, the objects
/// nothing reached, by stack). Objects that did not grow on every run are judged the same
/// whoever holds them; those that did are a leak whose holder that scan cannot tell.
pub fn grown_and_unreached(series: &[NormalizedProfile], unreached: &NormalizedProfile) -> bool {
    unreached
        .stacks
        .iter()
        .filter(|(_, c)| c.objects > 0)
        .any(|(frames, _)| {
            let bytes: Vec<u64> = series
                .iter()
                .map(|p| p.stacks.get(frames).map_or(0, |c| c.bytes))
                .collect();
            settling::grows_every_run(&bytes)
        })
}

/// What the counting pass settles about a test, from its counting run (its record read and
/// its end set to its own run's, see `ProcessResult::first_run_end`) and what its extra runs
/// showed.
///
/// `grown_and_unreached`: for a counting process that took stacks and whose last scan did not
/// reach everything, [`grown_and_unreached`] of its evidence (None: not known).
pub fn after_counting(
    result: &ProcessResult,
    outcome: Reruns,
    lifetime_fails: bool,
    grown_and_unreached: Option<bool>,
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
        // Every extra run left something behind: the stacks say what grows, taken in this
        // process from a run on when it could (a run that settled nothing after them:
        // the series ended with its last run or the grace after it).
        _ if outcome.usable() && stacks_taken(result, grown_and_unreached) => {
            Counted::StacksTaken(outcome)
        }
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

    fn profile(stacks: &[(u64, u64, u64)]) -> NormalizedProfile {
        use crate::analysis::diff::FrameKey;
        use crate::analysis::profile::Counts;
        NormalizedProfile {
            stacks: stacks
                .iter()
                .map(|&(at, objects, bytes)| {
                    let frame = FrameKey {
                        object: "/bin/t".into(),
                        file_offset: at,
                    };
                    (vec![frame], Counts { objects, bytes })
                })
                .collect(),
            sample_period: 1,
        }
    }

    #[test]
    fn a_scan_that_misses_only_what_did_not_grow_every_run_keeps_the_stacks_taken() {
        // Stack 1 grew in every run with stacks; stack 2 appeared once.
        let series = [
            profile(&[]),
            profile(&[(1, 1, 16)]),
            profile(&[(1, 2, 32), (2, 1, 1536)]),
            profile(&[(1, 3, 48), (2, 1, 1536)]),
        ];
        assert!(!grown_and_unreached(&series, &profile(&[(2, 1, 1536)])));
        assert!(grown_and_unreached(&series, &profile(&[(1, 1, 16)])));
        assert!(!grown_and_unreached(&series, &profile(&[(1, 0, 0)])));
    }

    #[test]
    fn stacks_taken_in_counting_judge_the_test_only_when_the_scan_can_name_the_holders() {
        let record = |unreached: &str| {
            Record::parse(&format!(
                "arena 3\nfirst 0 1 8 1\nrun 1 start\nrun 1 ok 2 16 1 1\nrun 2 start\nrun 2 ok 3 24 1 1\nrun 3 stacks\nrun 3 start\nrun 3 ok 4 32 1 1\nleft 1 1 8\nleft 2 1 8\nleft 3 1 8\n{unreached}end kept\n"
            ))
        };
        let outcome = || Reruns {
            made: 3,
            status: settling::Status::Completed,
        };
        let mut r = result(ProcessEnd::Exited(0), Some((1, 8)));
        r.record = Some(record("unreached 3 0\n"));
        assert!(matches!(
            after_counting(&r, outcome(), false, None),
            Counted::StacksTaken(_)
        ));
        r.record = Some(record("unreached 3 2\n"));
        assert!(matches!(
            after_counting(&r, outcome(), false, Some(true)),
            Counted::Stacks { rerun: true, .. }
        ));
        assert!(matches!(
            after_counting(&r, outcome(), false, Some(false)),
            Counted::StacksTaken(_)
        ));
        // No scan written: the stacks process decides.
        r.record = Some(record(""));
        assert!(matches!(
            after_counting(&r, outcome(), false, None),
            Counted::Stacks { rerun: true, .. }
        ));
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
    fn counts_of_an_allocator_that_serves_blocks_itself_prove_nothing() {
        // A program's own global allocator, asked at exit: some blocks were not malloc's.
        let mut own = result(ProcessEnd::Exited(0), None);
        own.record = Some(Record::parse(
            "arena 3\nallocator own\nfirst 0 0 0 1\ncost 1 1\nend own-allocator\n",
        ));
        assert!(needs_stacks(&own), "a zero count of it is no proof");
        let outcome = settling::Reruns::none(settling::Status::Completed);
        match after_counting(&own, outcome, false, None) {
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
