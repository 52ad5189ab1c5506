//! The rule for the program's own collections: a collection reachable from a static or a
//! thread-local whose length grew on every extra run is a leak, whatever the allocator saw.
//! A set that gains an id per call allocates only when it doubles, so no stack grows on
//! every run while its length does; a window that is full, a set refilled with the same
//! keys, a table cleared after the test stop growing and are kept state, like a pool that
//! warmed up.
//!
//! The readings come from the runtime's record (`len` lines, written when a length
//! changed); the collections they are of, from the binary's table (see
//! `execution::collections`); the call that last made a growing collection reallocate, from
//! the stacks process's `<dump>.collections` file ([`parse_sites`]).

use crate::analysis::frames::{frame_report, resolve_stack};
use crate::analysis::lengths::{identity, readings};
use crate::analysis::stacks::{allowance, Allowed, Policy};
use crate::evidence::sites::BufferSite;
use crate::evidence::symbols::Symbols;
use crate::evidence::{Collection, CollectionTable, Length};
use crate::model::{CollectionReport, FrameReport, StackKind};
use leakcheck_protocol::collections::{rose, Reading, ABSENT, INCONSISTENT, UNREADABLE};
use std::collections::HashMap;

/// The collections' verdicts for a test whose `runs` extra runs were made and measured:
/// every collection that grew in some run or could not be read, with its kind (a leak when
/// it grew on every run), whether it fails the test, and the stack that allocated its
/// buffer (`sites`, by index).
pub fn judge(
    table: &CollectionTable,
    lengths: &[Length],
    runs: usize,
    sites: &HashMap<u32, BufferSite>,
    symbols: &mut dyn Symbols,
    policy: &Policy,
) -> Vec<CollectionReport> {
    if runs == 0 {
        return Vec::new();
    }
    let mut found: Vec<(u32, CollectionReport)> = Vec::new();
    for (index, r) in readings(lengths, runs) {
        let Some(c) = table.collections.get(index as usize) else {
            continue;
        };
        if let Some(report) = grown(c, r.judged(), runs, sites.get(&index), symbols) {
            found.push((index, report));
        }
    }
    found.sort_by(|(_, a), (_, b)| {
        let (a, b) = (&a.collection, &b.collection);
        (&a.root, &a.field).cmp(&(&b.root, &b.field))
    });
    let mut out: Vec<CollectionReport> = one_per_buffer(found, sites)
        .into_iter()
        .map(|(report, roots)| against_policy(report, roots, policy))
        .collect();
    out.sort_by(|a, b| {
        b.fails.cmp(&a.fails).then_with(|| {
            let (a, b) = (&a.collection, &b.collection);
            (&a.root, &a.field).cmp(&(&b.root, &b.field))
        })
    });
    out
}

/// The report of collection `c` whose lengths over the runs are `points`: None when it
/// neither grew nor failed to be read. A leak when it grew on every run; not yet held
/// against the policy.
fn grown(
    c: &Collection,
    points: Vec<Reading>,
    runs: usize,
    site: Option<&BufferSite>,
    symbols: &mut dyn Symbols,
) -> Option<CollectionReport> {
    let problem = problem_of(&points);
    let growth: Vec<i64> = points
        .windows(2)
        .map(|w| match (w[0], w[1]) {
            (a, b) if a >= ABSENT && b >= 0 => b - a.max(0),
            _ => 0,
        })
        .collect();
    let every = points.windows(2).all(|w| rose(w[0], w[1]));
    if !growth.iter().any(|&g| g > 0) && problem.is_none() {
        return None;
    }
    let allocated_at = site
        .map(|site| {
            resolve_stack(&site.frames, symbols)
                .iter()
                .map(frame_report)
                .collect()
        })
        .unwrap_or_default();
    Some(CollectionReport {
        collection: identity(c),
        lengths: points,
        growth_per_run: growth,
        kind: if every {
            StackKind::Leak
        } else {
            StackKind::ProcessLifetime
        },
        reason: Some(if every {
            format!("its length grew in each of {runs} measured runs")
        } else {
            format!("its length did not grow in each of {runs} measured runs")
        }),
        fails: false,
        allowed: None,
        suppression: None,
        allocated_at,
        problem,
        also_held_by: Vec::new(),
    })
}

/// Collections of one buffer (at least [`MIN_BUFFER`]) with the same lengths are one
/// collection held from several roots: the first report stands, the others' collections
/// are where it is also held. Each report comes with its roots.
fn one_per_buffer(
    found: Vec<(u32, CollectionReport)>,
    sites: &HashMap<u32, BufferSite>,
) -> Vec<(CollectionReport, Vec<FrameReport>)> {
    let mut out: Vec<CollectionReport> = Vec::new();
    let mut roots: Vec<Vec<FrameReport>> = Vec::new();
    let mut buffers: Vec<Option<u64>> = Vec::new();
    for (index, report) in found {
        let buffer = sites
            .get(&index)
            .map(|s| s.buffer)
            .filter(|&b| b >= MIN_BUFFER);
        let same = out
            .iter()
            .zip(&buffers)
            .position(|(o, b)| buffer.is_some() && *b == buffer && o.lengths == report.lengths);
        match same {
            Some(k) => {
                roots[k].push(FrameReport::named(&report.collection.root));
                out[k].also_held_by.push(report.collection);
            }
            None => {
                roots.push(vec![FrameReport::named(&report.collection.root)]);
                buffers.push(buffer);
                out.push(report);
            }
        }
    }
    out.into_iter().zip(roots).collect()
}

/// Below this a buffer address is no allocation's (a zero-sized type's dangling pointer):
/// two collections with such a buffer need not be one.
const MIN_BUFFER: u64 = 1 << 16;

/// What a reading that failed says, for the report.
fn problem_of(points: &[Reading]) -> Option<String> {
    let (k, r) = points
        .iter()
        .enumerate()
        .find(|(_, r)| matches!(**r, UNREADABLE | INCONSISTENT))?;
    let when = match k {
        0 => "after the test's own run".to_string(),
        k => format!("after extra run {k}"),
    };
    Some(match *r {
        UNREADABLE => format!(
            "could not be read {when}: a pointer on the way does not lead into mapped memory"
        ),
        _ => format!(
            "could not be read {when}: its length is above its capacity (the memory is not what its type says, or it was changing)"
        ),
    })
}

/// A growing collection against the thresholds and suppressions, as a stack is: a
/// suppression whose `frame` matches one of its `roots` (or a frame of its allocation)
/// allows it; otherwise it fails when what one run adds (entries times their size) is over
/// the stack threshold.
fn against_policy(
    mut c: CollectionReport,
    roots: Vec<FrameReport>,
    policy: &Policy,
) -> CollectionReport {
    let judged = c.kind == StackKind::Leak
        || (c.kind == StackKind::ProcessLifetime && policy.effective.one_time_fails);
    if !judged || c.problem.is_some() && c.kind != StackKind::Leak {
        return c;
    }
    let size = c.collection.bytes_of(c.min_growth().unwrap_or(0));
    let mut names = roots;
    names.extend(c.allocated_at.iter().cloned());
    match allowance(policy, &names, size, " per run") {
        Allowed::Fails => c.fails = true,
        Allowed::By(suppression, allowance) => {
            c.suppression = suppression;
            c.allowed = Some(allowance);
        }
    }
    c
}

#[cfg(test)]
mod tests;
