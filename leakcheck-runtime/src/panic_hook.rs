//! Whether the test's own run left a panic hook of its own in place.
//!
//! libtest puts the default panic hook back once its tests have run (`take_hook`, then the
//! hook is dropped) and only then returns from `main`. A test that installs a hook, or
//! chains one onto the hook before it on every call, has therefore had that hook freed
//! before the exit handler measures the run: its own run seems to retain nothing, and a
//! run that retained nothing is not run again. The hook is looked at instead where the
//! test's run ends for libtest: when `main` joins the test's thread (libtest joins it before
//! it goes on), and once more when the run is measured. A hook that owns memory then means
//! the run is to be made again: what the extra runs do to the hook is measured, as libtest
//! no longer resets it.
//!
//! std keeps the hook in `static HOOK: RwLock<Hook>`, with `enum Hook { Default,
//! Custom(Box<dyn Fn(..)>) }`. The lock's data is its last field (it may be unsized), so
//! the hook is the symbol's last two words: the box's data pointer, then its vtable. The
//! `Default` variant is one of those words zero (whichever holds the niche; the other may
//! keep a stale value); a `Custom` hook has both set, and its data pointer is a heap block
//! unless the closure captures nothing (a dangling, aligned pointer below a page).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The hook's two words' address in the running process (0: not known).
static WORDS: AtomicUsize = AtomicUsize::new(0);
/// A hook owning memory was seen in place.
static SEEN: AtomicBool = AtomicBool::new(false);

/// The lowest address a heap block can have: a dangling pointer of a zero-sized closure
/// is its alignment, far below.
const PAGE: usize = 4096;

/// Where the hook is, from `LEAKCHECK_PANIC_HOOK` (`ADDRESS SIZE`, image address and the
/// symbol's size, hexadecimal), checked against this build. Called by the constructor.
pub fn configure(value: &str, build_id: &str) {
    let Some((address, size)) = value.split_once(' ') else {
        return;
    };
    let (Some(address), Some(size)) = (crate::sys::parse_hex(address), crate::sys::parse_hex(size))
    else {
        return;
    };
    let Some(words) = (address as usize)
        .checked_add(size as usize)
        .and_then(|end| end.checked_sub(16))
    else {
        return;
    };
    if size < 16 || words % std::mem::align_of::<usize>() != 0 {
        return;
    }
    if let Ok(resolved) = crate::image::resolve_data(words, build_id) {
        WORDS.store(resolved, Ordering::Release);
    }
}

/// Looks at the hook now: notes whether one that owns memory is in place.
pub fn note() {
    let words = WORDS.load(Ordering::Acquire);
    if words == 0 || SEEN.load(Ordering::Relaxed) {
        return;
    }
    if owns_memory(words) {
        SEEN.store(true, Ordering::Relaxed);
    }
}

/// Whether a hook that owns memory was seen in place during the test's own run.
pub fn seen() -> bool {
    note();
    SEEN.load(Ordering::Relaxed)
}

fn owns_memory(words: usize) -> bool {
    // SAFETY: `words` is the last two words of std's `HOOK` in a writable segment of this
    // very build (checked by `configure`), aligned; they are read as atomics without the
    // lock, so a hook being replaced meanwhile may be read half old, half new, which at
    // worst makes one extra run or none that the hook's state would otherwise have made.
    let (data, vtable) = unsafe {
        let w = words as *const AtomicUsize;
        (
            (*w).load(Ordering::Relaxed),
            (*w.add(1)).load(Ordering::Relaxed),
        )
    };
    data >= PAGE && vtable != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_owns_memory_only_with_both_words_set_and_a_heap_pointer() {
        let default_hook = [0usize, 0];
        let stale_data = [0x5555_0000usize, 0];
        let stale_vtable = [0usize, 0x5555_1000];
        let zero_sized = [1usize, 0x5555_1000];
        let boxed = [0x7f00_0000_1000usize, 0x5555_1000];
        for (words, owns) in [
            (default_hook, false),
            (stale_data, false),
            (stale_vtable, false),
            (zero_sized, false),
            (boxed, true),
        ] {
            assert_eq!(owns_memory(words.as_ptr() as usize), owns, "{words:x?}");
        }
    }
}
