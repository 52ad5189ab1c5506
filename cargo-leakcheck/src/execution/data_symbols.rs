//! The data and thread-local symbols of an object file, and where (in its DWARF) each
//! static is defined: what names the root of a retention path.

use crate::execution::symbolize::{elf_symbols, strip_hash};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
            let Some((full, line)) = declaration(&dwarf, &unit, entry) else {
                continue;
            };
            found.insert(address, (full, line));
        }
    }
    Some(found)
}

/// Where a DWARF entry says it is declared: its file, joined to its directory, and line.
pub(crate) fn declaration<R: addr2line::gimli::Reader>(
    dwarf: &addr2line::gimli::Dwarf<R>,
    unit: &addr2line::gimli::Unit<R>,
    entry: &addr2line::gimli::DebuggingInformationEntry<R>,
) -> Option<(String, u32)> {
    use addr2line::gimli;
    let line = match entry.attr_value(gimli::DW_AT_decl_line)? {
        gimli::AttributeValue::Udata(n) => n as u32,
        _ => return None,
    };
    let index = match entry.attr_value(gimli::DW_AT_decl_file)? {
        gimli::AttributeValue::FileIndex(i) | gimli::AttributeValue::Udata(i) => i,
        _ => return None,
    };
    let header = unit.line_program.as_ref()?.header();
    let entry_file = header.file(index)?;
    let name = |v| {
        let s = dwarf.attr_string(unit, v).ok()?;
        let text = gimli::Reader::to_string_lossy(&s).ok()?.into_owned();
        Some(text)
    };
    let file_name = name(entry_file.path_name())?;
    let full = match entry_file.directory(header).and_then(name) {
        Some(dir) if !file_name.starts_with('/') => format!("{dir}/{file_name}"),
        _ => file_name,
    };
    Some((full, line))
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
mod tests {
    use super::*;

    #[test]
    fn a_static_of_this_binary_is_named_by_its_symbol() {
        const DEFINED_AT: u32 = line!() + 1;
        static NAMED_FOR_THE_TEST: std::sync::atomic::AtomicU64 =
            std::sync::atomic::AtomicU64::new(7);
        std::hint::black_box(&NAMED_FOR_THE_TEST);
        let exe = std::env::current_exe().unwrap();
        let mut symbols = DataSymbols::default();
        let table = Table::read(&exe).unwrap();
        let (at, _, name) = table
            .data
            .iter()
            .find(|(_, _, n)| n.ends_with("NAMED_FOR_THE_TEST"))
            .expect("the static is in the symbol table")
            .clone();
        let exe = exe.to_string_lossy();
        assert_eq!(symbols.find(&exe, at, false), Some(name.clone()));
        assert_eq!(symbols.find(&exe, at + 7, false), Some(name));
        let (file, line) = symbols
            .definition(&exe, at + 4)
            .expect("debug info says where the static is defined");
        assert!(file.ends_with("data_symbols.rs"), "{file}");
        assert_eq!(line, DEFINED_AT);
    }

    #[test]
    fn a_thread_local_of_this_binary_is_in_its_table() {
        thread_local! {
            static HELD_FOR_THE_TEST: std::cell::Cell<u64> = const { std::cell::Cell::new(3) };
        }
        HELD_FOR_THE_TEST.with(|h| std::hint::black_box(h.get()));
        let table = Table::read(&std::env::current_exe().unwrap()).unwrap();
        assert!(
            table
                .tls
                .iter()
                .any(|(_, _, name)| name.contains("HELD_FOR_THE_TEST")),
            "no thread-local symbol for HELD_FOR_THE_TEST among {} thread-locals",
            table.tls.len()
        );
    }
}
