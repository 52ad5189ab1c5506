/work/main/examples/demo/target/debug/deps/leakcheck_demo-c297b3e1bbb6d277.d: src/lib.rs src/cache.rs src/config.rs src/frame.rs src/tree.rs

/work/main/examples/demo/target/debug/deps/leakcheck_demo-c297b3e1bbb6d277: src/lib.rs src/cache.rs src/config.rs src/frame.rs src/tree.rs

src/lib.rs:
src/cache.rs:
src/config.rs:
src/frame.rs:
src/tree.rs:
