#!/usr/bin/env bash
# A bench that grows in a few hundred milliseconds, judged on an idle machine and with both
# cores kept busy: the verdict must be `leak` (growing) every time, whatever the speed. Prints
# each run's verdict, snapshots and the length of the judged series.
#
# Usage: bench/short_bench.sh [--runs N] [--tool PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=3
tool="$here/target/release/cargo-leakcheck"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    *) echo "short_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$tool" ] || (cd "$here" && cargo build --release -q)
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
cp -r "$here/tests/fixtures/benches" "$work/benches"
cd "$work/benches"
one() {
  "$tool" leakcheck bench --bench interns --bench instant >/dev/null 2>&1 || true
  python3 - <<'PY'
import json
r = json.load(open("target/leakcheck/report.json"))
for b in r["benches"]:
    print(f'  {b["name"]:<8} {b["verdict"]:<10} {b["snapshots"]:>3} snapshots over {b["duration_seconds"]:.2f} s')
PY
}
echo "idle:"
for _ in $(seq "$runs"); do one; done
echo "both cores busy:"
for _ in 1 2; do (while :; do :; done) & done
for _ in $(seq "$runs"); do one; done
