//! FNV-1a, for values that must come out the same in every build and Rust version (std's
//! `DefaultHasher` may change): the runtime's cache key and checksum, and the hash that
//! shortens a long flame graph file name.

/// An FNV-1a hash being computed.
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn mix(&mut self, v: u64) {
        self.0 ^= v;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    /// Adds bytes one at a time.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> &mut Fnv {
        for &b in bytes {
            self.mix(u64::from(b));
        }
        self
    }

    /// Adds 8-byte words (and the bytes left over): eight times fewer steps, for large
    /// inputs in debug builds; any changed, missing or added byte still changes the hash.
    pub(crate) fn words(&mut self, data: &[u8]) -> &mut Fnv {
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            self.mix(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        self.bytes(words.remainder())
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}
