#!/usr/bin/env bash
# `cargo leakcheck diff` against jemalloc's own `jeprof --base=A B --collapsed` on the same two
# dumps of the service fixture (a debug build, sampled at lg_prof_sample:19): the totals
# must agree (within 1%), and the time of each is printed, best of N.
#
# Usage: bench/heap_diff.sh [--repeat N] [--tool PATH]
# Needs jeprof (Debian: `apt-get install libjemalloc-dev`); not run in CI.
set -euo pipefail
repeat=3
tool=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    *) echo "heap_diff.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v jeprof >/dev/null || { echo "heap_diff.sh: jeprof is missing (apt-get install libjemalloc-dev)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
work=${TMPDIR:-/tmp}/leakcheck-heap-diff
mkdir -p "$work"
if [ -z "$tool" ]; then
  echo "== building cargo-leakcheck (release)" >&2
  cargo build --release --quiet --manifest-path "$here/Cargo.toml" -p cargo-leakcheck
  tool="$here/target/release/cargo-leakcheck"
fi
echo "== building the service fixture (debug)" >&2
rm -rf "$work/service" && cp -r "$here/tests/fixtures/service" "$work/service"
cargo build --quiet --locked --manifest-path "$work/service/Cargo.toml" --target-dir "$work/target"
service="$work/target/debug/service"
_RJEM_MALLOC_CONF=prof:true,lg_prof_sample:19 "$service" "$work/base.heap" "$work/new.heap"

secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); python3 -c "print(f'{$e - $s:.3f}')"; }
best() { local b=""; for _ in $(seq "$repeat"); do t=$(secs "$@"); b=$(python3 -c "print(min(x for x in [$t, ${b:-1e9}]))"); done; echo "$b"; }

jeprof --base="$work/base.heap" "$service" "$work/new.heap" --collapsed > "$work/jeprof.folded" 2>/dev/null
"$tool" leakcheck diff "$work/base.heap" "$work/new.heap" --output-dir "$work/ours" 2>/dev/null
jt=$(awk '{s += $NF} END {print s}' "$work/jeprof.folded")
# jeprof's collapsed stacks carry what shrank as negative weights: its total is the net
# change, which growth.json gives as `net` (growth.folded has only what grew).
ot=$(python3 -c "import json; print(json.load(open('$work/ours/growth.json'))['net']['bytes'])")
t_jeprof=$(best jeprof --base="$work/base.heap" "$service" "$work/new.heap" --collapsed)
t_ours=$(best "$tool" leakcheck diff "$work/base.heap" "$work/new.heap" --output-dir "$work/ours")
printf 'dumps: %s stacks in the new one, %s bytes of binary\n' "$(grep -c '^@' "$work/new.heap")" "$(stat -c %s "$service")"
printf 'net change, bytes: jeprof %s, cargo-leakcheck %s (%s)\n' "$jt" "$ot" \
  "$(python3 -c "print(f'{abs($ot - $jt) / max($jt, 1) * 100:.3f}% apart')")"
printf 'time, best of %s: jeprof %s s, cargo-leakcheck diff %s s (all outputs: svg, folded, pprof, json): %sx faster\n' \
  "$repeat" "$t_jeprof" "$t_ours" "$(python3 -c "print(f'{$t_jeprof / $t_ours:.1f}')")"
python3 -c "import sys; sys.exit(0 if abs($ot - $jt) <= 0.01 * max($jt, 1) else 1)" || { echo "totals differ by more than 1%" >&2; exit 1; }
