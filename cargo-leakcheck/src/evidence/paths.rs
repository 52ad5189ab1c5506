//! The retention paths the runtime's reachability scan writes beside a dump
//! (`<dump>.paths`, format in the runtime's `paths` module), read: each path's root, the
//! thread it belongs to, and the allocation stack of each object on the way, as frame keys.

use crate::evidence::normalized::{self, FrameKey};
use crate::evidence::profile;
use leakcheck_protocol::paths::Root;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One path as the runtime wrote it, its stacks as frame keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldPath {
    pub root: RawRoot,
    /// `(tid, name)` of the thread a thread-local, stack or register root belongs to.
    pub thread: Option<(u64, String)>,
    /// What that thread was doing before the scan stopped it, when read.
    pub thread_state: Option<leakcheck_protocol::paths::ThreadState>,
    /// The stack of the call that started that thread, when known.
    pub spawned: Option<Vec<FrameKey>>,
    /// The allocation stack of each object, root-most first; the last is the held stack's.
    pub chain: Vec<Vec<FrameKey>>,
    /// Objects left out of a long chain (between the first and the last eight).
    pub skipped: u64,
    /// Per object of `chain`: those of its first words that point into a mapped file (code
    /// or read-only data, such as a vtable), by their place in the object.
    pub words: Vec<Vec<(u8, FrameKey)>>,
    /// Per object of `chain`: its first word, when the scan read it (a task's state).
    pub first_words: Vec<Option<u64>>,
}

/// A root as the runtime names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawRoot {
    /// A word at `vaddr` in a writable segment of `object` (`-`: the program).
    Static {
        vaddr: u64,
        object: String,
    },
    /// A word at `offset` in `object`'s static thread-local block.
    Tls {
        offset: u64,
        object: String,
    },
    /// A word on a stack, in the frame of the function this return address is in.
    Stack {
        frame: Option<FrameKey>,
    },
    /// A register.
    Register(String),
    Unknown,
}

/// Where the runtime writes the retention paths of a dump.
pub fn paths_file(dump: &Path) -> PathBuf {
    let mut name = dump.as_os_str().to_owned();
    name.push(leakcheck_protocol::files::PATHS);
    PathBuf::from(name)
}

/// Parses the text of a `.paths` file; None when it is not whole (a process that died while
/// writing it): retention paths are an explanation, never a verdict.
pub fn parse(text: &str) -> Option<Vec<HeldPath>> {
    use leakcheck_protocol::paths::Line;
    let (body, mappings) = profile::with_mappings(text)?;
    let mut lines = body.lines();
    if Line::parse(lines.next()?)? != Line::Header {
        return None;
    }
    let raws = raw_paths(lines)?;
    let mut stacks: Vec<Vec<u64>> = Vec::new();
    for r in &raws {
        stacks.extend(r.chain.iter().cloned());
        if let Root::Stack { frame } = r.root {
            stacks.push(vec![frame]);
        }
        stacks.extend(r.spawned.iter().cloned());
    }
    let mut keys = normalized::frame_keys(&mappings, &stacks).into_iter();
    let words: Vec<Vec<u64>> = raws.iter().flat_map(|r| r.words.iter().cloned()).collect();
    let mut word_keys = normalized::frame_keys(&mappings, &words).into_iter();
    raws.into_iter()
        .map(|r| r.keyed(&mut keys, &mut word_keys))
        .collect()
}

/// One path as the file spells it, its stacks as addresses.
struct RawPath<'a> {
    root: Root<'a>,
    thread: Option<(u64, String)>,
    state: Option<leakcheck_protocol::paths::ThreadState>,
    spawned: Option<Vec<u64>>,
    chain: Vec<Vec<u64>>,
    words: Vec<Vec<u64>>,
    skipped: u64,
}

/// The paths of a `.paths` file's lines after its header; None when one does not read.
fn raw_paths<'a>(lines: impl Iterator<Item = &'a str>) -> Option<Vec<RawPath<'a>>> {
    use leakcheck_protocol::heap_v2::parse_stack;
    use leakcheck_protocol::paths::Line;
    let mut raws: Vec<RawPath> = Vec::new();
    // After `spawned`, the next stack line is the thread's, not an object's.
    let mut spawn_next = false;
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some(addrs) = parse_stack(line) {
            let raw = raws.last_mut()?;
            let addrs: Vec<u64> = addrs.collect::<Result<_, _>>().ok()?;
            if std::mem::take(&mut spawn_next) {
                raw.spawned = Some(addrs);
                continue;
            }
            raw.chain.push(addrs);
            raw.words.push(Vec::new());
            continue;
        }
        match Line::parse(line)? {
            Line::Path => raws.push(RawPath {
                root: Root::Unknown,
                thread: None,
                state: None,
                spawned: None,
                chain: Vec::new(),
                words: Vec::new(),
                skipped: 0,
            }),
            Line::Words { words, n } => {
                *raws.last_mut()?.words.last_mut()? = words[..n].to_vec();
            }
            Line::Root(root) => raws.last_mut()?.root = root,
            Line::Thread { tid, name } => raws.last_mut()?.thread = Some((tid, name.to_owned())),
            Line::Skip(n) => raws.last_mut()?.skipped = n,
            Line::State(state) => raws.last_mut()?.state = Some(state),
            Line::Spawned => spawn_next = true,
            Line::Header => return None,
        }
    }
    Some(raws)
}

impl RawPath<'_> {
    /// The path with its stacks as frame keys, taken in order from `keys` (its chain, its
    /// stack root's frame, its spawning stack) and `word_keys` (its objects' words); None
    /// when they run out or the path has no chain (the file is not whole).
    fn keyed(
        self,
        keys: &mut impl Iterator<Item = Vec<FrameKey>>,
        word_keys: &mut impl Iterator<Item = Vec<FrameKey>>,
    ) -> Option<HeldPath> {
        let chain: Vec<Vec<FrameKey>> = keys.by_ref().take(self.chain.len()).collect();
        let first_words = self.words.iter().map(|w| w.first().copied()).collect();
        let words: Vec<Vec<(u8, FrameKey)>> = word_keys
            .by_ref()
            .take(self.words.len())
            .map(|ws| {
                ws.into_iter()
                    .enumerate()
                    .filter(|(_, k)| k.in_a_file())
                    .map(|(i, k)| (i as u8, k))
                    .collect()
            })
            .collect();
        let root = match self.root {
            Root::Static { vaddr, object } => RawRoot::Static {
                vaddr,
                object: object.to_owned(),
            },
            Root::Tls { offset, object } => RawRoot::Tls {
                offset,
                object: object.to_owned(),
            },
            Root::Stack { frame } => {
                let key = keys.next()?.pop();
                RawRoot::Stack {
                    frame: key.filter(|_| frame != 0),
                }
            }
            Root::Register(name) => RawRoot::Register(name.to_owned()),
            Root::Unknown => RawRoot::Unknown,
        };
        let spawned = match self.spawned {
            Some(_) => Some(keys.next()?),
            None => None,
        };
        (!chain.is_empty()).then_some(HeldPath {
            root,
            thread: self.thread,
            thread_state: self.state,
            spawned,
            chain,
            skipped: self.skipped,
            words,
            first_words,
        })
    }
}

/// The paths by the stack they hold, keyed as `key` turns the held stack's frames (the
/// caller's keys: whole, or cut at the test's entry point).
pub fn by_stack(
    paths: Vec<HeldPath>,
    key: impl Fn(&[FrameKey]) -> Vec<FrameKey>,
) -> HashMap<Vec<FrameKey>, HeldPath> {
    let mut by: HashMap<Vec<FrameKey>, HeldPath> = HashMap::new();
    for p in paths {
        let k = key(p.chain.last().expect("parse keeps paths with a chain"));
        // The runtime writes one path per stack; after a cut, the shortest stands.
        match by.get(&k) {
            Some(q) if q.chain.len() as u64 + q.skipped <= p.chain.len() as u64 + p.skipped => {}
            _ => {
                by.insert(k, p);
            }
        }
    }
    by
}
