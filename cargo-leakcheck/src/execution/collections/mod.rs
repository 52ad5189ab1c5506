//! The program's own collections, from the test binary's DWARF: every collection reachable
//! from a static or a thread-local (see [`walk`] for what is followed), with the steps the
//! runtime follows to read its length after each run (the table of
//! `leakcheck_protocol::collections`), and what the report says of it: the static, where it
//! is defined, the field and the collection's type.
//!
//! A collection that gains an entry on every call allocates only when it doubles, so no
//! allocation count shows its growth; its length does. The walk is made once per executable
//! and kept with the build (`cache`), since it reads the whole of `.debug_info`.
//!
//! A binary without type information (a release build with line tables only) has nothing to
//! read: [`Table::note`] says so, with the setting that gives it.

pub(crate) mod cache;
mod types;
mod walk;

use crate::execution::data_symbols::declaration;
use crate::execution::symbolize::strip_hash;
use addr2line::gimli;
use leakcheck_protocol::collections::Step;
use object::{Object, ObjectSection, ObjectSegment};
use std::borrow::Cow;
use std::fmt::Write;
use types::{Types, R};

pub use crate::evidence::{Collection, CollectionTable as Table};

/// Writes each binary's table of collections where its processes' runtime reads it
/// ([`table_file`]); a binary without collections (or without a build id for the runtime to
/// check) has none.
pub fn write_tables(
    binaries: &[crate::execution::cargo::TestBinary],
    work_dir: &std::path::Path,
) -> Result<(), crate::errors::Error> {
    use crate::errors::Error;
    std::fs::create_dir_all(work_dir)
        .map_err(|e| Error::io(format!("create `{}`", work_dir.display()), e))?;
    for (b, binary) in binaries.iter().enumerate() {
        let table = &binary.facts.collections;
        if table.collections.is_empty() || binary.facts.build_id.is_empty() {
            continue;
        }
        let path = table_file(work_dir, b);
        std::fs::write(&path, table.render(&binary.facts.build_id))
            .map_err(|e| Error::io(format!("write `{}`", path.display()), e))?;
    }
    Ok(())
}

/// Where the runtime's table of binary `index` is written in the work directory.
pub fn table_file(work_dir: &std::path::Path, index: usize) -> std::path::PathBuf {
    work_dir.join(format!("b{index}.collections"))
}

/// Says why a binary has no table: it has no type information.
pub const NO_TYPES: &str = "no type information (its profile's `debug` is `false` or `line-tables-only`; `debug = true` gives it)";

/// The run's note on the binaries whose collections could not be read, once for all of
/// them; None when every binary's could.
pub fn note(binaries: &[crate::execution::cargo::TestBinary]) -> Option<String> {
    // A doc-test's own code has line tables only, on purpose: its library's collections
    // are read in the library's own test binaries.
    let mut unread: Vec<(String, &str)> = binaries
        .iter()
        .filter(|b| b.kind != crate::model::TargetKind::Doc)
        .filter_map(|b| Some((b.id(), b.facts.collections.note.as_deref()?)))
        .collect();
    unread.sort();
    unread.dedup();
    let (_, why) = unread.first()?;
    let names: Vec<String> = unread.iter().map(|(id, _)| format!("`{id}`")).collect();
    Some(format!(
        "the program's own collections were not read in {}: {why}, so a collection that grows without allocating goes unseen there",
        names.join(", ")
    ))
}

/// The collections of the executable `data`.
pub fn read(data: &[u8]) -> Table {
    let Ok(file) = object::File::parse(data) else {
        return Table::default();
    };
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let Ok(sections) = gimli::DwarfSections::load(load) else {
        return Table::default();
    };
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut units = Vec::new();
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        let Some(start) = header.debug_info_offset().map(|o| o.0 as u64) else {
            continue;
        };
        if let Ok(unit) = dwarf.unit(header) {
            units.push((start, unit));
        }
    }
    let writable = writable_segments(&file);
    let symbols = DataAddresses::of(&file);
    let (roots, any_types) = roots(&dwarf, &units, &writable, &symbols);
    if !any_types {
        return Table {
            collections: Vec::new(),
            note: Some(NO_TYPES.into()),
        };
    }
    let mut types = Types::new(&dwarf, &units);
    let mut walk = walk::Walk::new(&mut types);
    let mut found = Vec::new();
    for r in &roots {
        let initial = (!r.thread_local)
            .then(|| initial_bytes(&file, r.address, r.size))
            .flatten();
        let root = walk::Root {
            ty: r.ty,
            thread_local: r.thread_local,
            initial: initial.as_deref(),
        };
        found.extend(walk.root(&root).into_iter().map(|f| (r, f)));
    }
    let once = walk.once_initial();
    let mut collections = Vec::new();
    for (r, mut f) in found {
        if !f.vouch(once) {
            continue;
        }
        if collections.len() >= leakcheck_protocol::collections::MAX_COLLECTIONS {
            break;
        }
        let mut program = String::new();
        let root = Step::Root {
            thread_local: r.thread_local,
            address: r.address,
        };
        for s in std::iter::once(&root).chain(&f.steps) {
            let _ = writeln!(program, "{s}");
        }
        collections.push(Collection {
            root: r.name.clone(),
            thread_local: r.thread_local,
            file: r.definition.as_ref().map(|d| d.0.clone()),
            line: r.definition.as_ref().map(|d| d.1),
            field: f.field,
            type_name: f.type_name,
            bytes: f.bytes,
            entry_size: f.entry_size,
            program,
        });
    }
    collections.dedup_by(|a, b| a.program == b.program);
    Table {
        collections,
        note: None,
    }
}

/// A static or thread-local of the executable, with its type.
struct RootVar {
    thread_local: bool,
    address: u64,
    size: u64,
    ty: u64,
    name: String,
    definition: Option<(String, u32)>,
}

/// Every static in a writable segment and every thread-local of the executable that has a
/// type; and whether any structure type is described at all (a binary built with line
/// tables only describes none). `.debug_info` is read raw: only namespaces and variables
/// have their attributes parsed, every other entry's are skipped, since a debug build holds
/// millions of entries (each function's parameters, scopes and inlined calls).
fn roots<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    units: &[(u64, gimli::Unit<R<'a>>)],
    writable: &[(u64, u64)],
    symbols: &DataAddresses,
) -> (Vec<RootVar>, bool) {
    let mut out = Vec::new();
    let mut any_types = false;
    for (start, unit) in units {
        let mut namespaces: Vec<(isize, String)> = Vec::new();
        let Ok(mut raw) = unit.entries_raw(None) else {
            continue;
        };
        while !raw.is_empty() {
            let depth = raw.next_depth();
            let offset = raw.next_offset();
            let abbrev = match raw.read_abbreviation() {
                Ok(Some(a)) => a,
                Ok(None) => continue,
                Err(_) => break,
            };
            while namespaces.last().is_some_and(|(d, _)| *d >= depth) {
                namespaces.pop();
            }
            let tag = abbrev.tag();
            if tag != gimli::DW_TAG_namespace && tag != gimli::DW_TAG_variable {
                any_types |= tag == gimli::DW_TAG_structure_type;
                if raw.skip_attributes(abbrev.attributes()).is_err() {
                    break;
                }
                continue;
            }
            let Some(attrs) = Attrs::read(&mut raw, abbrev) else {
                break;
            };
            if tag == gimli::DW_TAG_namespace {
                let name = string(dwarf, unit, attrs.name).unwrap_or_default();
                namespaces.push((depth, name));
                continue;
            }
            let var = (Variable {
                dwarf,
                unit,
                start: *start,
                offset,
                attrs,
            })
            .root(&namespaces, writable, symbols);
            out.extend(var);
        }
    }
    out.sort_by_key(|r| (r.thread_local, r.address));
    out.dedup_by(|a, b| a.thread_local == b.thread_local && a.address == b.address);
    (out, any_types)
}

/// The attributes of a variable or namespace the scan looks at.
#[derive(Default)]
struct Attrs<'a> {
    name: Option<gimli::AttributeValue<R<'a>>>,
    location: Option<gimli::AttributeValue<R<'a>>>,
    ty: Option<gimli::AttributeValue<R<'a>>>,
}

impl<'a> Attrs<'a> {
    /// Reads the attributes of the entry `raw` is at (of `abbrev`); None when one does not
    /// read.
    fn read(
        raw: &mut gimli::EntriesRaw<'_, R<'a>>,
        abbrev: &gimli::Abbreviation,
    ) -> Option<Attrs<'a>> {
        let mut attrs = Attrs::default();
        for spec in abbrev.attributes() {
            let attr = raw.read_attribute(*spec).ok()?;
            match attr.name() {
                gimli::DW_AT_name => attrs.name = Some(attr.value()),
                gimli::DW_AT_location => attrs.location = Some(attr.value()),
                gimli::DW_AT_type => attrs.ty = Some(attr.value()),
                _ => {}
            }
        }
        Some(attrs)
    }
}

/// A variable's entry: where it is and the attributes read of it.
struct Variable<'d, 'a> {
    dwarf: &'d gimli::Dwarf<R<'a>>,
    unit: &'d gimli::Unit<R<'a>>,
    /// The unit's offset in `.debug_info`.
    start: u64,
    offset: gimli::UnitOffset,
    attrs: Attrs<'a>,
}

impl Variable<'_, '_> {
    /// The root the variable is, inside `namespaces`: a static in a `writable` segment or a
    /// thread-local, kept by the linker, with a type; None for any other.
    fn root(
        self,
        namespaces: &[(isize, String)],
        writable: &[(u64, u64)],
        symbols: &DataAddresses,
    ) -> Option<RootVar> {
        let Some(gimli::AttributeValue::Exprloc(expr)) = self.attrs.location else {
            return None;
        };
        let (thread_local, address) = location(&expr, self.unit)?;
        if !thread_local && !writable.iter().any(|&(lo, hi)| (lo..hi).contains(&address)) {
            return None;
        }
        if !symbols.has(thread_local, address) {
            // The linker dropped it: its DWARF may name an address another uses.
            return None;
        }
        let ty = match self.attrs.ty {
            Some(gimli::AttributeValue::UnitRef(o)) => self.start + o.0 as u64,
            Some(gimli::AttributeValue::DebugInfoRef(o)) => o.0 as u64,
            _ => return None,
        };
        let Ok(entry) = self.unit.entry(self.offset) else {
            return None;
        };
        let plain = string(self.dwarf, self.unit, self.attrs.name);
        let linkage = string(
            self.dwarf,
            self.unit,
            entry.attr_value(gimli::DW_AT_linkage_name),
        );
        let name = root_name(
            linkage.as_deref(),
            namespaces,
            plain.as_deref().unwrap_or("?"),
            thread_local,
        );
        Some(RootVar {
            thread_local,
            address,
            size: type_size(self.unit, &entry).unwrap_or(0),
            ty,
            name,
            definition: declaration(self.dwarf, self.unit, &entry).map(|(file, line)| {
                // Relative to where the compiler ran, as frames are not.
                match self.unit.comp_dir.as_ref().map(|d| d.to_string_lossy()) {
                    Some(dir) if !file.starts_with('/') => (format!("{dir}/{file}"), line),
                    _ => (file, line),
                }
            }),
        })
    }
}

/// The addresses of the executable's data and thread-local symbols: a static or
/// thread-local the linker kept has one. Empty when the executable has no symbol table,
/// and then nothing is ruled out.
struct DataAddresses {
    data: std::collections::HashSet<u64>,
    tls: std::collections::HashSet<u64>,
}

impl DataAddresses {
    fn of(file: &object::File) -> DataAddresses {
        use object::ObjectSymbol;
        let mut s = DataAddresses {
            data: Default::default(),
            tls: Default::default(),
        };
        for sym in file.symbols() {
            match sym.kind() {
                object::SymbolKind::Data | object::SymbolKind::Unknown => {
                    s.data.insert(sym.address());
                }
                object::SymbolKind::Tls => {
                    s.tls.insert(sym.address());
                }
                _ => {}
            }
        }
        s
    }

    fn has(&self, thread_local: bool, address: u64) -> bool {
        if self.data.is_empty() && self.tls.is_empty() {
            return true;
        }
        match thread_local {
            true => self.tls.contains(&address),
            false => self.data.contains(&address),
        }
    }
}

fn string<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    unit: &gimli::Unit<R<'a>>,
    value: Option<gimli::AttributeValue<R<'a>>>,
) -> Option<String> {
    let s = dwarf.attr_string(unit, value?).ok()?;
    Some(s.to_string_lossy().into_owned())
}

/// A static's address (`DW_OP_addr`) or a thread-local's offset (`DW_OP_const*;
/// DW_OP_form_tls_address`).
fn location<'a>(expr: &gimli::Expression<R<'a>>, unit: &gimli::Unit<R<'a>>) -> Option<(bool, u64)> {
    let mut ops = expr.operations(unit.encoding());
    match ops.next().ok()?? {
        gimli::Operation::Address { address } => {
            ops.next().ok()?.is_none().then_some((false, address))
        }
        gimli::Operation::UnsignedConstant { value } => {
            matches!(ops.next().ok()??, gimli::Operation::TLS).then_some(())?;
            ops.next().ok()?.is_none().then_some((true, value))
        }
        _ => None,
    }
}

/// A variable's size, from its type's `DW_AT_byte_size` (typedefs not followed).
fn type_size<'a>(
    unit: &gimli::Unit<R<'a>>,
    entry: &gimli::DebuggingInformationEntry<R<'a>>,
) -> Option<u64> {
    let gimli::AttributeValue::UnitRef(at) = entry.attr_value(gimli::DW_AT_type)? else {
        return None;
    };
    unit.entry(at)
        .ok()?
        .attr_value(gimli::DW_AT_byte_size)?
        .udata_value()
}

/// The name a root is shown by: its demangled symbol, without its hash, and for what macros
/// generate, the name the user wrote (`thread_local!`'s, `lazy_static!`'s).
fn root_name(
    linkage: Option<&str>,
    namespaces: &[(isize, String)],
    name: &str,
    thread_local: bool,
) -> String {
    let full = match linkage {
        Some(l) => strip_hash(&addr2line::demangle_auto(l.into(), None)).to_string(),
        None => {
            let mut path: Vec<&str> = namespaces.iter().map(|(_, n)| n.as_str()).collect();
            path.push(name);
            path.join("::")
        }
    };
    // lazy_static!: `<app::NAME as core::ops::deref::Deref>::deref::__stability::LAZY`.
    if let Some(rest) = full.strip_prefix('<') {
        if let Some((ty, tail)) = rest.split_once(" as core::ops::deref::Deref>::deref::") {
            if tail.ends_with("LAZY") {
                return ty.to_string();
            }
        }
    }
    // thread_local!: `app::NAME::{{constant}}::{{closure}}::__RUST_STD_INTERNAL_VAL`.
    if thread_local {
        if let Some(at) = full.find("::{") {
            return full[..at].to_string();
        }
    }
    full
}

/// The ranges of the executable's writable segments (statics that can change).
fn writable_segments(file: &object::File) -> Vec<(u64, u64)> {
    file.segments()
        .filter(|s| match s.flags() {
            object::SegmentFlags::Elf { p_flags, .. } => p_flags.0 & object::elf::PF_W.0 != 0,
            _ => false,
        })
        .map(|s| (s.address(), s.address() + s.size()))
        .collect()
}

/// A static's bytes as the executable holds them before the program runs.
fn initial_bytes(file: &object::File, address: u64, size: u64) -> Option<Vec<u8>> {
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s > 0 && s <= 1 << 20)?;
    let section = file
        .sections()
        .find(|s| (s.address()..s.address() + s.size()).contains(&address))?;
    if section.kind() == object::SectionKind::UninitializedData
        || section.kind() == object::SectionKind::UninitializedTls
    {
        return Some(vec![0; size]);
    }
    let data = section.data().ok()?;
    let at = usize::try_from(address - section.address()).ok()?;
    data.get(at..at + size).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests;
