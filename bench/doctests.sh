#!/usr/bin/env bash
# What checking doc-tests costs on real crates: `cargo test --doc` and
# `cargo leakcheck test --doc` timed back to back on each crate, its library already built,
# best of N, and the ratio; with every doc-test's verdict, and the doc-tests rustdoc ran
# against those the tool judged (every one that ran must be judged).
#
# Usage: bench/doctests.sh [--repeat N] [--tool PATH] [--work DIR] [CRATE@VERSION[:FEATURES]…]
#   --repeat N   timed runs of each command per crate, the best counts (default 2)
#   --tool PATH  the cargo-leakcheck binary to time (default: a release build of this checkout)
#   --work DIR   where the crates are copied and built (default /tmp/leakcheck-doc)
#   CRATE@VER    crates to time instead of the default list; `:FEATURES` after one passes
#                `--features FEATURES`
# Needs crates.io. Run it on an otherwise idle machine: it measures wall time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repeat=2
tool=""
work=/tmp/leakcheck-doc
crates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "doctests.sh: unknown option $1" >&2; exit 2 ;;
    *) crates+=("$1"); shift ;;
  esac
done
if [ ${#crates[@]} -eq 0 ]; then
  crates=(rayon@1.12.0 regex@1.13.2 tokio@1.54.1:full)
fi
if [ -z "$tool" ]; then
  echo "== building cargo-leakcheck (release)" >&2
  cargo build --release --locked -q --manifest-path "$here/Cargo.toml" -p cargo-leakcheck
  tool="$here/target/release/cargo-leakcheck"
fi
mkdir -p "$work/bin"
ln -sf "$(cd "$(dirname "$tool")" && pwd)/$(basename "$tool")" "$work/bin/cargo-leakcheck"
export PATH="$work/bin:$PATH"

# Brings each crate's published source into cargo's registry cache through a scratch project.
mkdir -p "$work/fetch/src"
: > "$work/fetch/src/lib.rs"
{
  echo '[package]'; echo 'name = "fetch"'; echo 'version = "0.0.0"'; echo 'edition = "2021"'
  echo '[workspace]'; echo '[dependencies]'
  i=0
  for c in "${crates[@]}"; do
    spec=${c%%:*}
    echo "dep$i = { package = \"${spec%@*}\", version = \"=${spec#*@}\", default-features = false }"
    i=$((i + 1))
  done
} > "$work/fetch/Cargo.toml"
(cd "$work/fetch" && cargo fetch -q)

secs() {
  local start end rc=0
  start=$(date +%s.%N)
  "$@" >"$work/last.out" 2>&1 || rc=$?
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.1f} $rc')"
}

printf '%-20s %9s %16s %20s %7s  %s\n' crate doc-tests "cargo test (s)" "leakcheck (s)" ratio verdicts
for c in "${crates[@]}"; do
  spec=${c%%:*}; feats=""
  [ "$spec" != "$c" ] && feats="--features ${c#*:}"
  name=${spec%@*}; version=${spec#*@}
  dest="$work/$name-$version"
  if [ ! -f "$dest/.prepared" ]; then
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$name-$version" | head -n 1)
    rm -rf "$dest"; cp -r "$src" "$dest"
    grep -q '^\[workspace\]' "$dest/Cargo.toml" || printf '\n[workspace]\n' >> "$dest/Cargo.toml"
    touch "$dest/.prepared"
  fi
  # The library and the doc-tests' dependencies, built once for both commands.
  (cd "$dest" && cargo test --doc $feats -q -- --list >/dev/null 2>&1) || true
  ran=$(cd "$dest" && cargo test --doc $feats -- --list 2>/dev/null | grep -c ': test$' || true)
  ct_best=""; lc_best=""
  for _ in $(seq "$repeat"); do
    read -r t _rc <<<"$(cd "$dest" && secs cargo test --doc --no-fail-fast $feats)"
    ct_best=$(python3 -c "print(min(x for x in [$t, ${ct_best:-1e9}]))")
    read -r t _rc <<<"$(cd "$dest" && secs cargo leakcheck test --doc -q $feats)"
    lc_best=$(python3 -c "print(min(x for x in [$t, ${lc_best:-1e9}]))")
  done
  summary=$(python3 - "$dest/target/leakcheck/report.json" <<'PY'
import json, sys
from collections import Counter
report = json.load(open(sys.argv[1]))
tests = [t for t in report["tests"] if t["kind"] == "doc"]
counts = Counter(t["verdict"] for t in tests)
words = [", ".join(f"{n} {v}" for v, n in sorted(counts.items()))]
words += [f"{t['verdict']} {t['name']}" for t in tests if t["verdict"] not in ("clean",)][:8]
words += [n for n in report.get("notes", []) if "doc-test" in n]
print(len(tests), "; ".join(words))
PY
)
  judged=${summary%% *}
  ratio=$(python3 -c "print(f'{$lc_best / $ct_best:.2f}x')")
  printf '%-20s %9s %16s %20s %7s  %s\n' "$name" "$ran listed" "$ct_best" "$lc_best ($judged judged)" "$ratio" "${summary#* }"
done
