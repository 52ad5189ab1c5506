//! A dump's stacks as the process's files and offsets. ASLR loads each object at a
//! different address in each process, so raw addresses of two dumps cannot be compared; a
//! frame is instead identified by the file it was loaded from and its offset in that file,
//! which is the same in every process running the same binaries.

use std::collections::HashMap;
use std::sync::Arc;

use crate::evidence::profile::{Counts, HeapProfile, Mapping};

/// A frame identified independently of where the process loaded its objects.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FrameKey {
    /// Path of the mapped file holding the frame's address, as in the dump (so possibly
    /// `"[vdso]"` or ending in `" (deleted)"`). Empty when the address lies in no mapping
    /// or in an anonymous one (JIT code, a corrupt stack): such frames are kept rather
    /// than dropped so that a stack never silently loses a frame.
    pub object: Arc<str>,
    /// Offset of the address in `object`: `addr - mapping.start + mapping.offset`. It is
    /// still a return address; the symbolizer subtracts 1 to land on the call. For an
    /// empty `object` this is the raw address.
    pub file_offset: u64,
}

/// The offset nearly always tells two frames apart; of the path, only its length is hashed
/// (equal keys have equal paths, so the hash agrees with `Eq`, which compares the paths).
/// Every stack of every dump is hashed frame by frame, and hashing each frame's whole path
/// was most of what loading a dump cost.
impl std::hash::Hash for FrameKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.file_offset ^ (self.object.len() as u64).rotate_left(48));
    }
}

impl FrameKey {
    /// Whether the address is in a mapped file (not an anonymous or special mapping, nor
    /// in no mapping at all).
    pub fn in_a_file(&self) -> bool {
        !self.object.is_empty() && !self.object.starts_with('[')
    }
}

/// A profile whose stacks are keyed by [`FrameKey`]s, ready to be compared with a
/// profile of another process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalizedProfile {
    /// Live counts per stack, frames innermost first. Stacks that normalize to the same
    /// frames (which happens when an object is mapped twice) are summed.
    pub stacks: HashMap<Vec<FrameKey>, Counts>,
    /// The sample period of the profile this came from. Normalizing does not unbias:
    /// call [`HeapProfile::unbiased`] first when the period is above 1.
    pub sample_period: u64,
}

/// One mapping reduced to what address lookup needs.
struct Region {
    start: u64,
    end: u64,
    offset: u64,
    /// `None` for an anonymous mapping.
    object: Option<Arc<str>>,
}

/// Finds the mapping of an address with a binary search, since a profile can hold
/// thousands of stacks of dozens of frames each.
struct AddressMap {
    /// Sorted by `start`.
    regions: Vec<Region>,
    unknown: Arc<str>,
}

impl AddressMap {
    fn new(mappings: &[Mapping]) -> Self {
        // One `Arc` per distinct path: a library is mapped 4 or 5 times and its frames
        // appear in every stack, so sharing keeps keys small and comparisons cheap.
        let mut interned: HashMap<&str, Arc<str>> = HashMap::new();
        let mut regions: Vec<Region> = mappings
            .iter()
            .filter(|m| m.start < m.end)
            .map(|m| Region {
                start: m.start,
                end: m.end,
                offset: m.offset,
                object: (!m.path.is_empty()).then(|| {
                    interned
                        .entry(m.path.as_str())
                        .or_insert_with(|| Arc::from(m.path.as_str()))
                        .clone()
                }),
            })
            .collect();
        regions.sort_by_key(|r| r.start);
        AddressMap {
            regions,
            unknown: Arc::from(""),
        }
    }

    fn key(&self, addr: u64) -> FrameKey {
        // The last region starting at or before `addr` is the only one that can hold it,
        // since the kernel's mappings never overlap.
        let after = self.regions.partition_point(|r| r.start <= addr);
        let region = after
            .checked_sub(1)
            .map(|i| &self.regions[i])
            .filter(|r| addr < r.end);
        match region {
            Some(Region {
                start,
                offset,
                object: Some(object),
                ..
            }) => FrameKey {
                object: object.clone(),
                // Wrapping: a corrupt dump must not crash the comparison.
                file_offset: (addr - start).wrapping_add(*offset),
            },
            _ => FrameKey {
                object: self.unknown.clone(),
                file_offset: addr,
            },
        }
    }
}

/// Each stack of raw addresses as frame keys, through a process's mappings.
pub fn frame_keys(mappings: &[Mapping], stacks: &[Vec<u64>]) -> Vec<Vec<FrameKey>> {
    let map = AddressMap::new(mappings);
    stacks
        .iter()
        .map(|addrs| addrs.iter().map(|&a| map.key(a)).collect())
        .collect()
}

/// Rewrites every stack of `profile` in terms of [`FrameKey`]s, using the dump's own
/// mappings.
pub fn normalize(profile: &HeapProfile) -> NormalizedProfile {
    let map = AddressMap::new(&profile.mappings);
    let mut stacks: HashMap<Vec<FrameKey>, Counts> = HashMap::with_capacity(profile.stacks.len());
    for stack in &profile.stacks {
        let frames = stack.addrs.iter().map(|&addr| map.key(addr)).collect();
        let counts = stacks.entry(frames).or_default();
        counts.objects = counts.objects.saturating_add(stack.live.objects);
        counts.bytes = counts.bytes.saturating_add(stack.live.bytes);
    }
    NormalizedProfile {
        stacks,
        sample_period: profile.sample_period,
    }
}
