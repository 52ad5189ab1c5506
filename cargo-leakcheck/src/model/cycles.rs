//! How a leaked stack's lost objects are lost: the reference cycle that keeps them, or
//! nothing pointing to them (the line the reports say it in is `report::text`'s).

use super::FrameReport;
use serde::{Deserialize, Serialize};

/// How a leaked stack's objects are lost, when no root reaches them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Unreachable {
    /// They are members of reference cycles: each member keeps the next alive (an
    /// `Rc`/`Arc` cycle keeps its counts above zero), so nothing frees any of them.
    Cycle(CycleReport),
    /// They are in a reference cycle too, among the same lost objects, but not on the one
    /// cycle the scan shows for their group (a tree's third node: its group holds two
    /// cycles, one shown).
    InCycle,
    /// Only other lost objects, in no cycle, point to them: they are inside a lost
    /// structure, whose own stack says how it was lost.
    InsideLost,
    /// Nothing points to them: a `Box::leak` or `mem::forget` whose result was dropped, or
    /// a raw pointer given up.
    NoCycle,
}

/// A reference cycle among lost objects: one of its kind, as the scan found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleReport {
    /// How many cycles through the same allocation sites the scan found (after the last
    /// extra run, when the test had them: one per run is a cycle made on every run).
    pub cycles: u64,
    /// Their objects in all (a cycle's group may hold more objects than the cycle itself).
    pub objects: u64,
    /// The cycle's members in all; at most 16 are listed.
    pub length: u64,
    /// Its members, the owner first (the one allocated first in the program's code): each
    /// points to the next, the last back to the first.
    pub members: Vec<CycleMember>,
}

impl CycleReport {
    /// The pointer that should be `Weak`: the one that closes the cycle, from the last
    /// member back to the owner (a child's to its parent, a callback's to the cache that
    /// holds it).
    pub fn weak_edge(&self) -> Option<(&CycleMember, &CycleMember)> {
        Some((self.members.last()?, self.members.first()?))
    }
}

/// One object of a reference cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleMember {
    /// Where it was allocated: the first frame in the program's own code.
    pub site: FrameReport,
    /// When another member was allocated at the same line (a constructor every node goes
    /// through): the next frame of the program's own code further out, which tells them
    /// apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub called_at: Option<FrameReport>,
    /// What allocated it, from std's frames: `Arc`, `Rc`, `Box` or `Vec` (a vector's buffer).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub container: Option<String>,
    /// Its type, when the frame names carry the constructor's generic argument (inlined
    /// frames of an optimised build with line tables).
    #[serde(rename = "type")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub type_name: Option<String>,
    /// Its size in bytes.
    pub size: u64,
    /// Where in it the pointer to the next member is, in bytes.
    pub offset: u64,
    /// Its strong and weak counts, when it looks like an `Rc`/`Arc` allocation (they come
    /// first in one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub strong: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub weak: Option<u64>,
}
