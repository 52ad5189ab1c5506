#!/usr/bin/env bash
# What the counting pass costs a test whose time is all in malloc and free: bench/alloc-heavy's
# one test (ten million small allocations, nothing retained), as a plain process and as the
# counting pass's process (the runtime preloaded, counting mode), back to back, best of N.
# The counting pass's time is the process time cargo-leakcheck records in metrics.json.
#
# Usage: bench/alloc_heavy.sh [--repeat N] [--tool PATH] [--release]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repeat=3
tool=""
profile=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --release) profile=(--release); shift ;;
    *) echo "alloc_heavy.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$tool" ]; then
  cargo build --release --locked -q --manifest-path "$here/Cargo.toml" -p cargo-leakcheck
  tool="$here/target/release/cargo-leakcheck"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/bench/alloc-heavy" "$work/crate"
cd "$work/crate"
test_name=tests::ten_million_small_allocations
bin=$(cargo test "${profile[@]}" --no-run --message-format=json -q 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])')
"$tool" leakcheck test -q "${profile[@]}" >/dev/null 2>&1 || true   # builds, writes the runtime

python3 - "$bin" "$test_name" "$tool" "$repeat" "${profile[@]}" <<'PY'
import json, subprocess, sys, time
binary, test, tool, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5:]
plain, counted = [], []
for _ in range(repeat):
    start = time.monotonic()
    subprocess.run([binary, "--exact", test, "--nocapture"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    plain.append(time.monotonic() - start)
    subprocess.run([tool, "leakcheck", "test", "-q", *extra], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = json.load(open("target/leakcheck/metrics.json"))
    report = json.load(open("target/leakcheck/report.json"))
    [entry] = [t for t in metrics["tests"] if t["test"] == test and t["pass"] == "count"]
    [verdict] = [(t["verdict"], t["method"]) for t in report["tests"] if t["name"] == test]
    assert verdict == ("clean", "counters"), verdict
    counted.append(entry["seconds"])
best_plain, best_counted = min(plain), min(counted)
print(f"plain process     {best_plain:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in plain)})")
print(f"counting pass     {best_counted:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in counted)})")
print(f"ratio             {best_counted / best_plain:.2f}x")
PY
