//! The reference cycles the runtime's scan found among a dump's lost objects
//! (`<dump>.cycles`), read: each group of objects that point to one another, its members'
//! stacks as frame keys, and how each stack's objects are lost.

use crate::evidence::normalized::{self, FrameKey};
use crate::evidence::profile;
use std::path::{Path, PathBuf};

/// A cycles file, its stacks as frame keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cycles {
    pub groups: Vec<Group>,
    /// Per stack with lost objects: how they are lost.
    pub lost: Vec<(Vec<FrameKey>, How)>,
    /// Whether the search stopped at its limit (what it wrote covers part of the objects).
    pub limited: bool,
}

/// Cycles alike: through the same stacks in the same order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub count: u64,
    pub objects: u64,
    pub length: u64,
    pub members: Vec<MemberObject>,
}

/// One member of a group's representative cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberObject {
    pub stack: Vec<FrameKey>,
    pub size: u64,
    /// Where in it the pointer to the next member is.
    pub offset: u64,
    /// Its first words, as the scan read them.
    pub words: Vec<u64>,
}

/// How a stack's lost objects are lost: in a cycle, pointed to only by other lost objects,
/// or by nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct How {
    pub cycle: u64,
    pub inside: u64,
    pub alone: u64,
}

/// Where the runtime writes the cycles among a dump's lost objects.
pub fn cycles_file(dump: &Path) -> PathBuf {
    let mut name = dump.as_os_str().to_owned();
    name.push(leakcheck_protocol::files::CYCLES);
    PathBuf::from(name)
}

/// Parses the text of a `.cycles` file; None when it is not whole: cycles are an
/// explanation, never a verdict.
pub fn parse(text: &str) -> Option<Cycles> {
    use leakcheck_protocol::cycles::Line;
    use leakcheck_protocol::heap_v2::parse_stack;
    let (body, mappings) = profile::with_mappings(text)?;
    let mut lines = body.lines();
    if Line::parse(lines.next()?)? != Line::Header {
        return None;
    }
    /// What a stack line belongs to.
    enum Last {
        Member,
        Lost(How),
        Nothing,
    }
    let mut raw_members: Vec<(usize, u64, u64, Vec<u64>)> = Vec::new();
    let mut raw_groups: Vec<(u64, u64, u64)> = Vec::new();
    let mut raw_lost: Vec<How> = Vec::new();
    let mut stacks: Vec<Vec<u64>> = Vec::new();
    let mut member_stacks = Vec::new();
    let mut lost_stacks = Vec::new();
    let mut last = Last::Nothing;
    let mut limited = false;
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some(addrs) = parse_stack(line) {
            let addrs: Vec<u64> = addrs.collect::<Result<_, _>>().ok()?;
            match std::mem::replace(&mut last, Last::Nothing) {
                Last::Member => member_stacks.push(stacks.len()),
                Last::Lost(how) => {
                    raw_lost.push(how);
                    lost_stacks.push(stacks.len());
                }
                Last::Nothing => return None,
            }
            stacks.push(addrs);
            continue;
        }
        match Line::parse(line)? {
            Line::Cycle { count, objects } => raw_groups.push((count, objects, 0)),
            Line::Member {
                size,
                offset,
                length,
            } => {
                let group = raw_groups.len().checked_sub(1)?;
                raw_groups[group].2 = length;
                raw_members.push((group, size, offset, Vec::new()));
                last = Last::Member;
            }
            Line::Words { words, n } => raw_members.last_mut()?.3 = words[..n].to_vec(),
            Line::Unreached {
                cycle,
                inside,
                alone,
            } => {
                last = Last::Lost(How {
                    cycle,
                    inside,
                    alone,
                })
            }
            Line::Limit(_) => limited = true,
            Line::Cost { .. } => {}
            Line::Header => return None,
        }
    }
    if raw_members.len() != member_stacks.len() {
        return None;
    }
    let mut keys: Vec<Option<Vec<FrameKey>>> = normalized::frame_keys(&mappings, &stacks)
        .into_iter()
        .map(Some)
        .collect();
    let mut groups: Vec<Group> = raw_groups
        .into_iter()
        .map(|(count, objects, length)| Group {
            count,
            objects,
            length,
            members: Vec::new(),
        })
        .collect();
    for ((group, size, offset, words), at) in raw_members.into_iter().zip(member_stacks) {
        groups[group].members.push(MemberObject {
            stack: keys[at].take()?,
            size,
            offset,
            words,
        });
    }
    let lost = raw_lost
        .into_iter()
        .zip(lost_stacks)
        .map(|(how, at)| Some((keys[at].take()?, how)))
        .collect::<Option<_>>()?;
    Some(Cycles {
        groups,
        lost,
        limited,
    })
}
