//! Which of a test's stacks a renderer shows: a stack whose lost objects are explained by
//! another stack ("inside a lost structure", "in a reference cycle … shown for another
//! stack") brings that stack with it, so that no line refers to a stack the reader cannot
//! see.

use super::{StackReport, TestReport, Unreachable};

/// Whether a stack's lost objects are so.
type IsLost = fn(&Unreachable) -> bool;

fn in_other_cycle(u: &Unreachable) -> bool {
    matches!(u, Unreachable::InCycle)
}

fn inside_lost(u: &Unreachable) -> bool {
    matches!(u, Unreachable::InsideLost)
}

fn cycle(u: &Unreachable) -> bool {
    matches!(u, Unreachable::Cycle(_))
}

fn lost_whole(u: &Unreachable) -> bool {
    matches!(u, Unreachable::Cycle(_) | Unreachable::NoCycle)
}

/// A stack lost the first way is explained by a stack lost the second.
const EXPLAINED_BY: [(IsLost, IsLost); 2] = [(in_other_cycle, cycle), (inside_lost, lost_whole)];

fn is(s: &StackReport, lost: IsLost) -> bool {
    s.unreachable.as_ref().is_some_and(lost)
}

impl TestReport {
    /// The first `limit` of `listed` (a renderer's choice, in its order), then, when one of
    /// them is lost inside a structure or in a cycle that another stack explains and none
    /// shown explains it, this test's first stack that does.
    pub fn shown_stacks<'a>(
        &'a self,
        listed: impl IntoIterator<Item = &'a StackReport>,
        limit: usize,
    ) -> Vec<&'a StackReport> {
        let mut shown: Vec<&StackReport> = listed.into_iter().take(limit).collect();
        for (referring, explaining) in EXPLAINED_BY {
            let refers = shown.iter().any(|s| is(s, referring));
            let explained = shown.iter().any(|s| is(s, explaining));
            if refers && !explained {
                if let Some(e) = self.stacks.iter().find(|s| is(s, explaining)) {
                    shown.push(e);
                }
            }
        }
        shown
    }
}
