#!/usr/bin/env bash
# Measures the cost of installing: the time of `cargo install --locked --path cargo-leakcheck`
# from an empty target directory (jemalloc and the runtime are built here), then the README's
# example run with an empty runtime cache, split into the example's own build and the rest.
# Usage: bash bench/install_first_run.sh [SCRATCH_DIR]   (the crates registry must be warm)
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-/tmp/leakcheck-install-bench}"
rm -rf "$work" && mkdir -p "$work"

start=$(date +%s.%N)
CARGO_TARGET_DIR="$work/target" cargo install --locked --quiet --path cargo-leakcheck --root "$work/root"
install_s=$(echo "$(date +%s.%N) - $start" | bc)

export PATH="$work/root/bin:$PATH" LEAKCHECK_CACHE_DIR="$work/cache"
start=$(date +%s.%N)
set +e
"$work/root/bin/cargo-leakcheck" leakcheck test --manifest-path examples/demo/Cargo.toml \
  --target-dir "$work/demo-target" >"$work/run.log" 2>&1
code=$?
set -e
run_s=$(echo "$(date +%s.%N) - $start" | bc)
build_s=$(sed -n 's/.*Finished .* in \([0-9.]*\)s.*/\1/p' "$work/run.log" | head -n 1)

printf 'install (empty target dir):           %6.1f s\n' "$install_s"
printf 'first run of the example (exit %s):    %6.1f s, of which cargo building the example %s s\n' "$code" "$run_s" "${build_s:-?}"
printf 'runtime builds during the first run:  %s\n' "$(grep -c 'Building the leakcheck runtime' "$work/run.log" || true)"
ls "$work/cache"
