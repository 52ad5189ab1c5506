//! The lengths of the program's own collections as a process's record gives them (`len`
//! lines, written when a length changed): the reading at each point of its runs, and which
//! runs made some collection longer, the rule the counting pass settles by (see
//! `leakcheck_protocol::settling`).

use crate::evidence::{Collection, Length};
use crate::model::{CollectionId, LengthUnit, RootKind};
use leakcheck_protocol::collections::{rose, Reading, ABSENT};
use std::collections::BTreeMap;

/// One collection's readings over a process's runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readings {
    /// After the test's own run (0), then after each extra run.
    pub points: Vec<Reading>,
    /// After the grace for the runs' threads, when it changed then.
    pub grace: Option<Reading>,
}

impl Readings {
    /// The points the rule judges: the last run's reading replaced by the one after the
    /// grace, when the runtime read again then (threads of the runs that end soon after
    /// may remove what they added).
    pub fn judged(&self) -> Vec<Reading> {
        let mut points = self.points.clone();
        if let (Some(g), Some(last)) = (self.grace, points.last_mut()) {
            *last = g;
        }
        points
    }
}

/// The readings of every collection the record mentions, over its `runs` extra runs: each
/// point is the last reading written at or before it (`ABSENT` before any).
pub fn readings(lengths: &[Length], runs: usize) -> BTreeMap<u32, Readings> {
    let mut out: BTreeMap<u32, Readings> = BTreeMap::new();
    for l in lengths {
        let r = out.entry(l.index).or_insert_with(|| Readings {
            points: vec![ABSENT; runs + 1],
            grace: None,
        });
        match l.run {
            Some(k) if (k as usize) <= runs => {
                for p in &mut r.points[k as usize..] {
                    *p = l.reading;
                }
            }
            Some(_) => {}
            None => r.grace = Some(l.reading),
        }
    }
    out
}

/// Per extra run (index k - 1 for run k): whether some collection grew in it; and whether
/// one grew during the grace after the last. The rule the runtime stops its counting runs
/// by (see `leakcheck_protocol::settling`), read back from its record.
pub fn growth_by_run(lengths: &[Length], runs: usize) -> (Vec<bool>, bool) {
    let mut grew = vec![false; runs];
    let mut grace = false;
    for r in readings(lengths, runs).values() {
        for k in 1..=runs {
            grew[k - 1] |= rose(r.points[k - 1], r.points[k]);
        }
        if let Some(g) = r.grace {
            grace |= rose(r.points[runs], g);
        }
    }
    (grew, grace)
}

/// What the reports say a collection of the binary's table is.
pub fn identity(c: &Collection) -> CollectionId {
    CollectionId {
        root: c.root.clone(),
        root_kind: if c.thread_local {
            RootKind::ThreadLocal
        } else {
            RootKind::Static
        },
        field: c.field.clone(),
        type_name: c.type_name.clone(),
        file: c.file.clone(),
        line: c.line,
        unit: if c.bytes {
            LengthUnit::Bytes
        } else {
            LengthUnit::Entries
        },
        entry_bytes: c.entry_size,
    }
}
