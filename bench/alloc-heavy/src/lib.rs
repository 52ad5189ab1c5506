//! One allocation-heavy test that retains nothing (see Cargo.toml).

#[cfg(test)]
mod tests {
    use std::hint::black_box;

    /// Ten million boxes of a few sizes, each freed soon after, a thousand live at a time.
    #[test]
    fn ten_million_small_allocations() {
        let mut window: Vec<Option<Box<[u8]>>> = (0..1000).map(|_| None).collect();
        let mut total = 0usize;
        for i in 0..10_000_000usize {
            let size = 8 + (i % 7) * 8;
            let b = black_box(vec![i as u8; size].into_boxed_slice());
            total += b.len();
            window[i % 1000] = Some(b);
        }
        assert!(black_box(total) > 0);
    }
}
