#!/usr/bin/env bash
# Wall time of `cargo nextest run`, `cargo leakcheck nextest` and `cargo leakcheck test`
# on one crate's own test suite, after a warm build, and whether the two cargo-leakcheck
# runs give the same verdicts. Usage: bench/nextest_compare.sh CRATE_DIR [NEXTEST ARGS…]
# (cargo-leakcheck and cargo-nextest on PATH; the crate has an empty [workspace] table).
set -uo pipefail
dir=$(cd "$1" && pwd); shift
cd "$dir"
cargo test --no-run -q >/dev/null 2>&1 || { echo "$dir: the tests do not build"; exit 1; }
cargo nextest run --no-run -q "$@" >/dev/null 2>&1
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; local rc=$?; e=$(date +%s.%N); printf '%.1f %s' "$(echo "$e - $s" | bc)" "$rc"; }
read -r nt nrc <<<"$(secs cargo nextest run --no-fail-fast "$@")"
read -r lt lrc <<<"$(secs cargo leakcheck test)"
cp target/leakcheck/report.json /tmp/lc-test-report.json
read -r xt xrc <<<"$(secs cargo leakcheck nextest --no-fail-fast "$@")"
cp target/leakcheck/report.json /tmp/lc-nextest-report.json
echo "$(basename "$dir"): cargo nextest run ${nt}s (exit $nrc); cargo leakcheck test ${lt}s (exit $lrc); cargo leakcheck nextest ${xt}s (exit $xrc)"
python3 - <<'PY'
import json
def load(p):
    r = json.load(open(p))
    return {(t['binary'], t['name']): t['verdict'] for t in r['tests']}
a, b = load('/tmp/lc-test-report.json'), load('/tmp/lc-nextest-report.json')
both = set(a) & set(b)
differ = sorted(k for k in both if a[k] != b[k])
print(f"    {len(a)} tests under test, {len(b)} under nextest, {len(both)} in both, {len(differ)} with different verdicts")
for k in differ:
    print(f"    differs: {k[0]} {k[1]}: test={a[k]} nextest={b[k]}")
for name, r in (('test', a), ('nextest', b)):
    bad = sorted(k for k, v in r.items() if v != 'clean')
    for k in bad:
        print(f"    {name}: {k[0]} {k[1]} {r[k]}")
PY
