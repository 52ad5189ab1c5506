//! The objects a reachability scan found no pointer to (`<dump>.unreached`, written by the
//! runtime beside a dump), by stack and object size, and the subtraction of what the
//! harness alone loses there, object for object.

use crate::evidence::normalized::{self, FrameKey};
use crate::evidence::profile::{self, Counts};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Lost objects: per stack, `(size, count)` pairs, one per object size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    pub stacks: HashMap<Vec<FrameKey>, Vec<(u64, u64)>>,
}

impl Lost {
    /// The `(size, count)` pairs of one stack (none: nothing lost there).
    pub fn of(&self, frames: &[FrameKey]) -> &[(u64, u64)] {
        self.stacks.get(frames).map_or(&[], Vec::as_slice)
    }
}

/// Where the runtime writes which objects of a dump no pointer reached any more.
pub fn unreached_path(dump: &Path) -> PathBuf {
    let mut name = dump.as_os_str().to_owned();
    name.push(leakcheck_protocol::files::UNREACHED);
    PathBuf::from(name)
}

/// Adds the objects of one `.unreached` file (a dump of the objects nothing pointed to at
/// that moment, see [`unreached_path`]).
pub fn add_unreached(lost: &mut Lost, parsed: &profile::HeapProfile) {
    let addrs: Vec<Vec<u64>> = parsed.stacks.iter().map(|s| s.addrs.clone()).collect();
    let keys = normalized::frame_keys(&parsed.mappings, &addrs);
    for (frames, s) in keys.into_iter().zip(&parsed.stacks) {
        if s.live.objects == 0 {
            continue;
        }
        // The runtime writes one record per stack and object size (an older runtime,
        // one per stack: then the sizes are its average).
        let size = s.live.bytes / s.live.objects;
        add(lost.stacks.entry(frames).or_default(), size, s.live.objects);
    }
}

fn add(sizes: &mut Vec<(u64, u64)>, size: u64, count: u64) {
    match sizes.iter_mut().find(|(s, _)| *s == size) {
        Some((_, n)) => *n += count,
        None => sizes.push((size, count)),
    }
}

/// What the test lost on a stack beyond what the harness alone lost there: each of the
/// harness's objects takes away one of the test's of the same size, so the result is always
/// whole objects (an object of 60 bytes does not take 60 bytes off one of 100).
pub fn beyond(test: &[(u64, u64)], harness: &[(u64, u64)]) -> Counts {
    test.iter()
        .fold(Counts::default(), |total, &(size, count)| {
            let matched = harness
                .iter()
                .filter(|(s, _)| *s == size)
                .map(|(_, n)| *n)
                .sum::<u64>();
            let left = count.saturating_sub(matched);
            Counts {
                objects: total.objects + left,
                bytes: total.bytes + left * size,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_is_subtracted_object_for_object() {
        // One of 100 bytes lost by the test, one of 60 by the harness: still one of 100.
        assert_eq!(
            beyond(&[(100, 1)], &[(60, 1)]),
            Counts {
                objects: 1,
                bytes: 100
            }
        );
        // The same object lost in both: nothing of the test's.
        assert_eq!(beyond(&[(100, 1)], &[(100, 1)]), Counts::default());
        // Three of 32 and two of 64, less one of 32 and three of 64.
        assert_eq!(
            beyond(&[(32, 3), (64, 2)], &[(32, 1), (64, 3)]),
            Counts {
                objects: 2,
                bytes: 64
            }
        );
        assert_eq!(
            beyond(&[(48, 2)], &[]),
            Counts {
                objects: 2,
                bytes: 96
            }
        );
    }

    #[test]
    fn sizes_of_one_stack_add_up_by_size() {
        let mut sizes = Vec::new();
        add(&mut sizes, 32, 2);
        add(&mut sizes, 64, 1);
        add(&mut sizes, 32, 1);
        assert_eq!(sizes, vec![(32, 3), (64, 1)]);
    }
}
