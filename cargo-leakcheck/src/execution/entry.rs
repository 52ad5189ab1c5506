//! Finds, in a test executable, the function libtest calls to run each test, so the
//! runtime can call it again after the test's run (see [`crate::execution::extra_runs`]).
//!
//! The harness `#[test]` generates is a table: for every test a `TestDescAndFn` value with
//! the test's name (`&'static str`) and `testfn: StaticTestFn(fn() -> Result<(), String>)`,
//! and `main` passes `&[&TestDescAndFn]` to libtest. In a position-independent executable
//! every pointer in that table is a dynamic relocation, so the table can be read from the
//! file exactly, for debug and release builds alike, without symbols (a release build
//! inlines the test's own functions away).
//!
//! Nothing here guesses. libtest's struct layout is not stable across Rust versions, so it
//! is inferred from the executable itself and must be the same for every test in it:
//! - a test's name field is a pointer to exactly its name's bytes followed by their length;
//! - its struct starts at the nearest address at or below the name field that something
//!   points to (each struct is pointed to by the table `main` hands to libtest, and nothing
//!   points inside one), and ends before the next such address;
//! - the entry point is the one field offset, the same in every test's struct, that holds
//!   a pointer to the start of a function (a symbol or an unwind-table entry says so).
//!
//! The layout belongs to the toolchain's libtest, so it is the same in every test binary of
//! one build: a binary with a single test, whose struct alone may leave several offsets
//! possible, takes the layout another binary of the build proved (see [`Layout`]).
//!
//! Where the table alone leaves it open (a binary of one test, selected alone; a test whose
//! name is also another string of the binary, such as `module_path!()` in an integration
//! test named like its crate), the symbols of a debug build settle it: each test's body is
//! the closure `<crate>::<test name>::{{closure}}`, and the function libtest keeps is that
//! closure or the `FnOnce::call_once` shim that calls it; so the one offset at which the
//! structs point to a function that is, or directly calls, their own test's closure, by
//! that exact name, is the layout ([`find_entries_by_symbols`]). A test's other closures
//! carry the same name (`INIT.call_once(|| …)` inside the test), and a static beside the
//! struct may point to one of their shims; the closure libtest keeps is the one that calls
//! the test's function itself, and a layout proven by such closures is taken first. If the layout cannot be pinned down to one offset either
//! way, no test of the binary gets an entry point, and its tests are reported as not
//! repeatable.

pub use crate::evidence::Entry;
use addr2line::gimli;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, Rela, SectionHeader};
use object::{elf, LittleEndian as LE, Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Where the name and the function pointer sit in libtest's struct of a test, as offsets
/// from the struct's start.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Layout {
    /// Offset of the name's pointer.
    pub name: u64,
    /// Offset of the function pointer.
    pub function: u64,
}

/// What the executable says about running its tests again.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inspection {
    /// Entry points by test name.
    pub entries: HashMap<String, Entry>,
    /// The layout this executable alone proves (one possible function offset).
    pub proven_layout: Option<Layout>,
    /// When several function offsets were possible: the entry points each would give, so
    /// that a layout proven by another executable of the same build can settle it (see
    /// [`Inspection::settle`]) without reading this one again.
    pub alternatives: Vec<(Layout, HashMap<String, Entry>)>,
    /// Why tests have no entry point, when none could be found for some.
    pub problem: Option<String>,
    /// The GNU build id, hexadecimal; the runtime checks it against the running file.
    pub build_id: String,
    /// The address of `_rjem_mallctl` (tikv-jemallocator's jemalloc), when linked in.
    pub app_mallctl: Option<u64>,
    /// The address of std's record of the thread that is ending the process (see
    /// [`runtime_symbols`]), when std is linked in statically.
    pub exit_guard: Option<u64>,
    /// std's panic hook, its address and size (see [`runtime_symbols`]).
    pub panic_hook: Option<(u64, u64)>,
    /// Rust's allocation shims (`__rust_alloc`, `__rust_dealloc`), through which the runtime
    /// asks a global allocator of the program's own whether it reaches `malloc`.
    pub alloc_shims: Option<(u64, u64)>,
    /// The deferred-reclamation runtimes' collectors, each with its kind, for the runtime to
    /// drain before it measures (see [`crate::execution::reclaimers`]).
    #[serde(with = "collectors_by_name")]
    pub collectors: Vec<leakcheck_protocol::drain::Collector>,
    /// Why a reclaimer's collectors could not be used, when one linked in cannot.
    pub drain_problems: Vec<String>,
    /// The entry points are `fn()` (a doc-test's `main`), not libtest's
    /// `fn() -> Result<(), String>`.
    pub unit_entries: bool,
    /// Doc-tests whose entry point is std's `lang_start` closure: the `main` it calls.
    pub entry_mains: HashMap<String, u64>,
    /// Why a test has no entry point, by name, when the reason is its own.
    pub no_entry: HashMap<String, String>,
}

/// The collectors as `(kind, enter, leave)`, the kind by its name: the protocol's types stay
/// free of serde, which the runtime does not link.
mod collectors_by_name {
    use leakcheck_protocol::drain::{Collector, Reclaimer};
    use serde::{de::Error, Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(list: &[Collector], s: S) -> Result<S::Ok, S::Error> {
        let named: Vec<(&str, u64, u64)> = list
            .iter()
            .map(|c| (c.kind.name(), c.enter, c.leave))
            .collect();
        named.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Collector>, D::Error> {
        let named = Vec::<(String, u64, u64)>::deserialize(d)?;
        named
            .into_iter()
            .map(|(kind, enter, leave)| {
                let kind = Reclaimer::from_name(&kind)
                    .ok_or_else(|| D::Error::custom(format!("unknown collector kind `{kind}`")))?;
                Ok(Collector { kind, enter, leave })
            })
            .collect()
    }
}

/// Symbols of the Rust runtime the tool hands to its own runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RuntimeSymbols {
    /// `_rjem_mallctl` of a tikv-jemallocator linked in.
    mallctl: Option<u64>,
    /// std's record of the thread ending the process (see below).
    exit_guard: Option<u64>,
    /// std's panic hook, `std::panicking::HOOK`: address and size.
    panic_hook: Option<(u64, u64)>,
    /// Rust's allocation shims, `__rust_alloc` and `__rust_dealloc`.
    alloc_shims: Option<(u64, u64)>,
}

/// Reads the runtime symbols in one pass over the symbols (a test binary can hold a
/// hundred thousand).
///
/// std lets one thread end the process: `exit` (and `main`'s return) records the calling
/// thread in a static, `unique_thread_exit::EXITING_THREAD_ID`, and any other thread that
/// calls `exit` afterwards waits forever. Extra runs happen after `main` returned, so a
/// child a run forks, ending with `exit`, would wait forever; the runtime clears the record
/// for the runs and puts it back after them. EntryPoints by its mangled name (v0 and legacy
/// manglings both hold this part).
///
/// std keeps the panic hook in a static, `std::panicking::HOOK`. libtest puts the default
/// hook back (freeing the test's) after its tests ran and before `main` returns, so what a
/// test's own run did to the hook is gone by the time the runtime measures it; the runtime
/// reads the hook as libtest joins the test's thread instead.
///
/// The allocation shims are what every `Box` and `Vec` allocates through: plain
/// `__rust_alloc` in older toolchains, a v0-mangled name ending in the same identifier
/// (`…12___rust_alloc`) in newer ones.
fn runtime_symbols<'data>(file: &impl object::Object<'data>) -> RuntimeSymbols {
    use object::ObjectSymbol;
    let mut found = RuntimeSymbols::default();
    let (mut alloc, mut dealloc) = (None, None);
    for s in file.symbols().chain(file.dynamic_symbols()) {
        let Ok(name) = s.name() else { continue };
        match s.kind() {
            SymbolKind::Text if name == "_rjem_mallctl" => found.mallctl = Some(s.address()),
            SymbolKind::Text
                if s.address() != 0
                    && (name == "__rust_alloc" || name.ends_with("12___rust_alloc")) =>
            {
                alloc = Some(s.address())
            }
            SymbolKind::Text
                if s.address() != 0
                    && (name == "__rust_dealloc" || name.ends_with("14___rust_dealloc")) =>
            {
                dealloc = Some(s.address())
            }
            SymbolKind::Data
                if s.size() == 8 && name.contains("18unique_thread_exit17EXITING_THREAD_ID") =>
            {
                found.exit_guard = Some(s.address())
            }
            SymbolKind::Data if s.size() >= 16 && name.contains("9panicking4HOOK") => {
                found.panic_hook = Some((s.address(), s.size()))
            }
            _ => continue,
        }
    }
    found.alloc_shims = alloc.zip(dealloc);
    found
}

/// One loadable segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Virtual address.
    pub vaddr: u64,
    /// Size in memory.
    pub memsz: u64,
    /// Offset of its bytes in the file.
    pub offset: u64,
    /// How many of them are in the file (the rest are zero).
    pub filesz: u64,
    /// Whether it holds code.
    pub executable: bool,
}

/// The parts of an executable that the search needs; built from an ELF file, or by hand in
/// tests.
#[derive(Clone, Debug, Default)]
pub struct Image<'a> {
    /// The file's bytes.
    pub data: &'a [u8],
    /// Its loadable segments.
    pub segments: Vec<Segment>,
    /// Every pointer stored in the image: location -> target (virtual addresses).
    pub pointers: BTreeMap<u64, u64>,
    /// Known function starts -> their sizes in bytes.
    pub functions: BTreeMap<u64, u64>,
}

/// A program's own jemalloc (tikv-jemallocator): the address of its `_rjem_mallctl` and the
/// program's GNU build id, hexadecimal, for the runtime to check; None without one, or for
/// a file that is not a 64-bit ELF executable.
pub fn own_allocator(data: &[u8]) -> Option<(u64, String)> {
    let file = ElfFile64::<LE>::parse(data).ok()?;
    let mallctl = runtime_symbols(&file).mallctl;
    let build_id = file
        .build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
        .unwrap_or_default();
    mallctl.map(|m| (m, build_id))
}

/// Reads what [`find_entries`] needs from an ELF executable and looks up `names`, the
/// tests of crate `krate` (the target's name, `-` as `_`).
/// What a doc-test executable says about running its doc-tests again: the entry points
/// naming found ([`crate::execution::doctests`]), with the executable's build id and the
/// runtime's symbols as for a libtest binary.
pub fn inspect_doc(data: &[u8], doc: &crate::execution::doctests::held::DocTests) -> Inspection {
    let file = match ElfFile64::<LE>::parse(data) {
        Ok(f) => f,
        Err(e) => {
            return Inspection {
                problem: Some(format!("not a 64-bit ELF executable: {e}")),
                ..Inspection::default()
            }
        }
    };
    let symbols = runtime_symbols(&file);
    Inspection {
        entries: doc.entries.clone(),
        build_id: build_id_of(&file),
        app_mallctl: symbols.mallctl,
        exit_guard: symbols.exit_guard,
        panic_hook: symbols.panic_hook,
        alloc_shims: symbols.alloc_shims,
        unit_entries: doc.unit_entries,
        entry_mains: doc.entry_mains.clone(),
        no_entry: doc.no_entry.clone(),
        ..Inspection::default()
    }
}

/// An executable's GNU build id, hexadecimal; empty without one.
fn build_id_of(file: &ElfFile64<'_, LE>) -> String {
    file.build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
        .unwrap_or_default()
}

pub fn inspect(data: &[u8], names: &[&str], krate: &str) -> Inspection {
    let file = match ElfFile64::<LE>::parse(data) {
        Ok(f) => f,
        Err(e) => {
            return Inspection {
                problem: Some(format!("not a 64-bit ELF executable: {e}")),
                ..Inspection::default()
            }
        }
    };
    let mut inspection = Inspection {
        build_id: build_id_of(&file),
        ..Inspection::default()
    };
    let image = match image_of(&file, data) {
        Ok(image) => image,
        Err(e) => {
            inspection.problem = Some(e.to_string());
            return inspection;
        }
    };
    let symbols = runtime_symbols(&file);
    inspection.app_mallctl = symbols.mallctl;
    inspection.exit_guard = symbols.exit_guard;
    inspection.panic_hook = symbols.panic_hook;
    inspection.alloc_shims = symbols.alloc_shims;
    let (collectors, problems) = crate::execution::reclaimers::collectors(
        file.symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                Some(crate::execution::reclaimers::Symbol {
                    name: s.name().ok()?,
                    address: s.address(),
                })
            }),
    );
    inspection.collectors = collectors;
    inspection.drain_problems = problems.iter().map(ToString::to_string).collect();
    let by_table = find_entries(&image, names);
    let complete = by_table
        .as_ref()
        .is_ok_and(|f| names.iter().all(|n| f.entries.contains_key(*n)));
    // Only when the table leaves something open are the symbols read (demangling every
    // function's name costs more than the rest of the inspection).
    let by_symbols = (!complete)
        .then(|| find_entries_by_symbols(&image, &closures_of(&file, krate), names, krate))
        .flatten();
    match (by_table, by_symbols) {
        (Ok(mut found), Some(named)) if named.layout == found.layout => {
            for (name, entry) in named.entries {
                found.entries.entry(name).or_insert(entry);
            }
            inspection.entries = found.entries;
            inspection.proven_layout = Some(found.layout);
            inspection.check_complete(names);
        }
        (Ok(found), _) => {
            inspection.entries = found.entries;
            inspection.proven_layout = Some(found.layout);
            inspection.check_complete(names);
        }
        (Err(_), Some(named)) => {
            inspection.entries = named.entries;
            inspection.proven_layout = Some(named.layout);
            inspection.check_complete(names);
        }
        (Err(e), None) => {
            inspection.alternatives = e.alternatives;
            inspection.problem = Some(e.message);
        }
    }
    inspection
}

/// Functions whose demangled name is a closure's (`…::{{closure}}`, or `…::{closure#0}` in
/// the v0 mangling), and the functions of crate `krate` (the tests themselves), by
/// address, hash dropped.
fn closures_of<'data>(file: &impl object::Object<'data>, krate: &str) -> HashMap<u64, String> {
    let mut closures = HashMap::new();
    for s in file.symbols() {
        if s.kind() != SymbolKind::Text || s.size() == 0 {
            continue;
        }
        let Ok(raw) = s.name() else { continue };
        let demangled = addr2line::demangle_auto(raw.into(), None);
        let name = crate::execution::symbolize::strip_hash(&demangled);
        let own_crate = name
            .strip_prefix(krate)
            .is_some_and(|rest| rest.starts_with("::"));
        if name.ends_with("::{{closure}}") || name.ends_with("::{closure#0}") || own_crate {
            closures.insert(s.address(), name.to_owned());
        }
    }
    closures
}

impl Inspection {
    /// Takes `known`, a layout another executable of the same build proved, when it is one
    /// of the several this executable left possible; it never overrides a single one.
    pub fn settle(&mut self, known: Layout, names: &[&str]) {
        let Some(at) = self.alternatives.iter().position(|(l, _)| *l == known) else {
            return;
        };
        let (_, entries) = self.alternatives.swap_remove(at);
        self.alternatives.clear();
        self.entries = entries;
        self.problem = None;
        self.check_complete(names);
    }

    fn check_complete(&mut self, names: &[&str]) {
        if let Some(missing) = names.iter().find(|n| !self.entries.contains_key(**n)) {
            self.problem = Some(format!(
                "`{missing}` has no entry in libtest's table of tests"
            ));
        }
    }
}

/// An executable whose pointers cannot be read: neither relative relocations nor (at a fixed
/// address) a writable word pointing into its image.
#[derive(Debug, thiserror::Error)]
#[error("the executable has no pointer table to read (no relative relocations)")]
struct NoPointerTable;

fn image_of<'a>(file: &ElfFile64<'a, LE>, data: &'a [u8]) -> Result<Image<'a>, NoPointerTable> {
    let endian = file.endian();
    let header = file.elf_header();
    let segments: Vec<Segment> = file
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| Segment {
            vaddr: ph.p_vaddr(endian),
            memsz: ph.p_memsz(endian),
            offset: ph.p_offset(endian),
            filesz: ph.p_filesz(endian),
            executable: (ph.p_flags(endian) & elf::PF_X).0 != 0,
        })
        .collect();
    let mut image = Image {
        data,
        segments,
        ..Image::default()
    };
    let sections = file.elf_section_table();
    if header.e_type(endian) == elf::ET_DYN {
        for section in sections.iter() {
            match section.sh_type(endian) {
                elf::SHT_RELA => {
                    let Ok(Some((relas, _))) = section.rela(endian, data) else {
                        continue;
                    };
                    for r in relas {
                        if r.r_type(endian, false) == elf::R_X86_64_RELATIVE {
                            image
                                .pointers
                                .insert(r.r_offset(endian), r.r_addend(endian) as u64);
                        }
                    }
                }
                elf::SHT_RELR => {
                    let Ok(words) = section.data_as_array::<object::U64<LE>, _>(endian, data)
                    else {
                        continue;
                    };
                    let locations = relr_locations(words.iter().map(|w| w.get(endian)));
                    for at in locations {
                        // RELR keeps the addend in place.
                        if let Some(target) = image.word(at) {
                            image.pointers.insert(at, target);
                        }
                    }
                }
                _ => {}
            }
        }
    } else {
        // A fixed-address executable stores absolute pointers: any aligned word of a
        // writable segment that lands inside the image.
        let writable: Vec<Segment> = file
            .elf_program_headers()
            .iter()
            .filter(|ph| {
                ph.p_type(endian) == elf::PT_LOAD && (ph.p_flags(endian) & elf::PF_W).0 != 0
            })
            .map(|ph| Segment {
                vaddr: ph.p_vaddr(endian),
                memsz: ph.p_memsz(endian),
                offset: ph.p_offset(endian),
                filesz: ph.p_filesz(endian),
                executable: false,
            })
            .collect();
        for seg in writable {
            let mut at = (seg.vaddr + 7) & !7;
            while at + 8 <= seg.vaddr + seg.filesz {
                if let Some(v) = image.word(at) {
                    if image.segment_of(v).is_some() {
                        image.pointers.insert(at, v);
                    }
                }
                at += 8;
            }
        }
    }
    if image.pointers.is_empty() {
        return Err(NoPointerTable);
    }
    for s in file.symbols().chain(file.dynamic_symbols()) {
        if s.kind() == SymbolKind::Text && s.size() > 0 {
            image.functions.entry(s.address()).or_insert(s.size());
        }
    }
    if let Some(eh) = file.section_by_name(".eh_frame") {
        if let Ok(bytes) = eh.data() {
            for (start, len) in fde_ranges(bytes, eh.address()) {
                image.functions.entry(start).or_insert(len);
            }
        }
    }
    Ok(image)
}

/// Decodes a `SHT_RELR` table into the locations it relocates.
fn relr_locations(words: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut next = 0u64;
    for w in words {
        if w & 1 == 0 {
            out.push(w);
            next = w + 8;
        } else {
            let mut bits = w >> 1;
            let mut at = next;
            while bits != 0 {
                if bits & 1 != 0 {
                    out.push(at);
                }
                bits >>= 1;
                at += 8;
            }
            next += 63 * 8;
        }
    }
    out
}

/// `(start, length)` of every function the unwind table describes.
fn fde_ranges(bytes: &[u8], address: u64) -> Vec<(u64, u64)> {
    use gimli::UnwindSection;
    let eh = gimli::EhFrame::new(bytes, gimli::LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(address);
    let mut entries = eh.entries(&bases);
    let mut out = Vec::new();
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) {
                out.push((fde.initial_address(), fde.len()));
            }
        }
    }
    out
}

impl Image<'_> {
    fn segment_of(&self, vaddr: u64) -> Option<&Segment> {
        self.segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.memsz)
    }

    /// The bytes at `vaddr`, when all `len` of them are in the file.
    fn bytes(&self, vaddr: u64, len: u64) -> Option<&[u8]> {
        let seg = self.segment_of(vaddr)?;
        let rel = vaddr - seg.vaddr;
        if rel.checked_add(len)? > seg.filesz {
            return None;
        }
        let start = usize::try_from(seg.offset + rel).ok()?;
        self.data
            .get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The 8-byte little-endian word at `vaddr` as stored in the file.
    fn word(&self, vaddr: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(vaddr, 8)?.try_into().ok()?))
    }

    /// The file offset of an address.
    fn file_offset(&self, vaddr: u64) -> Option<u64> {
        let seg = self.segment_of(vaddr)?;
        Some(vaddr - seg.vaddr + seg.offset)
    }

    /// Whether `target` is the first byte of a function: code, and a known function start.
    fn is_function_start(&self, target: u64) -> bool {
        self.segment_of(target).is_some_and(|s| s.executable)
            && self.functions.contains_key(&target)
    }
}

/// The furthest a struct's name field may lie from the struct's start.
const MAX_NAME_OFFSET: u64 = 512;

/// Where a test's struct lies: from the nearest pointed-to address at or below its name
/// field, up to the next pointed-to address.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    name_field: u64,
    start: u64,
    end: u64,
}

/// The entry points found, and the layout the image proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPoints {
    /// Entry points by test name.
    pub entries: HashMap<String, Entry>,
    /// The layout.
    pub layout: Layout,
}

/// Why no entry point could be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotFound {
    /// In words.
    pub message: String,
    /// When several function offsets were possible, the entry points under each.
    pub alternatives: Vec<(Layout, HashMap<String, Entry>)>,
}

fn not_found(message: impl Into<String>) -> NotFound {
    NotFound {
        message: message.into(),
        alternatives: Vec::new(),
    }
}

/// Name fields: for each name, every place that holds a pointer to its bytes followed by
/// their length.
fn name_fields<'n>(image: &Image, names: &[&'n str]) -> HashMap<&'n str, Vec<u64>> {
    let wanted: HashMap<&[u8], &str> = names.iter().map(|n| (n.as_bytes(), *n)).collect();
    let lengths: BTreeSet<u64> = names.iter().map(|n| n.len() as u64).collect();
    let mut fields: HashMap<&str, Vec<u64>> = HashMap::new();
    for (&at, &target) in &image.pointers {
        let Some(len) = image.word(at + 8) else {
            continue;
        };
        if !lengths.contains(&len) {
            continue;
        }
        if let Some(name) = image.bytes(target, len).and_then(|b| wanted.get(b)) {
            fields.entry(name).or_default().push(at);
        }
    }
    fields
}

/// The structs a name's fields could belong to (see [`Candidate`]); `targets` is every
/// pointed-to address.
fn candidates(
    image: &Image,
    targets: &BTreeSet<u64>,
    fields: &HashMap<&str, Vec<u64>>,
    name: &str,
) -> Vec<Candidate> {
    fields
        .get(name)
        .into_iter()
        .flatten()
        .filter_map(|&field| {
            let start = *targets
                .range(field.saturating_sub(MAX_NAME_OFFSET)..=field)
                .next_back()?;
            let seg = image.segment_of(start)?;
            let end = targets
                .range(start + 1..)
                .next()
                .copied()
                .unwrap_or(u64::MAX)
                .min(seg.vaddr + seg.memsz);
            Some(Candidate {
                name_field: field,
                start,
                end,
            })
        })
        .collect()
}

/// Finds every named test's entry point; see the module documentation for the rules.
pub fn find_entries(image: &Image, names: &[&str]) -> Result<EntryPoints, NotFound> {
    if names.is_empty() {
        return Err(not_found("no tests to look up"));
    }
    let targets: BTreeSet<u64> = image.pointers.values().copied().collect();
    let fields = name_fields(image, names);
    let candidates = |name: &str| candidates(image, &targets, &fields, name);

    // The layout, from the tests whose name field is unambiguous.
    let sure: Vec<Candidate> = names
        .iter()
        .filter_map(|n| match candidates(n).as_slice() {
            [one] => Some(*one),
            _ => None,
        })
        .collect();
    if sure.is_empty() {
        return Err(not_found(
            "libtest's table of tests was not found in the executable",
        ));
    }
    let name_offset = sure[0].name_field - sure[0].start;
    if sure.iter().any(|c| c.name_field - c.start != name_offset) {
        return Err(not_found(
            "libtest's table of tests has no consistent layout in the executable",
        ));
    }
    let size = sure.iter().map(|c| c.end - c.start).min().unwrap_or(0);
    let entry_at = |c: &Candidate, offset: u64| -> Option<u64> {
        let target = *image.pointers.get(&(c.start + offset))?;
        image.is_function_start(target).then_some(target)
    };
    let offsets: Vec<u64> = (0..size)
        .step_by(8)
        .filter(|&off| sure.iter().all(|c| entry_at(c, off).is_some()))
        .collect();
    let entries_for = |fn_offset: u64| -> HashMap<String, Entry> {
        let mut entries = HashMap::new();
        for name in names {
            let fitting: Vec<u64> = candidates(name)
                .iter()
                .filter(|c| c.name_field - c.start == name_offset && c.end - c.start > fn_offset)
                .filter_map(|c| entry_at(c, fn_offset))
                .collect();
            if let [address] = fitting.as_slice() {
                let size = image.functions.get(address).copied().unwrap_or(0);
                if let Some(start) = image.file_offset(*address) {
                    entries.insert(
                        (*name).to_string(),
                        Entry {
                            address: *address,
                            file_range: (start, start + size),
                        },
                    );
                }
            }
        }
        entries
    };
    let layout = |function| Layout {
        name: name_offset,
        function,
    };
    match offsets.as_slice() {
        [one] => Ok(EntryPoints {
            entries: entries_for(*one),
            layout: layout(*one),
        }),
        [] => Err(not_found(
            "no function pointer at the same place in every test of libtest's table",
        )),
        many => Err(NotFound {
            message: format!(
                "{} places in libtest's table of tests could hold the test function; none is certain",
                many.len()
            ),
            alternatives: many
                .iter()
                .map(|&off| (layout(off), entries_for(off)))
                .collect(),
        }),
    }
}

/// The layout proven by symbols (see the module documentation): for every test, the
/// offsets at which one of its candidate structs points to a function that is, or directly
/// calls, one named `<krate>::<test>::{{closure}}`. One (name, function) offset pair over all of them is the
/// layout; each test's entry is then the closure its struct points to there, when exactly
/// one of its structs does. None when no test's closure is found, or the offsets disagree.
pub fn find_entries_by_symbols(
    image: &Image,
    closures: &HashMap<u64, String>,
    names: &[&str],
    krate: &str,
) -> Option<EntryPoints> {
    if closures.is_empty() {
        return None;
    }
    let targets: BTreeSet<u64> = image.pointers.values().copied().collect();
    let fields = name_fields(image, names);
    let is_own_closure = |name: &str, function: &str| {
        function
            .strip_prefix(krate)
            .and_then(|rest| rest.strip_prefix("::"))
            .and_then(|rest| rest.strip_prefix(name))
            .is_some_and(|rest| rest == "::{{closure}}" || rest == "::{closure#0}")
    };
    // A test may hold closures of its own besides the one libtest keeps (`Once::call_once`
    // with a closure, say), reached through another static's pointer near its struct. The
    // one libtest keeps calls the test's function itself (`|| assert_test_result(test())`),
    // so a layout proven by such closures wins over one proven by any closure of the name.
    let proofs_by = |strict: bool| {
        // (layout, test) -> the closures its structs point to at that layout.
        let mut proofs: BTreeMap<Layout, HashMap<&str, BTreeSet<u64>>> = BTreeMap::new();
        for name in names {
            let test_function = format!("{krate}::{name}");
            let calls_test = |f: u64| {
                direct_callees(image, f)
                    .any(|g| closures.get(&g).is_some_and(|n| *n == test_function))
            };
            let own = |f: u64| {
                closures.get(&f).is_some_and(|n| is_own_closure(name, n))
                    && (!strict || calls_test(f))
            };
            for c in candidates(image, &targets, &fields, name) {
                let span = (c.end - c.start).min(MAX_STRUCT_SIZE);
                for offset in (0..span).step_by(8) {
                    let Some(&target) = image.pointers.get(&(c.start + offset)) else {
                        continue;
                    };
                    if own(target) || direct_callees(image, target).any(own) {
                        let layout = Layout {
                            name: c.name_field - c.start,
                            function: offset,
                        };
                        let by_test = proofs.entry(layout).or_default();
                        by_test.entry(*name).or_default().insert(target);
                    }
                }
            }
        }
        proofs
    };
    fn only<T>(proofs: BTreeMap<Layout, T>) -> Option<(Layout, T)> {
        let mut layouts = proofs.into_iter();
        let one = layouts.next()?;
        layouts.next().is_none().then_some(one)
    }
    let (layout, by_test) = only(proofs_by(true)).or_else(|| only(proofs_by(false)))?;
    let entries = by_test
        .into_iter()
        .filter_map(|(name, found)| {
            let [address] = *found.iter().copied().collect::<Vec<_>>().as_slice() else {
                return None;
            };
            let size = image.functions.get(&address).copied().unwrap_or(0);
            let start = image.file_offset(address)?;
            Some((
                name.to_string(),
                Entry {
                    address,
                    file_range: (start, start + size),
                },
            ))
        })
        .collect();
    Some(EntryPoints { entries, layout })
}

/// The furthest a struct's function pointer may lie from the struct's start, when it is
/// found by its name (libtest's struct is a few hundred bytes at most).
const MAX_STRUCT_SIZE: u64 = 1024;

/// The targets of the x86-64 direct calls and jumps (`e8`/`e9` with a 32-bit displacement)
/// in a short function (a shim): every byte is tried as an opcode, which is harmless here,
/// since a target only counts when it is exactly the start of the test's own closure.
fn direct_callees<'i>(image: &'i Image, function: u64) -> impl Iterator<Item = u64> + 'i {
    let size = image.functions.get(&function).copied().unwrap_or(0);
    let code = (size <= MAX_SHIM_SIZE)
        .then(|| image.bytes(function, size))
        .flatten()
        .unwrap_or(&[]);
    (0..code.len().saturating_sub(4)).filter_map(move |i| {
        if code[i] != 0xe8 && code[i] != 0xe9 {
            return None;
        }
        let rel = i32::from_le_bytes(code[i + 1..i + 5].try_into().ok()?);
        let next = function.checked_add(i as u64 + 5)?;
        Some(next.wrapping_add_signed(i64::from(rel)))
    })
}

/// The largest function read for its calls: a `call_once` shim is a few dozen bytes.
const MAX_SHIM_SIZE: u64 = 256;

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made image: rodata with names at 0x1000, code at 0x2000, data at 0x3000.
    struct Builder {
        data: Vec<u8>,
        image_pointers: BTreeMap<u64, u64>,
        functions: BTreeMap<u64, u64>,
    }

    const RODATA: u64 = 0x1000;
    const CODE: u64 = 0x2000;
    const DATA: u64 = 0x3000;

    impl Builder {
        fn new() -> Self {
            Builder {
                data: vec![0; 0x4000],
                image_pointers: BTreeMap::new(),
                functions: BTreeMap::new(),
            }
        }
        fn bytes(&mut self, at: u64, b: &[u8]) {
            self.data[at as usize..at as usize + b.len()].copy_from_slice(b);
        }
        fn word(&mut self, at: u64, v: u64) {
            self.bytes(at, &v.to_le_bytes());
        }
        fn pointer(&mut self, at: u64, target: u64) {
            self.image_pointers.insert(at, target);
        }
        fn function(&mut self, at: u64) {
            self.functions.insert(at, 0x20);
        }
        /// A test struct at `start` in libtest's shape: [should_panic 3 words][name tag]
        /// [name ptr][name len][ignore msg 2][source ptr][source len] … [tag][fn] ….
        fn test_struct(&mut self, start: u64, name_at: u64, name: &str, func: u64) {
            self.bytes(name_at, name.as_bytes());
            self.word(start + 24, 0x8000_0000_0000_0001);
            self.pointer(start + 32, name_at);
            self.word(start + 40, name.len() as u64);
            self.pointer(start + 56, RODATA + 0xf00); // source file
            self.word(start + 64, 10);
            self.pointer(start + 136, func);
            self.function(func);
        }
        fn image(&self) -> Image<'_> {
            let seg = |vaddr: u64, executable| Segment {
                vaddr,
                memsz: 0x1000,
                offset: vaddr,
                filesz: 0x1000,
                executable,
            };
            Image {
                data: &self.data,
                segments: vec![seg(RODATA, false), seg(CODE, true), seg(DATA, false)],
                pointers: self.image_pointers.clone(),
                functions: self.functions.clone(),
            }
        }
    }

    const STRIDE: u64 = 152;

    /// Three adjacent structs and the table of pointers to them that `main` passes on.
    fn three_tests() -> Builder {
        let mut b = Builder::new();
        let names = ["tests::a", "tests::b", "tests::c"];
        for (i, name) in names.iter().enumerate() {
            let start = DATA + i as u64 * STRIDE;
            b.test_struct(
                start,
                RODATA + 0x100 * i as u64,
                name,
                CODE + 0x100 * i as u64,
            );
            b.pointer(DATA + 0x800 + 8 * i as u64, start);
        }
        b
    }

    #[test]
    fn each_test_gets_the_function_of_its_own_struct() {
        let b = three_tests();
        let found = find_entries(&b.image(), &["tests::a", "tests::b", "tests::c"]).unwrap();
        let entries = &found.entries;
        assert_eq!(entries["tests::a"].address, CODE);
        assert_eq!(entries["tests::b"].address, CODE + 0x100);
        assert_eq!(entries["tests::c"].address, CODE + 0x200);
        assert_eq!(entries["tests::b"].file_range, (CODE + 0x100, CODE + 0x120));
        assert_eq!(
            found.layout,
            Layout {
                name: 32,
                function: 136
            }
        );
    }

    /// A short function at `at` that calls `target` (x86-64 `call rel32`).
    fn calls(b: &mut Builder, at: u64, target: u64) {
        let rel = (target as i64 - (at as i64 + 5)) as i32;
        b.bytes(at, &[0xe8]);
        b.bytes(at + 1, &rel.to_le_bytes());
        b.function(at);
    }

    #[test]
    fn a_lone_test_is_found_by_the_closure_that_calls_it_not_by_another_of_its_closures() {
        // tracing-subscriber 0.1.4's repro: a test alone in its binary that runs a
        // `Once::call_once` closure. Both closures are `leak::…::{{closure}}`, and a static
        // beside the test's struct points to the shim of the second one.
        let mut b = Builder::new();
        let (shim, closure, test_fn) = (CODE, CODE + 0x100, CODE + 0x200);
        let (once_shim, once_closure) = (CODE + 0x300, CODE + 0x400);
        b.test_struct(DATA, RODATA, "lone", shim);
        b.pointer(DATA + 0x800, DATA);
        calls(&mut b, shim, closure);
        calls(&mut b, closure, test_fn);
        b.function(test_fn);
        b.pointer(DATA + 264, once_shim);
        calls(&mut b, once_shim, once_closure);
        b.function(once_closure);
        let names: HashMap<u64, String> = [
            (closure, "k::lone::{{closure}}"),
            (once_closure, "k::lone::{{closure}}"),
            (test_fn, "k::lone"),
        ]
        .into_iter()
        .map(|(a, n)| (a, n.to_string()))
        .collect();
        let found = find_entries_by_symbols(&b.image(), &names, &["lone"], "k")
            .expect("the closure that calls the test settles it");
        assert_eq!(found.layout.function, 136);
        assert_eq!(found.entries["lone"].address, shim);
    }

    #[test]
    fn a_name_that_is_a_prefix_of_another_is_not_confused() {
        let mut b = three_tests();
        // `tests::a` stored again as the start of a longer string, with that string's length.
        b.bytes(RODATA + 0x400, b"tests::ab");
        b.pointer(DATA + 0x900, RODATA + 0x400);
        b.word(DATA + 0x908, 9);
        let entries = find_entries(&b.image(), &["tests::a"]).unwrap().entries;
        assert_eq!(entries["tests::a"].address, CODE);
    }

    #[test]
    fn a_pointer_that_is_not_a_function_start_is_never_taken() {
        let mut b = three_tests();
        // A second code pointer inside every struct, but into the middle of a function.
        for i in 0..3 {
            b.pointer(DATA + i * STRIDE + 8, CODE + 0x100 * i + 4);
        }
        let entries = find_entries(&b.image(), &["tests::a", "tests::b", "tests::c"])
            .unwrap()
            .entries;
        assert_eq!(entries["tests::c"].address, CODE + 0x200);
    }

    #[test]
    fn two_places_that_could_hold_the_function_give_no_entry_at_all() {
        let mut b = three_tests();
        // Another function pointer at the same offset in every struct: which one libtest
        // calls cannot be told, so none is used.
        for i in 0..3 {
            b.pointer(DATA + i * STRIDE + 16, CODE + 0x800 + 0x10 * i);
            b.function(CODE + 0x800 + 0x10 * i);
        }
        let err = find_entries(&b.image(), &["tests::a", "tests::b", "tests::c"]).unwrap_err();
        assert!(err.message.contains("none is certain"), "{err:?}");
        assert_eq!(err.alternatives.len(), 2);
    }

    #[test]
    fn a_layout_proven_elsewhere_settles_a_lone_test_but_never_overrides() {
        // One test, followed by unreferenced data holding another function pointer: from
        // this binary alone, two offsets could hold the test's function.
        let mut b = Builder::new();
        b.test_struct(DATA, RODATA, "lone", CODE);
        b.pointer(DATA + 0x800, DATA);
        b.pointer(DATA + STRIDE + 8, CODE + 0x300);
        b.function(CODE + 0x300);
        let alone = find_entries(&b.image(), &["lone"]).unwrap_err();
        assert_eq!(alone.alternatives.len(), 2, "{alone:?}");
        let unsettled = Inspection {
            alternatives: alone.alternatives,
            problem: Some(alone.message),
            ..Inspection::default()
        };
        let known = Layout {
            name: 32,
            function: 136,
        };
        let mut settled = unsettled.clone();
        settled.settle(known, &["lone"]);
        assert_eq!(settled.problem, None);
        assert_eq!(settled.entries["lone"].address, CODE);
        assert_eq!(settled.proven_layout, None);
        // A known layout that is not among the possible offsets decides nothing.
        let other = Layout {
            name: 32,
            function: 64,
        };
        let mut still = unsettled.clone();
        still.settle(other, &["lone"]);
        assert_eq!(still, unsettled);
        // With one possible offset, the image's own answer stands.
        let three = three_tests();
        let found = find_entries(&three.image(), &["tests::a"]).unwrap();
        assert_eq!(found.layout.function, 136);
        let mut proven = Inspection {
            entries: found.entries.clone(),
            proven_layout: Some(found.layout),
            ..Inspection::default()
        };
        proven.settle(other, &["tests::a"]);
        assert_eq!(proven.entries, found.entries);
    }

    #[test]
    fn a_neighbour_outside_the_struct_does_not_count() {
        // One test: just past its struct lies other pointed-to data holding a function
        // pointer. The struct ends where that data starts, so it is not a candidate.
        let mut b = Builder::new();
        b.test_struct(DATA, RODATA, "tests::only", CODE);
        b.pointer(DATA + 0x800, DATA);
        b.pointer(DATA + STRIDE + 8, CODE + 0x300);
        b.function(CODE + 0x300);
        b.pointer(DATA + 0x808, DATA + STRIDE);
        let entries = find_entries(&b.image(), &["tests::only"]).unwrap().entries;
        assert_eq!(entries["tests::only"].address, CODE);
    }

    #[test]
    fn no_table_is_an_error_not_a_guess() {
        let b = Builder::new();
        assert!(find_entries(&b.image(), &["tests::a"]).is_err());
    }

    #[test]
    fn relr_tables_decode_addresses_and_bitmaps() {
        // An address, then a bitmap relocating the 1st and 3rd words after it.
        let got = relr_locations([0x1000u64, (0b101 << 1) | 1].into_iter());
        assert_eq!(got, vec![0x1000, 0x1008, 0x1018]);
    }

    #[test]
    fn this_test_binary_is_readable_as_an_image() {
        // The unit-test binary of this crate is itself a libtest binary: its own entry for
        // this very test must be found and lie in code.
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        // libtest names a test by its module path without the crate's name.
        let here = module_path!().split_once("::").unwrap().1;
        let me = &format!("{here}::this_test_binary_is_readable_as_an_image");
        let other = &format!("{here}::no_table_is_an_error_not_a_guess");
        let found = inspect(&data, &[me, other], "cargo_leakcheck");
        assert_eq!(found.problem, None);
        let entry = found.entries[me];
        assert!(entry.file_range.1 > entry.file_range.0);
        assert!(!found.build_id.is_empty());
    }

    #[test]
    fn symbols_prove_the_layout_of_a_lone_test_and_agree_with_the_table() {
        // One test alone, as a binary of one test or `--test NAME` leaves it: the closure
        // its struct points to, found by its name, gives the same layout and entry as the
        // table read with more tests.
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let file = ElfFile64::<LE>::parse(&*data).unwrap();
        let image = image_of(&file, &data).unwrap();
        let here = module_path!().split_once("::").unwrap().1;
        let me =
            &format!("{here}::symbols_prove_the_layout_of_a_lone_test_and_agree_with_the_table");
        let other = &format!("{here}::no_table_is_an_error_not_a_guess");
        let by_table = find_entries(&image, &[me, other]).unwrap();
        let closures = closures_of(&file, "cargo_leakcheck");
        let named = find_entries_by_symbols(&image, &closures, &[me], "cargo_leakcheck")
            .expect("this debug test binary has its closures' symbols");
        assert_eq!(named.layout, by_table.layout);
        assert_eq!(named.entries[me], by_table.entries[me]);
        // Another crate's name proves nothing: the closure must be the test's own.
        assert!(find_entries_by_symbols(&image, &closures, &[me], "other_crate").is_none());
    }
}
