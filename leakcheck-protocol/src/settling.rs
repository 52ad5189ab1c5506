//! The counting pass's rule for a test whose own run retained something: whether its extra
//! runs settle it (what it retained was kept for the process, not grown on every run). The
//! runtime applies it run by run, to stop as soon as it holds; the tool applies it again to
//! the record, to say why the runs stopped. One rule, here, for both.
//!
//! Two ways settle a test, and neither while the live total rose on every step:
//!
//! - an extra run's own arena is empty (nothing it allocated is still live: `nothing_left`);
//! - a later extra run left the live total where the run before had left it, and the extra
//!   runs' arenas together hold what they held before it.
//!
//! The second settles what a collector's garbage keeps: each run's arena holds what the
//! next runs free (crossbeam-epoch's entries of the run's threads, say), so no arena is empty
//! until the garbage of the first runs is gone, three or four runs later. A leak adds to the
//! total on every run; for the total to stay the same, the older garbage the run freed would
//! have to match what it left, leak included, to the object and the byte, and in a series
//! whose garbage has reached its steady state that is exactly what it left without the leak.
//! So what the run freed must come from the series' own garbage: the runs' arenas together
//! hold what they held before it. Memory the test's own run made, freed by chance in the same
//! run as a leak of the same size (a buffer of the harness replaced, a 16-byte box dropped
//! late), moves the total back where it was, yet leaves the runs' arenas holding the leak
//! more; it settles nothing. The first extra run is not taken at its word: it frees the
//! test's own run's garbage, which need not be steady yet. The counts after the runtime's grace for the runs' threads,
//! when it waited, are the series' last point (a step, not a run).
//!
//! A run that made one of the program's own collections longer (see [`crate::collections`])
//! settles nothing, whatever its arena holds: a set that gains an id per call allocates only
//! when it doubles, so most of its runs leave nothing behind in their arena, yet it grows on
//! every one. Such a run neither counts as one that left nothing behind, nor as one that
//! added nothing, and a grace during which a collection grew settles nothing either. A
//! collection that stops growing (a window that is full, a set refilled with the same keys)
//! lets the runs after it settle the test as before.
//!
//! The series also ends early, unsettled, when every run so far left threads of its own
//! running and raised the live total ([`Series::leaves_threads`], after
//! [`RUNS_LEAVING_THREADS`] runs). A thread's own allocations stay in the arena of the run
//! that started it for as long as it runs, so no later run can settle the series until those
//! threads end: the grace after the last run is their chance, and it is given at once.
//! Later runs would only add threads. A pool that warms a cache per worker starts no thread
//! per run and keeps the whole series.

/// After this many extra runs that each left threads running and raised the live total,
/// the counting series stops (see [`Series::leaves_threads`]).
pub const RUNS_LEAVING_THREADS: u32 = 2;

use crate::record::Counts;

/// The live totals of a test's own run and of its extra runs so far, as the rule reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Series {
    previous: Counts,
    /// What the extra runs' arenas held together after the run before (`None` before the
    /// first run, or when the record did not say).
    previous_held: Option<Counts>,
    runs: u32,
    steps: u32,
    rose_every_step: bool,
    a_later_run_added_nothing: bool,
    every_run_left_threads: bool,
    grew_in_grace: bool,
}

impl Series {
    /// A series that starts at what the test's own run left live.
    pub const fn new(first: Counts) -> Series {
        Series {
            previous: first,
            previous_held: None,
            runs: 0,
            steps: 0,
            rose_every_step: true,
            a_later_run_added_nothing: false,
            every_run_left_threads: true,
            grew_in_grace: false,
        }
    }

    /// The live total after the next extra run, what the extra runs' arenas held together
    /// then, whether the threads that run started had all ended by then, and whether the run
    /// made a collection longer.
    pub fn run_with_threads(
        &mut self,
        live: Counts,
        held: Counts,
        threads_ended: bool,
        lengths_grew: bool,
    ) {
        let left_before = self.every_run_left_threads;
        self.run(live, Some(held), lengths_grew);
        self.every_run_left_threads = left_before && !threads_ended;
    }

    /// The live total after the next extra run, what the extra runs' arenas held together
    /// then (`None`: a record of a runtime that did not say, read by the rule as it was
    /// before it said), and whether the run made a collection longer.
    pub fn run(&mut self, live: Counts, held: Option<Counts>, lengths_grew: bool) {
        self.every_run_left_threads = false;
        let held_the_same = match (held, self.previous_held) {
            (Some(now), Some(before)) => now == before,
            (None, _) => true,
            (Some(_), None) => false,
        };
        if self.runs >= 1 && live == self.previous && held_the_same && !lengths_grew {
            self.a_later_run_added_nothing = true;
        }
        self.previous_held = held;
        self.runs += 1;
        self.step(live);
    }

    /// The live total once the runs' threads had their grace, and whether a collection grew
    /// meanwhile.
    pub fn grace(&mut self, live: Counts, lengths_grew: bool) {
        self.grew_in_grace |= lengths_grew;
        self.step(live);
    }

    fn step(&mut self, live: Counts) {
        let rose = live.objects >= self.previous.objects
            && live.bytes >= self.previous.bytes
            && live != self.previous;
        self.rose_every_step &= rose;
        self.steps += 1;
        self.previous = live;
    }

    /// Whether the series has the shape only threads that never end give it: at least
    /// [`RUNS_LEAVING_THREADS`] runs, every one of which raised the live total and left
    /// threads of its own running (runs measured with [`Series::run`] alone count as
    /// having let theirs end).
    pub fn leaves_threads(&self) -> bool {
        self.runs >= RUNS_LEAVING_THREADS
            && self.runs == self.steps
            && self.rose_every_step
            && self.every_run_left_threads
    }

    /// Whether the series settles the test; `nothing_left`: some extra run's own arena is
    /// empty, and that run made no collection longer (see [`nothing_left`]).
    pub fn settled(&self, nothing_left: bool) -> bool {
        let rose_every_step = self.steps >= 1 && self.rose_every_step;
        (nothing_left || self.a_later_run_added_nothing) && !rose_every_step && !self.grew_in_grace
    }
}

/// Whether some extra run left nothing behind: its own arena is empty now (`left[k]`) and it
/// made no collection longer (`grew[k]`).
pub fn nothing_left(left: &[Counts], grew: &[bool]) -> bool {
    left.iter()
        .enumerate()
        .any(|(k, l)| *l == Counts::default() && !grew.get(k).copied().unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(objects: i64, bytes: i64) -> Counts {
        Counts { objects, bytes }
    }

    fn series(first: Counts, runs: &[Counts]) -> Series {
        let mut s = Series::new(first);
        runs.iter().for_each(|&r| s.run(r, None, false));
        s
    }

    #[test]
    fn an_empty_arena_settles_unless_the_total_rose_on_every_step() {
        let s = series(live(3, 300), &[live(3, 300)]);
        assert!(s.settled(true));
        assert!(!s.settled(false), "the first run's word is not taken");
        let rising = series(live(3, 300), &[live(4, 400), live(5, 500)]);
        assert!(!rising.settled(true));
    }

    #[test]
    fn a_later_run_that_adds_nothing_settles_and_the_grace_is_a_step_not_a_run() {
        let s = series(live(9, 900), &[live(7, 700), live(7, 700)]);
        assert!(s.settled(false));
        let mut g = series(live(1, 100), &[live(2, 200)]);
        g.grace(live(2, 200), false);
        assert!(!g.settled(false), "the grace is no run");
        assert!(g.settled(true), "it did not rise at the grace");
        let mut r = series(live(1, 100), &[live(2, 200)]);
        r.grace(live(3, 300), false);
        assert!(
            !r.settled(true),
            "it rose at every step, the grace included"
        );
    }

    #[test]
    fn runs_that_each_leave_threads_and_grow_end_the_series_after_two() {
        let mut s = Series::new(live(5, 500));
        s.run_with_threads(live(9, 900), live(4, 400), false, false);
        assert!(!s.leaves_threads(), "one run is not every run");
        s.run_with_threads(live(13, 1300), live(8, 800), false, false);
        assert!(s.leaves_threads());
        assert!(!s.settled(false));

        // A run whose threads ended, a run that did not grow, or a grace step: the series
        // goes on.
        let mut ended = Series::new(live(5, 500));
        ended.run_with_threads(live(9, 900), live(4, 400), false, false);
        ended.run_with_threads(live(13, 1300), live(8, 800), true, false);
        assert!(!ended.leaves_threads());
        let mut flat = Series::new(live(5, 500));
        flat.run_with_threads(live(9, 900), live(4, 400), false, false);
        flat.run_with_threads(live(9, 900), live(4, 400), false, false);
        assert!(!flat.leaves_threads());
        let mut graced = Series::new(live(5, 500));
        graced.run_with_threads(live(9, 900), live(4, 400), false, false);
        graced.run_with_threads(live(13, 1300), live(8, 800), false, false);
        graced.grace(live(14, 1400), false);
        assert!(
            !graced.leaves_threads(),
            "after the grace the series is over anyway"
        );

        // Runs measured without their threads say nothing of them.
        let counted = series(live(5, 500), &[live(9, 900), live(13, 1300)]);
        assert!(!counted.leaves_threads());
    }

    #[test]
    fn a_run_that_made_a_collection_longer_settles_nothing() {
        // A set given a new id on every run: no run allocates (the table has room), so each
        // run's arena is empty and the total stays put, yet the set grows every time.
        let mut s = Series::new(live(2, 96));
        for _ in 0..4 {
            s.run(live(2, 96), None, true);
            let nothing = nothing_left(&[live(0, 0); 4], &[true; 4]);
            assert!(!nothing);
            assert!(!s.settled(nothing), "grew on every run");
        }
        // Once it stops growing (a window that is full), the next quiet run settles it.
        s.run(live(2, 96), None, false);
        assert!(s.settled(false), "a later run added nothing");
        let grew = [true, true, false];
        assert!(nothing_left(&[live(0, 0); 3], &grew));
        assert!(!nothing_left(&[live(0, 0), live(0, 0), live(1, 8)], &grew));
        // A grace during which a collection grew settles nothing.
        let mut g = series(live(1, 100), &[live(1, 100)]);
        g.grace(live(1, 100), true);
        assert!(!g.settled(true));
    }

    #[test]
    fn an_equal_total_settles_only_when_the_runs_freed_their_own_garbage() {
        // Garbage in steady state: each run leaves 2 objects the run after it frees, so
        // the runs' arenas together hold the same after every run from the second on.
        let mut garbage = Series::new(live(10, 1000));
        garbage.run(live(11, 1100), Some(live(2, 200)), false);
        garbage.run(live(11, 1100), Some(live(2, 200)), false);
        assert!(garbage.settled(false));
        // A 16-byte leak on every run, and in the third run an object of the test's own run
        // of the same size freed: the total is back where it was, the runs' arenas hold the
        // leak more. Nothing settles.
        let mut leak = Series::new(live(36, 99120));
        leak.run(live(37, 99136), Some(live(1, 16)), false);
        leak.run(live(38, 99152), Some(live(2, 32)), false);
        leak.run(live(38, 99152), Some(live(3, 48)), false);
        assert!(!leak.settled(false));
        // The first run's held total is no reference for the second when the record said
        // nothing of it.
        let mut unknown_then_known = Series::new(live(5, 500));
        unknown_then_known.run(live(6, 600), None, false);
        unknown_then_known.run(live(6, 600), Some(live(1, 100)), false);
        assert!(!unknown_then_known.settled(false));
    }

    #[test]
    fn no_runs_settle_only_on_an_empty_arena() {
        assert!(Series::new(live(1, 8)).settled(true));
        assert!(!Series::new(live(1, 8)).settled(false));
    }
}
