//! Comparing heap profiles of different processes.
//!
//! Every test runs in its own process, and ASLR loads each object at a different address
//! in each process, so raw addresses of two dumps cannot be compared. A frame is instead
//! identified by the file it was loaded from and its offset in that file, which is the
//! same in every process running the same binaries.

use std::collections::HashMap;
use std::sync::Arc;

use crate::analysis::profile::{Counts, HeapProfile, Mapping};

/// A frame identified independently of where the process loaded its objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// What remains of one stack of a profile once an earlier profile is subtracted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackDelta {
    /// The stack, innermost frame first.
    pub frames: Vec<FrameKey>,
    /// Objects and bytes that the later profile has beyond the earlier one. `objects`
    /// can be 0 while `bytes` is not, when the same objects grew (a `realloc`).
    pub live: Counts,
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

/// The memory that `after` holds beyond `before`, per stack.
///
/// Each stack of `after` loses what the same stack holds in `before` (never going below
/// zero); stacks with no bytes left are dropped, and stacks only in `before` (freed
/// since) do not appear. Both profiles should have the same sample period, or have been
/// unbiased. The result is sorted by bytes, largest first, then by frames, so that the
/// same inputs always give the same report.
pub fn diff(after: &NormalizedProfile, before: &NormalizedProfile) -> Vec<StackDelta> {
    let mut deltas: Vec<StackDelta> = after
        .stacks
        .iter()
        .filter_map(|(frames, live)| {
            let earlier = before.stacks.get(frames).copied().unwrap_or_default();
            let bytes = live.bytes.saturating_sub(earlier.bytes);
            (bytes > 0).then(|| StackDelta {
                frames: frames.clone(),
                live: Counts {
                    objects: live.objects.saturating_sub(earlier.objects),
                    bytes,
                },
            })
        })
        .collect();
    deltas.sort_by(|a, b| {
        b.live
            .bytes
            .cmp(&a.live.bytes)
            .then_with(|| a.frames.cmp(&b.frames))
    });
    deltas
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::profile::StackSample;
    use crate::execution::load::heap_profile as read_heap_profile;
    use std::path::Path;

    const RUNTIME: &str = "/work/main/target/debug/libleakcheck_runtime.so";
    const TEST_BINARY: &str = "/tmp/probe/t";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    const LD_SO: &str = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";

    fn dump(name: &str) -> HeapProfile {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/dumps")
            .join(name);
        read_heap_profile(&path).unwrap_or_else(|err| panic!("{err}"))
    }

    fn key(object: &str, file_offset: u64) -> FrameKey {
        FrameKey {
            object: Arc::from(object),
            file_offset,
        }
    }

    fn counts(objects: u64, bytes: u64) -> Counts {
        Counts { objects, bytes }
    }

    fn mapping(start: u64, end: u64, perms: &str, offset: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            perms: perms.into(),
            offset,
            path: path.into(),
        }
    }

    fn normalized(stacks: &[(&[FrameKey], Counts)]) -> NormalizedProfile {
        NormalizedProfile {
            stacks: stacks.iter().map(|(f, c)| (f.to_vec(), *c)).collect(),
            sample_period: 1,
        }
    }

    /// How many allocator frames (jemalloc's profiling internals and the `malloc` or
    /// `calloc` shim, all in the preloaded runtime) top the stack: 5 or 6 here.
    fn allocator_frames(stack: &[FrameKey]) -> usize {
        stack.iter().take_while(|f| &*f.object == RUNTIME).count()
    }

    #[test]
    fn known_addresses_of_a_captured_dump() {
        let profile = dump("baseline.heap");
        let map = AddressMap::new(&profile.mappings);
        // Text mapping of the test binary: 561fac374000-561fac40d000 r-xp 00033000, so
        // 0x561fac3eeada - 0x561fac374000 + 0x33000 = 0xadada.
        assert_eq!(map.key(0x561fac3eeada), key(TEST_BINARY, 0xadada));
        // Runtime text: 7f758205f000-7f7582644000 r-xp 0005e000.
        assert_eq!(map.key(0x7f7582591e87), key(RUNTIME, 0x590e87));
        // libc text: 7f7581e44000-7f7581f9a000 r-xp 00026000; first and last byte.
        assert_eq!(map.key(0x7f7581e44000), key(LIBC, 0x26000));
        assert_eq!(map.key(0x7f7581f99fff), key(LIBC, 0x26000 + 0x155fff));
        // The first page of libc (r--p, offset 0) ends where the text begins.
        assert_eq!(map.key(0x7f7581e43fff), key(LIBC, 0x25fff));
        // Anonymous (7f7581780000-7f7581e00000 rw-p) and unmapped addresses keep their
        // raw value.
        assert_eq!(map.key(0x7f7581780010), key("", 0x7f7581780010));
        assert_eq!(map.key(0x7f7581e00000), key("", 0x7f7581e00000));
        assert_eq!(map.key(0x10), key("", 0x10));
        assert_eq!(map.key(u64::MAX), key("", u64::MAX));
        // Pseudo paths are objects too.
        assert_eq!(map.key(0x7f758284b123), key("[vdso]", 0x123));

        let normalized = normalize(&profile);
        assert_eq!(normalized.sample_period, 1);
        assert_eq!(normalized.stacks.len(), 1);
        let (frames, live) = normalized.stacks.iter().next().unwrap();
        assert_eq!(*live, counts(1, 640));
        let expected = [
            key(RUNTIME, 0x590e87),
            key(RUNTIME, 0x590f65),
            key(RUNTIME, 0x4b8836),
            key(RUNTIME, 0x77657),
            key(RUNTIME, 0xc6fed),
            key(RUNTIME, 0x5ef0b),
            key(TEST_BINARY, 0xadada),
            key(TEST_BINARY, 0xa6d3d),
            key(TEST_BINARY, 0x34377),
            key(TEST_BINARY, 0x3923e),
            key(LIBC, 0x2724a),
            key(LIBC, 0x27305),
            key(TEST_BINARY, 0x33401),
        ];
        assert_eq!(frames.as_slice(), expected);
    }

    #[test]
    fn object_names_are_shared() {
        let normalized = normalize(&dump("fails.heap"));
        let mut distinct: Vec<*const u8> = normalized
            .stacks
            .keys()
            .flatten()
            .map(|f| f.object.as_ptr())
            .collect();
        distinct.sort();
        distinct.dedup();
        let mut names: Vec<&str> = normalized
            .stacks
            .keys()
            .flatten()
            .map(|f| &*f.object)
            .collect();
        names.sort();
        names.dedup();
        // libgcc_s appears because the failing test's panic unwound the stack.
        assert_eq!(
            names,
            [
                TEST_BINARY,
                LD_SO,
                LIBC,
                "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
                RUNTIME,
            ]
        );
        // One allocation per path, however many frames use it.
        assert_eq!(distinct.len(), names.len());
    }

    #[test]
    fn same_stack_in_two_processes_has_the_same_key() {
        // The 640-byte stack of baseline.heap is at different addresses in clean.heap.
        let baseline = dump("baseline.heap");
        let clean = dump("clean.heap");
        assert_ne!(baseline.stacks[0].addrs, clean.stacks[0].addrs);
        let a = normalize(&baseline);
        let b = normalize(&clean);
        let frames = a.stacks.keys().next().unwrap();
        assert_eq!(b.stacks.get(frames), Some(&counts(1, 640)));
        // Every captured frame lies in a named file.
        for profile in [&a, &b] {
            for frame in profile.stacks.keys().flatten() {
                assert!(!frame.object.is_empty(), "{frame:?}");
            }
        }
    }

    #[test]
    fn identical_keys_are_merged() {
        // The same file mapped twice (e.g. by two loaders) yields the same frames.
        let profile = HeapProfile {
            sample_period: 1,
            total: counts(0, 0),
            stacks: vec![
                StackSample {
                    addrs: vec![0x1010, 0x9000],
                    live: counts(1, 16),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![0x5010, 0x9000],
                    live: counts(2, 64),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![0x1010],
                    live: counts(1, 8),
                    accum: Counts::default(),
                },
            ],
            mappings: vec![
                // Deliberately unsorted.
                mapping(0x5000, 0x6000, "r-xp", 0x2000, "/lib/a.so"),
                mapping(0x1000, 0x2000, "r-xp", 0x2000, "/lib/a.so"),
                mapping(0x8000, 0xa000, "rw-p", 0, ""),
            ],
        };
        let normalized = normalize(&profile);
        let two = vec![key("/lib/a.so", 0x2010), key("", 0x9000)];
        let one = vec![key("/lib/a.so", 0x2010)];
        assert_eq!(normalized.stacks.len(), 2);
        assert_eq!(normalized.stacks[&two], counts(3, 80));
        assert_eq!(normalized.stacks[&one], counts(1, 8));
    }

    #[test]
    fn no_mappings_at_all() {
        let profile = HeapProfile {
            sample_period: 4,
            total: counts(1, 8),
            stacks: vec![StackSample {
                addrs: vec![0x1234, 0],
                live: counts(1, 8),
                accum: Counts::default(),
            }],
            mappings: vec![],
        };
        let normalized = normalize(&profile);
        assert_eq!(normalized.sample_period, 4);
        assert_eq!(
            normalized.stacks[&vec![key("", 0x1234), key("", 0)]],
            counts(1, 8)
        );
    }

    #[test]
    fn diff_of_hand_made_profiles() {
        let same = [key("/a", 1), key("/t", 10)];
        let partial = [key("/a", 2), key("/t", 20)];
        let freed = [key("/a", 3), key("/t", 30)];
        let new = [key("/a", 4), key("/t", 40)];
        let grew = [key("/a", 5), key("/t", 50)];
        let shrank = [key("/a", 6), key("/t", 60)];
        let tie_b = [key("/b", 0)];
        let tie_a = [key("/a", 9)];
        let before = normalized(&[
            (&same, counts(2, 64)),
            (&partial, counts(5, 500)),
            (&freed, counts(1, 4096)),
            (&grew, counts(1, 64)),
            (&shrank, counts(3, 300)),
        ]);
        let after = normalized(&[
            (&same, counts(2, 64)),
            (&partial, counts(7, 700)),
            (&new, counts(1, 32)),
            (&grew, counts(1, 128)),
            (&shrank, counts(1, 100)),
            (&tie_b, counts(1, 32)),
            (&tie_a, counts(1, 32)),
        ]);
        let deltas = diff(&after, &before);
        let expected = vec![
            StackDelta {
                frames: partial.to_vec(),
                live: counts(2, 200),
            },
            StackDelta {
                frames: grew.to_vec(),
                live: counts(0, 64),
            },
            // Equal bytes: frames ascending, "/a" < "/b".
            StackDelta {
                frames: new.to_vec(),
                live: counts(1, 32),
            },
            StackDelta {
                frames: tie_a.to_vec(),
                live: counts(1, 32),
            },
            StackDelta {
                frames: tie_b.to_vec(),
                live: counts(1, 32),
            },
        ];
        assert_eq!(deltas, expected);

        assert!(diff(&after, &after).is_empty());
        assert!(diff(&before, &before).is_empty());
        // Against nothing, everything is new.
        let empty = normalized(&[]);
        assert_eq!(diff(&after, &empty).len(), 7);
        assert!(diff(&empty, &after).is_empty());
    }

    /// The deltas as (bytes, objects, offset in the test binary of the first frame
    /// below the allocator) for compact assertions.
    fn summary(deltas: &[StackDelta]) -> Vec<(u64, u64, Arc<str>, u64)> {
        deltas
            .iter()
            .map(|d| {
                let caller = &d.frames[allocator_frames(&d.frames)];
                (
                    d.live.bytes,
                    d.live.objects,
                    caller.object.clone(),
                    caller.file_offset,
                )
            })
            .collect()
    }

    #[test]
    fn clean_test_against_baseline() {
        let baseline = normalize(&dump("baseline.heap"));
        let clean = normalize(&dump("clean.heap"));
        let deltas = diff(&clean, &baseline);
        // baseline's single 640-byte stack cancels. What remains is harness noise that a
        // trivial test's exit dump would cancel: 48 bytes allocated by libtest and 320
        // bytes allocated by ld.so when libc started the test's thread (thread-local
        // storage).
        assert_eq!(
            summary(&deltas),
            [
                (320, 1, Arc::from(LD_SO), 0x10cb3),
                (48, 1, Arc::from(TEST_BINARY), 0x9b5fc),
            ]
        );
        assert_eq!(allocator_frames(&deltas[0].frames), 5);
        assert_eq!(allocator_frames(&deltas[1].frames), 6);
        assert_eq!(deltas[0].frames.len(), 23);
        assert_eq!(deltas[0].frames[7], key(LIBC, 0x89daf));
        assert_eq!(deltas[0].frames[8], key(TEST_BINARY, 0x93e61));
        assert!(diff(&baseline, &clean).is_empty());
    }

    #[test]
    fn leaking_test_against_baseline_and_clean() {
        let baseline = normalize(&dump("baseline.heap"));
        let clean = normalize(&dump("clean.heap"));
        let leaks = normalize(&dump("leaks.heap"));
        let deltas = diff(&leaks, &baseline);
        assert_eq!(
            summary(&deltas),
            [
                (320, 1, Arc::from(LD_SO), 0x10cb3),
                (112, 1, Arc::from(TEST_BINARY), 0xb6c66),
                (48, 1, Arc::from(TEST_BINARY), 0x9b5fc),
            ]
        );
        // Against the clean test only the leak itself is left: 112 bytes allocated on
        // the test's own thread (its stack ends in libc's thread start, not `main`).
        let deltas = diff(&leaks, &clean);
        assert_eq!(
            summary(&deltas),
            [(112, 1, Arc::from(TEST_BINARY), 0xb6c66)]
        );
        assert_eq!(deltas[0].frames.len(), 20);
        assert_eq!(deltas[0].frames.last().unwrap().object.as_ref(), LIBC);
    }

    #[test]
    fn joined_thread_against_clean() {
        // A test that spawned and joined a thread keeps a second 320-byte block from
        // ld.so (glibc caches the thread's stack and TLS after the join), allocated from
        // the test's own code rather than from libtest.
        let clean = normalize(&dump("clean.heap"));
        let joined = normalize(&dump("joined.heap"));
        let deltas = diff(&joined, &clean);
        assert_eq!(deltas.len(), 1);
        assert_eq!(deltas[0].live, counts(1, 320));
        assert_eq!(deltas[0].frames[8], key(TEST_BINARY, 0x93e61));
        assert_eq!(deltas[0].frames[9], key(TEST_BINARY, 0x34e53));
    }

    #[test]
    fn failing_test_against_baseline() {
        let baseline = normalize(&dump("baseline.heap"));
        let fails = normalize(&dump("fails.heap"));
        assert_eq!(fails.stacks.len(), 78);
        let deltas = diff(&fails, &baseline);
        // Only the baseline's 640-byte stack cancels.
        assert_eq!(deltas.len(), 77);
        // Raw counts, as written (not unbiased).
        let total = deltas.iter().fold(Counts::default(), |acc, d| {
            counts(acc.objects + d.live.objects, acc.bytes + d.live.bytes)
        });
        assert_eq!(total, counts(44866 - 1, 35710524 - 640));
        assert_eq!(deltas[0].live, counts(1724, 10690176));
        assert_eq!(deltas[1].live, counts(1, 6291456));
        assert_eq!(deltas[76].live, counts(1, 8));
        for pair in deltas.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                a.live.bytes > b.live.bytes
                    || (a.live.bytes == b.live.bytes && a.frames < b.frames),
                "not sorted: {pair:?}"
            );
        }
        // Ties are ordered by frames: two stacks of 16498 bytes.
        let ties: Vec<&StackDelta> = deltas.iter().filter(|d| d.live.bytes == 16498).collect();
        assert_eq!(ties.len(), 2);
        assert!(ties[0].frames < ties[1].frames);
        // Deterministic whatever the hash maps' iteration order, which differs between
        // two maps built separately.
        let again = normalize(&dump("fails.heap"));
        assert_eq!(deltas, diff(&again, &baseline));
    }
}
