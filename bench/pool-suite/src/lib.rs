//! 100 tests over one process-wide pool (see Cargo.toml).

#[cfg(test)]
mod tests {
    /// A job: sums `n` squares in the worker's scratch buffer.
    fn squares(scratch: &mut Vec<u64>, n: u64) -> u64 {
        scratch.clear();
        scratch.extend((0..n).map(|k| k * k));
        scratch.iter().sum()
    }

    /// Ten tests, each handing a different amount of work to the pool.
    macro_rules! ten_pool_tests {
        () => {
            #[test]
            fn a() {
                assert_eq!(super::squares(&mut Vec::new(), 10), crate::tests::run(10));
            }
            #[test]
            fn b() {
                assert_eq!(super::squares(&mut Vec::new(), 20), crate::tests::run(20));
            }
            #[test]
            fn c() {
                assert_eq!(super::squares(&mut Vec::new(), 30), crate::tests::run(30));
            }
            #[test]
            fn d() {
                assert_eq!(super::squares(&mut Vec::new(), 40), crate::tests::run(40));
            }
            #[test]
            fn e() {
                assert_eq!(super::squares(&mut Vec::new(), 50), crate::tests::run(50));
            }
            #[test]
            fn f() {
                assert_eq!(super::squares(&mut Vec::new(), 60), crate::tests::run(60));
            }
            #[test]
            fn g() {
                assert_eq!(super::squares(&mut Vec::new(), 70), crate::tests::run(70));
            }
            #[test]
            fn h() {
                assert_eq!(super::squares(&mut Vec::new(), 80), crate::tests::run(80));
            }
            #[test]
            fn i() {
                assert_eq!(super::squares(&mut Vec::new(), 90), crate::tests::run(90));
            }
            #[test]
            fn j() {
                assert_eq!(super::squares(&mut Vec::new(), 100), crate::tests::run(100));
            }
        };
    }

    fn run(n: u64) -> u64 {
        lifetime::pool::run(squares, n)
    }

    mod m0 {
        ten_pool_tests!();
    }
    mod m1 {
        ten_pool_tests!();
    }
    mod m2 {
        ten_pool_tests!();
    }
    mod m3 {
        ten_pool_tests!();
    }
    mod m4 {
        ten_pool_tests!();
    }
    mod m5 {
        ten_pool_tests!();
    }
    mod m6 {
        ten_pool_tests!();
    }
    mod m7 {
        ten_pool_tests!();
    }
    mod m8 {
        ten_pool_tests!();
    }
    mod m9 {
        ten_pool_tests!();
    }
}
