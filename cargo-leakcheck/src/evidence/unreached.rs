//! The objects a reachability scan found no pointer to (`<dump>.unreached`, written by the
//! runtime beside a dump), read by stack and object size.

use crate::evidence::normalized::{self, FrameKey};
use crate::evidence::profile;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_one_stack_add_up_by_size() {
        let mut sizes = Vec::new();
        add(&mut sizes, 32, 2);
        add(&mut sizes, 64, 1);
        add(&mut sizes, 32, 1);
        assert_eq!(sizes, vec![(32, 3), (64, 1)]);
    }
}
