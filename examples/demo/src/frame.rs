//! Length-prefixed wire frames in heap buffers that are handed to C code as raw pointers.

/// A frame whose buffer Rust no longer owns: whoever holds it must pass it to [`release`].
pub struct RawFrame {
    ptr: *mut u8,
    len: usize,
    capacity: usize,
}

impl RawFrame {
    /// The frame's bytes: a 4-byte big-endian length, then the payload.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` and `len` come from a live Vec that was forgotten in `encode`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Encodes `payload` into a new frame and gives up Rust's ownership of its buffer (as when
/// passing it to a C library that calls back later).
pub fn encode(payload: &[u8]) -> RawFrame {
    let mut buf = Vec::with_capacity(4 + payload.len()); // leak-site: frame_starts_with_length
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    let frame = RawFrame {
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
        capacity: buf.capacity(),
    };
    std::mem::forget(buf);
    frame
}

/// Takes a frame's buffer back and frees it. Every frame from [`encode`] must end here.
pub fn release(frame: RawFrame) {
    // SAFETY: the parts are exactly those of the Vec forgotten in `encode`, used once.
    drop(unsafe { Vec::from_raw_parts(frame.ptr, frame.len, frame.capacity) });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEAK: checks the header and then simply drops the `RawFrame`, which does not free
    /// anything: the 2 KiB buffer is forgotten. Calling `release(frame)` fixes it.
    #[test]
    fn frame_starts_with_length() {
        let frame = encode(&[0x42; 2048]);
        assert_eq!(&frame.bytes()[..4], &[0, 0, 8, 0]);
    }

    /// CLEAN: the same allocation, but the frame is released.
    #[test]
    fn frame_round_trip() {
        let frame = encode(b"hello");
        assert_eq!(frame.bytes(), b"\0\0\0\x05hello");
        release(frame);
    }
}
