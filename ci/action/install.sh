#!/usr/bin/env bash
# The action's install step. Installs cargo-leakcheck with cargo: from crates.io at
# $LEAKCHECK_VERSION, or, when that is empty, from the source the action was checked out
# with ($LEAKCHECK_SOURCE, pinned by the workflow's @REF). Does nothing when that version
# is already on PATH (a cached ~/.cargo/bin, a self-hosted runner). The profiling runtime is
# built as part of the install, so the check itself builds only the project's tests.
set -euo pipefail

version="${LEAKCHECK_VERSION:-}"
source_dir="${LEAKCHECK_SOURCE:-}"

if [ -n "$version" ]; then
  want="${version#v}"
else
  if [ ! -f "$source_dir/cargo-leakcheck/Cargo.toml" ]; then
    echo "::error title=cargo-leakcheck::no cargo-leakcheck source at '$source_dir' and no version given"
    exit 2
  fi
  # The workspace's version (the package inherits it).
  want="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$source_dir/Cargo.toml" | head -n 1)"
fi

have="$(cargo-leakcheck leakcheck --version 2>/dev/null | head -n 1 || true)"
if [ "$have" = "cargo-leakcheck $want" ]; then
  echo "cargo-leakcheck $want is already installed: $(command -v cargo-leakcheck)"
  exit 0
fi
if [ -n "$have" ]; then
  echo "replacing $have with $want"
fi

if [ -n "$version" ]; then
  cargo install cargo-leakcheck --locked --version "=$want"
else
  cargo install cargo-leakcheck --locked --path "$source_dir/cargo-leakcheck"
fi
cargo-leakcheck leakcheck --version
