#!/usr/bin/env bash
# Installs what the project needs beyond a Rust toolchain: a C compiler and make, which
# tikv-jemalloc-sys uses to build jemalloc from source; curl, the load generator of the
# `run` end-to-end tests; chromium, the headless browser that checks the HTML report;
# cargo-nextest; and every crate the
# workspace, the fixture crates and the example need. Nothing else (no perl, jeprof,
# graphviz or valgrind) is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || missing+=(make)
# curl: the load of the `cargo leakcheck run` end-to-end tests.
command -v curl >/dev/null 2>&1 || missing+=(curl)
# chromium: the end-to-end tests open the HTML report in a headless browser and check what
# it shows.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/install-deps.sh: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}"
  fi
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }

# cargo-nextest: the end-to-end tests check `cargo leakcheck nextest`, which drives it.
# Installed from crates.io when missing (a few minutes, once).
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "ci/install-deps.sh: installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

# Every crate the workspace, the fixture crates and the bundled example need, fetched now
# (from each one's own Cargo.lock), so that no test depends on what happens to be in cargo's
# cache or on which other test ran first, and the tests themselves need no network.
echo "ci/install-deps.sh: fetching the crates of the workspace, fixtures and examples"
cargo fetch --locked --quiet --manifest-path Cargo.toml
for manifest in tests/fixtures/*/Cargo.toml examples/*/Cargo.toml; do
  cargo fetch --locked --quiet --manifest-path "$manifest" ||
    { echo "ci/install-deps.sh: cargo fetch failed for $manifest" >&2; exit 1; }
done
