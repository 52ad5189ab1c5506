//! What grew between two heap dumps of one process (`cargo leakcheck diff`): the dumps are
//! unbiased (a sampled dump's counts scaled to estimates, as jeprof does), their stacks
//! keyed by file and offset, the base subtracted per stack, and what is left symbolized.
//! With no base, what is live. Pure: the dumps are read and the binaries checked by the
//! caller.

use crate::analysis::delta;
use crate::analysis::frames::{frame_report, resolve_stack};
use crate::evidence::normalized::{self, FrameKey, NormalizedProfile};
use crate::evidence::profile::{Counts, HeapProfile, Mapping};
use crate::evidence::symbols::CodeSymbols;
use crate::model::FrameReport;
use serde::Serialize;
use std::sync::Arc;

/// One stack that grew.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrownStack {
    /// Objects the new dump has beyond the base (estimates for a sampled dump).
    pub objects: u64,
    /// Bytes it has beyond the base.
    pub bytes: u64,
    /// The allocation stack, innermost first, allocator frames left out.
    pub frames: Vec<FrameReport>,
}

/// What grew, largest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Growth {
    /// The dumps' sample period: 1 is exact, above it the counts are estimates.
    pub sample_period: u64,
    /// Growth of all stacks that grew together.
    pub total: Counts,
    /// The change of the whole heap: what grew less what shrank (as jeprof's `--base`
    /// totals it); with no base, what is live.
    pub net: Net,
    /// Per stack, largest growth first.
    pub stacks: Vec<GrownStack>,
}

/// A signed change of live objects and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Net {
    /// Objects.
    pub objects: i64,
    /// Bytes.
    pub bytes: i64,
}

/// The live objects and bytes of a profile's stacks, summed.
fn live(p: &HeapProfile) -> Net {
    p.stacks.iter().fold(Net::default(), |n, s| Net {
        objects: n.objects + s.live.objects as i64,
        bytes: n.bytes + s.live.bytes as i64,
    })
}

/// The path of the program a dump was taken from: the first file its maps name (the
/// kernel lists mappings by address, and an executable is mapped below its libraries).
pub fn program(mappings: &[Mapping]) -> Option<&str> {
    mappings
        .iter()
        .map(|m| m.path.as_str())
        .find(|p| p.starts_with('/'))
}

/// Growth from `base` (none: from nothing) to `new`, each already unbiased. Frames in
/// `program` are looked up in `binary` instead when one is given (a dump from another
/// machine).
pub fn growth(
    base: Option<&HeapProfile>,
    new: &HeapProfile,
    binary: Option<(&str, &str)>,
    symbolizer: &mut dyn CodeSymbols,
) -> Growth {
    let rename = |p: NormalizedProfile| -> NormalizedProfile {
        let Some((program, binary)) = binary else {
            return p;
        };
        let to: Arc<str> = Arc::from(binary);
        let stacks = p
            .stacks
            .into_iter()
            .map(|(frames, counts)| {
                let frames = frames
                    .into_iter()
                    .map(|k| match &*k.object == program {
                        true => FrameKey {
                            object: to.clone(),
                            file_offset: k.file_offset,
                        },
                        false => k,
                    })
                    .collect();
                (frames, counts)
            })
            .collect();
        NormalizedProfile { stacks, ..p }
    };
    let after = rename(normalized::normalize(new));
    let before = base
        .map(|b| rename(normalized::normalize(b)))
        .unwrap_or(NormalizedProfile {
            stacks: Default::default(),
            sample_period: after.sample_period,
        });
    let grown: Vec<_> = delta::diff(&after, &before)
        .into_iter()
        .filter(|d| d.live.bytes > 0)
        .collect();
    let addresses: Vec<(&str, u64)> = grown
        .iter()
        .flat_map(|d| d.frames.iter())
        .map(|k| (&*k.object, k.file_offset))
        .collect();
    symbolizer.prepare(&addresses);
    let mut stacks: Vec<GrownStack> = grown
        .into_iter()
        .map(|d| GrownStack {
            objects: d.live.objects,
            bytes: d.live.bytes,
            frames: resolve_stack(&d.frames, symbolizer)
                .iter()
                .map(frame_report)
                .collect(),
        })
        .collect();
    // Stacks that symbolize alike (inlined copies, frames of no known object) are one.
    stacks.sort_by(|a, b| a.frames.cmp(&b.frames));
    stacks.dedup_by(|b, a| {
        if a.frames == b.frames {
            a.objects += b.objects;
            a.bytes += b.bytes;
            true
        } else {
            false
        }
    });
    stacks.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.frames.cmp(&b.frames)));
    let total = stacks.iter().fold(Counts::default(), |t, s| Counts {
        objects: t.objects + s.objects,
        bytes: t.bytes + s.bytes,
    });
    let (after_all, before_all) = (live(new), base.map(live).unwrap_or_default());
    Growth {
        sample_period: new.sample_period,
        total,
        net: Net {
            objects: after_all.objects - before_all.objects,
            bytes: after_all.bytes - before_all.bytes,
        },
        stacks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::profile::parse_heap_profile;

    fn dump(text: &str) -> HeapProfile {
        parse_heap_profile(text.as_bytes()).unwrap().unbiased()
    }

    const MAPS: &str =
        "MAPPED_LIBRARIES:\n555555554000-555555556000 r-xp 00000000 00:00 0 /nonexistent/service\n";

    #[test]
    fn the_base_is_subtracted_per_stack_and_what_shrank_is_left_out() {
        let base = dump(&format!(
            "heap_v2/1\n  t*: 3: 300 [0: 0]\n@ 0x555555554100\n  t*: 2: 200 [0: 0]\n@ 0x555555554200\n  t*: 1: 100 [0: 0]\n\n{MAPS}"
        ));
        let new = dump(&format!(
            "heap_v2/1\n  t*: 7: 700 [0: 0]\n@ 0x555555554100\n  t*: 7: 700 [0: 0]\n\n{MAPS}"
        ));
        let g = growth(
            Some(&base),
            &new,
            None,
            &mut crate::evidence::symbols::Replay::new(Default::default()),
        );
        assert_eq!(g.stacks.len(), 1, "{g:?}");
        assert_eq!((g.stacks[0].objects, g.stacks[0].bytes), (5, 500));
        assert_eq!(
            g.total,
            Counts {
                objects: 5,
                bytes: 500
            }
        );
        // Without a base, everything live.
        let live = growth(
            None,
            &new,
            None,
            &mut crate::evidence::symbols::Replay::new(Default::default()),
        );
        assert_eq!(
            live.total,
            Counts {
                objects: 7,
                bytes: 700
            }
        );
    }

    #[test]
    fn the_program_is_the_first_file_mapped_and_can_be_looked_up_elsewhere() {
        let new = dump(&format!(
            "heap_v2/1\n  t*: 1: 100 [0: 0]\n@ 0x555555554100\n  t*: 1: 100 [0: 0]\n\n{MAPS}"
        ));
        assert_eq!(program(&new.mappings), Some("/nonexistent/service"));
        let g = growth(
            None,
            &new,
            Some(("/nonexistent/service", "/elsewhere/service-copy")),
            &mut crate::evidence::symbols::Replay::new(Default::default()),
        );
        // The binary is not there either: the frame stays, named by object and offset.
        let f = &g.stacks[0].frames[0];
        assert_eq!(f.function, "service-copy+0x100", "{f:?}");
    }
}
