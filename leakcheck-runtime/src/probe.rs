//! Whether a program's own `#[global_allocator]` reaches this runtime's `malloc`.
//!
//! The counts of counting mode are jemalloc's, so they see what a program allocates through
//! `malloc` and nothing else. A global allocator of the program's own may forward to the
//! system allocator (a wrapper that counts or limits allocations, as crossbeam-channel's
//! tests have), and then every allocation still lands here; or it may manage memory itself
//! (mimalloc, a bump allocator), and then a count of zero would prove nothing. So, before
//! the test's own run is measured, the runtime asks Rust's allocation shim (the functions
//! every `Box` and `Vec` of the program allocates through) for a series of blocks of
//! different sizes, all kept live until the end, and watches this thread's count of bytes
//! jemalloc handed out: every block must be jemalloc's, each as large as asked at least. An
//! allocator that serves some sizes itself (a pool for small objects that takes its chunks
//! from `malloc`) fails on those. The blocks are freed through the shim again.
//!
//! The shims are the program's own functions, found by cargo-leakcheck in its symbol table
//! and checked to be code of this very build before they are called.

use crate::image;

/// `__rust_alloc(size, align) -> *mut u8`.
type AllocFn = unsafe fn(usize, usize) -> *mut u8;
/// `__rust_dealloc(ptr, size, align)`.
type DeallocFn = unsafe fn(*mut u8, usize, usize);

/// The blocks asked for, `(size, align)`: every size class jemalloc treats differently
/// (tiny, small, large, huge), twice for the smallest, and an over-aligned one.
const BLOCKS: [(usize, usize); 14] = [
    (8, 8),
    (8, 8),
    (24, 8),
    (48, 8),
    (64, 8),
    (64, 64),
    (128, 16),
    (256, 8),
    (1024, 8),
    (4096, 8),
    (16 << 10, 8),
    (64 << 10, 8),
    (256 << 10, 8),
    (1 << 20, 8),
];

/// Whether every block the program's allocation shim `alloc` (freed with `dealloc`; image
/// addresses of the build `build_id`) hands out is this runtime's. False when the shims are
/// not code of this build.
pub fn reaches_malloc(alloc: u64, dealloc: u64, build_id: &str) -> bool {
    let (Ok(alloc), Ok(dealloc)) = (
        image::resolve(alloc as usize, build_id),
        image::resolve(dealloc as usize, build_id),
    ) else {
        return false;
    };
    // SAFETY: both addresses are the program's Rust allocation shims (cargo-leakcheck found
    // them by name), checked above to be code of the running executable, whose signatures
    // are these (std's `alloc::alloc` declares them so).
    let (alloc, dealloc) = unsafe {
        (
            std::mem::transmute::<usize, AllocFn>(alloc),
            std::mem::transmute::<usize, DeallocFn>(dealloc),
        )
    };
    let mut blocks = [std::ptr::null_mut::<u8>(); BLOCKS.len()];
    let mut reached = true;
    for (slot, &(size, align)) in blocks.iter_mut().zip(&BLOCKS) {
        let before = allocated_by_this_thread();
        // SAFETY: a non-zero size and a power-of-two alignment, as `GlobalAlloc` requires.
        *slot = unsafe { alloc(size, align) };
        let after = allocated_by_this_thread();
        reached &= !slot.is_null()
            && matches!((before, after), (Some(b), Some(a)) if a.saturating_sub(b) >= size as u64);
    }
    for (&ptr, &(size, align)) in blocks.iter().zip(&BLOCKS) {
        if !ptr.is_null() {
            // SAFETY: allocated above by the same shim with this size and alignment.
            unsafe { dealloc(ptr, size, align) };
        }
    }
    reached
}

/// Bytes jemalloc has handed out to the calling thread so far.
fn allocated_by_this_thread() -> Option<u64> {
    // SAFETY: "thread.allocated" reads a uint64_t (jemalloc manual, MALLCTL NAMESPACE).
    unsafe { tikv_jemalloc_ctl::raw::read::<u64>(b"thread.allocated\0") }.ok()
}
