//! A test's stacks process started beside its counting process (see
//! [`crate::execution::passes`]): why it was started then, and what became of it, as
//! `metrics.json` reports them.

/// A test's stacks process started beside its counting process: why, and what became of
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beside {
    /// Why it was started then.
    pub on: AheadOn,
    /// What became of it.
    pub came_to: Ahead,
}

/// Why a test's stacks process was started beside its counting process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AheadOn {
    /// The previous run needed it: started with the counting process.
    PreviousRun,
    /// The counting process was headed for it (see [`crate::analysis::counting::headed_for_stacks`]):
    /// started while it ran.
    CountingHeaded,
}

impl AheadOn {
    /// The word `metrics.json` gives it.
    pub fn word(self) -> &'static str {
        match self {
            AheadOn::PreviousRun => "previous-run",
            AheadOn::CountingHeaded => "counting-headed",
        }
    }
}

/// What became of a test's stacks process started beside its counting process (see
/// [`crate::execution::cancel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// Its counting process asked for exactly that process: it is what the test is judged
    /// by.
    Kept,
    /// Its counting process settled the test, or asked for other extra runs: it was called
    /// off (never started, or killed).
    CalledOff,
    /// Asked for, but its test's own run did not end as the counting process's did (the
    /// two side by side may have met over a port or a file): not used, and run again
    /// alone in the stacks pass.
    NotUsed,
}

impl Ahead {
    /// The word `metrics.json` gives it.
    pub fn word(self) -> &'static str {
        match self {
            Ahead::Kept => "kept",
            Ahead::CalledOff => "called-off",
            Ahead::NotUsed => "not-used",
        }
    }
}
