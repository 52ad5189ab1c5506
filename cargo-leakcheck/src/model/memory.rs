//! What memory the reports speak of: heap objects or the program's own mappings, and where a
//! service's resident set went.

use serde::{Deserialize, Serialize};

/// What memory a stack holds: heap objects, or mappings the program made itself (`mmap`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    /// Objects of the allocator.
    #[default]
    Heap,
    /// Anonymous mappings the program made itself, outside the allocator.
    Mapped,
    /// Mappings of files the program made itself.
    MappedFile,
}

impl Memory {
    /// Whether it is the heap (what reports say nothing about).
    pub fn is_heap(&self) -> bool {
        *self == Memory::Heap
    }

    /// How reports name it, when not the heap.
    pub fn label(self) -> Option<&'static str> {
        match self {
            Memory::Heap => None,
            Memory::Mapped => Some("mapped memory"),
            Memory::MappedFile => Some("mapped file"),
        }
    }
}

/// Where a service's resident memory went between its first snapshot and its last: each
/// part at both moments, from the kernel's split of the resident set (`smaps_rollup`) and the
/// allocator's own figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryExplained {
    /// Seconds since the first snapshot of the two moments compared.
    pub from_seconds: f64,
    pub to_seconds: f64,
    /// The resident set at both, bytes.
    pub rss_from: u64,
    pub rss_to: u64,
    /// Every part, in [`MemoryPart::ALL`] order.
    pub parts: Vec<MemoryPartFigures>,
    /// At the end, pages the allocator freed but has not returned to the kernel (dirty), and
    /// pages it returned lazily (`MADV_FREE`, muzzy, resident until the kernel needs them),
    /// bytes; and the kernel's count of lazily freed pages still resident (`LazyFree`).
    pub dirty: u64,
    pub muzzy: u64,
    pub lazy_free: u64,
    /// `[run] rss-growth-budget`, bytes, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default)]
    pub rss_budget: Option<u64>,
    /// Whether the resident set grew by more than that budget (the run fails).
    pub over_budget: bool,
    /// What the figures say, one sentence each: where the growth went and what returns it.
    pub findings: Vec<String>,
    /// Each part at every snapshot that has the allocator's figures, for the plot.
    pub series: Vec<MemoryPoint>,
}

impl MemoryExplained {
    /// How much the resident set grew (negative: it shrank), bytes.
    pub fn rss_growth(&self) -> i64 {
        self.rss_to as i64 - self.rss_from as i64
    }
}

/// One part of a process's resident memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryPart {
    /// Bytes in live objects: judged stack by stack.
    LiveHeap,
    /// Memory the program mapped itself, outside the allocator: judged stack by stack.
    Mappings,
    /// Pages the allocator holds that no object uses: freed pages it has not returned yet,
    /// and its own metadata.
    AllocatorPages,
    /// Pages that hold live objects, less the objects' bytes.
    Fragmentation,
    /// Pages of mapped files.
    FileBacked,
    /// The rest of the resident set: thread stacks, memory glibc and C libraries allocate
    /// outside the allocator, lazily freed pages.
    Other,
}

impl MemoryPart {
    /// Every part, in the order reports list them and the plot stacks them.
    pub const ALL: [MemoryPart; 6] = [
        MemoryPart::LiveHeap,
        MemoryPart::Mappings,
        MemoryPart::AllocatorPages,
        MemoryPart::Fragmentation,
        MemoryPart::FileBacked,
        MemoryPart::Other,
    ];

    /// How reports name it.
    pub fn label(self) -> &'static str {
        match self {
            MemoryPart::LiveHeap => "live heap",
            MemoryPart::Mappings => "mappings outside the heap",
            MemoryPart::AllocatorPages => "pages the allocator holds, no object in them",
            MemoryPart::Fragmentation => "fragmentation",
            MemoryPart::FileBacked => "file-backed pages",
            MemoryPart::Other => "thread stacks and the rest",
        }
    }

    /// Whether its growth is judged as a leak (stack by stack); the others are explained.
    pub fn judged(self) -> bool {
        matches!(self, MemoryPart::LiveHeap | MemoryPart::Mappings)
    }
}

/// One part at the first and the last moment, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPartFigures {
    pub part: MemoryPart,
    pub from: u64,
    pub to: u64,
}

impl MemoryPartFigures {
    /// Its growth (negative: it shrank), bytes.
    pub fn growth(&self) -> i64 {
        self.to as i64 - self.from as i64
    }
}

/// Every part at one moment, bytes, in [`MemoryPart::ALL`] order.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    pub seconds: f64,
    pub parts: [u64; 6],
}
