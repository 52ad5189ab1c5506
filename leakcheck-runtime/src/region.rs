//! Memory mapped straight from the kernel, for the runtime's tables and work space: never
//! from the allocator being tracked, so using it neither re-enters the tracker nor shows in
//! what the tracker counts.

/// Memory from the kernel, never from the allocator being tracked.
pub(crate) struct Region {
    pub(crate) ptr: *mut u64,
    words: usize,
}

impl Region {
    pub(crate) const fn empty() -> Region {
        Region {
            ptr: std::ptr::null_mut(),
            words: 0,
        }
    }

    pub(crate) fn map(words: usize) -> Option<Region> {
        // SAFETY: an anonymous private mapping; the kernel zeroes it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                words * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(Region {
            ptr: p.cast(),
            words,
        })
    }

    /// Grows the mapping to `words`, moving it if need be; contents are kept.
    pub(crate) fn grow(&mut self, words: usize) -> bool {
        if self.ptr.is_null() {
            return match Region::map(words) {
                Some(r) => {
                    *self = r;
                    true
                }
                None => false,
            };
        }
        // SAFETY: remapping a mapping this region owns.
        let p = unsafe {
            libc::mremap(
                self.ptr.cast(),
                self.words * 8,
                words * 8,
                libc::MREMAP_MAYMOVE,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        self.ptr = p.cast();
        self.words = words;
        true
    }

    pub(crate) fn unmap(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: unmapping a mapping this region owns, no longer referenced.
            unsafe { libc::munmap(self.ptr.cast(), self.words * 8) };
        }
        *self = Region::empty();
    }

    pub(crate) fn len_words(&self) -> usize {
        self.words
    }

    pub(crate) fn words(&mut self) -> &mut [u64] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: the mapping holds `words` words. The slice borrows `self` mutably, and a
        // region shared between threads (the tracker's, `maps`') is reached only under its
        // table's lock.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.words) }
    }
}
