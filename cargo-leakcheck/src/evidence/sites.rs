//! Where each collection's buffer was when a dump was taken, and the stack that allocated
//! it, as the runtime writes them beside the dump.

use crate::evidence::normalized::{self, FrameKey};
use crate::evidence::profile;
use std::collections::HashMap;

/// Where a collection's buffer was as the last run left it, and the stack that allocated
/// it (empty when the tracker had none).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BufferSite {
    pub buffer: u64,
    pub frames: Vec<FrameKey>,
}

/// The sites written beside a dump (`leakcheck_protocol::collections::SITES_HEADER`): each
/// collection's buffer and the stack that allocated it, by index. None when the file is
/// not whole.
pub fn parse_sites(text: &str) -> Option<HashMap<u32, BufferSite>> {
    use leakcheck_protocol::collections::{Site, SITES_HEADER};
    use leakcheck_protocol::heap_v2::parse_stack;
    let (body, mappings) = profile::with_mappings(text)?;
    let mut lines = body.lines();
    if lines.next()? != SITES_HEADER {
        return None;
    }
    let mut sites = Vec::new();
    let mut stacks = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some(site) = Site::decode(line) {
            sites.push((site, None));
        } else if let Some(addrs) = parse_stack(line) {
            let (_, stack) = sites.last_mut().filter(|s| s.1.is_none())?;
            *stack = Some(stacks.len());
            stacks.push(addrs.collect::<Result<Vec<u64>, _>>().ok()?);
        } else {
            return None;
        }
    }
    let mut keys = normalized::frame_keys(&mappings, &stacks);
    Some(
        sites
            .into_iter()
            .map(|(site, stack)| {
                let frames = stack
                    .map(|k| std::mem::take(&mut keys[k]))
                    .unwrap_or_default();
                (
                    site.index,
                    BufferSite {
                        buffer: site.buffer,
                        frames,
                    },
                )
            })
            .collect(),
    )
}
