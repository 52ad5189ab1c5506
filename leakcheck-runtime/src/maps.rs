//! The program's own mappings: memory it maps with `mmap` and never gives back is growth
//! exactly as a heap object is, and no allocator statistic shows it.
//!
//! This library exports `mmap`, `mmap64`, `munmap` and `mremap` in front of libc's, as it
//! exports `malloc`. Rust code maps through libc's dynamic symbol (`libc::mmap`, memmap2,
//! std's signal stacks), so its calls arrive here; glibc's own mappings (thread stacks, the
//! loader) call the kernel directly and never do. The jemalloc inside this library and the
//! runtime's own bookkeeping call `mmap` too, and their calls reach the same symbol: each
//! entry point is a small trampoline that looks at its return address and sends a call
//! from this library's own code straight to the kernel, so only the program's mappings are
//! recorded.
//!
//! Each recorded mapping keeps the run it was made in (counting mode: what each extra run
//! left behind, as the run's arena says for the heap) and, while stacks are tracked, the
//! stack that made it, interned by the tracker with a marker frame on top
//! ([`leakcheck_mapped_memory`], [`leakcheck_mapped_file`]) so that cargo-leakcheck can
//! tell a mapping from a heap object in the dumps. A reservation (`PROT_NONE`) holds
//! address space, not memory: it is kept out of every count.
//!
//! Mappings are few next to heap objects: they are kept in a sorted array, searched by
//! binary search, in memory mapped directly from the kernel.

use crate::region::Region;
use crate::spin::SpinLock;
use crate::tracker;
use leakcheck_protocol::record::Counts;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Whether the program's mappings are recorded.
static ON: AtomicBool = AtomicBool::new(false);
/// This library's own address range, [LO, HI): calls from there are not the program's.
static SELF_LO: AtomicUsize = AtomicUsize::new(0);
static SELF_HI: AtomicUsize = AtomicUsize::new(0);
/// The run new mappings belong to (see [`set_run`]).
static RUN: AtomicU32 = AtomicU32::new(0);
static LOCK: SpinLock = SpinLock::new();

/// Tag of a mapping the main thread made before the exit handler: the harness's, as the main
/// thread's arena is (left out of every count).
const MAIN: u32 = u32::MAX;
/// Tag of a mapping made between extra runs: in the process's total, in no run's.
pub const BETWEEN: u32 = u32::MAX - 1;

/// One mapping: start, end, tag and kind, stack id + 1 (0: none).
const W: usize = 4;
const KIND_ANON: u64 = 0;
const KIND_FILE: u64 = 1;
const KIND_RESERVED: u64 = 2;

struct Table {
    region: Region,
    len: usize,
}

static mut TABLE: Table = Table {
    region: Region::empty(),
    len: 0,
};

/// The marker frame on top of the stack of an anonymous mapping in the dumps.
#[no_mangle]
#[inline(never)]
pub extern "C" fn leakcheck_mapped_memory() -> usize {
    // A body of a few instructions, so that the marker's address plus one is still inside it.
    std::hint::black_box(SELF_LO.load(Ordering::Relaxed)) ^ 1
}

/// The marker frame on top of the stack of a file mapping in the dumps.
#[no_mangle]
#[inline(never)]
pub extern "C" fn leakcheck_mapped_file() -> usize {
    std::hint::black_box(SELF_HI.load(Ordering::Relaxed)) ^ 2
}

/// Starts recording the program's mappings. Called once by the constructor,
/// single-threaded.
pub fn start() {
    let (lo, hi) = own_range();
    if lo >= hi {
        // Without its own range every call of jemalloc's would look like the program's.
        return;
    }
    SELF_LO.store(lo, Ordering::SeqCst);
    SELF_HI.store(hi, Ordering::SeqCst);
    crate::spin::hold_across_fork!(LOCK);
    ON.store(true, Ordering::SeqCst);
}

/// New mappings belong to extra run `run` from now on ([`BETWEEN`]: to none).
pub fn set_run(run: u32) {
    RUN.store(run, Ordering::SeqCst);
}

fn with_table<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    LOCK.lock();
    // SAFETY: the lock gives exclusive access to TABLE.
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(TABLE) });
    LOCK.unlock();
    r
}

/// The address range of the object this function is in, from its loaded segments.
fn own_range() -> (usize, usize) {
    struct Found {
        probe: usize,
        lo: usize,
        hi: usize,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the callback, and
        // `data` is the `Found` below.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Found>()) };
        let base = info.dlpi_addr as usize;
        let (mut lo, mut hi) = (usize::MAX, 0);
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let start = base + ph.p_vaddr as usize;
            lo = lo.min(start);
            hi = hi.max(start + ph.p_memsz as usize);
        }
        if lo <= found.probe && found.probe < hi {
            found.lo = lo;
            found.hi = hi;
            return 1;
        }
        0
    }
    let mut found = Found {
        probe: own_range as *const () as usize,
        lo: 0,
        hi: 0,
    };
    // SAFETY: the callback only reads the headers it is given and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut found).cast()) };
    (found.lo, found.hi)
}

// ---------------------------------------------------------------------------------------
// The entry points. Each is a trampoline: a call whose return address is in this library
// goes to the kernel unrecorded, any other to the recording version.

macro_rules! trampoline {
    ($name:ident ($($arg:ident: $ty:ty),*) -> $ret:ty, $raw:ident, $recorded:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // rax is free: none of these take vector arguments, so a variadic caller's count
            // of them (mremap's) is not needed past this point.
            core::arch::naked_asm!(
                "mov rax, qword ptr [rsp]",
                "cmp rax, qword ptr [rip + {lo}]",
                "jb 2f",
                "cmp rax, qword ptr [rip + {hi}]",
                "jae 2f",
                "jmp {raw}",
                "2:",
                "jmp {recorded}",
                lo = sym SELF_LO,
                hi = sym SELF_HI,
                raw = sym $raw,
                recorded = sym $recorded,
            )
        }
    };
}

trampoline!(mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void, raw_mmap, recorded_mmap);
trampoline!(mmap64(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void, raw_mmap, recorded_mmap);
trampoline!(munmap(addr: *mut c_void, len: usize) -> c_int, raw_munmap, recorded_munmap);
trampoline!(mremap(old: *mut c_void, old_len: usize, new_len: usize, flags: c_int, new_addr: *mut c_void) -> *mut c_void, raw_mremap, recorded_mremap);

unsafe extern "C" fn raw_mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: the caller's contract is mmap's; the system call takes the same arguments, and
    // syscall(2) returns -1 (MAP_FAILED) with errno set on failure.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
}

unsafe extern "C" fn raw_munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: the caller's contract is munmap's.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

unsafe extern "C" fn raw_mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's contract is mremap's; `new_addr` is read by the kernel only with
    // MREMAP_FIXED, when the caller passed it.
    unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
    }
}

unsafe extern "C" fn recorded_mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: as for raw_mmap.
    let p = unsafe { raw_mmap(addr, len, prot, flags, fd, off) };
    if p != libc::MAP_FAILED && ON.load(Ordering::Relaxed) {
        keeping_errno(|| {
            let kind = if prot == libc::PROT_NONE {
                KIND_RESERVED
            } else if flags & libc::MAP_ANONYMOUS == 0 && fd >= 0 {
                KIND_FILE
            } else {
                KIND_ANON
            };
            mapped(p as usize, len, kind);
        });
    }
    p
}

unsafe extern "C" fn recorded_munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: as for raw_munmap.
    let r = unsafe { raw_munmap(addr, len) };
    if r == 0 && ON.load(Ordering::Relaxed) {
        keeping_errno(|| {
            with_table(|t| t.remove_range(addr as usize, page_round(len)));
        });
    }
    r
}

unsafe extern "C" fn recorded_mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: as for raw_mremap.
    let p = unsafe { raw_mremap(old, old_len, new_len, flags, new_addr) };
    if p != libc::MAP_FAILED && ON.load(Ordering::Relaxed) {
        keeping_errno(|| {
            let kind = with_table(|t| {
                let kind = t.kind_at(old as usize);
                if kind.is_some() {
                    t.remove_range(old as usize, page_round(old_len));
                }
                kind
            });
            // Only a mapping that was the program's stays one; like a realloc, what it is
            // now belongs to the stack and run that resized it.
            if let Some(kind) = kind {
                mapped(p as usize, new_len, kind);
            }
        });
    }
    p
}

fn keeping_errno(f: impl FnOnce()) {
    // SAFETY: errno's location is valid for the calling thread.
    let saved = unsafe { *libc::__errno_location() };
    f();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

fn page_round(len: usize) -> usize {
    const PAGE: usize = 4096;
    len.saturating_add(PAGE - 1) & !(PAGE - 1)
}

fn on_main_thread() -> bool {
    // SAFETY: getpid and the gettid system call have no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) == libc::c_long::from(libc::getpid()) }
}

/// Records a new mapping of the program's.
fn mapped(start: usize, len: usize, kind: u64) {
    let len = page_round(len);
    let mut run = RUN.load(Ordering::Relaxed);
    if run == 0 && on_main_thread() {
        run = MAIN;
    }
    // The stack is taken before the table's lock (unwinding may allocate, and allocations
    // take the tracker's lock).
    let stack = if kind == KIND_RESERVED {
        None
    } else {
        let marker = if kind == KIND_FILE {
            leakcheck_mapped_file as *const () as usize
        } else {
            leakcheck_mapped_memory as *const () as usize
        };
        tracker::mapping_stack(marker + 1, len as u64)
    };
    with_table(|t| {
        // MAP_FIXED (and mremap onto a fixed address) replace whatever was there.
        t.remove_range(start, len);
        t.insert(start, start + len, run, kind, stack);
    });
}

impl Table {
    fn entries(&mut self) -> &mut [u64] {
        let len = self.len;
        &mut self.region.words()[..len * W]
    }

    /// The index of the first entry ending after `addr`.
    fn first_ending_after(&mut self, addr: usize) -> usize {
        let e = self.entries();
        let (mut lo, mut hi) = (0, e.len() / W);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if (e[mid * W + 1] as usize) <= addr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The kind of the mapping that holds `addr`, when recorded.
    fn kind_at(&mut self, addr: usize) -> Option<u64> {
        let i = self.first_ending_after(addr);
        let e = self.entries();
        (i * W < e.len() && e[i * W] as usize <= addr).then(|| e[i * W + 2] >> 32)
    }

    /// Records [start, end) in its place; the stack's counts are taken back when the table
    /// cannot grow to hold it.
    fn insert(&mut self, start: usize, end: usize, run: u32, kind: u64, stack: Option<u32>) {
        let i = self.first_ending_after(start);
        let word = stack.map_or(0, |id| u64::from(id) + 1);
        if !self.insert_at(i, start, end, run, kind, word) {
            if let Some(id) = stack {
                tracker::mapping_adjust(id, -1, -((end - start) as i64));
            }
        }
    }

    fn region_words(&self) -> usize {
        self.region.len_words()
    }

    /// Takes [start, start + len) out of every recorded mapping it overlaps, splitting one
    /// that it cuts in the middle.
    fn remove_range(&mut self, start: usize, len: usize) {
        let end = start.saturating_add(len);
        let mut i = self.first_ending_after(start);
        while i < self.len {
            let (s, e, tag, stack) = {
                let w = &self.entries()[i * W..(i + 1) * W];
                (w[0] as usize, w[1] as usize, w[2], w[3])
            };
            if s >= end {
                break;
            }
            let cut_lo = s.max(start);
            let cut_hi = e.min(end);
            let keep_head = s < cut_lo;
            let keep_tail = cut_hi < e;
            if stack != 0 {
                // Each recorded piece is one object of its stack.
                let pieces = i64::from(keep_head) + i64::from(keep_tail) - 1;
                tracker::mapping_adjust((stack - 1) as u32, pieces, -((cut_hi - cut_lo) as i64));
            }
            match (keep_head, keep_tail) {
                (false, false) => {
                    let n = self.len * W;
                    let w = &mut self.region.words()[..n];
                    w.copy_within((i + 1) * W..n, i * W);
                    self.len -= 1;
                }
                (true, false) => {
                    self.entries()[i * W + 1] = cut_lo as u64;
                    i += 1;
                }
                (false, true) => {
                    self.entries()[i * W] = cut_hi as u64;
                    i += 1;
                }
                (true, true) => {
                    // The tail becomes an entry of its own, under the same stack.
                    self.entries()[i * W + 1] = cut_lo as u64;
                    let kind = tag >> 32;
                    let run = tag as u32;
                    if !self.insert_at(i + 1, cut_hi, e, run, kind, stack) && stack != 0 {
                        // Not kept: its bytes leave the stack's count with it.
                        tracker::mapping_adjust((stack - 1) as u32, -1, -((e - cut_hi) as i64));
                    }
                    i += 2;
                }
            }
        }
    }

    /// Puts an entry at index `i` (its stack word: id + 1, 0 for none); false when the table
    /// cannot grow to hold it.
    fn insert_at(
        &mut self,
        i: usize,
        start: usize,
        end: usize,
        run: u32,
        kind: u64,
        stack: u64,
    ) -> bool {
        if (self.len + 1) * W > self.region_words() {
            let words = (self.region_words() * 2).max(1024);
            if !self.region.grow(words) {
                return false;
            }
        }
        self.len += 1;
        let e = self.entries();
        e.copy_within(i * W..(e.len() - W), (i + 1) * W);
        e[i * W] = start as u64;
        e[i * W + 1] = end as u64;
        e[i * W + 2] = (kind << 32) | u64::from(run);
        e[i * W + 3] = stack;
        true
    }

    /// Mappings and their bytes whose tag `keep` accepts, reservations left out.
    fn count(&mut self, keep: impl Fn(u32) -> bool) -> Counts {
        let mut c = Counts::default();
        for w in self.entries().chunks_exact(W) {
            let (kind, run) = (w[2] >> 32, w[2] as u32);
            if kind == KIND_RESERVED || !keep(run) {
                continue;
            }
            c.objects += 1;
            c.bytes += (w[1] - w[0]) as i64;
        }
        c
    }
}

/// The program's mappings live now, but the harness's (the main thread's before the exit
/// handler); reservations left out.
pub fn live() -> Counts {
    if !ON.load(Ordering::Relaxed) {
        return Counts::default();
    }
    with_table(|t| t.count(|run| run != MAIN))
}

/// Every mapping of the program's live now, the main thread's too (a service's own
/// mappings); reservations left out.
pub fn all_live() -> Counts {
    if !ON.load(Ordering::Relaxed) {
        return Counts::default();
    }
    with_table(|t| t.count(|_| true))
}

/// The mappings extra run `run` made that are still there.
pub fn left_by(run: u32) -> Counts {
    if !ON.load(Ordering::Relaxed) {
        return Counts::default();
    }
    with_table(|t| t.count(|r| r == run))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            region: Region::empty(),
            len: 0,
        }
    }

    fn ranges(t: &mut Table) -> Vec<(usize, usize, u32)> {
        t.entries()
            .chunks_exact(W)
            .map(|w| (w[0] as usize, w[1] as usize, w[2] as u32))
            .collect()
    }

    #[test]
    fn the_marker_frames_are_the_ones_the_tool_looks_for() {
        use leakcheck_protocol::heap_v2::{MAPPED_FILE_FRAME, MAPPED_MEMORY_FRAME};
        assert_eq!(stringify!(leakcheck_mapped_memory), MAPPED_MEMORY_FRAME);
        assert_eq!(stringify!(leakcheck_mapped_file), MAPPED_FILE_FRAME);
    }

    #[test]
    fn mappings_are_kept_in_order_and_unmapping_the_middle_splits_one() {
        let mut t = table();
        t.insert(0x30000, 0x40000, 2, KIND_ANON, None);
        t.insert(0x10000, 0x20000, 1, KIND_ANON, None);
        t.insert(0x50000, 0x60000, 3, KIND_FILE, None);
        assert_eq!(
            ranges(&mut t),
            [
                (0x10000, 0x20000, 1),
                (0x30000, 0x40000, 2),
                (0x50000, 0x60000, 3)
            ]
        );
        // A hole in the middle of one, the tail of another and a range no mapping covers.
        t.remove_range(0x34000, 0x1000);
        t.remove_range(0x1c000, 0x4000);
        t.remove_range(0x70000, 0x1000);
        assert_eq!(
            ranges(&mut t),
            [
                (0x10000, 0x1c000, 1),
                (0x30000, 0x34000, 2),
                (0x35000, 0x40000, 2),
                (0x50000, 0x60000, 3)
            ]
        );
        assert_eq!(t.kind_at(0x38000), Some(KIND_ANON));
        assert_eq!(t.kind_at(0x34800), None);
        assert_eq!(t.kind_at(0x58000), Some(KIND_FILE));
        // One range over several: all gone.
        t.remove_range(0x0, 0x100000);
        assert!(ranges(&mut t).is_empty());
        t.region.unmap();
    }

    #[test]
    fn counts_leave_out_reservations_and_keep_runs_apart() {
        let mut t = table();
        t.insert(0x10000, 0x20000, 1, KIND_ANON, None);
        t.insert(0x20000, 0x22000, 2, KIND_FILE, None);
        t.insert(0x100000, 0x10100000, 2, KIND_RESERVED, None);
        t.insert(0x30000, 0x31000, MAIN, KIND_ANON, None);
        let all = t.count(|run| run != MAIN);
        assert_eq!((all.objects, all.bytes), (2, 0x12000));
        let second = t.count(|run| run == 2);
        assert_eq!((second.objects, second.bytes), (1, 0x2000));
        t.region.unmap();
    }

    #[test]
    fn this_library_is_found_around_its_own_code() {
        let (lo, hi) = own_range();
        let here = own_range as *const () as usize;
        assert!(lo <= here && here < hi, "{lo:#x} {here:#x} {hi:#x}");
    }
}
