//! What the execution asks the analysis while it runs, and nothing else: which tests the
//! counting pass can settle ([`can_settle`]) and which it sends on to a stacks process, and
//! when ([`after_counting`], [`headed_for_stacks`], [`may_have_met_its_neighbour`]); how a
//! test's extra runs went ([`interpret`]) and how many a stacks process makes
//! ([`stacks_runs`], [`runs_after_threads_left`]). Every other rule is applied once the
//! processes have run, by the judging stage.

pub use crate::analysis::counting::{
    after_counting, can_settle, headed_for_stacks, may_have_met_its_neighbour, Counted, Headed,
};
pub use crate::analysis::settling::{
    interpret, runs_after_threads_left, stacks_runs, ProcessOutput,
};
