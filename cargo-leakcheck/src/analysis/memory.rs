//! Where a service's resident memory went: the kernel's split of the resident set
//! (`smaps_rollup`) and the allocator's own figures (jemalloc's `stats.*`, with the program's
//! own mappings), read at the same moments, made into parts that add up to the resident set.
//!
//! Only the live heap and the program's own mappings can be a leak, and those are judged
//! stack by stack elsewhere; the rest (pages the allocator keeps after frees, fragmentation,
//! thread stacks, file pages) is explained here and fails the run only over the budget the
//! user set for the resident set's growth.

use crate::model::{MemoryExplained, MemoryPart, MemoryPartFigures, MemoryPoint};
use leakcheck_protocol::timeline::MemoryAt;

/// A growth under this is not worth a sentence (page-granular noise).
const NOTABLE: i64 = 1 << 20;

/// The parts at one moment, from the allocator's figures and the kernel's split read with
/// them.
fn parts_at(a: &MemoryAt) -> [u64; 6] {
    let rss_bytes = a.kernel.rss;
    let file = a.kernel.file();
    let heap = a.allocated;
    let fragmentation = a.active.saturating_sub(a.allocated);
    let allocator = a.resident.saturating_sub(a.active);
    // The program's mappings count at their size; what of them is not resident yet makes the
    // rest smaller, never negative.
    let mappings = a.program_mapped;
    let accounted = a.resident.max(a.active) + mappings + file;
    let other = rss_bytes.saturating_sub(accounted);
    let mut parts = [0; 6];
    for (slot, part) in parts.iter_mut().zip(MemoryPart::ALL) {
        *slot = match part {
            MemoryPart::LiveHeap => heap,
            MemoryPart::Mappings => mappings,
            MemoryPart::AllocatorPages => allocator,
            MemoryPart::Fragmentation => fragmentation,
            MemoryPart::FileBacked => file,
            MemoryPart::Other => other,
        };
    }
    parts
}

/// Explains the resident set's growth between the first and the last of `points` (seconds on
/// the snapshots' time axis, the figures read then), against `budget` (bytes the resident set
/// may grow). None without two moments whose resident set was read.
pub fn explain(points: &[(f64, MemoryAt)], budget: Option<u64>) -> Option<MemoryExplained> {
    let points: Vec<&(f64, MemoryAt)> = points.iter().filter(|(_, a)| a.kernel.rss > 0).collect();
    let (first, last) = (points.first()?, points.last()?);
    if points.len() < 2 {
        return None;
    }
    let (from, to) = (parts_at(&first.1), parts_at(&last.1));
    let parts: Vec<MemoryPartFigures> = MemoryPart::ALL
        .iter()
        .enumerate()
        .map(|(i, &part)| MemoryPartFigures {
            part,
            from: from[i],
            to: to[i],
        })
        .collect();
    let (rss_from, rss_to) = (first.1.kernel.rss, last.1.kernel.rss);
    let growth = rss_to as i64 - rss_from as i64;
    let over_budget = budget.is_some_and(|b| growth > b as i64);
    let mut explained = MemoryExplained {
        from_seconds: first.0,
        to_seconds: last.0,
        rss_from,
        rss_to,
        parts,
        dirty: last.1.dirty,
        muzzy: last.1.muzzy,
        lazy_free: last.1.kernel.lazy_free,
        rss_budget: budget,
        over_budget,
        findings: Vec::new(),
        series: points
            .iter()
            .map(|(t, a)| MemoryPoint {
                seconds: *t,
                parts: parts_at(a),
            })
            .collect(),
    };
    explained.findings = findings(&explained);
    Some(explained)
}

fn mib(bytes: i64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// What the figures say, largest growth first.
fn findings(e: &MemoryExplained) -> Vec<String> {
    let mut out = Vec::new();
    let growth = e.rss_growth();
    let grew = |part: MemoryPart| {
        e.parts
            .iter()
            .find(|p| p.part == part)
            .map_or(0, MemoryPartFigures::growth)
    };
    let heap = grew(MemoryPart::LiveHeap);
    let held = grew(MemoryPart::AllocatorPages);
    let fragmentation = grew(MemoryPart::Fragmentation);
    if held >= NOTABLE {
        out.push(format!(
            "{} of the growth are pages the allocator kept after their objects were freed ({} dirty, {} muzzy at the end): not a leak. jemalloc returns dirty pages after `dirty_decay_ms` (10 s by default), and only while it is allocating, unless `background_thread:true` is set; an idle service keeps its peak.",
            mib(held),
            mib(e.dirty as i64),
            mib(e.muzzy as i64),
        ));
    }
    if fragmentation >= NOTABLE {
        out.push(format!(
            "{} of the growth is fragmentation: pages that hold live objects, partly empty; not a leak, though a workload that frees most of what it allocated in a burst leaves it behind.",
            mib(fragmentation)
        ));
    }
    if e.lazy_free >= NOTABLE as u64 {
        out.push(format!(
            "{} of the resident set are pages freed with MADV_FREE that the kernel has not taken back yet: they leave the resident set under memory pressure.",
            mib(e.lazy_free as i64)
        ));
    }
    if heap >= NOTABLE && growth < heap / 2 {
        out.push(format!(
            "The live heap grew {} while the resident set grew {}: the heap's new objects went into pages the process already had resident (freed pages the allocator kept), or into pages not touched yet; the growth is still in the heap, judged stack by stack.",
            mib(heap),
            mib(growth)
        ));
    }
    if let Some(budget) = e.rss_budget.filter(|_| e.over_budget) {
        out.push(format!(
            "The resident set grew {}, over the budget of {} set by `[run] rss-growth-budget`.",
            mib(growth),
            mib(budget as i64)
        ));
    }
    out
}

/// A service's resident memory, explained, decides with its heap: memory over the budget
/// (`[run] rss-growth-budget`) fails a service its heap did not, with the finding as why.
pub fn with_memory(
    mut service: crate::model::GrowthReport,
    memory: Option<MemoryExplained>,
) -> crate::model::GrowthReport {
    if let Some(m) = memory.as_ref().filter(|m| m.over_budget) {
        if service.verdict == crate::model::Verdict::Clean {
            service.verdict = crate::model::Verdict::Leak;
            service.message = m.findings.last().cloned();
        }
    }
    service.memory = memory;
    service
}

#[cfg(test)]
mod tests {
    use super::*;
    use leakcheck_protocol::timeline::ResidentSet;

    const MIB: u64 = 1 << 20;

    fn figures(
        (allocated, active, resident, dirty, mapped): (u64, u64, u64, u64, u64),
        (rss_mib, file_mib): (u64, u64),
    ) -> MemoryAt {
        MemoryAt {
            seq: 0,
            allocated,
            active,
            resident,
            mapped: resident,
            retained: 0,
            dirty,
            muzzy: 0,
            program_mapped: mapped,
            kernel: ResidentSet {
                rss: rss_mib * MIB,
                anonymous: (rss_mib - file_mib) * MIB,
                ..ResidentSet::default()
            },
        }
    }

    fn part(e: &MemoryExplained, p: MemoryPart) -> i64 {
        e.parts.iter().find(|f| f.part == p).unwrap().growth()
    }

    #[test]
    fn pages_kept_after_a_burst_are_the_allocators_not_a_leak() {
        // A burst of 150 MiB allocated and freed: the heap is back at 2 MiB, jemalloc still
        // has the pages resident, dirty.
        let points = [
            (0.0, figures((2 * MIB, 3 * MIB, 4 * MIB, 0, 0), (10, 4))),
            (
                5.0,
                figures((150 * MIB, 152 * MIB, 154 * MIB, 0, 0), (160, 4)),
            ),
            (
                10.0,
                figures((2 * MIB, 3 * MIB, 154 * MIB, 150 * MIB, 0), (160, 4)),
            ),
        ];
        let e = explain(&points, None).unwrap();
        assert_eq!(e.rss_growth(), 150 * MIB as i64);
        assert_eq!(part(&e, MemoryPart::AllocatorPages), 150 * MIB as i64);
        assert_eq!(part(&e, MemoryPart::LiveHeap), 0);
        assert_eq!(part(&e, MemoryPart::Mappings), 0);
        assert_eq!(part(&e, MemoryPart::FileBacked), 0);
        assert_eq!(e.dirty, 150 * MIB);
        assert!(!e.over_budget);
        assert!(
            e.findings[0].starts_with("150.0 MiB of the growth are pages the allocator kept")
                && e.findings[0].contains("background_thread:true"),
            "{:?}",
            e.findings
        );
        // The parts add up to the resident set at every moment.
        for p in &e.series {
            let sum: u64 = p.parts.iter().sum();
            assert!(sum <= 160 * MIB, "{p:?}");
        }
        assert_eq!(
            e.series.last().unwrap().parts.iter().sum::<u64>(),
            160 * MIB
        );
    }

    #[test]
    fn the_programs_own_mappings_are_a_part_of_their_own() {
        let points = [
            (0.0, figures((MIB, MIB, 2 * MIB, 0, 0), (8, 2))),
            (10.0, figures((MIB, MIB, 2 * MIB, 0, 200 * MIB), (208, 2))),
        ];
        let e = explain(&points, Some(64 * MIB)).unwrap();
        assert_eq!(part(&e, MemoryPart::Mappings), 200 * MIB as i64);
        assert_eq!(part(&e, MemoryPart::AllocatorPages), 0);
        assert!(e.over_budget);
        assert!(
            e.findings
                .iter()
                .any(|f| f.contains("over the budget of 64.0 MiB")),
            "{:?}",
            e.findings
        );
    }

    #[test]
    fn a_heap_that_grows_while_the_resident_set_stays_says_why() {
        // The burst's pages are reused by objects that stay: RSS flat, heap up.
        let points = [
            (
                0.0,
                figures((2 * MIB, 3 * MIB, 154 * MIB, 150 * MIB, 0), (160, 4)),
            ),
            (
                10.0,
                figures((100 * MIB, 101 * MIB, 154 * MIB, 52 * MIB, 0), (160, 4)),
            ),
        ];
        let e = explain(&points, None).unwrap();
        assert_eq!(e.rss_growth(), 0);
        assert_eq!(part(&e, MemoryPart::LiveHeap), 98 * MIB as i64);
        assert!(
            e.findings.iter().any(|f| f
                .starts_with("The live heap grew 98.0 MiB while the resident set grew 0.0 MiB")),
            "{:?}",
            e.findings
        );
    }

    #[test]
    fn without_two_moments_there_is_nothing_to_explain() {
        let one = [(0.0, figures((MIB, MIB, MIB, 0, 0), (8, 2)))];
        assert!(explain(&one, None).is_none());
        // Figures without the kernel's reading (smaps_rollup unreadable) are left out.
        let mut unread = figures((MIB, MIB, MIB, 0, 0), (8, 2));
        unread.kernel = ResidentSet::default();
        assert!(explain(&[one[0], (1.0, unread)], None).is_none());
    }
}
