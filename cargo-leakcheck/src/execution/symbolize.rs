//! In-process symbolization of heap-dump stack addresses.
//!
//! A heap dump records runtime return addresses; the dump reader turns each into an
//! `(object path, file offset)` pair with the dump's `MAPPED_LIBRARIES`. This module turns such
//! a pair into source frames (function, file, line), innermost inlined frame first, using the
//! DWARF of the object (through `addr2line`) and its symbol table as a fallback.
//!
//! A library whose debug info is only in a separate debug file (a distribution's `-dbg` or
//! `-dbgsym` package, found by build id) is named from that file's symbol table, not its
//! DWARF: its frames (glibc's `__libc_start_call_main`, say) need a name, not the line of a
//! distribution source tree that is rarely on the machine, and decompressing that DWARF was
//! most of the time of a `cargo leakcheck diff`.
//!
//! File offsets rather than runtime addresses are the input because they are stable across
//! processes (ASLR moves the mappings, not the bytes in the file), so frames computed once can be
//! shared by every dump of the same binary.

use crate::evidence::symbols::{is_runtime_object, CodeSymbols, Frame};
use crate::execution::doctests::sources::{map_frames, Anchor, SourceMap};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::read::ReadCache;
use object::FileKind;

/// A `PT_LOAD` segment: the file range `[file_start, file_end)` is mapped at `vaddr`.
#[derive(Clone, Copy, Debug)]
struct LoadSegment {
    file_start: u64,
    file_end: u64,
    vaddr: u64,
    executable: bool,
}

/// Translates a file offset into the address DWARF and the symbol table use (the SVMA).
///
/// The two are not the same number: rust-lld places the text segment at
/// `p_vaddr = p_offset + 0x1000`, so treating the offset as the address lands in the wrong
/// function.
fn file_offset_to_svma(segments: &[LoadSegment], offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| s.file_start <= offset && offset < s.file_end)
        .map(|s| offset - s.file_start + s.vaddr)
}

/// What the program headers tell us about an object.
struct ElfLayout {
    segments: Vec<LoadSegment>,
    build_id: Option<Vec<u8>>,
}

/// Why an object's program headers could not be read.
#[derive(Debug, thiserror::Error)]
enum LayoutError {
    #[error("{0}")]
    Open(#[from] std::io::Error),
    #[error("{0}")]
    Parse(#[from] object::read::Error),
    #[error("not an ELF file ({0:?})")]
    NotElf(FileKind),
}

/// Reads the program headers only; a [`ReadCache`] fetches just the bytes parsed, so this stays
/// cheap even for large debug binaries (the `Loader` maps the whole file separately).
fn read_layout(path: &Path) -> Result<ElfLayout, LayoutError> {
    let file = File::open(path)?;
    layout_in(&ReadCache::new(file))
}

fn layout_in<'a, R: object::ReadRef<'a>>(data: R) -> Result<ElfLayout, LayoutError> {
    match FileKind::parse(data)? {
        FileKind::Elf64 => layout_of::<elf::FileHeader64<object::Endianness>, R>(data),
        FileKind::Elf32 => layout_of::<elf::FileHeader32<object::Endianness>, R>(data),
        other => Err(LayoutError::NotElf(other)),
    }
}

/// Why the start of a file gave no code offsets.
#[derive(Debug, thiserror::Error)]
#[error("{}", match .0 {
    LayoutError::NotElf(_) => .0.to_string(),
    other => format!("not an ELF file ({other})"),
})]
pub(crate) struct NoCodeOffsets(LayoutError);

/// File offsets (page-aligned) of the executable segments of the ELF file whose first bytes
/// (enough for its program headers) are `data`.
pub(crate) fn code_offsets(data: &[u8]) -> Result<Vec<u64>, NoCodeOffsets> {
    const PAGE: u64 = 4096;
    let layout = layout_in(data).map_err(NoCodeOffsets)?;
    Ok(layout
        .segments
        .iter()
        .filter(|s| s.executable)
        .map(|s| s.file_start / PAGE * PAGE)
        .collect())
}

fn layout_of<'a, Elf: FileHeader<Endian = object::Endianness>, R: object::ReadRef<'a>>(
    data: R,
) -> Result<ElfLayout, LayoutError> {
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let headers = header.program_headers(endian, data)?;
    let mut layout = ElfLayout {
        segments: Vec::new(),
        build_id: None,
    };
    for ph in headers {
        if ph.p_type(endian) == elf::PT_LOAD {
            let (file_start, size) = ph.file_range(endian);
            layout.segments.push(LoadSegment {
                file_start,
                file_end: file_start.saturating_add(size),
                vaddr: ph.p_vaddr(endian).into(),
                executable: (ph.p_flags(endian) & elf::PF_X).0 != 0,
            });
        } else if layout.build_id.is_none() {
            // A broken note segment only costs us the separate debug file lookup.
            if let Ok(Some(mut notes)) = ph.notes(endian, data) {
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == elf::ELF_NOTE_GNU
                        && note.n_type(endian) == elf::NT_GNU_BUILD_ID
                    {
                        layout.build_id = Some(note.desc().to_vec());
                        break;
                    }
                }
            }
        }
    }
    Ok(layout)
}

/// Where distributions install separate debug files keyed by build id (Debian's `libc6-dbg`,
/// `*-dbgsym` packages, Fedora's `debuginfo`).
fn build_id_debug_path(build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    Some(PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{first:02x}/{rest}.debug"
    )))
}

fn has_dwarf(loader: &addr2line::Loader) -> bool {
    loader.get_section_range(b".debug_info").is_some()
}

/// Paths in `/proc/pid/maps` that name no file: nothing to open and nothing worth a warning.
fn is_pseudo_path(path: &str) -> bool {
    path.is_empty() || path.starts_with('[') || path.starts_with("anon_inode:")
}

/// Drops a trailing legacy Rust hash (`::h` + 16 hex digits).
///
/// addr2line's demangling already uses the alternate format that hides it, but names that were
/// never demangled (a DWARF `DW_AT_name`, or a symbol the demangler rejected) can still carry
/// one, and a hash in a name would split identical stacks of two builds.
pub(crate) fn strip_hash(name: &str) -> &str {
    if let Some((head, hash)) = name.rsplit_once("::h") {
        if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return head;
        }
    }
    name
}

fn demangle_symbol(name: &str) -> String {
    let demangled = addr2line::demangle_auto(name.into(), None);
    strip_hash(&demangled).to_owned()
}

/// Per-object state, created the first time the object is seen.
struct ObjectEntry {
    /// `None` when the object could not be opened or parsed: every address is unresolved.
    backend: Option<Backend>,
    memo: HashMap<u64, Arc<[Frame]>>,
}

struct Backend {
    segments: Vec<LoadSegment>,
    lookup: Lookup,
}

/// Where an object's frames come from.
enum Lookup {
    /// The object's own DWARF and symbol table (or just the table, when it has no DWARF).
    Dwarf(Box<addr2line::Loader>),
    /// The symbol table of its separate debug file (same addresses, fuller than the object's).
    Symbols(SymbolTable),
}

/// Function symbols by address, names as stored (demangled when looked up).
struct SymbolTable {
    /// (address, name), sorted by address.
    symbols: Vec<(u64, String)>,
}

/// A symbol an ELF file defines.
pub(crate) struct ElfSymbol {
    pub kind: object::SymbolKind,
    /// Its address (for a thread-local, its offset in the object's thread-local block).
    pub address: u64,
    pub size: u64,
    /// As stored, without a symbol version (`memcpy@@GLIBC_2.14` is `memcpy`).
    pub name: String,
}

/// The symbols the ELF file at `path` defines, from its symbol table and its dynamic
/// symbols, in no order; None when it cannot be read.
pub(crate) fn elf_symbols(path: &Path) -> Option<Vec<ElfSymbol>> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let symbols = file
        .symbols()
        .chain(file.dynamic_symbols())
        // `is_definition` is false for every thread-local, so: not undefined. A
        // thread-local's offset may be 0; any other address of 0 is no place.
        .filter(|s| !s.is_undefined() && (s.kind() == SymbolKind::Tls || s.address() != 0))
        .filter_map(|s| {
            Some(ElfSymbol {
                kind: s.kind(),
                address: s.address(),
                size: s.size(),
                name: s.name().ok()?.split('@').next()?.to_owned(),
            })
        })
        .collect();
    Some(symbols)
}

impl SymbolTable {
    /// The function symbols of the ELF file at `path`; None when it cannot be read.
    fn read(path: &Path) -> Option<SymbolTable> {
        let mut symbols: Vec<(u64, String)> = elf_symbols(path)?
            .into_iter()
            .filter(|s| s.kind == object::SymbolKind::Text)
            .map(|s| (s.address, s.name))
            .collect();
        symbols.sort();
        symbols.dedup_by_key(|s| s.0);
        (!symbols.is_empty()).then_some(SymbolTable { symbols })
    }

    /// The symbol at or nearest below `svma`.
    fn find(&self, svma: u64) -> Option<&str> {
        let after = self.symbols.partition_point(|s| s.0 <= svma);
        after.checked_sub(1).map(|i| self.symbols[i].1.as_str())
    }
}

/// Whether `path` is a library the system or the Rust toolchain installed (libc, libgcc_s,
/// a toolchain's `libstd-*.so`), not one the user's build produced.
fn is_system_object(path: &str) -> bool {
    const SYSTEM: [&str; 6] = [
        "/usr/",
        "/lib/",
        "/lib32/",
        "/lib64/",
        "/nix/store/",
        "/snap/",
    ];
    SYSTEM.iter().any(|dir| path.starts_with(dir)) || path.contains("/.rustup/toolchains/")
}

impl Backend {
    fn open(path: &str, warnings: &mut Vec<String>) -> Option<Self> {
        if is_pseudo_path(path) {
            return None;
        }
        let cannot_open = |why: &dyn std::fmt::Display| {
            // /proc/pid/maps marks files unlinked after mapping; the error alone would not say.
            let hint = if path.ends_with(" (deleted)") {
                " (the file was deleted or replaced after it was mapped)"
            } else {
                ""
            };
            format!("cannot open `{path}`: {why}{hint}")
        };
        let layout = match read_layout(Path::new(path)) {
            Ok(layout) => layout,
            Err(e) => {
                warnings.push(cannot_open(&e));
                return None;
            }
        };
        let loader = match addr2line::Loader::new(path) {
            Ok(loader) => loader,
            Err(e) => {
                warnings.push(cannot_open(&e));
                return None;
            }
        };
        if has_dwarf(&loader) {
            return Some(Backend {
                segments: layout.segments,
                lookup: Lookup::Dwarf(Box::new(loader)),
            });
        }
        let debug_path = layout.build_id.as_deref().and_then(build_id_debug_path);
        if let Some(table) = debug_path
            .as_deref()
            .filter(|p| p.is_file())
            .and_then(SymbolTable::read)
        {
            return Some(Backend {
                segments: layout.segments,
                lookup: Lookup::Symbols(table),
            });
        }
        let looked = match &debug_path {
            Some(p) => format!("no separate debug file at `{}`", p.display()),
            None => "no build id to find a separate debug file".to_owned(),
        };
        // The runtime carries no debug info on purpose: its frames are the allocator's and are
        // trimmed from every stack, so names are all it needs. A system library or the
        // toolchain's own is not the user's to rebuild: a note about it could not be acted on.
        if !is_runtime_object(path) && !is_system_object(path) {
            warnings.push(format!(
                "no debug info in `{path}`: only symbol-table names, without file and line ({looked})"
            ));
        }
        Some(Backend {
            segments: layout.segments,
            lookup: Lookup::Dwarf(Box::new(loader)),
        })
    }

    /// Frames at a return address given as a file offset, innermost first, never empty.
    fn frames(&self, object: &str, offset: u64) -> Vec<Frame> {
        let unresolved = Frame::unresolved(object, offset);
        // A return address points after the call instruction, often at the first instruction of
        // the next statement (or past the end of a function that ends in a call). One byte back
        // is inside the call itself, whose line is the allocating statement.
        let Some(svma) = offset
            .checked_sub(1)
            .and_then(|call| file_offset_to_svma(&self.segments, call))
        else {
            return vec![unresolved];
        };

        let loader = match &self.lookup {
            Lookup::Dwarf(loader) => loader,
            Lookup::Symbols(table) => {
                return vec![Frame {
                    function: table.find(svma).map(demangle_symbol),
                    ..unresolved
                }]
            }
        };
        let mut frames = Vec::new();
        // A DWARF error part-way leaves the frames read so far: better than none.
        if let Ok(mut iter) = loader.find_frames(svma) {
            while let Ok(Some(frame)) = iter.next() {
                let function = frame
                    .function
                    .as_ref()
                    .and_then(|f| f.demangle().ok())
                    .map(|name| strip_hash(&name).to_owned());
                let (file, line, column) = match frame.location {
                    Some(loc) => (loc.file.map(str::to_owned), loc.line, loc.column),
                    None => (None, None, None),
                };
                frames.push(Frame {
                    function,
                    file,
                    line,
                    column,
                    inlined: true,
                    ..unresolved.clone()
                });
            }
        }
        let symbol = || loader.find_symbol(svma).map(demangle_symbol);
        match frames.last_mut() {
            Some(outermost) => {
                outermost.inlined = false;
                if outermost.function.is_none() {
                    outermost.function = symbol();
                }
            }
            None => frames.push(Frame {
                function: symbol(),
                ..unresolved
            }),
        }
        frames
    }
}

/// Opens `object` and symbolizes `offsets` in it (see [`Symbolizer::prepare`]).
fn open_and_resolve(object: &str, offsets: &[u64]) -> (ObjectEntry, Vec<String>) {
    let mut warnings = Vec::new();
    let backend = Backend::open(object, &mut warnings);
    let mut memo = HashMap::new();
    for &offset in offsets {
        memo.entry(offset).or_insert_with(|| -> Arc<[Frame]> {
            match &backend {
                Some(b) => b.frames(object, offset).into(),
                None => Arc::new([Frame::unresolved(object, offset)]),
            }
        });
    }
    (ObjectEntry { backend, memo }, warnings)
}

/// Symbolizes `(object path, file offset)` pairs, caching per object and per address.
///
/// Building an object's DWARF context is the expensive part, and a dump repeats the same few
/// thousand addresses across many stacks, so both are done once.
#[derive(Default)]
pub struct Symbolizer {
    objects: HashMap<String, ObjectEntry>,
    warnings: Vec<String>,
    /// Objects whose frames are put back where a doc-test's code is (see
    /// [`Symbolizer::map_sources`]), with their mapped frames by offset.
    sources: HashMap<String, Mapped>,
}

/// A doc-test executable's source maps and the frames mapped so far.
struct Mapped {
    maps: Vec<SourceMap>,
    frames: HashMap<u64, Arc<[Frame]>>,
}

impl Symbolizer {
    /// An empty symbolizer; objects are opened lazily on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Has the frames of `object`, a doc-test executable, put where its doc-tests' code is
    /// in their files (see [`crate::execution::doctests::sources`]).
    pub fn map_sources(&mut self, object: &str, maps: Vec<SourceMap>) {
        self.sources.insert(
            object.to_owned(),
            Mapped {
                maps,
                frames: HashMap::new(),
            },
        );
    }

    /// Frames at the return address `file_offset` of `object`, innermost (most inlined) first.
    ///
    /// Never empty: an address nothing resolves gives one frame with `function: None`. Each
    /// object is loaded once and each `(object, offset)` is symbolized once; repeated calls
    /// return the same `Arc`.
    pub fn symbolize(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
        let raw = self.symbolize_raw(object, file_offset);
        let Some(maps) = self.sources.get(object).map(|m| m.maps.clone()) else {
            return raw;
        };
        if let Some(done) = self
            .sources
            .get(object)
            .and_then(|m| m.frames.get(&file_offset))
        {
            return Arc::clone(done);
        }
        // A map's anchor is the line of its function's first instruction (a "return
        // address" one past it).
        let mapped: Arc<[Frame]> = map_frames(&raw, &maps, |m| {
            let frames = self.symbolize_raw(object, m.start + 1);
            let outer = frames.iter().rfind(|f| !f.inlined)?;
            Some(Anchor {
                line: outer.line?,
                file: outer.file.clone()?,
            })
        })
        .into();
        if let Some(m) = self.sources.get_mut(object) {
            m.frames.insert(file_offset, Arc::clone(&mapped));
        }
        mapped
    }

    /// [`Symbolizer::symbolize`] before any source map.
    fn symbolize_raw(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
        if !self.objects.contains_key(object) {
            let backend = Backend::open(object, &mut self.warnings);
            self.objects.insert(
                object.to_owned(),
                ObjectEntry {
                    backend,
                    memo: HashMap::new(),
                },
            );
        }
        let entry = self
            .objects
            .get_mut(object)
            .expect("object entry inserted above");
        if let Some(frames) = entry.memo.get(&file_offset) {
            return Arc::clone(frames);
        }
        let frames: Arc<[Frame]> = match &entry.backend {
            Some(backend) => backend.frames(object, file_offset).into(),
            None => Arc::new([Frame::unresolved(object, file_offset)]),
        };
        entry.memo.insert(file_offset, Arc::clone(&frames));
        frames
    }

    /// Symbolizes every `(object, file offset)` of `addresses` ahead of the
    /// [`Symbolizer::symbolize`] calls that will ask for them, one thread per object not yet
    /// open: loading an object's debug info (parsing a large binary's DWARF, decompressing a
    /// separate debug file's sections) is most of the cost and objects do not depend on each
    /// other. Results and warnings are as if each address had been asked for in turn.
    pub fn prepare<'a>(&mut self, addresses: impl IntoIterator<Item = (&'a str, u64)>) {
        let mut wanted: HashMap<&str, Vec<u64>> = HashMap::new();
        for (object, offset) in addresses {
            if !self.objects.contains_key(object) {
                wanted.entry(object).or_default().push(offset);
            }
        }
        if wanted.len() < 2 {
            return;
        }
        let mut wanted: Vec<(&str, Vec<u64>)> = wanted.into_iter().collect();
        // Warnings come out in the order the objects are named, whatever finishes first.
        wanted.sort_by(|a, b| a.0.cmp(b.0));
        let opened: Vec<(ObjectEntry, Vec<String>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = wanted
                .iter()
                .map(|(object, offsets)| scope.spawn(move || open_and_resolve(object, offsets)))
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        for ((object, _), (entry, warnings)) in wanted.iter().zip(opened) {
            self.warnings.extend(warnings);
            self.objects.insert((*object).to_owned(), entry);
        }
    }

    /// Problems met so far, at most one per object: ``cannot open `PATH`: …`` for objects that
    /// could not be read, ``no debug info in `PATH`: …`` for objects resolved by symbol table
    /// only (no DWARF in the object nor in a separate debug file found by build id).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

impl CodeSymbols for Symbolizer {
    fn code(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
        self.symbolize(object, file_offset)
    }

    fn prepare(&mut self, addresses: &[(&str, u64)]) {
        Symbolizer::prepare(self, addresses.iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    /// Maps a runtime address of this process to (object path, file offset), the way the dump
    /// reader does with MAPPED_LIBRARIES.
    fn locate(addr: usize) -> (String, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next().unwrap();
            let _perms = fields.next();
            let offset = u64::from_str_radix(fields.next().unwrap(), 16).unwrap();
            let _dev = fields.next();
            let _inode = fields.next();
            let path = fields.next().unwrap_or("").trim_start();
            let (start, end) = range.split_once('-').unwrap();
            let start = usize::from_str_radix(start, 16).unwrap();
            let end = usize::from_str_radix(end, 16).unwrap();
            if start <= addr && addr < end {
                return (path.to_owned(), (addr - start) as u64 + offset);
            }
        }
        panic!("address {addr:#x} is in no mapping of /proc/self/maps");
    }

    /// Return addresses of the current stack as glibc's `backtrace` sees it (the same unwinder
    /// family jemalloc uses): `[0]` is in this function, `[1]` in its caller.
    ///
    /// `extern "C"` makes the function non-unwinding, so callers use a plain `call` with no
    /// landing-pad `jmp` after it: the return address is then the first instruction of the next
    /// statement, which is what shows whether the one-byte step back happens.
    #[inline(never)]
    extern "C" fn record_caller(out: &mut Vec<usize>) {
        let mut buf = [std::ptr::null_mut(); 8];
        // SAFETY: the buffer holds `buf.len()` pointers and outlives the call.
        let n = unsafe { libc::backtrace(buf.as_mut_ptr(), buf.len() as libc::c_int) };
        out.extend(buf[..n as usize].iter().map(|&p| p as usize));
    }

    const HELPER_LINE: u32 = line!() + 2;
    #[inline(never)]
    fn helper(x: u64) -> u64 {
        black_box(x).wrapping_mul(3)
    }

    #[inline(never)]
    fn call_site() -> (Vec<usize>, u32) {
        let mut out = Vec::new();
        let line = line!() + 1;
        record_caller(&mut out);
        // A statement that needs nothing spilled by the previous one, so its first instruction
        // (the return address) carries its own line.
        next_statement();
        (out, line)
    }

    #[inline(never)]
    fn next_statement() {
        black_box(());
    }

    #[inline(always)]
    fn inlined_recorder(out: &mut Vec<usize>) -> u32 {
        let line = line!() + 1;
        record_caller(out);
        line
    }

    #[inline(never)]
    fn inline_host() -> (Vec<usize>, u32, u32) {
        let mut out = Vec::new();
        let host_line = line!() + 1;
        let inner_line = inlined_recorder(&mut out);
        black_box(&mut out);
        (out, inner_line, host_line)
    }

    fn assert_this_file(frame: &Frame) {
        let file = frame.file.as_deref().unwrap_or_default();
        assert!(file.ends_with("symbolize.rs"), "{frame:?}");
    }

    #[test]
    fn function_entry_resolves_to_its_definition() {
        black_box(helper(1));
        let (object, offset) = locate(helper as fn(u64) -> u64 as usize);
        let mut s = Symbolizer::new();
        // +1 because symbolize treats the offset as a return address and steps back one byte.
        let frames = s.symbolize(&object, offset + 1);
        assert_eq!(frames.len(), 1, "{frames:?}");
        let f = &frames[0];
        let name = f.function.as_deref().unwrap_or_default();
        assert!(name.ends_with("symbolize::tests::helper"), "{f:?}");
        assert_eq!(strip_hash(name), name, "hash left in {name}");
        assert_this_file(f);
        assert_eq!(f.line, Some(HELPER_LINE), "{f:?}");
        assert!(!f.inlined);
        assert_eq!(f.object, object);
        assert_eq!(f.offset, offset + 1);
        assert_eq!(f.display_name(), name);
        // A few bytes further is still the same function.
        let later = s.symbolize(&object, offset + 4);
        assert_eq!(later.last().unwrap().function.as_deref(), Some(name));
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    }

    #[test]
    fn return_address_maps_to_the_call_line() {
        let (addrs, line) = call_site();
        let (object, offset) = locate(addrs[1]);
        let mut s = Symbolizer::new();
        let frames = s.symbolize(&object, offset);
        let f = &frames[0];
        assert!(
            f.function
                .as_deref()
                .unwrap_or_default()
                .ends_with("symbolize::tests::call_site"),
            "{frames:?}"
        );
        assert_this_file(f);
        assert_eq!(f.line, Some(line), "{frames:?}");
        assert!(f.column.is_some());

        // Without the one-byte step back the lookup would land on the next statement: looking
        // up `offset + 1` makes symbolize probe the return address itself.
        let unadjusted = s.symbolize(&object, offset + 1);
        assert_eq!(unadjusted[0].line, Some(line + 3), "{unadjusted:?}");
    }

    #[test]
    fn inlined_frames_come_innermost_first() {
        let (addrs, inner_line, host_line) = inline_host();
        let (object, offset) = locate(addrs[1]);
        let mut s = Symbolizer::new();
        let frames = s.symbolize(&object, offset);
        // `#[inline(always)]` is honoured even by the unoptimised test profile.
        assert_eq!(frames.len(), 2, "{frames:?}");
        let (inner, outer) = (&frames[0], &frames[1]);
        assert!(
            inner
                .function
                .as_deref()
                .unwrap_or_default()
                .ends_with("symbolize::tests::inlined_recorder"),
            "{frames:?}"
        );
        assert!(inner.inlined);
        assert_eq!(inner.line, Some(inner_line), "{frames:?}");
        assert_this_file(inner);
        assert!(
            outer
                .function
                .as_deref()
                .unwrap_or_default()
                .ends_with("symbolize::tests::inline_host"),
            "{frames:?}"
        );
        assert!(!outer.inlined);
        assert_eq!(outer.line, Some(host_line), "{frames:?}");
        assert_this_file(outer);
        assert!(frames
            .iter()
            .all(|f| f.offset == offset && f.object == object));
    }

    #[test]
    fn only_the_users_own_objects_get_a_note_about_missing_debug_info() {
        assert!(is_system_object("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"));
        assert!(is_system_object("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_system_object(
            "/home/u/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/lib/libstd-1a2b.so"
        ));
        assert!(!is_system_object(
            "/home/u/app/target/debug/deps/app-1a2b3c"
        ));
        assert!(!is_system_object(
            "/home/u/app/target/debug/build/sys-1a2b/out/libfoo.so"
        ));
    }

    #[test]
    fn libc_function_resolves() {
        let addr = libc::malloc as unsafe extern "C" fn(libc::size_t) -> *mut libc::c_void;
        let (object, offset) = locate(addr as usize);
        let mut s = Symbolizer::new();
        let frames = s.symbolize(&object, offset + 1);
        let outer = frames.last().unwrap();
        // `malloc` and `__libc_malloc` share the address; either name is right. Under an
        // interposing preload the shim's own `malloc` is found, which is right too.
        let name = outer.function.as_deref().unwrap_or_default();
        assert!(name.contains("malloc"), "{frames:?} {:?}", s.warnings());
        let runtime = is_runtime_object(&object);
        // With a distribution's separate debug file, its symbol table names the frame.
        let debug_file = read_layout(Path::new(&object))
            .ok()
            .and_then(|l| l.build_id)
            .and_then(|id| build_id_debug_path(&id))
            .is_some_and(|p| p.is_file());
        if outer.file.is_none() && !runtime && !debug_file && !is_system_object(&object) {
            let expected = format!("no debug info in `{object}`");
            let warnings = s.warnings();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].starts_with(&expected), "{warnings:?}");
        } else {
            assert!(s.warnings().is_empty(), "{:?}", s.warnings());
        }
        // An offset past every segment resolves to nothing but still names the object.
        let beyond = s.symbolize(&object, u64::MAX / 2);
        assert_eq!(beyond.len(), 1);
        assert_eq!(beyond[0].function, None);
        let file_name = Path::new(&object).file_name().unwrap().to_string_lossy();
        assert_eq!(
            beyond[0].display_name(),
            format!("{file_name}+0x{:x}", u64::MAX / 2)
        );
    }

    #[test]
    fn missing_object_warns_once() {
        let mut s = Symbolizer::new();
        let path = "/nonexistent/leakcheck/libgone.so";
        let a = s.symbolize(path, 0x1234);
        let b = s.symbolize(path, 0x5678);
        let c = s.symbolize(path, 0x1234);
        assert_eq!(
            &*a,
            &[Frame {
                function: None,
                file: None,
                line: None,
                column: None,
                object: path.to_owned(),
                offset: 0x1234,
                inlined: false,
            }]
        );
        assert_eq!(b[0].function, None);
        assert_eq!(a[0].display_name(), "libgone.so+0x1234");
        assert!(Arc::ptr_eq(&a, &c));
        let warnings = s.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(&format!("cannot open `{path}`: ")),
            "{warnings:?}"
        );
    }

    #[test]
    fn pseudo_objects_are_unresolved_silently() {
        let mut s = Symbolizer::new();
        for object in ["", "[vdso]", "[anon:leak]"] {
            let frames = s.symbolize(object, 0x10);
            assert_eq!(frames.len(), 1);
            assert_eq!(frames[0].function, None);
        }
        assert_eq!(s.symbolize("[vdso]", 0x10)[0].display_name(), "[vdso]+0x10");
        assert_eq!(s.symbolize("", 0x10)[0].display_name(), "[unknown]+0x10");
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    }

    #[test]
    fn results_are_memoized() {
        black_box(helper(2));
        let (object, offset) = locate(helper as fn(u64) -> u64 as usize);
        let mut s = Symbolizer::new();
        let first = s.symbolize(&object, offset + 1);
        let second = s.symbolize(&object, offset + 1);
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(s.objects.len(), 1);
        assert_eq!(s.objects[&object].memo.len(), 1);
    }

    #[test]
    fn preparing_several_objects_at_once_gives_what_asking_in_turn_gives() {
        black_box(helper(3));
        let (own, own_offset) = locate(helper as fn(u64) -> u64 as usize);
        let malloc = libc::malloc as unsafe extern "C" fn(libc::size_t) -> *mut libc::c_void;
        let (lib, lib_offset) = locate(malloc as usize);
        let gone = "/nonexistent/leakcheck/libgone.so";
        let asked = [
            (own.as_str(), own_offset + 1),
            (lib.as_str(), lib_offset + 1),
            (gone, 0x10),
        ];
        let mut in_turn = Symbolizer::new();
        let expected: Vec<_> = asked
            .iter()
            .map(|&(o, a)| in_turn.symbolize(o, a))
            .collect();
        let mut prepared = Symbolizer::new();
        prepared.prepare(asked.iter().copied());
        assert_eq!(prepared.objects.len(), 3, "every object opened ahead");
        for (&(o, a), want) in asked.iter().zip(&expected) {
            assert_eq!(&prepared.symbolize(o, a), want, "{o}+{a:x}");
        }
        let mut warnings = prepared.warnings();
        let mut want = in_turn.warnings();
        warnings.sort();
        want.sort();
        assert_eq!(warnings, want);
    }

    #[test]
    fn a_symbol_table_names_an_address_by_the_symbol_at_or_below_it() {
        black_box(helper(4));
        let exe = std::env::current_exe().unwrap();
        let table = SymbolTable::read(&exe).expect("the test binary has a symbol table");
        assert!(table.symbols.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(table.symbols.iter().all(|(_, name)| !name.contains('@')));
        let (address, name) = table
            .symbols
            .iter()
            .find(|(_, n)| demangle_symbol(n).ends_with("symbolize::tests::helper"))
            .expect("helper is in the table");
        assert_eq!(table.find(*address), Some(name.as_str()));
        assert_eq!(table.find(address + 1), Some(name.as_str()));
        assert_eq!(table.find(0), None);
        assert!(SymbolTable::read(Path::new("/nonexistent/leakcheck/x.debug")).is_none());
    }

    #[test]
    fn symbolizer_can_move_to_another_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<Symbolizer>();
    }

    #[test]
    fn offsets_translate_through_load_segments() {
        // The layout rust-lld produces: text mapped one page above its file offset.
        let segments = [
            LoadSegment {
                file_start: 0,
                file_end: 0x5000,
                vaddr: 0,
                executable: true,
            },
            LoadSegment {
                file_start: 0x5000,
                file_end: 0x9000,
                vaddr: 0x6000,
                executable: true,
            },
        ];
        assert_eq!(file_offset_to_svma(&segments, 0x10), Some(0x10));
        assert_eq!(file_offset_to_svma(&segments, 0x5000), Some(0x6000));
        assert_eq!(file_offset_to_svma(&segments, 0x8fff), Some(0x9fff));
        assert_eq!(file_offset_to_svma(&segments, 0x9000), None);
    }

    #[test]
    fn hashes_are_stripped() {
        assert_eq!(strip_hash("a::b::h0123456789abcdef"), "a::b");
        assert_eq!(strip_hash("a::b"), "a::b");
        assert_eq!(strip_hash("a::hello"), "a::hello");
        assert_eq!(
            demangle_symbol("_ZN5leaky5tests10forget_vec17h0123456789abcdefE"),
            "leaky::tests::forget_vec"
        );
        assert_eq!(demangle_symbol("malloc"), "malloc");
        assert_eq!(
            demangle_symbol("_RNvNtCs1234_5leaky5tests10forget_vec"),
            "leaky::tests::forget_vec"
        );
        assert_eq!(
            demangle_symbol("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
    }
}
