//! A test with many live allocations at its peak.

#[cfg(test)]
mod tests {
    /// Holds 1M boxes (8 bytes each) at its peak, frees them, and leaks one byte.
    #[test]
    fn a_million_boxes_at_peak_and_a_one_byte_leak() {
        let boxes: Vec<Box<u64>> = (0..1_000_000u64).map(Box::new).collect();
        let sum: u64 = boxes.iter().map(|b| **b).sum();
        assert_eq!(sum, 499_999_500_000);
        drop(boxes);
        std::mem::forget(Box::new(1u8));
    }
}
