//! From a static or a thread-local to the collections it holds: through the wrappers a
//! static is built from (`Mutex`, `RwLock`, `OnceLock`, `LazyLock`, `RefCell`, `Cell`,
//! `UnsafeCell`, `Option` and every other Rust enum, once_cell's and lazy_static's cells,
//! the thread-local storage of `thread_local!`), through the pointers of `Box`, `Arc` and
//! `Rc` (and references), to a bounded depth, into the length of each collection it meets:
//! std's `Vec`, `VecDeque`, `String`, `HashMap`/`HashSet` (hashbrown's item count),
//! `BTreeMap`/`BTreeSet`, `LinkedList`, `BinaryHeap`, and indexmap's, hashbrown's,
//! dashmap's shards, slab's and smallvec's. A collection's own elements are not walked into.
//!
//! Names and offsets are read from the DWARF every time; only the shape of a type (its name
//! and its members' names) says what it is, so a release of std that moves a field is
//! followed, and one that renames it is simply not recognised.
//!
//! What may not be valid memory is guarded: a `OnceLock`'s or `LazyLock`'s value only once
//! its `Once` has left the state it starts in (read from the static's initial bytes in the
//! executable), a thread-local's value only while its state is `Alive`, an enum's variant only
//! when its discriminant says so. A union is read through only behind such a guard.

use super::types::{Type, TypeKind, TypeRef, Types, Variants};
use leakcheck_protocol::collections::{Length, Step};
use std::rc::Rc;

/// How deep the walk goes into nested types.
const MAX_DEPTH: u32 = 24;
/// How many pointers it follows from a root.
const MAX_DEREFS: u32 = 3;
/// Most collections found from one root.
const MAX_PER_ROOT: usize = 64;
/// Most types visited from one root.
const MAX_VISITS: u32 = 20_000;
/// Most elements of a slice or an inline array whose collections are summed.
const MAX_ELEMENTS: u64 = 1024;
/// hashbrown's control bytes are aligned to its group width (16 on x86-64, SSE2).
const GROUP_WIDTH: u64 = 16;

/// Where a walk starts.
pub struct Root<'b> {
    pub ty: TypeRef,
    /// A thread-local's, not a static's.
    pub thread_local: bool,
    /// Its bytes as the executable holds them before the program runs (a static's).
    pub initial: Option<&'b [u8]>,
}

impl FoundCollection {
    /// Gives the guards on a `Once` behind a pointer the value `once` starts in; false when
    /// there are some and it is not known (the collection cannot be vouched for).
    pub fn vouch(&mut self, once: Option<u32>) -> bool {
        if self.once_behind_pointer.is_empty() {
            return true;
        }
        let Some(value) = once else { return false };
        for &i in &self.once_behind_pointer {
            if let Some(Step::Guard { value: v, .. }) = self.steps.get_mut(i) {
                *v = u64::from(value);
            }
        }
        self.once_behind_pointer.clear();
        true
    }
}

/// A collection found: the steps from its root to its length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundCollection {
    pub steps: Vec<Step>,
    /// The collection's type, as declared (`HashSet<u64, RandomState>`).
    pub type_name: String,
    /// Its length counts bytes (a `String`), not entries.
    pub bytes: bool,
    /// The size of one entry, when known.
    pub entry_size: u64,
    /// The fields from the root to it, outside std's wrappers (`.seen`, `.0`), empty when it
    /// is the root's value itself.
    pub field: String,
    /// Guards on the way (indices in `steps`) that read a `Once` behind a pointer: their
    /// value is the binary's (see [`Walk::once_initial`]).
    pub once_behind_pointer: Vec<usize>,
}

/// Where the walk is.
#[derive(Clone)]
struct At {
    /// Bytes from the base the steps so far lead to.
    offset: i64,
    steps: Vec<Step>,
    depth: u32,
    derefs: u32,
    /// Inside a `Box`, `Arc` or `Rc`: its pointer is followed.
    owner: bool,
    /// A guard above vouches for the `value` of the next union.
    union_ok: bool,
    /// The outermost collection type on the way.
    family: Option<String>,
    bytes: bool,
    field: String,
    /// Nothing followed yet: the root's initial bytes are those at `offset`.
    inline: bool,
    once_behind_pointer: Vec<usize>,
}

impl At {
    /// The steps, with what is pending as one move.
    fn settle(&mut self) {
        if self.offset != 0 {
            self.steps.push(Step::Add(self.offset));
            self.offset = 0;
        }
    }

    fn at(&self, offset: u64) -> At {
        let mut a = self.clone();
        a.offset += offset as i64;
        a.depth += 1;
        a
    }
}

/// One walk over every root of an executable.
pub struct Walk<'t, 'u, 'a> {
    pub types: &'t mut Types<'u, 'a>,
    /// The value a `Once` starts in, as read from statics' initial bytes.
    once_initial: Vec<u32>,
    found: Vec<FoundCollection>,
    visits: u32,
}

impl<'t, 'u, 'a> Walk<'t, 'u, 'a> {
    pub fn new(types: &'t mut Types<'u, 'a>) -> Self {
        Walk {
            types,
            once_initial: Vec::new(),
            found: Vec::new(),
            visits: 0,
        }
    }

    /// The collections under one root.
    pub fn root(&mut self, root: &Root) -> Vec<FoundCollection> {
        self.found.clear();
        self.visits = 0;
        let at = At {
            offset: 0,
            steps: Vec::new(),
            depth: 0,
            derefs: 0,
            owner: false,
            union_ok: false,
            family: None,
            bytes: false,
            field: String::new(),
            inline: true,
            once_behind_pointer: Vec::new(),
        };
        self.walk(root.ty, at, root);
        let mut found = std::mem::take(&mut self.found);
        found.dedup();
        found
    }

    /// The value every `Once` of the executable's statics starts in, when they agree on one:
    /// a `Once` behind a pointer has no initial bytes of its own to say it.
    pub fn once_initial(&self) -> Option<u32> {
        let mut values = self.once_initial.clone();
        values.sort_unstable();
        values.dedup();
        match values.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    fn walk(&mut self, ty: TypeRef, at: At, root: &Root) {
        self.visits += 1;
        if at.depth > MAX_DEPTH || self.visits > MAX_VISITS || self.found.len() >= MAX_PER_ROOT {
            return;
        }
        let Some(t) = self.types.get(ty) else { return };
        if t.size == 0 {
            return;
        }
        match &t.kind {
            TypeKind::Pointer { target } => {
                // A `Box` is a pointer type of its own in the DWARF.
                let owned = at.owner || t.name.starts_with('&') || is_owner(&t.name);
                // A static's own raw pointer to a struct (an `AtomicPtr` or lazy_static
                // 0.2's cell) is a value leaked for the process, as `Box::into_raw` left
                // it: read when not null. Not a thread-local's (a scoped pointer into a
                // stack frame) nor one inside what a pointer led to (a node, a buffer,
                // freed memory).
                let raw = !owned
                    && !root.thread_local
                    && at.derefs == 0
                    && is_raw(&t.name)
                    && target.is_some_and(|t| self.is_struct(t));
                if let (true, Some(target)) = (owned || raw, target) {
                    if at.derefs < MAX_DEREFS {
                        let mut next = at.clone();
                        next.settle();
                        if raw {
                            next.steps.push(Step::Guard {
                                offset: 0,
                                size: 8,
                                value: 0,
                                equal: false,
                            });
                        }
                        next.steps.push(Step::Deref);
                        next.derefs += 1;
                        next.depth += 1;
                        next.owner = false;
                        next.inline = false;
                        self.walk(*target, next, root);
                    }
                }
            }
            TypeKind::Array { element, count } => {
                let Some(element) = *element else { return };
                let stride = self.types.get(element).map_or(0, |e| e.size);
                if *count == 0 || stride == 0 {
                    return;
                }
                if *count == 1 {
                    self.walk(element, at.at(0), root);
                } else if *count <= MAX_ELEMENTS {
                    let mut next = at.at(0);
                    next.settle();
                    next.steps.push(Step::Repeat {
                        stride,
                        count: *count,
                    });
                    next.inline = false;
                    self.walk(element, next, root);
                }
            }
            TypeKind::Struct { .. } => self.structure(&t, at, root),
            TypeKind::Other => {}
        }
    }

    /// Whether `ty` is a struct with a size (not a primitive, `()` or `c_void`).
    fn is_struct(&mut self, ty: TypeRef) -> bool {
        self.types
            .get(ty)
            .is_some_and(|t| t.size > 0 && matches!(t.kind, TypeKind::Struct { .. }))
    }

    fn structure(&mut self, t: &Rc<Type>, mut at: At, root: &Root) {
        let TypeKind::Struct {
            members,
            variants,
            union,
            ..
        } = &t.kind
        else {
            return;
        };
        if *union {
            // Only a guarded union is read, through its value.
            if at.union_ok {
                if let Some(value) = t.member("value").and_then(|m| m.ty.map(|ty| (m, ty))) {
                    let mut next = at.at(value.0.offset);
                    next.union_ok = false;
                    self.walk(value.1, next, root);
                }
            }
            return;
        }
        if let Some(v) = variants {
            self.variants(v, at, root);
            return;
        }
        if self.length(t, &at) {
            return;
        }
        let name = t.name.as_str();
        if name == "String" && t.member("vec").is_some() {
            at.family.get_or_insert_with(|| name.to_string());
            at.bytes = true;
        } else if is_collection_family(name) && at.family.is_none() {
            at.family = Some(name.to_string());
        }
        if let Some(next) = self.guarded(t, &at, root) {
            let (member, at) = next;
            self.walk(member, at, root);
            return;
        }
        if is_owner(name) {
            at.owner = true;
        }
        // A fat pointer to a slice inside an owner: each element.
        if at.owner {
            if let (Some(data), Some(length)) = (t.member("data_ptr"), t.member("length")) {
                if data.offset == 0 && length.offset == 8 {
                    self.slice(data.ty, at, root);
                    return;
                }
            }
        }
        // A tuple newtype adds no field to what the user sees.
        let newtype = members.len() == 1 && members[0].name.starts_with("__");
        let transparent = at.family.is_some() || is_wrapper(name) || newtype;
        for m in members {
            let Some(ty) = m.ty else { continue };
            let mut next = at.at(m.offset);
            if !transparent && !m.name.is_empty() {
                let field = m.name.strip_prefix("__").unwrap_or(&m.name);
                next.field.push('.');
                next.field.push_str(field);
            }
            self.walk(ty, next, root);
        }
    }

    /// A Rust enum: each variant that holds something, behind a guard on the discriminant.
    fn variants(&mut self, v: &Variants, at: At, root: &Root) {
        let others: Vec<u64> = v.variants.iter().filter_map(|(d, _)| *d).collect();
        for (value, member) in &v.variants {
            let Some(ty) = member.ty else { continue };
            let mut next = at.at(member.offset);
            if let Some((offset, size)) = v.discr {
                let guard = |value: u64, equal: bool| Step::Guard {
                    offset: at.offset + offset as i64,
                    size,
                    value,
                    equal,
                };
                match value {
                    Some(d) => next.steps.push(guard(*d, true)),
                    None => next.steps.extend(others.iter().map(|&d| guard(d, false))),
                }
            }
            self.walk(ty, next, root);
        }
    }

    /// A wrapper whose value is valid only in some states: the guard, and where to go on.
    fn guarded(&mut self, t: &Type, at: &At, root: &Root) -> Option<(TypeRef, At)> {
        let name = t.name.as_str();
        // std's OnceLock { once, value } and LazyLock { once, data }.
        let once_value = if name.starts_with("OnceLock<") {
            t.member("value")
        } else if name.starts_with("LazyLock<") {
            t.member("data")
        } else {
            None
        };
        if let (Some(once), Some(value)) = (t.member("once"), once_value) {
            let ty = value.ty?;
            let offset = at.offset + once.offset as i64;
            let mut next = at.at(value.offset);
            let initial = at
                .inline
                .then_some(root.initial)
                .flatten()
                .and_then(|bytes| read_u32(bytes, offset));
            if let Some(v) = initial {
                self.once_initial.push(v);
            } else if at.inline {
                return None;
            } else {
                next.once_behind_pointer.push(next.steps.len());
            }
            next.steps.push(Step::Guard {
                offset,
                size: 4,
                value: u64::from(initial.unwrap_or(0)),
                equal: false,
            });
            next.union_ok = true;
            return Some((ty, next));
        }
        // The storage of a lazily initialised `thread_local!`: { value, state }.
        if let (Some(value), Some(state)) = (t.member("value"), t.member("state")) {
            let (state_type, inner) = self.enum_inside(state.ty?)?;
            let TypeKind::Struct {
                variants: Some(v), ..
            } = &state_type.kind
            else {
                return None;
            };
            let (discr, size) = v.discr?;
            let discr = discr + inner;
            let alive = v
                .variants
                .iter()
                .find(|(_, m)| m.name == "Alive")
                .and_then(|(d, _)| *d)?;
            let mut next = at.at(value.offset);
            next.steps.push(Step::Guard {
                offset: at.offset + (state.offset + discr) as i64,
                size,
                value: alive,
                equal: true,
            });
            next.union_ok = true;
            return Some((value.ty?, next));
        }
        None
    }

    /// The enum inside `ty`, through newtypes (`Cell<State>`), and its offset there.
    fn enum_inside(&mut self, ty: TypeRef) -> Option<(Rc<Type>, u64)> {
        let mut t = self.types.get(ty)?;
        let mut offset = 0;
        for _ in 0..8 {
            match &t.kind {
                TypeKind::Struct {
                    variants: Some(_), ..
                } => return Some((t, offset)),
                TypeKind::Struct { members, .. } if members.len() == 1 => {
                    offset += members[0].offset;
                    let next = self.types.get(members[0].ty?)?;
                    t = next;
                }
                _ => return None,
            }
        }
        None
    }

    fn slice(&mut self, data: Option<TypeRef>, at: At, root: &Root) {
        let Some(pointer) = data.and_then(|d| self.types.get(d)) else {
            return;
        };
        let TypeKind::Pointer {
            target: Some(element),
        } = pointer.kind
        else {
            return;
        };
        let stride = self.types.get(element).map_or(0, |e| e.size);
        if stride == 0 || at.derefs >= MAX_DEREFS {
            return;
        }
        let mut next = at.at(0);
        next.settle();
        next.steps.push(Step::Slice {
            stride,
            max: MAX_ELEMENTS,
        });
        next.derefs += 1;
        next.owner = false;
        next.inline = false;
        self.walk(element, next, root);
    }

    /// A collection whose length is read here; false when `t` is none.
    fn length(&mut self, t: &Type, at: &At) -> bool {
        let name = t.name.as_str();
        let size_of = |types: &mut Types, param: &str| {
            t.param(param)
                .and_then(|p| types.get(p))
                .map_or(0, |p| p.size)
        };
        let offset = |m: &str| t.member(m).map(|m| at.offset + m.offset as i64);
        let vec = name.starts_with("Vec<") && t.has_members(&["buf", "len"]);
        let deque = name.starts_with("VecDeque<") && t.has_members(&["head", "len", "buf"]);
        let (length, entry_size) = if vec || deque {
            let Some((cap, ptr)) = self.raw_vec(t) else {
                return false;
            };
            let base = at.offset + t.member("buf").map_or(0, |m| m.offset as i64);
            (
                Length::Vec {
                    len: offset("len").unwrap_or(0),
                    cap: base + cap,
                    ptr: base + ptr,
                },
                size_of(self.types, "T"),
            )
        } else if name.starts_with("RawTable<") && t.member("table").is_some() {
            let Some(inner) = t
                .member("table")
                .and_then(|m| m.ty)
                .and_then(|ty| self.types.get(ty))
            else {
                return false;
            };
            if !inner.has_members(&["bucket_mask", "ctrl", "items"]) {
                return false;
            }
            let base = at.offset + t.member("table").map_or(0, |m| m.offset as i64);
            let field = |m: &str| base + inner.member(m).map_or(0, |m| m.offset as i64);
            let element = t.param("T").and_then(|p| self.types.get(p));
            let (bucket, align) = element.map_or((0, 1), |e| (e.size, e.align));
            (
                Length::Table {
                    items: field("items"),
                    mask: field("bucket_mask"),
                    ctrl: field("ctrl"),
                    bucket,
                    align: align.max(GROUP_WIDTH).next_power_of_two(),
                },
                bucket,
            )
        } else if name.starts_with("BTreeMap<") && t.has_members(&["root", "length"]) {
            (
                Length::Count {
                    len: offset("length").unwrap_or(0),
                },
                size_of(self.types, "K") + size_of(self.types, "V"),
            )
        } else if (name.starts_with("LinkedList<") && t.has_members(&["head", "tail", "len"]))
            || (name.starts_with("Slab<") && t.has_members(&["entries", "len"]))
        {
            (
                Length::Count {
                    len: offset("len").unwrap_or(0),
                },
                size_of(self.types, "T"),
            )
        } else if (name.starts_with("IndexMapCore<") || name.starts_with("Core<"))
            && t.has_members(&["entries", "indices"])
        {
            // Its entries, in order; the indices are a table of positions into them.
            let Some(entries) = t.member("entries").and_then(|m| m.ty.map(|ty| (m, ty))) else {
                return false;
            };
            let mut next = at.at(entries.0.offset);
            next.family.get_or_insert_with(|| name.to_string());
            if let Some(vec) = self.types.get(entries.1) {
                if self.length(&vec.clone(), &next) {
                    return true;
                }
            }
            return false;
        } else if name.starts_with("SmallVec<") && t.has_members(&["capacity", "data"]) {
            let Some(small) = self.small_vec(t, at) else {
                return false;
            };
            small
        } else {
            return false;
        };
        let mut steps = at.steps.clone();
        steps.push(Step::Length(length));
        let family = at.family.clone().unwrap_or_else(|| name.to_string());
        self.found.push(FoundCollection {
            steps,
            type_name: short_type(&family),
            bytes: at.bytes,
            entry_size,
            field: at.field.clone(),
            once_behind_pointer: at.once_behind_pointer.clone(),
        });
        true
    }

    /// A `Vec`'s or `VecDeque`'s capacity and pointer, relative to its `buf`.
    fn raw_vec(&mut self, t: &Type) -> Option<(i64, i64)> {
        let buf = t.member("buf")?.ty?;
        let cap = self.find(buf, "cap", 3)?;
        let ptr = self.find(buf, "ptr", 3)?;
        Some((cap as i64, ptr as i64))
    }

    /// The offset of the member named `name` somewhere inside `ty`, `depth` levels at most.
    fn find(&mut self, ty: TypeRef, name: &str, depth: u32) -> Option<u64> {
        let t = self.types.get(ty)?;
        if let Some(m) = t.member(name) {
            return Some(m.offset);
        }
        if depth == 0 {
            return None;
        }
        let TypeKind::Struct { members, .. } = &t.kind else {
            return None;
        };
        members.iter().find_map(|m| {
            let inner = self.find(m.ty?, name, depth - 1)?;
            Some(m.offset + inner)
        })
    }

    /// smallvec 1's `SmallVec { capacity, data }`, its data a union `{ inline, heap: (ptr,
    /// len) }` (feature `union`) or an enum `Inline(..) | Heap { ptr, len }`: which one is in
    /// use follows from the capacity, so only where the heap's pointer and length are matters.
    fn small_vec(&mut self, t: &Type, at: &At) -> Option<(Length, u64)> {
        let array = self.types.get(t.param("A")?)?;
        let TypeKind::Array { element, count } = array.kind else {
            return None;
        };
        let data = t.member("data")?;
        let data_type = self.types.get(data.ty?)?;
        let heap = match &data_type.kind {
            TypeKind::Struct { union: true, .. } => data_type.member("heap")?.clone(),
            TypeKind::Struct {
                variants: Some(v), ..
            } => v.variants.iter().find(|(_, m)| m.name == "Heap")?.1.clone(),
            _ => return None,
        };
        let pair = self.types.get(heap.ty?)?;
        let ptr = pair.member("ptr").or_else(|| pair.member("__0"))?;
        let len = pair.member("len").or_else(|| pair.member("__1"))?;
        let base = at.offset + (data.offset + heap.offset) as i64;
        let entry = element
            .and_then(|e| self.types.get(e))
            .map_or(0, |e| e.size);
        Some((
            Length::Small {
                cap: at.offset + t.member("capacity")?.offset as i64,
                inline: count,
                len: base + len.offset as i64,
                ptr: base + ptr.offset as i64,
            },
            entry,
        ))
    }
}

/// Types whose pointer owns what it points to.
fn is_owner(name: &str) -> bool {
    let short = name.strip_prefix("alloc::boxed::").unwrap_or(name);
    ["Box<", "Arc<", "Rc<"].iter().any(|p| short.starts_with(p))
}

/// A raw pointer type, as rustc names it in the DWARF.
fn is_raw(name: &str) -> bool {
    name.starts_with("*const ") || name.starts_with("*mut ")
}

/// Types that are a collection to the user, whatever holds their length inside.
fn is_collection_family(name: &str) -> bool {
    [
        "HashMap<",
        "HashSet<",
        "IndexMap<",
        "IndexSet<",
        "BTreeSet<",
        "BinaryHeap<",
        "DashMap<",
        "DashSet<",
        "HashTable<",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// std's and the common crates' wrappers: their fields are not the user's.
fn is_wrapper(name: &str) -> bool {
    [
        "Mutex<",
        "RwLock<",
        "ReentrantLock<",
        "OnceLock<",
        "OnceCell<",
        "LazyLock<",
        "LazyCell<",
        "Lazy<",
        "UnsafeCell<",
        "SyncUnsafeCell<",
        "Cell<",
        "RefCell<",
        "MaybeUninit<",
        "ManuallyDrop<",
        "Box<",
        "Arc<",
        "Rc<",
        "ArcInner<",
        "RcInner<",
        "RcBox<",
        "NonNull<",
        "Unique<",
        "Storage<",
        "EagerStorage<",
        "CachePadded<",
        "Option<",
        "Some",
        "Data<",
        "ShardedLock<",
        "AtomicCell<",
        "AtomicPtr<",
        "Pin<",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// A type's name as a user writes it: every path cut to its last segment, and the
/// parameters nobody writes (the global allocator, std's random hasher) left out.
pub fn short_type(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String| {
        let last = token.rsplit("::").next().unwrap_or("");
        out.push_str(last);
        token.clear();
    };
    for c in name.chars() {
        if c.is_alphanumeric() || matches!(c, '_' | ':' | '{' | '}' | '#') {
            token.push(c);
        } else {
            flush(&mut token, &mut out);
            out.push(c);
        }
    }
    flush(&mut token, &mut out);
    for default in [", Global", ", RandomState"] {
        out = out.replace(default, "");
    }
    out
}

fn read_u32(bytes: &[u8], offset: i64) -> Option<u32> {
    let at = usize::try_from(offset).ok()?;
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_read_as_the_user_wrote_them() {
        assert_eq!(
            short_type("HashSet<u64, std::hash::random::RandomState, alloc::alloc::Global>"),
            "HashSet<u64>"
        );
        assert_eq!(
            short_type("Vec<alloc::string::String, alloc::alloc::Global>"),
            "Vec<String>"
        );
        assert_eq!(
            short_type("HashMap<u64, alloc::vec::Vec<u8, alloc::alloc::Global>, std::hash::random::RandomState, alloc::alloc::Global>"),
            "HashMap<u64, Vec<u8>>"
        );
        assert_eq!(short_type("String"), "String");
        assert_eq!(short_type("[u8; 4]"), "[u8; 4]");
    }
}
