//! Why lost objects are never freed: the reference cycles the runtime's scan found among
//! them (`<dump>.cycles`, format in `leakcheck_protocol::cycles`), read, matched to the
//! dump's stacks and named: each member by where it was allocated, what allocated it (`Arc`,
//! `Rc`, `Box`, a `Vec`'s buffer), its type when the frames give it, its counts when it
//! looks like an `Rc`/`Arc` allocation, and which pointer should be `Weak`.

use crate::analysis::frames::{frame_report, resolve_stack};
use crate::analysis::retention::allocation_site;
use crate::evidence::cycles::{Cycles, Group, How, MemberObject};
use crate::evidence::normalized::FrameKey;
use crate::evidence::symbols::{Frame, Symbols};
use crate::model::{CycleMember, CycleReport, FrameReport, Unreachable};
use std::collections::HashMap;

/// The cycles by the stack whose objects they explain, keyed as `key` turns a stack's
/// frames (the caller's keys: whole, or cut at the test's entry point).
#[derive(Clone, Debug, Default)]
pub struct ByStack {
    groups: Vec<Group>,
    /// How each stack's objects are lost, and the group with most cycles it is a member of.
    stacks: HashMap<Vec<FrameKey>, (How, Option<usize>)>,
}

impl ByStack {
    pub fn new(cycles: Cycles, key: impl Fn(&[FrameKey]) -> Vec<FrameKey>) -> ByStack {
        let mut stacks: HashMap<Vec<FrameKey>, (How, Option<usize>)> = HashMap::new();
        for (frames, how) in &cycles.lost {
            let e = stacks.entry(key(frames)).or_default();
            e.0.cycle += how.cycle;
            e.0.inside += how.inside;
            e.0.alone += how.alone;
        }
        // Groups whose members' stacks key alike are one (the test's own run and its extra
        // runs call in from different places above the entry point).
        let mut groups: Vec<Group> = Vec::new();
        let mut seen: HashMap<Vec<Vec<FrameKey>>, usize> = HashMap::new();
        for group in cycles.groups {
            let keys: Vec<Vec<FrameKey>> = group.members.iter().map(|m| key(&m.stack)).collect();
            let g = match seen.get(&keys) {
                Some(&g) => {
                    groups[g].count += group.count;
                    groups[g].objects += group.objects;
                    g
                }
                None => {
                    seen.insert(keys.clone(), groups.len());
                    groups.push(group);
                    groups.len() - 1
                }
            };
            for k in keys {
                let e = stacks.entry(k).or_default();
                if e.1.is_none_or(|best| groups[best].count < groups[g].count) {
                    e.1 = Some(g);
                }
            }
        }
        ByStack { groups, stacks }
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// How the objects of the stack keyed `key` are lost, when the scan found them lost:
    /// the cycle they are in (or, off the cycle shown, in its group), else inside a lost
    /// structure, else pointed to by nothing.
    pub fn describe(
        &self,
        key: &[FrameKey],
        exe: &str,
        symbols: &mut dyn Symbols,
    ) -> Option<Unreachable> {
        let (how, group) = self.stacks.get(key)?;
        if let Some(g) = group.filter(|_| how.cycle > 0) {
            return Some(Unreachable::Cycle(cycle_report(
                &self.groups[g],
                exe,
                symbols,
            )));
        }
        if how.cycle > 0 {
            return Some(Unreachable::InCycle);
        }
        if how.alone > 0 && how.alone >= how.inside {
            Some(Unreachable::NoCycle)
        } else if how.inside > 0 {
            Some(Unreachable::InsideLost)
        } else {
            None
        }
    }
}

/// A group's cycle, named, its owner first (see [`owner`]).
fn cycle_report(g: &Group, exe: &str, symbols: &mut dyn Symbols) -> CycleReport {
    let stacks: Vec<Vec<Frame>> = g
        .members
        .iter()
        .map(|m| resolve_stack(&m.stack, symbols))
        .collect();
    let mut members: Vec<CycleMember> = g
        .members
        .iter()
        .zip(&stacks)
        .map(|(m, frames)| member(m, frames, exe))
        .collect();
    // Members allocated at the same line (every node of a tree in its constructor) are
    // told apart by the call further out.
    for i in 0..members.len() {
        let shared = members
            .iter()
            .enumerate()
            .any(|(j, o)| j != i && o.site == members[i].site);
        if shared {
            members[i].called_at = called_at(&stacks[i], &members[i].site, exe);
        }
    }
    let first = owner(&members);
    members.rotate_left(first);
    CycleReport {
        cycles: g.count,
        objects: g.objects,
        length: g.length.max(g.members.len() as u64),
        members,
    }
}

/// The first frame of the program's own code further out than `site` on `frames`, at
/// another line.
fn called_at(frames: &[Frame], site: &FrameReport, exe: &str) -> Option<FrameReport> {
    let own = |f: &Frame| {
        crate::analysis::classify::is_user_frame(f, exe)
            && f.file
                .as_deref()
                .is_some_and(crate::analysis::classify::is_own_source)
    };
    let at_site = frames
        .iter()
        .position(|f| own(f) && f.file == site.file && f.line == site.line)?;
    frames[at_site + 1..]
        .iter()
        .find(|f| own(f) && (f.file != site.file || f.line != site.line))
        .map(frame_report)
}

/// The member that owns the cycle: the one allocated first, as far as the program's code
/// says (the earliest allocation site, by file then line: a cache's cell before its
/// callback, a parent before its child). The pointer back to it closes the cycle.
fn owner(members: &[CycleMember]) -> usize {
    (0..members.len())
        .min_by_key(|&i| {
            let s = &members[i].site;
            let via = members[i].called_at.as_ref().and_then(|c| c.line);
            let earliest = |line: Option<u32>| line.unwrap_or(u32::MAX);
            (
                s.file.is_none(),
                s.file.clone(),
                earliest(s.line),
                earliest(via),
            )
        })
        .unwrap_or(0)
}

fn member(m: &MemberObject, frames: &[Frame], exe: &str) -> CycleMember {
    let (container, type_name) = allocated_by(frames);
    let counted = matches!(container.as_deref(), Some("Arc" | "Rc") | None);
    let looks_counted = |w: u64| (1..=1 << 24).contains(&w);
    let (strong, weak) = match m.words[..] {
        [s, w, ..] if counted && looks_counted(s) && looks_counted(w) => (Some(s), Some(w)),
        _ => (None, None),
    };
    CycleMember {
        site: allocation_site(frames, exe),
        called_at: None,
        container,
        type_name,
        size: m.size,
        offset: m.offset,
        strong,
        weak,
    }
}

/// What allocated an object, from std's frames of its stack (`Arc`, `Rc`, `Box`, `Vec`), and
/// its type when a frame's name carries the generic argument (`alloc::sync::Arc<app::Cache>::new`,
/// or an inlined `new<app::Cache>` in `alloc/src/sync.rs`).
fn allocated_by(frames: &[Frame]) -> (Option<String>, Option<String>) {
    const KINDS: [(&str, &str, &str); 5] = [
        ("alloc::sync::Arc", "/sync.rs", "Arc"),
        ("alloc::rc::Rc", "/rc.rs", "Rc"),
        ("alloc::boxed::Box", "/boxed.rs", "Box"),
        ("alloc::raw_vec", "/raw_vec", "Vec"),
        ("alloc::vec::Vec", "/vec/", "Vec"),
    ];
    // std's frames before the program's own, outermost last: `Arc::new` calls `Box::new`.
    let in_std = |f: &&Frame| {
        !f.file
            .as_deref()
            .is_some_and(crate::analysis::classify::is_own_source)
    };
    let mut found = (None, None);
    for f in frames.iter().take_while(in_std) {
        let name = f.function.as_deref().unwrap_or("");
        let file = f.file.as_deref().unwrap_or("");
        let std_file = file.contains("/library/alloc/src");
        let kind = KINDS.iter().find(|(path, source, _)| {
            name.trim_start_matches('<').starts_with(path) || (std_file && file.contains(source))
        });
        if let Some((path, _, kind)) = kind {
            let rest = name.trim_start_matches('<');
            let short = name
                .split('<')
                .next()
                .is_some_and(|head| !head.contains("::"));
            let generic = rest
                .strip_prefix(path)
                .and_then(first_generic)
                .or_else(|| short.then(|| first_generic(name)).flatten());
            found = (Some((*kind).to_owned()), generic);
        }
    }
    found
}

/// The first generic argument of `<A, B>…` at the start of `text` (or after a short name:
/// `new<A>`), unless it is a parameter's name (`T`).
fn first_generic(text: &str) -> Option<String> {
    let open = text.find('<')?;
    let arg = crate::analysis::tasks::first_argument(&text[open + 1..]);
    let arg = arg
        .strip_prefix("core::cell::RefCell<")
        .map_or(arg, |inner| inner.strip_suffix('>').unwrap_or(inner));
    (arg.contains("::") || arg.chars().next().is_some_and(|c| c.is_uppercase()) && arg.len() > 1)
        .then(|| short_type(arg))
}

/// A type without the module paths of its parts (`std::sync::once_lock::OnceLock<app::Cache>`
/// → `OnceLock<Cache>`).
fn short_type(path: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for c in path.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' || c == '{' || c == '}' || c == '#' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(&word));
    out
}

#[cfg(test)]
mod tests;
