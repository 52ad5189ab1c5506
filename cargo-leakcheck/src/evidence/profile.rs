//! Parser for jemalloc `heap_v2` heap profile dumps.
//!
//! This module only turns text into data: it knows nothing about symbols, tests or
//! processes. A dump looks like this (jemalloc's `prof_dump` writes it; the runtime's tracker writes the same):
//!
//! ```text
//! heap_v2/1
//!   t*: 4: 1120 [0: 0]
//!   t0: 3: 1008 [0: 0]
//! @ 0x7f2391191e87 0x7f2391191f65 …
//!   t*: 1: 112 [0: 0]
//!   t1: 1: 112 [0: 0]
//!
//! MAPPED_LIBRARIES:
//! 55cc2b8ce000-55cc2b902000 r--p 00000000 fe:00 10010743   /tmp/probe/t
//! ```
//!
//! The parser is strict about the parts we use (totals, stacks, mappings) because a
//! silently misread dump would turn into a wrong leak report, and tolerant about the
//! parts we ignore (per-thread lines and their optional thread names).

use leakcheck_protocol::heap_v2::{self, parse_decimal, parse_hex, Label as CountsLabel};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// One parsed heap profile dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapProfile {
    /// Mean number of bytes between samples (`2^lg_prof_sample`); 1 means every
    /// allocation was recorded and the counts are exact.
    pub sample_period: u64,
    /// The dump's own `t*:` totals line. It is not always the sum of `stacks`: jemalloc
    /// writes every counts line pre-divided for [`HeapProfile::unbiased`] using that
    /// line's own mean object size, so the lines round differently. After unbiasing, the
    /// stacks add up to this total (up to rounding).
    pub total: Counts,
    /// Live memory per allocation stack, in file order.
    pub stacks: Vec<StackSample>,
    /// The process's memory map at dump time (a copy of `/proc/<pid>/maps`), needed to
    /// turn the raw addresses of `stacks` into something comparable across processes.
    pub mappings: Vec<Mapping>,
}

/// A number of live objects and the bytes they occupy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Counts {
    /// Number of live allocations.
    pub objects: u64,
    /// Their size in bytes, counted as jemalloc size classes (a 1000-byte request shows
    /// as 1024), not as requested sizes.
    pub bytes: u64,
}

/// The live memory allocated from one call stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackSample {
    /// Return addresses, innermost frame first, exactly as in the file. They point just
    /// after the call instruction, so a symbolizer should look up `addr - 1`.
    pub addrs: Vec<u64>,
    /// The stack's `t*:` line: objects and bytes still allocated at dump time, as
    /// written (see [`HeapProfile::unbiased`] for the real estimate).
    pub live: Counts,
    /// The bracketed part of the `t*:` line: everything ever allocated from this stack,
    /// freed or not (`prof_accum:true`; zero otherwise). Not unbiased: it is only used as
    /// evidence that an allocation path was taken at all.
    pub accum: Counts,
}

/// One line of the `MAPPED_LIBRARIES:` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// Permission string as written by the kernel, e.g. `"r-xp"`.
    pub perms: String,
    /// Offset in the mapped file at which the mapping starts.
    pub offset: u64,
    /// Mapped file, verbatim: `""` for an anonymous mapping, pseudo paths such as
    /// `"[heap]"` or `"[vdso]"`, and possibly a `" (deleted)"` suffix when the file was
    /// removed or replaced while the process ran (a rebuilt test binary, typically).
    pub path: String,
}

impl Mapping {
    #[cfg(test)]
    /// Whether code can run from this mapping; return addresses of a stack should only
    /// ever fall in such mappings.
    pub fn is_executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

impl HeapProfile {
    /// Estimates of the real live counts, the way jeprof computes them.
    ///
    /// jemalloc records an object of `S` bytes with probability `1 - exp(-S / period)`,
    /// so each stack's counts are scaled by the inverse of that probability, using the
    /// stack's mean object size for `S`. Counts are rounded to the nearest integer. The
    /// result's `total` is the sum of the unbiased stacks, because the header's totals mix
    /// objects of all sizes.
    ///
    /// This must be applied even with a period of 1. jemalloc 5.3 (`prof_unbias`, on by
    /// default) keeps its own exact estimate and writes counts that it has divided by
    /// the same scale, so that jeprof's formula gives the estimate back. At a period of 1
    /// the scale for 8-byte objects is 1.000335: a stack of 2063 objects of 8 bytes is
    /// written as `2062: 16498` and only unbiasing gives `2063: 16504` back (the last
    /// digit can still be off by one from the rounding on both sides).
    pub fn unbiased(&self) -> HeapProfile {
        let period = self.sample_period.max(1) as f64;
        let mut total = Counts::default();
        let stacks = self
            .stacks
            .iter()
            .map(|stack| {
                let live = unbias(stack.live, period);
                total.objects = total.objects.saturating_add(live.objects);
                total.bytes = total.bytes.saturating_add(live.bytes);
                StackSample {
                    addrs: stack.addrs.clone(),
                    live,
                    accum: stack.accum,
                }
            })
            .collect();
        HeapProfile {
            sample_period: self.sample_period,
            total,
            stacks,
            mappings: self.mappings.clone(),
        }
    }
}

fn unbias(live: Counts, period: f64) -> Counts {
    if live.objects == 0 || live.bytes == 0 {
        // Nothing to scale, and the formula would divide by zero.
        return live;
    }
    let n = live.objects as f64;
    let s = live.bytes as f64;
    let ratio = (s / n) / period;
    // `-expm1(-r)` is `1 - exp(-r)` without the cancellation that loses most digits when
    // objects are tiny compared with the period, which is the common case.
    let scale = 1.0 / -(-ratio).exp_m1();
    // `as` saturates, so an absurd input cannot wrap around.
    Counts {
        objects: (n * scale).round() as u64,
        bytes: (s * scale).round() as u64,
    }
}

/// What was wrong with a dump; see [`ProfileError::kind`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileErrorKind {
    /// Reading failed.
    #[error("cannot read: {0}")]
    Io(#[source] std::io::Error),
    /// The file holds no bytes at all (jemalloc created it but never wrote to it).
    #[error("empty file: no `heap_v2/<sample period>` header")]
    Empty,
    /// The first line is not a `heap_v<N>/…` header.
    #[error("not a jemalloc heap profile: expected a `heap_v2/<sample period>` header")]
    MissingHeader,
    /// The header names a format other than `heap_v2`.
    #[error("unsupported dump format: only jemalloc's `heap_v2/<sample period>` is supported")]
    UnsupportedVersion,
    /// The header's sample period is not a positive integer.
    #[error("expected `heap_v2/<sample period>` with a positive decimal period")]
    BadSamplePeriod,
    /// The header is not followed by the `t*:` totals line.
    #[error("expected the `t*: <objects>: <bytes>` totals line after the header")]
    MissingTotals,
    /// A `t*:` or `tN:` line whose counts do not parse.
    #[error(
        "expected `t<thread or *>: <objects>: <bytes> [<objects>: <bytes>]` with decimal counts"
    )]
    BadCounts,
    /// An `@` line with something that is not a hexadecimal address.
    #[error("expected `@ <hexadecimal addresses>` separated by spaces")]
    BadAddress,
    /// An `@` line not followed by its `t*:` line.
    #[error("expected `t*: <objects>: <bytes>` after a stack header")]
    MissingStackTotals,
    /// A line that fits nowhere in the profile section.
    #[error("expected `@ <addresses>`, a `t<thread>:` line, a blank line or `MAPPED_LIBRARIES:`")]
    UnexpectedLine,
    /// A line of the `MAPPED_LIBRARIES:` section that is not a maps line.
    #[error("expected a maps line `<start>-<end> <perms> <offset> <dev> <inode> [<path>]`")]
    BadMapping,
    /// The file ends before the `MAPPED_LIBRARIES:` section, which jemalloc always
    /// writes: the dump was cut short (process killed while dumping, disk full, …).
    #[error("truncated: no MAPPED_LIBRARIES section (jemalloc always writes one, so the dump was cut short)")]
    Truncated,
    /// The file ends in the middle of a `MAPPED_LIBRARIES:` line: the dump was cut short
    /// and that last mapping cannot be trusted (its path may be cut too).
    #[error("truncated: the last MAPPED_LIBRARIES line has no newline (the dump was cut short)")]
    TruncatedMapping,
}

impl ProfileErrorKind {
    /// Whether showing the offending line helps; it does not when there is no such line.
    fn shows_line(&self) -> bool {
        !matches!(
            self,
            ProfileErrorKind::Io(_)
                | ProfileErrorKind::Empty
                | ProfileErrorKind::Truncated
                | ProfileErrorKind::TruncatedMapping
        )
    }
}

/// A dump that could not be read or parsed, with enough context to point at the problem.
#[derive(Debug, thiserror::Error)]
#[error("{}{kind}{}", location(path.as_deref(), *line), found(kind, text))]
pub struct ProfileError {
    path: Option<PathBuf>,
    line: Option<usize>,
    text: String,
    #[source]
    kind: ProfileErrorKind,
}

/// Longest excerpt of an offending line kept in an error; a corrupt dump can have
/// megabyte-long lines and the message only needs to identify it.
const MAX_EXCERPT_CHARS: usize = 120;

impl ProfileError {
    pub(crate) fn new(line: Option<usize>, text: &str, kind: ProfileErrorKind) -> Self {
        let mut excerpt: String = text.chars().take(MAX_EXCERPT_CHARS).collect();
        if excerpt.len() < text.len() {
            excerpt.push('…');
        }
        ProfileError {
            path: None,
            line,
            text: excerpt,
            kind,
        }
    }

    /// The same error, naming the file it was read from.
    pub(crate) fn with_path(mut self, path: &Path) -> Self {
        self.path = Some(path.to_path_buf());
        self
    }

    /// The dump's path, when it was read from a file (`evidence::load::heap_profile`).
    #[cfg(test)]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// 1-based number of the offending line; for a truncated dump, the last line there
    /// is. `None` when no line is involved (the file could not be opened).
    #[cfg(test)]
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The offending line, shortened to about 120 characters.
    #[cfg(test)]
    pub fn line_text(&self) -> &str {
        &self.text
    }

    /// What was wrong.
    #[cfg(test)]
    pub fn kind(&self) -> &ProfileErrorKind {
        &self.kind
    }
}

/// `` `path` line N: `` as far as they are known.
fn location(path: Option<&Path>, line: Option<usize>) -> String {
    match (path, line) {
        (Some(path), Some(line)) => format!("`{}` line {line}: ", path.display()),
        (Some(path), None) => format!("`{}`: ", path.display()),
        (None, Some(line)) => format!("line {line}: "),
        (None, None) => String::new(),
    }
}

/// `` , found `text` `` where the offending line helps.
fn found(kind: &ProfileErrorKind, text: &str) -> String {
    if !kind.shows_line() {
        String::new()
    } else if text.is_empty() {
        ", found an empty line".into()
    } else {
        format!(", found `{text}`")
    }
}

/// Lines of the input with their 1-based numbers.
///
/// Lines are read as bytes and decoded lossily: mapped file paths are arbitrary bytes on
/// Linux, and anywhere else a stray non-UTF-8 byte is reported as a parse error on its
/// line rather than as an opaque I/O error.
struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    text: String,
    /// Number of the line last returned.
    number: usize,
}

/// One line of the input, without its newline.
struct Line<'a> {
    text: &'a str,
    number: usize,
    /// Whether the line ended with a newline. jemalloc ends every line with one, so a
    /// line without it is where a cut-short dump stops.
    terminated: bool,
}

impl<R: BufRead> Lines<R> {
    fn new(reader: R) -> Self {
        Lines {
            reader,
            buf: Vec::new(),
            text: String::new(),
            number: 0,
        }
    }

    /// The next line, or `None` at end of input.
    fn next_line(&mut self) -> Result<Option<Line<'_>>, ProfileError> {
        self.buf.clear();
        let read = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|err| {
                ProfileError::new(Some(self.number + 1), "", ProfileErrorKind::Io(err))
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        let terminated = self.buf.last() == Some(&b'\n');
        if terminated {
            self.buf.pop();
        }
        self.text.clear();
        self.text.push_str(&String::from_utf8_lossy(&self.buf));
        Ok(Some(Line {
            text: &self.text,
            number: self.number,
            terminated,
        }))
    }
}

/// Parses a whole `heap_v2` dump.
///
/// Blank lines are allowed between records; per-thread `tN:` lines (with or without a
/// trailing thread name) are checked for well-formed counts and otherwise ignored.
///
/// A dump cut short is an error, never a smaller profile: a file that ends before the
/// `MAPPED_LIBRARIES:` section or in the middle of a line is reported as truncated. Only
/// a cut exactly at the end of a maps line cannot be told apart from a complete dump.
pub fn parse_heap_profile<R: BufRead>(reader: R) -> Result<HeapProfile, ProfileError> {
    let mut lines = Lines::new(reader);
    let err = |line: &Line, kind| ProfileError::new(Some(line.number), line.text, kind);
    let truncated =
        |number: usize| ProfileError::new(Some(number), "", ProfileErrorKind::Truncated);

    let Some(line) = lines.next_line()? else {
        return Err(ProfileError::new(Some(1), "", ProfileErrorKind::Empty));
    };
    let sample_period = parse_header(line.text).map_err(|kind| err(&line, kind))?;

    let total = match lines.next_line()? {
        None => return Err(truncated(1)),
        Some(line) if !line.terminated => return Err(err(&line, ProfileErrorKind::Truncated)),
        Some(line) => match parse_counts_line(line.text) {
            Ok(Some((CountsLabel::Total, counts, _))) => counts,
            Ok(_) => return Err(err(&line, ProfileErrorKind::MissingTotals)),
            Err(kind) => return Err(err(&line, kind)),
        },
    };

    let mut stacks = Vec::new();
    // Addresses of an `@` line whose `t*:` line has not been read yet.
    let mut pending: Option<Vec<u64>> = None;
    loop {
        let last_number = lines.number;
        let Some(line) = lines.next_line()? else {
            return Err(truncated(last_number));
        };
        if !line.terminated {
            // Whatever this partial line says, the real one was longer.
            return Err(err(&line, ProfileErrorKind::Truncated));
        }
        if let Some(addrs) = pending.take() {
            match parse_counts_line(line.text) {
                Ok(Some((CountsLabel::Total, live, accum))) => {
                    stacks.push(StackSample { addrs, live, accum })
                }
                Ok(_) => return Err(err(&line, ProfileErrorKind::MissingStackTotals)),
                Err(kind) => return Err(err(&line, kind)),
            }
            continue;
        }
        if line.text.trim().is_empty() {
            continue;
        }
        if line.text.starts_with('@') {
            pending = Some(parse_addresses(line.text).map_err(|kind| err(&line, kind))?);
            continue;
        }
        if line.text == heap_v2::MAPPED_LIBRARIES {
            break;
        }
        match parse_counts_line(line.text) {
            Ok(Some((CountsLabel::Thread, _, _))) => {}
            // A second `t*:` for the same stack, or one without any stack: the dump is
            // not what we think it is, so do not guess which counts are right.
            Ok(Some((CountsLabel::Total, _, _))) | Ok(None) => {
                return Err(err(&line, ProfileErrorKind::UnexpectedLine))
            }
            Err(kind) => return Err(err(&line, kind)),
        }
    }

    let mut mappings = Vec::new();
    while let Some(line) = lines.next_line()? {
        if !line.terminated {
            return Err(err(&line, ProfileErrorKind::TruncatedMapping));
        }
        if line.text.trim().is_empty() {
            continue;
        }
        let mapping =
            parse_mapping(line.text).ok_or_else(|| err(&line, ProfileErrorKind::BadMapping))?;
        mappings.push(mapping);
    }

    Ok(HeapProfile {
        sample_period,
        total,
        stacks,
        mappings,
    })
}

fn parse_header(line: &str) -> Result<u64, ProfileErrorKind> {
    let Some(period) = line.strip_prefix(heap_v2::HEADER) else {
        // Name the version problem separately from "not a dump at all": a gperftools or
        // future jemalloc profile needs a different answer than a wrong file.
        return Err(
            if line.starts_with("heap_v") || line.starts_with("heap profile:") {
                ProfileErrorKind::UnsupportedVersion
            } else {
                ProfileErrorKind::MissingHeader
            },
        );
    };
    match parse_decimal(period) {
        Some(period) if period > 0 => Ok(period),
        _ => Err(ProfileErrorKind::BadSamplePeriod),
    }
}

/// A counts line through the contract's grammar ([`heap_v2::parse_counts`]), in this
/// parser's counts and errors.
fn parse_counts_line(
    line: &str,
) -> Result<Option<(CountsLabel, Counts, Counts)>, ProfileErrorKind> {
    let counts = |c: heap_v2::Counts| Counts {
        objects: c.objects,
        bytes: c.bytes,
    };
    match heap_v2::parse_counts(line) {
        Ok(Some((label, live, accum))) => Ok(Some((label, counts(live), counts(accum)))),
        Ok(None) => Ok(None),
        Err(heap_v2::BadCounts) => Err(ProfileErrorKind::BadCounts),
    }
}

/// A stack line's addresses (`line` with its `@`) through the contract's grammar.
fn parse_addresses(line: &str) -> Result<Vec<u64>, ProfileErrorKind> {
    heap_v2::parse_stack(line)
        .ok_or(ProfileErrorKind::BadAddress)?
        .map(|a| a.map_err(|_| ProfileErrorKind::BadAddress))
        .collect()
}

/// A file the runtime writes beside a dump, split into its body and the process's mappings
/// that end it (after `MAPPED_LIBRARIES:`, as in a dump); None when they are missing (a file
/// not whole).
pub fn with_mappings(text: &str) -> Option<(&str, Vec<Mapping>)> {
    let marker = format!("\n{}\n", leakcheck_protocol::heap_v2::MAPPED_LIBRARIES);
    let (body, maps) = text.split_once(&marker)?;
    let mappings = maps
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(parse_mapping)
        .collect();
    Some((body, mappings))
}

/// Parses `start-end perms offset dev inode [path]`.
pub fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        rest = after;
        (!word.is_empty()).then_some(word)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    // The path is everything after the inode: it may contain spaces, and the kernel pads
    // the column with spaces before it.
    let path = rest.trim();

    let (start, end) = range.split_once('-')?;
    let start = parse_hex(start)?;
    let end = parse_hex(end)?;
    if start > end || perms.len() != 4 || !perms.is_ascii() {
        return None;
    }
    let offset = parse_hex(offset)?;
    let (major, minor) = dev.split_once(':')?;
    parse_hex(major)?;
    parse_hex(minor)?;
    parse_decimal(inode)?;
    Some(Mapping {
        start,
        end,
        perms: perms.to_owned(),
        offset,
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::load::heap_profile as read_heap_profile;
    use std::fmt::Write as _;

    fn dump_path(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/dumps")
            .join(name)
    }

    fn read_dump(name: &str) -> HeapProfile {
        read_heap_profile(&dump_path(name)).unwrap_or_else(|err| panic!("{err}"))
    }

    fn parse_str(text: &str) -> Result<HeapProfile, ProfileError> {
        parse_heap_profile(text.as_bytes())
    }

    fn parse_err(text: &str) -> ProfileError {
        match parse_str(text) {
            Ok(profile) => panic!("expected an error, parsed {profile:?}"),
            Err(err) => err,
        }
    }

    fn counts(objects: u64, bytes: u64) -> Counts {
        Counts { objects, bytes }
    }

    fn sum_of_stacks(profile: &HeapProfile) -> Counts {
        profile.stacks.iter().fold(Counts::default(), |acc, s| {
            counts(acc.objects + s.live.objects, acc.bytes + s.live.bytes)
        })
    }

    /// Writes a profile in the format jemalloc uses, for round trips.
    fn write_profile(profile: &HeapProfile) -> String {
        let mut out = String::new();
        let t = |out: &mut String, c: Counts, a: Counts| {
            writeln!(
                out,
                "  t*: {}: {} [{}: {}]",
                c.objects, c.bytes, a.objects, a.bytes
            )
            .unwrap();
        };
        writeln!(out, "heap_v2/{}", profile.sample_period).unwrap();
        t(&mut out, profile.total, Counts::default());
        for stack in &profile.stacks {
            out.push('@');
            for addr in &stack.addrs {
                // Like C's `%#x`, which prints zero without the prefix.
                if *addr == 0 {
                    out.push_str(" 0");
                } else {
                    write!(out, " {addr:#x}").unwrap();
                }
            }
            out.push('\n');
            t(&mut out, stack.live, stack.accum);
            writeln!(
                out,
                "  t0: {}: {} [0: 0]",
                stack.live.objects, stack.live.bytes
            )
            .unwrap();
        }
        out.push_str("\nMAPPED_LIBRARIES:\n");
        for m in &profile.mappings {
            writeln!(
                out,
                "{:x}-{:x} {} {:08x} 00:00 0                          {}",
                m.start, m.end, m.perms, m.offset, m.path
            )
            .unwrap();
        }
        out
    }

    const ALL_DUMPS: [&str; 5] = [
        "baseline.heap",
        "clean.heap",
        "joined.heap",
        "leaks.heap",
        "fails.heap",
    ];

    #[test]
    fn baseline_dump() {
        let p = read_dump("baseline.heap");
        assert_eq!(p.sample_period, 1);
        assert_eq!(p.total, counts(1, 640));
        assert_eq!(p.stacks.len(), 1);
        let stack = &p.stacks[0];
        assert_eq!(stack.live, counts(1, 640));
        assert_eq!(stack.addrs.len(), 13);
        assert_eq!(stack.addrs[0], 0x7f7582591e87);
        assert_eq!(*stack.addrs.last().unwrap(), 0x561fac374401);
        assert_eq!(p.mappings.len(), 38);

        let text: Vec<&Mapping> = p
            .mappings
            .iter()
            .filter(|m| m.path == "/tmp/probe/t")
            .collect();
        assert_eq!(text.len(), 4);
        let exec: Vec<&&Mapping> = text.iter().filter(|m| m.is_executable()).collect();
        assert_eq!(exec.len(), 1);
        assert_eq!(
            *exec[0],
            &Mapping {
                start: 0x561fac374000,
                end: 0x561fac40d000,
                perms: "r-xp".into(),
                offset: 0x33000,
                path: "/tmp/probe/t".into(),
            }
        );
        // The outermost frame (`_start`) is inside the test binary's text.
        assert!(exec[0].start <= stack.addrs[12] && stack.addrs[12] < exec[0].end);

        // Anonymous mappings are written with a trailing space after the inode.
        let anon = &p.mappings[4];
        assert_eq!((anon.start, anon.end), (0x7f7581780000, 0x7f7581e00000));
        assert_eq!(anon.perms, "rw-p");
        assert_eq!(anon.path, "");
        assert!(!anon.is_executable());

        let last = p.mappings.last().unwrap();
        assert_eq!(last.path, "[vsyscall]");
        assert_eq!(last.start, 0xffffffffff600000);
        assert_eq!(last.perms, "--xp");
        assert!(last.is_executable());
        assert!(p
            .mappings
            .iter()
            .any(|m| m.path == "[vdso]" && m.is_executable()));
        assert!(p.mappings.iter().any(|m| m.path == "[stack]"));
    }

    #[test]
    fn other_captured_dumps() {
        let clean = read_dump("clean.heap");
        assert_eq!(clean.total, counts(3, 1008));
        let live: Vec<Counts> = clean.stacks.iter().map(|s| s.live).collect();
        assert_eq!(live, [counts(1, 640), counts(1, 48), counts(1, 320)]);

        let leaks = read_dump("leaks.heap");
        assert_eq!(leaks.total, counts(4, 1120));
        let live: Vec<Counts> = leaks.stacks.iter().map(|s| s.live).collect();
        assert_eq!(
            live,
            [
                counts(1, 112),
                counts(1, 640),
                counts(1, 48),
                counts(1, 320)
            ]
        );
        assert_eq!(leaks.stacks[0].addrs.len(), 20);

        let joined = read_dump("joined.heap");
        assert_eq!(joined.total, counts(4, 1328));
        assert_eq!(joined.stacks.len(), 4);

        let fails = read_dump("fails.heap");
        assert_eq!(fails.sample_period, 1);
        assert_eq!(fails.stacks.len(), 78);
        assert_eq!(fails.total, counts(44868, 35710536));
        // As written, the stacks add up to 2 objects and 12 bytes less than the header:
        // two stacks of 2063 8-byte objects are written as `2062: 16498` (see
        // `unbiasing_at_period_one`).
        assert_eq!(sum_of_stacks(&fails), counts(44866, 35710524));
        assert_eq!(fails.stacks[0].live, counts(6, 21296));
        assert_eq!(fails.stacks[77].live, counts(1, 1310720));
        assert_eq!(fails.mappings.len(), 47);
        // A panicking test maps its own binary and a debug file to symbolize the
        // backtrace: extra read-only mappings of the same path.
        let binary: Vec<&Mapping> = fails
            .mappings
            .iter()
            .filter(|m| m.path == "/tmp/probe/t")
            .collect();
        assert_eq!(binary.len(), 5);
        assert_eq!(binary.iter().filter(|m| m.is_executable()).count(), 1);
        assert!(fails
            .mappings
            .iter()
            .any(|m| m.path.starts_with("/usr/lib/debug/.build-id/")));

        for name in ALL_DUMPS {
            let p = read_dump(name);
            assert_eq!(p.sample_period, 1, "{name}");
            assert!(!p.mappings.is_empty(), "{name}");
            for stack in &p.stacks {
                assert!(!stack.addrs.is_empty(), "{name}");
                // Every return address lies in an executable mapping.
                for &addr in &stack.addrs {
                    assert!(
                        p.mappings
                            .iter()
                            .any(|m| m.is_executable() && m.start <= addr && addr < m.end),
                        "{name}: {addr:#x}"
                    );
                }
            }
            if name != "fails.heap" {
                assert_eq!(sum_of_stacks(&p), p.total, "{name}");
            }
        }
    }

    #[test]
    fn round_trip_captured_dumps() {
        for name in ALL_DUMPS {
            let p = read_dump(name);
            let again = parse_str(&write_profile(&p)).unwrap();
            assert_eq!(again, p, "{name}");
        }
    }

    #[test]
    fn round_trip_hand_made() {
        let p = HeapProfile {
            sample_period: 524288,
            total: counts(7, 123456),
            stacks: vec![
                StackSample {
                    addrs: vec![0x1000, 0, u64::MAX],
                    live: counts(3, 100000),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![],
                    live: counts(0, 0),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![0xdeadbeef],
                    live: counts(4, 23456),
                    accum: Counts::default(),
                },
            ],
            mappings: vec![
                Mapping {
                    start: 0x1000,
                    end: 0x2000,
                    perms: "r-xp".into(),
                    offset: 0x3000,
                    path: "/a path/with spaces (deleted)".into(),
                },
                Mapping {
                    start: 0x2000,
                    end: 0x3000,
                    perms: "rw-p".into(),
                    offset: 0,
                    path: String::new(),
                },
                Mapping {
                    start: 0x4000,
                    end: 0x5000,
                    perms: "rw-p".into(),
                    offset: 0,
                    path: "[heap]".into(),
                },
            ],
        };
        let text = write_profile(&p);
        assert!(text.contains("@ 0x1000 0 0xffffffffffffffff\n"), "{text}");
        assert_eq!(parse_str(&text).unwrap(), p);
    }

    #[test]
    fn tolerated_variations() {
        let text = "heap_v2/1\n\
                    \x20 t*: 2: 96 [0: 0]\n\
                    \x20 t0: 2: 96 [0: 0] main thread name\n\
                    @ 0x10 0x20\n\
                    \x20 t*: 2: 96\n\
                    \x20 t3: 2: 96 [0: 0] worker\n\
                    \n\
                    @\n\
                    \x20 t*: 0: 0 [5: 500]\n\
                    \n\
                    \n\
                    MAPPED_LIBRARIES:\n\
                    10-20 r-xp 00000000 fe:00 12 /bin/with two  spaces (deleted)\n\
                    \n\
                    20-30 rw-p 00000000 00:00 0\n";
        let p = parse_str(text).unwrap();
        assert_eq!(p.total, counts(2, 96));
        assert_eq!(p.stacks.len(), 2);
        assert_eq!(p.stacks[0].addrs, [0x10, 0x20]);
        assert!(p.stacks[1].addrs.is_empty());
        assert_eq!(p.mappings[0].path, "/bin/with two  spaces (deleted)");
        assert_eq!(p.mappings[1].path, "");

        // An empty maps section is fine (jemalloc writes one when it cannot read
        // `/proc/self/maps`).
        let p = parse_str("heap_v2/1\n  t*: 0: 0 [0: 0]\n\nMAPPED_LIBRARIES:\n").unwrap();
        assert!(p.stacks.is_empty() && p.mappings.is_empty());

        // Paths are bytes on Linux; a non-UTF-8 one is kept (lossily), not an error.
        let bytes = b"heap_v2/1\n  t*: 0: 0\nMAPPED_LIBRARIES:\n10-20 r-xp 0 0:0 1 /x\xff\n";
        let p = parse_heap_profile(bytes.as_slice()).unwrap();
        assert_eq!(p.mappings[0].path, "/x\u{fffd}");
    }

    /// The line number, kind and message of the error for `text`.
    fn check_error(text: &str, line: usize, matches_kind: fn(&ProfileErrorKind) -> bool) {
        let err = parse_err(text);
        assert_eq!(err.line(), Some(line), "{err}");
        assert!(matches_kind(err.kind()), "{err}");
        assert!(
            err.to_string().starts_with(&format!("line {line}: ")),
            "{err}"
        );
    }

    #[test]
    fn empty_file() {
        check_error("", 1, |k| matches!(k, ProfileErrorKind::Empty));
        assert_eq!(
            parse_err("").to_string(),
            "line 1: empty file: no `heap_v2/<sample period>` header"
        );
    }

    #[test]
    fn bad_headers() {
        check_error("hello\n", 1, |k| {
            matches!(k, ProfileErrorKind::MissingHeader)
        });
        // The totals line without a header.
        check_error("  t*: 1: 2 [0: 0]\n", 1, |k| {
            matches!(k, ProfileErrorKind::MissingHeader)
        });
        check_error("heap_v3/1\n", 1, |k| {
            matches!(k, ProfileErrorKind::UnsupportedVersion)
        });
        check_error("heap profile: 1: 2 [3: 4] @ heapprofile\n", 1, |k| {
            matches!(k, ProfileErrorKind::UnsupportedVersion)
        });
        assert_eq!(
            parse_err("heap_v1/1\n").to_string(),
            "line 1: unsupported dump format: only jemalloc's `heap_v2/<sample period>` \
             is supported, found `heap_v1/1`"
        );
        for bad in [
            "heap_v2/",
            "heap_v2/0",
            "heap_v2/-1",
            "heap_v2/+4",
            "heap_v2/1 x",
        ] {
            check_error(&format!("{bad}\n  t*: 0: 0\n"), 1, |k| {
                matches!(k, ProfileErrorKind::BadSamplePeriod)
            });
        }
        check_error("heap_v2/99999999999999999999\n", 1, |k| {
            matches!(k, ProfileErrorKind::BadSamplePeriod)
        });
        check_error("heap_v2/1\n  t0: 1: 2\n", 2, |k| {
            matches!(k, ProfileErrorKind::MissingTotals)
        });
        check_error("heap_v2/1\n@ 0x1\n", 2, |k| {
            matches!(k, ProfileErrorKind::MissingTotals)
        });
    }

    #[test]
    fn bad_numbers() {
        let cases = [
            "heap_v2/1\n  t*: x: 2 [0: 0]\n",
            "heap_v2/1\n  t*: 1: 2x [0: 0]\n",
            "heap_v2/1\n  t*: 1: -2 [0: 0]\n",
            "heap_v2/1\n  t*: 1 2\n",
            "heap_v2/1\n  t*: 1:\n",
            "heap_v2/1\n  t*: 1: 2 [0: 0\n",
            "heap_v2/1\n  t*: 1: 2 [0 0]\n",
            "heap_v2/1\n  t*: 1: 2 [0: 0] trailing\n",
            "heap_v2/1\n  t*: 1: 99999999999999999999\n",
        ];
        for case in cases {
            check_error(case, 2, |k| matches!(k, ProfileErrorKind::BadCounts));
        }
        check_error("heap_v2/1\n  t*: 1: 2\n  t0: 1: z [0: 0]\n", 3, |k| {
            matches!(k, ProfileErrorKind::BadCounts)
        });
        check_error(
            "heap_v2/1\n  t*: 1: 2\n@ 0x1\n  t*: 1: 2.5 [0: 0]\n",
            4,
            |k| matches!(k, ProfileErrorKind::BadCounts),
        );
    }

    #[test]
    fn bad_addresses() {
        for at in [
            "@ 0x1 0xg2",
            "@ 0x1 zz",
            "@0x1",
            "@ 0x",
            "@ 0x1,0x2",
            "@ 0x10000000000000000",
        ] {
            let text = format!("heap_v2/1\n  t*: 1: 2\n\n{at}\n  t*: 1: 2\n");
            check_error(&text, 4, |k| matches!(k, ProfileErrorKind::BadAddress));
        }
        let err = parse_err("heap_v2/1\n  t*: 1: 2\n@ 0x1 nothex\n");
        assert_eq!(
            err.to_string(),
            "line 3: expected `@ <hexadecimal addresses>` separated by spaces, found `@ 0x1 nothex`"
        );
    }

    #[test]
    fn stack_without_totals() {
        let head = "heap_v2/1\n  t*: 1: 2\n@ 0x1\n";
        for next in ["garbage", "", "  t0: 1: 2", "@ 0x2", "MAPPED_LIBRARIES:"] {
            let text = format!("{head}{next}\n  t*: 1: 2\n\nMAPPED_LIBRARIES:\n");
            check_error(&text, 4, |k| {
                matches!(k, ProfileErrorKind::MissingStackTotals)
            });
        }
        let err = parse_err(&format!("{head}garbage\n")).with_path(Path::new("/x/y.heap"));
        assert_eq!(
            err.to_string(),
            "`/x/y.heap` line 4: expected `t*: <objects>: <bytes>` after a stack header, \
             found `garbage`"
        );
        assert_eq!(err.line_text(), "garbage");
        assert_eq!(err.path(), Some(Path::new("/x/y.heap")));
        let err = parse_err(&format!("{head}\n"));
        assert!(err.to_string().ends_with("found an empty line"), "{err}");
    }

    #[test]
    fn unexpected_lines() {
        let head = "heap_v2/1\n  t*: 1: 2\n@ 0x1\n  t*: 1: 2\n";
        for line in [
            "  t*: 1: 2",
            "garbage",
            "MAPPED_LIBRARIES",
            "t: 1: 2",
            "tx: 1: 2",
        ] {
            check_error(&format!("{head}{line}\nMAPPED_LIBRARIES:\n"), 5, |k| {
                matches!(k, ProfileErrorKind::UnexpectedLine)
            });
        }
    }

    #[test]
    fn bad_mappings() {
        let head = "heap_v2/1\n  t*: 0: 0\n\nMAPPED_LIBRARIES:\n";
        let good = "10-20 r-xp 00000000 fe:00 12 /bin/x\n";
        for line in [
            "10-20 r-xp 00000000 fe:00",
            "10 r-xp 00000000 fe:00 12 /bin/x",
            "10-2g r-xp 00000000 fe:00 12 /bin/x",
            "20-10 r-xp 00000000 fe:00 12 /bin/x",
            "10-20 r-x 00000000 fe:00 12 /bin/x",
            "10-20 r-xp 0000000z fe:00 12 /bin/x",
            "10-20 r-xp 00000000 fe00 12 /bin/x",
            "10-20 r-xp 00000000 fe:00 1a /bin/x",
            "garbage",
        ] {
            check_error(&format!("{head}{good}{line}\n{good}"), 6, |k| {
                matches!(k, ProfileErrorKind::BadMapping)
            });
        }
    }

    #[test]
    fn truncated_dumps() {
        let full = std::fs::read_to_string(dump_path("baseline.heap")).unwrap();
        let maps_at = full.find("MAPPED_LIBRARIES:").unwrap();
        // Cut in the middle of the stack record, of the blank line, and of the keyword.
        for cut in [11, 40, 200, maps_at - 1, maps_at, maps_at + 10] {
            let prefix = &full[..cut];
            let err = parse_err(prefix);
            assert!(
                matches!(err.kind(), ProfileErrorKind::Truncated),
                "{cut}: {err}"
            );
            assert_eq!(err.line(), Some(prefix.lines().count()), "{cut}");
        }
        let err = parse_err("heap_v2/1\n  t*: 1: 2\n@ 0x1 0x2\n  t*: 1: 2\n  t0: 1: 2\n");
        assert_eq!(
            err.to_string(),
            "line 5: truncated: no MAPPED_LIBRARIES section (jemalloc always writes one, \
             so the dump was cut short)"
        );
        // Cut inside the maps section, even in the middle of a path that would parse.
        let cut = full.len() - "[vsyscall]\n".len() - 3;
        let err = parse_err(&full[..cut]);
        assert!(
            matches!(err.kind(), ProfileErrorKind::TruncatedMapping),
            "{err}"
        );
        assert_eq!(err.line(), Some(46));
        // Only the header, and a stack header as the last line.
        check_error("heap_v2/1\n", 1, |k| {
            matches!(k, ProfileErrorKind::Truncated)
        });
        check_error("heap_v2/1\n  t*: 1: 2\n@ 0x1\n", 3, |k| {
            matches!(k, ProfileErrorKind::Truncated)
        });
    }

    #[test]
    fn io_errors() {
        struct Failing;
        impl std::io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let err = parse_heap_profile(std::io::BufReader::new(Failing)).unwrap_err();
        assert!(matches!(err.kind(), ProfileErrorKind::Io(_)));
        assert_eq!(err.line(), Some(1));
        assert_eq!(err.to_string(), "line 1: cannot read: disk on fire");
        assert!(std::error::Error::source(&err).is_some());

        // Fails after two good lines.
        let reader = std::io::Read::chain("heap_v2/1\n  t*: 1: 2\n".as_bytes(), Failing);
        let err = parse_heap_profile(std::io::BufReader::new(reader)).unwrap_err();
        assert!(matches!(err.kind(), ProfileErrorKind::Io(_)));
        assert_eq!(err.line(), Some(3));

        let missing = dump_path("no-such.heap");
        let err = read_heap_profile(&missing).unwrap_err();
        assert!(matches!(err.kind(), ProfileErrorKind::Io(_)));
        assert_eq!(err.line(), None);
        assert_eq!(err.path(), Some(missing.as_path()));
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("`{}`: cannot read: ", missing.display())),
            "{message}"
        );
    }

    #[test]
    fn read_errors_carry_the_path() {
        let dir = std::env::temp_dir().join(format!("leakcheck-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.heap");
        std::fs::write(&path, "heap_v2/1\n  t*: 1: 2\n@ 0x1\ngarbage\n").unwrap();
        let err = read_heap_profile(&path).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "`{}` line 4: expected `t*: <objects>: <bytes>` after a stack header, \
                 found `garbage`",
                path.display()
            )
        );
    }

    #[test]
    fn long_lines_are_shortened_in_errors() {
        let long = format!("@ 0x1 {}", "é".repeat(500));
        let err = parse_err(&format!("heap_v2/1\n  t*: 1: 2\n{long}\n"));
        assert_eq!(err.line_text().chars().count(), MAX_EXCERPT_CHARS + 1);
        assert!(err.line_text().ends_with('…'));
        assert!(long.starts_with(err.line_text().trim_end_matches('…')));
    }

    #[test]
    fn unbiased_sampled_profile() {
        // Period 2^19. Each stack's mean object size s/n gives r = (s/n)/524288 and
        // scale = 1/(1 - e^-r):
        // - 4 objects of 1 MiB: r = 2, e^-2 = 0.135335283, scale = 1/0.864664717
        //   = 1.156517643; n' = 4.626 -> 5, s' = 4194304 * 1.156517643 = 4850786.6
        //   -> 4850787.
        // - 2 objects of 48 B: r = 48/524288 is tiny, scale = 1/r + 1/2 + r/12 + …
        //   = 10922.667 + 0.5 = 10923.1667; n' = 21846.33 -> 21846,
        //   s' = 96 * 10923.1667 = 1048576 + 48 + 0.0007 -> 1048624.
        // - 5 objects of 100000 B: r = 0.190734863, e^-r = 0.826348, scale =
        //   1/0.173652 = 5.758765; n' = 28.79 -> 29, s' = 2879382.47 -> 2879382.
        let text = "heap_v2/524288\n\
                    \x20 t*: 11: 4694400 [0: 0]\n\
                    @ 0x1\n  t*: 4: 4194304 [0: 0]\n\
                    @ 0x2\n  t*: 2: 96 [0: 0]\n\
                    @ 0x3\n  t*: 5: 500000 [0: 0]\n\
                    @ 0x4\n  t*: 0: 0 [0: 0]\n\
                    \nMAPPED_LIBRARIES:\n";
        let p = parse_str(text).unwrap();
        assert_eq!(p.sample_period, 524288);
        let u = p.unbiased();
        let live: Vec<Counts> = u.stacks.iter().map(|s| s.live).collect();
        assert_eq!(
            live,
            [
                counts(5, 4850787),
                counts(21846, 1048624),
                counts(29, 2879382),
                counts(0, 0),
            ]
        );
        assert_eq!(u.total, counts(5 + 21846 + 29, 4850787 + 1048624 + 2879382));
        assert_eq!(u.sample_period, 524288);
        assert_eq!(u.mappings, p.mappings);
        let addrs: Vec<&[u64]> = u.stacks.iter().map(|s| s.addrs.as_slice()).collect();
        assert_eq!(addrs, [[1], [2], [3], [4]]);
    }

    #[test]
    fn unbiasing_at_period_one() {
        // Stacks of objects of 48 bytes or more are left alone: the scale 1/(1 - e^-48)
        // differs from 1 by 1e-21.
        for name in ["baseline.heap", "clean.heap", "joined.heap", "leaks.heap"] {
            let p = read_dump(name);
            assert_eq!(p.unbiased(), p, "{name}");
        }
        // fails.heap has two stacks written as `2062: 16498`: bytes that are not a
        // multiple of 8 although every size class is. Mean size 16498/2062 = 8.00097,
        // scale = 1/(1 - e^-8.00097) = 1.000335; 2062 * 1.000335 = 2062.69 -> 2063,
        // 16498 * 1.000335 = 16503.53 -> 16504 = 2063 * 8.
        let fails = read_dump("fails.heap");
        let unbiased = fails.unbiased();
        let mut changed = Vec::new();
        for (before, after) in fails.stacks.iter().zip(&unbiased.stacks) {
            assert_eq!(before.addrs, after.addrs);
            if before.live != after.live {
                changed.push((before.live, after.live));
            }
        }
        assert_eq!(
            changed,
            [
                (counts(2062, 16498), counts(2063, 16504)),
                (counts(2062, 16498), counts(2063, 16504)),
            ]
        );
        // And now the stacks add up to the header's totals.
        assert_eq!(unbiased.total, fails.total);
        assert_eq!(sum_of_stacks(&unbiased), fails.total);
    }

    #[test]
    fn unbiased_never_overflows() {
        let p = HeapProfile {
            sample_period: 2,
            total: Counts::default(),
            stacks: vec![
                StackSample {
                    addrs: vec![],
                    live: counts(u64::MAX, 1),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![],
                    live: counts(1, u64::MAX),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![],
                    live: counts(0, 5),
                    accum: Counts::default(),
                },
                StackSample {
                    addrs: vec![],
                    live: counts(5, 0),
                    accum: Counts::default(),
                },
            ],
            mappings: vec![],
        };
        let u = p.unbiased();
        assert_eq!(u.stacks[0].live.objects, u64::MAX);
        assert_eq!(u.stacks[1].live, counts(1, u64::MAX));
        assert_eq!(u.stacks[2].live, counts(0, 5));
        assert_eq!(u.stacks[3].live, counts(5, 0));
        assert_eq!(u.total.objects, u64::MAX);
    }

    /// Runs the parser on `input`, turning a panic into a test failure that says which
    /// input caused it.
    fn parse_without_panic(input: &[u8], what: &str) -> Result<HeapProfile, ProfileError> {
        match std::panic::catch_unwind(|| parse_heap_profile(input)) {
            Ok(result) => result,
            Err(_) => panic!("parser panicked on {what}"),
        }
    }

    #[test]
    fn never_panics_on_truncated_dumps() {
        for (name, step) in [("baseline.heap", 1), ("leaks.heap", 3), ("fails.heap", 53)] {
            let full = std::fs::read(dump_path(name)).unwrap();
            let maps_at = full
                .windows(b"MAPPED_LIBRARIES:".len())
                .position(|w| w == b"MAPPED_LIBRARIES:")
                .unwrap();
            let maps_end = maps_at + b"MAPPED_LIBRARIES:\n".len();
            for len in (0..=full.len()).step_by(step) {
                let result = parse_without_panic(&full[..len], &format!("{name}[..{len}]"));
                // Only a cut right after a whole maps line goes unnoticed.
                let complete_lines = len >= maps_end && full[len - 1] == b'\n';
                assert_eq!(result.is_ok(), complete_lines, "{name}[..{len}]");
            }
        }
    }

    #[test]
    fn never_panics_on_mutated_dumps() {
        // A fixed linear congruential generator keeps the test reproducible.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        // Bytes that matter to the grammar, so mutations reach deep into the parser.
        let alphabet = b"0123456789abcdefx@t*:[]- \n\r\t/Mp\xff\xc3";
        for name in ["leaks.heap", "fails.heap"] {
            let original = std::fs::read(dump_path(name)).unwrap();
            let mut ok = 0;
            for round in 0..400 {
                let mut input = original.clone();
                let mutations = 1 + next() % 8;
                for _ in 0..mutations {
                    let at = next() as usize % input.len();
                    match next() % 4 {
                        0 => {
                            input.remove(at);
                        }
                        1 => input.insert(at, alphabet[next() as usize % alphabet.len()]),
                        _ => input[at] = alphabet[next() as usize % alphabet.len()],
                    }
                }
                if parse_without_panic(&input, &format!("{name} mutation {round}")).is_ok() {
                    ok += 1;
                }
            }
            // Some mutations land in harmless places (a thread line, a path), most do not.
            assert!(ok > 0 && ok < 400, "{name}: {ok} of 400 mutations parsed");
        }
    }
}
