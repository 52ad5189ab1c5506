/work/main/examples/demo/target/debug/deps/leakcheck_demo-9a596c693c955d5a.d: src/lib.rs src/cache.rs src/config.rs src/frame.rs src/tree.rs

/work/main/examples/demo/target/debug/deps/libleakcheck_demo-9a596c693c955d5a.rlib: src/lib.rs src/cache.rs src/config.rs src/frame.rs src/tree.rs

/work/main/examples/demo/target/debug/deps/libleakcheck_demo-9a596c693c955d5a.rmeta: src/lib.rs src/cache.rs src/config.rs src/frame.rs src/tree.rs

src/lib.rs:
src/cache.rs:
src/config.rs:
src/frame.rs:
src/tree.rs:
