//! A tiny web-backend library to try `cargo leakcheck test` on.
//!
//! It has a response cache ([`cache`]), a document tree ([`tree`]), a wire-frame encoder that
//! hands buffers to C code ([`frame`]) and a lazily loaded configuration ([`config`]). All six
//! tests pass under plain `cargo test`, yet three of them leak, each in a way that is common
//! in real code:
//!
//! - `cache::tests::repeated_requests_hit_the_cache` — **leak** (still reachable): the global
//!   response cache is never pruned, so it grows with every distinct request.
//! - `tree::tests::paths_follow_parent_links` — **leak**: parent and child hold strong `Rc`s to
//!   each other (the parent link should be a `Weak`), so the tree is never freed.
//! - `frame::tests::frame_starts_with_length` — **leak**: the test encodes a frame and forgets
//!   to give its buffer back with `frame::release`.
//! - `frame::tests::frame_round_trip`, `tree::tests::lone_node_is_its_own_root` — clean.
//! - `config::tests::defaults_are_sane` — clean: the `LazyLock` configuration is built once
//!   and kept for the life of the process. cargo-leakcheck lists it as one-time
//!   initialisation, which does not fail a test.
//!
//! For each leaking test, `cargo leakcheck test` reports the bytes still held when the test
//! ended and the stack that allocated them, down to the allocating line (marked in the source
//! with a `leak-site` comment). Fix a leak (bound the cache, make the parent link a `Weak`,
//! call `release`) and the test comes out clean.

pub mod cache;
pub mod config;
pub mod frame;
pub mod tree;
