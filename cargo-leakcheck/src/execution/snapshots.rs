//! Which heap snapshots a bench's or a service's verdict is drawn from, chosen from what its
//! process left: the evidence the growth rules read, selected here so that the rules (and
//! the golden cases that replay them) see exactly these.

use crate::evidence::load;
use crate::execution::preload;
use crate::execution::service::{ServiceRun, Window};
use std::path::{Path, PathBuf};

/// The most snapshots judged: a long run's are thinned evenly to this many, which is plenty
/// for the growth rule (it compares quarters of the run) and keeps the tool's memory
/// bounded however long the service runs.
const MAX_SNAPSHOTS: usize = 240;

/// The bench's heap snapshots: with the bench's own jemalloc's dump of each moment, when
/// it has one; then a dump without it (the exit dump) would be half the heap, and is left
/// out.
pub fn of_bench(work_dir: &Path, key: &str, own_allocator: bool) -> Vec<Vec<PathBuf>> {
    preload::all_dumps(work_dir, key, preload::PRELOAD_STEM)
        .iter()
        .map(|d| preload::snapshot_parts(d, key))
        .filter(|parts| !own_allocator || parts.len() > 1)
        .collect()
}

/// The snapshots a service's verdict is drawn from: those of the window under load (at
/// most [`MAX_SNAPSHOTS`], evenly), and the one after it (the scanned one, when the scan
/// ran).
pub struct ServiceSnapshots {
    pub timeline: PathBuf,
    pub marks: load::Marks,
    pub dumps: Vec<Vec<PathBuf>>,
    /// The snapshot after the load, and its parts.
    pub after: Option<(PathBuf, Vec<PathBuf>)>,
}

pub fn of_service(work_dir: &Path, key: &str, ran: &ServiceRun) -> ServiceSnapshots {
    let timeline = preload::timeline(work_dir, key);
    let marks = load::timeline_marks(&timeline);
    let (dumps, after) = split_at_window(&ran.dumps, ran.window, &marks);
    let after = ran.scanned.clone().or(after);
    let dumps = (evenly(dumps, MAX_SNAPSHOTS).iter())
        .map(|d| preload::snapshot_parts(d, key))
        .collect();
    let after = after.map(|dump| {
        let parts = preload::snapshot_parts(&dump, key);
        (dump, parts)
    });
    ServiceSnapshots {
        timeline,
        marks,
        dumps,
        after,
    }
}

/// The snapshots taken under load (from ready to the end of the load), and the first one
/// taken after the settle pause, by the moments the runtime's timeline gives them; all of
/// them, and none after, when the window is unknown (the service ended before it was
/// stopped).
fn split_at_window(
    dumps: &[PathBuf],
    window: Option<Window>,
    marks: &load::Marks,
) -> (Vec<PathBuf>, Option<PathBuf>) {
    let Some(w) = window else {
        return (dumps.to_vec(), None);
    };
    let time = |d: &PathBuf| load::moment_of(marks, d);
    let under_load = dumps
        .iter()
        .filter(|d| time(d).is_some_and(|t| t >= w.ready && t <= w.loaded))
        .cloned()
        .collect();
    let after = dumps
        .iter()
        .find(|d| time(d).is_some_and(|t| t >= w.settled))
        .cloned();
    (under_load, after)
}

/// At most `max` of `all`, evenly spaced, the first and the last among them.
fn evenly(all: Vec<PathBuf>, max: usize) -> Vec<PathBuf> {
    if all.len() <= max || max < 2 {
        return all;
    }
    let last = all.len() - 1;
    (0..max)
        .map(|i| all[i * last / (max - 1)].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_runs_are_thinned_evenly_keeping_both_ends() {
        let all: Vec<PathBuf> = (0..1000).map(|i| PathBuf::from(i.to_string())).collect();
        let kept = evenly(all.clone(), 240);
        assert_eq!(kept.len(), 240);
        assert_eq!(
            (kept[0].clone(), kept[239].clone()),
            (all[0].clone(), all[999].clone())
        );
        assert!(kept.windows(2).all(|w| w[0] != w[1]));
        assert_eq!(evenly(all[..10].to_vec(), 240).len(), 10);
    }
}
