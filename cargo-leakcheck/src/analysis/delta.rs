//! What one heap profile holds beyond another, stack by stack (profiles of different
//! processes compare by their frames' files and offsets, see
//! [`crate::evidence::normalized`]).

use crate::evidence::normalized::{FrameKey, NormalizedProfile};
use crate::evidence::profile::Counts;

/// What remains of one stack of a profile once an earlier profile is subtracted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackDelta {
    /// The stack, innermost frame first.
    pub frames: Vec<FrameKey>,
    /// Objects and bytes that the later profile has beyond the earlier one. `objects`
    /// can be 0 while `bytes` is not, when the same objects grew (a `realloc`).
    pub live: Counts,
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
    use crate::evidence::load::heap_profile as read_heap_profile;
    use crate::evidence::normalized::{frame_keys, normalize};
    use crate::evidence::profile::StackSample;
    use crate::evidence::profile::{HeapProfile, Mapping};
    use std::path::Path;
    use std::sync::Arc;

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
        let key_of = |a: u64| {
            frame_keys(&profile.mappings, &[vec![a]])
                .remove(0)
                .remove(0)
        };
        // Text mapping of the test binary: 561fac374000-561fac40d000 r-xp 00033000, so
        // 0x561fac3eeada - 0x561fac374000 + 0x33000 = 0xadada.
        assert_eq!(key_of(0x561fac3eeada), key(TEST_BINARY, 0xadada));
        // Runtime text: 7f758205f000-7f7582644000 r-xp 0005e000.
        assert_eq!(key_of(0x7f7582591e87), key(RUNTIME, 0x590e87));
        // libc text: 7f7581e44000-7f7581f9a000 r-xp 00026000; first and last byte.
        assert_eq!(key_of(0x7f7581e44000), key(LIBC, 0x26000));
        assert_eq!(key_of(0x7f7581f99fff), key(LIBC, 0x26000 + 0x155fff));
        // The first page of libc (r--p, offset 0) ends where the text begins.
        assert_eq!(key_of(0x7f7581e43fff), key(LIBC, 0x25fff));
        // Anonymous (7f7581780000-7f7581e00000 rw-p) and unmapped addresses keep their
        // raw value.
        assert_eq!(key_of(0x7f7581780010), key("", 0x7f7581780010));
        assert_eq!(key_of(0x7f7581e00000), key("", 0x7f7581e00000));
        assert_eq!(key_of(0x10), key("", 0x10));
        assert_eq!(key_of(u64::MAX), key("", u64::MAX));
        // Pseudo paths are objects too.
        assert_eq!(key_of(0x7f758284b123), key("[vdso]", 0x123));

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
