#!/usr/bin/env bash
# The packages as a registry would serve them: `cargo package --workspace` packs and verifies
# every crate (each built from its tarball, against the others packed beside it), then
# cargo-leakcheck is installed from those tarballs through a local registry that holds them
# and every crate they depend on, offline, and the bundled demo is checked with the installed
# tool: its three leaks found, exit 3. What a user's `cargo install cargo-leakcheck` fetches is
# what this builds.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"

# The workspace's dev-profile settings (which dependencies build optimised) go to the
# verifying builds too: a packed crate carries no workspace profile, and without them every
# dependency the workspace optimises, jemalloc's C build among them, is built a second time
# in the target directory the earlier steps filled.
profile=()
while IFS= read -r setting; do
  profile+=(--config "$setting")
done < <(awk '
  /^\[profile\.dev\.package\./ {
    package = $0
    sub(/^\[profile\.dev\.package\./, "", package)
    sub(/\][[:space:]]*$/, "", package)
    next
  }
  /^\[/ { package = ""; next }
  package != "" && /^[a-z-]+[[:space:]]*=/ {
    key = $1
    value = $0
    sub(/^[^=]*=[[:space:]]*/, "", value)
    printf "profile.dev.package.%s.%s=%s\n", package, key, value
  }
' Cargo.toml)

echo "== cargo package --workspace (verified)"
cargo package --workspace --locked "${profile[@]}" 2>&1 | tee "$work/package.log"
if grep -q '^warning: manifest has no' "$work/package.log"; then
  echo "== cargo package: a manifest lacks metadata (see the warnings above)" >&2
  exit 1
fi

# The local registry: every dependency of the workspace, as `cargo vendor` lays them out,
# and the packed crates beside them. A directory source checks each crate against the
# checksum its lock file names: the packed crates' are their tarballs' SHA-256.
registry="$work/registry"
cargo vendor --locked --versioned-dirs --quiet "$registry" >/dev/null
for crate in target/package/*-"$version".crate; do
  name="$(basename "$crate" .crate)"
  rm -rf "${registry:?}/$name"
  tar -xzf "$crate" -C "$registry"
  sum="$(sha256sum "$crate" | cut -d' ' -f1)"
  printf '{"files":{},"package":"%s"}\n' "$sum" >"$registry/$name/.cargo-checksum.json"
done

echo "== cargo install cargo-leakcheck $version from the packed crates (local registry, offline)"
root="$work/root"
cargo install cargo-leakcheck --version "=$version" --locked --offline --root "$root" \
  --config "source.crates-io.replace-with='packed'" \
  --config "source.packed.directory='$registry'"

echo "== the installed tool on the bundled demo"
code=0
out=$(PATH="$root/bin:$PATH" CARGO_TARGET_DIR="$work/demo-target" \
  cargo leakcheck test --manifest-path examples/demo/Cargo.toml 2>&1) || code=$?
echo "$out" | tail -n 20
if [ "$code" -ne 3 ] || [ "$(grep -c 'LEAK leakcheck_demo' <<<"$out")" -ne 3 ]; then
  echo "== the installed tool on the demo: expected exit 3 with its three leaks, got exit $code" >&2
  exit 1
fi
echo "== installed from the packed crates: the demo's three leaks, exit 3"
