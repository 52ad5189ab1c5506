#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the end-to-end tests that run
# the built cargo-leakcheck on the fixture crates. This is the README's test command and
# what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install-deps.sh
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
