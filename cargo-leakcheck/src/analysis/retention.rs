//! Who holds a stack's objects: the retention paths the runtime's reachability scan writes
//! beside a dump (`<dump>.paths`, format in the runtime's `paths` module), read, matched to
//! the dump's stacks and named: a static or thread-local by its symbol, a stack root by the
//! function whose frame holds the pointer, each object on the way by where it was allocated.

use crate::analysis::classify;
use crate::analysis::diff::{self, FrameKey};
use crate::analysis::frames::{frame_report, resolve_stack};
use crate::analysis::profile;
use crate::analysis::symbolize::{elf_symbols, strip_hash, Frame, Symbolizer};
use crate::model::{FrameReport, RetainedBy, RootKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One path as the runtime wrote it, its stacks as frame keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldPath {
    pub root: RawRoot,
    /// `(tid, name)` of the thread a thread-local, stack or register root belongs to.
    pub thread: Option<(u64, String)>,
    /// The allocation stack of each object, root-most first; the last is the held stack's.
    pub chain: Vec<Vec<FrameKey>>,
    /// Objects left out of a long chain (between the first and the last eight).
    pub skipped: u64,
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

/// Reads a `.paths` file; None when there is none, or it is not whole (a process that died
/// while writing it): retention paths are an explanation, never a verdict.
pub fn read(path: &Path) -> Option<Vec<HeldPath>> {
    parse(&std::fs::read_to_string(path).ok()?)
}

/// Parses the text of a `.paths` file (see [`read`]).
pub fn parse(text: &str) -> Option<Vec<HeldPath>> {
    let (body, maps) = text.split_once("\nMAPPED_LIBRARIES:\n")?;
    let mappings: Vec<profile::Mapping> = maps
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(profile::parse_mapping)
        .collect();
    let mut lines = body.lines();
    if lines.next()? != "leakcheck-paths/1" {
        return None;
    }
    struct Raw {
        root: Vec<String>,
        thread: Option<(u64, String)>,
        chain: Vec<Vec<u64>>,
        skipped: u64,
    }
    let mut raws: Vec<Raw> = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if line == "path" {
            raws.push(Raw {
                root: Vec::new(),
                thread: None,
                chain: Vec::new(),
                skipped: 0,
            });
            continue;
        }
        let raw = raws.last_mut()?;
        if let Some(rest) = line.strip_prefix("root ") {
            raw.root = rest.splitn(3, ' ').map(str::to_owned).collect();
        } else if let Some(rest) = line.strip_prefix("thread ") {
            let (tid, name) = rest.split_once(' ')?;
            raw.thread = Some((tid.parse().ok()?, name.to_owned()));
        } else if let Some(rest) = line.strip_prefix("skip ") {
            raw.skipped = rest.parse().ok()?;
        } else if let Some(rest) = line.strip_prefix('@') {
            let addrs: Option<Vec<u64>> = rest.split_whitespace().map(hex).collect();
            raw.chain.push(addrs?);
        } else {
            return None;
        }
    }
    let mut stacks: Vec<Vec<u64>> = Vec::new();
    for r in &raws {
        stacks.extend(r.chain.iter().cloned());
        if let [kind, at, ..] = &r.root[..] {
            if kind == "stack" {
                stacks.push(vec![hex(at)?]);
            }
        }
    }
    let mut keys = diff::frame_keys(&mappings, &stacks).into_iter();
    raws.into_iter()
        .map(|r| {
            let chain: Vec<Vec<FrameKey>> = keys.by_ref().take(r.chain.len()).collect();
            let word = |i: usize| r.root.get(i).map(String::as_str);
            let root = match (word(0), word(1), word(2)) {
                (Some("static"), Some(at), Some(object)) => RawRoot::Static {
                    vaddr: hex(at)?,
                    object: object.to_owned(),
                },
                (Some("tls"), Some(at), Some(object)) => RawRoot::Tls {
                    offset: hex(at)?,
                    object: object.to_owned(),
                },
                (Some("stack"), Some(at), _) => {
                    let key = keys.next()?.pop();
                    RawRoot::Stack {
                        frame: key.filter(|_| hex(at) != Some(0)),
                    }
                }
                (Some("register"), Some(name), _) => RawRoot::Register(name.to_owned()),
                _ => RawRoot::Unknown,
            };
            (!chain.is_empty()).then_some(HeldPath {
                root,
                thread: r.thread,
                chain,
                skipped: r.skipped,
            })
        })
        .collect()
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
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

/// Names a path's root and the objects on its way (`exe`: the test binary, which a static
/// of `-` is in).
pub fn describe(
    p: &HeldPath,
    exe: &str,
    symbolizer: &mut Symbolizer,
    symbols: &mut DataSymbols,
) -> RetainedBy {
    // Thread ids differ from run to run, and the report must not: threads go by name.
    let thread = p.thread.as_ref().map(|(_, name)| name.clone());
    let of_thread = |what: String| match &p.thread {
        Some((_, name)) => format!("{what} of thread `{name}`"),
        None => what,
    };
    let object = |o: &str| {
        if o == "-" {
            exe.to_owned()
        } else {
            o.to_owned()
        }
    };
    let (mut frame, mut definition) = (None, None);
    let (root_kind, symbol, root) = match &p.root {
        RawRoot::Static { vaddr, object: o } => {
            let symbol = symbols.find(&object(o), *vaddr, false);
            definition = symbols
                .definition(&object(o), *vaddr)
                .map(|(file, line)| FrameReport {
                    function: symbol.clone().unwrap_or_default(),
                    file: Some(file),
                    line: Some(line),
                    inlined: false,
                });
            let root = match &symbol {
                Some(s) => format!("static `{s}`"),
                None => format!("static data of `{}` at {vaddr:#x}", file_name(&object(o))),
            };
            (RootKind::Static, symbol, root)
        }
        RawRoot::Tls { offset, object: o } => {
            let symbol = symbols
                .find(&object(o), *offset, true)
                .map(|s| tls_name(&s));
            let root = match &symbol {
                Some(s) => of_thread(format!("thread-local `{s}`")),
                None => of_thread("thread-local storage".to_owned()),
            };
            (RootKind::ThreadLocal, symbol, root)
        }
        RawRoot::Stack { frame: at } => {
            let f = at.as_ref().and_then(|k| {
                symbolizer
                    .symbolize(&k.object, k.file_offset)
                    .first()
                    .cloned()
            });
            let symbol = f.as_ref().and_then(|f| f.function.clone());
            frame = f.filter(|f| f.function.is_some()).map(|f| frame_report(&f));
            (RootKind::Stack, symbol, of_thread("stack".to_owned()))
        }
        RawRoot::Register(name) => (
            RootKind::Register,
            Some(name.clone()),
            of_thread(format!("register {name}")),
        ),
        RawRoot::Unknown => (RootKind::Unknown, None, "an unknown root".to_owned()),
    };
    let via = p.chain[..p.chain.len() - 1]
        .iter()
        .map(|keys| allocation_site(&resolve_stack(keys, symbolizer), exe))
        .collect();
    RetainedBy {
        root_kind,
        root,
        symbol,
        thread,
        frame,
        definition,
        via,
        skipped: p.skipped,
    }
}

/// Where an object was allocated: the first frame in the program's own code (not std's,
/// nor a crate std vendors, nor the registry's), or of the binary, or the first.
fn allocation_site(frames: &[Frame], exe: &str) -> FrameReport {
    let own_source = |f: &&Frame| f.file.as_deref().is_some_and(classify::is_own_source);
    let user = |f: &&Frame| classify::is_user_frame(f, exe);
    frames
        .iter()
        .find(|f| user(f) && own_source(f))
        .or_else(|| frames.iter().find(user))
        .or(frames.first())
        .map_or_else(|| FrameReport::named("?"), frame_report)
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned())
}

/// A `thread_local!`'s own name from the symbol of the static its expansion declares
/// (`app::CACHE::{{constant}}::{{closure}}::VAL` → `app::CACHE`).
fn tls_name(symbol: &str) -> String {
    match symbol.find("::{{") {
        Some(i) => symbol[..i].to_owned(),
        None => symbol.to_owned(),
    }
}

/// Data and thread-local symbols of the objects a path names, read once per object.
#[derive(Default)]
pub struct DataSymbols {
    objects: HashMap<String, Arc<Table>>,
}

#[derive(Default)]
struct Table {
    /// (address or TLS offset, size, demangled name), sorted.
    data: Vec<(u64, u64, String)>,
    tls: Vec<(u64, u64, String)>,
    /// Where each static is defined, by address, from the DWARF (read on first use).
    definitions: std::sync::OnceLock<HashMap<u64, (String, u32)>>,
    path: PathBuf,
}

impl DataSymbols {
    /// The symbol holding `at` (a virtual address, or an offset in the thread-local block).
    pub fn find(&mut self, object: &str, at: u64, tls: bool) -> Option<String> {
        self.find_entry(object, at, tls).map(|(_, name)| name)
    }

    fn find_entry(&mut self, object: &str, at: u64, tls: bool) -> Option<(u64, String)> {
        let table = self.table(object);
        let list = if tls { &table.tls } else { &table.data };
        let after = list.partition_point(|s| s.0 <= at);
        let (start, size, name) = &list[after.checked_sub(1)?];
        (at < start + (*size).max(1)).then(|| (*start, name.clone()))
    }

    fn table(&mut self, object: &str) -> Arc<Table> {
        self.objects
            .entry(object.to_owned())
            .or_insert_with(|| {
                let mut table = Table::read(Path::new(object)).unwrap_or_default();
                table.path = PathBuf::from(object);
                Arc::new(table)
            })
            .clone()
    }

    /// The file and line where the static holding `at` is defined, when the object's debug
    /// info says (its DWARF is read once, the first time one is asked for).
    pub fn definition(&mut self, object: &str, at: u64) -> Option<(String, u32)> {
        let (start, _) = self.find_entry(object, at, false)?;
        let table = self.table(object);
        table
            .definitions
            .get_or_init(|| static_definitions(&table.path).unwrap_or_default())
            .get(&start)
            .cloned()
    }
}

/// The `DW_TAG_variable`s with a fixed address (`DW_OP_addr`) in the DWARF of the ELF file at
/// `path`: where each is declared.
fn static_definitions(path: &Path) -> Option<HashMap<u64, (String, u32)>> {
    use addr2line::gimli;
    use object::{Object, ObjectSection};
    use std::borrow::Cow;
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let sections = gimli::DwarfSections::load(load).ok()?;
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, endian));
    let mut found = HashMap::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        while let Ok(Some(entry)) = entries.next_dfs() {
            if entry.tag() != gimli::DW_TAG_variable {
                continue;
            }
            let Some(gimli::AttributeValue::Exprloc(expr)) =
                entry.attr_value(gimli::DW_AT_location)
            else {
                continue;
            };
            let mut ops = expr.operations(unit.encoding());
            let Ok(Some(gimli::Operation::Address { address })) = ops.next() else {
                continue;
            };
            let line = match entry.attr_value(gimli::DW_AT_decl_line) {
                Some(gimli::AttributeValue::Udata(n)) => n as u32,
                _ => continue,
            };
            let index = match entry.attr_value(gimli::DW_AT_decl_file) {
                Some(gimli::AttributeValue::FileIndex(i) | gimli::AttributeValue::Udata(i)) => i,
                _ => continue,
            };
            let Some(program) = &unit.line_program else {
                continue;
            };
            let header = program.header();
            let Some(entry_file) = header.file(index) else {
                continue;
            };
            let name = |v| {
                dwarf
                    .attr_string(&unit, v)
                    .ok()
                    .map(|s| s.to_string_lossy().into_owned())
            };
            let Some(file_name) = name(entry_file.path_name()) else {
                continue;
            };
            let full = match entry_file.directory(header).and_then(name) {
                Some(dir) if !file_name.starts_with('/') => format!("{dir}/{file_name}"),
                _ => file_name,
            };
            found.insert(address, (full, line));
        }
    }
    Some(found)
}

impl Table {
    fn read(path: &Path) -> Option<Table> {
        let mut table = Table::default();
        for s in elf_symbols(path)? {
            let list = match s.kind {
                object::SymbolKind::Data => &mut table.data,
                object::SymbolKind::Tls => &mut table.tls,
                _ => continue,
            };
            let name = addr2line::demangle_auto(s.name.into(), None);
            list.push((s.address, s.size, strip_hash(&name).to_owned()));
        }
        for list in [&mut table.data, &mut table.tls] {
            list.sort();
            list.dedup_by_key(|s| s.0);
        }
        Some(table)
    }
}

#[cfg(test)]
mod tests;
