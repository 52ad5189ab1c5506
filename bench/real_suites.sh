#!/usr/bin/env bash
# What a leak check costs on real crates' own test suites: `cargo nextest run` and
# `cargo leakcheck test --no-doc` (nextest runs no doc-tests; bench/doctests.sh times those)
# timed back to back on each suite, with its tests already built,
# best of N, and the ratio. Also prints every non-clean verdict, the clean tests that needed
# more than one extra run, and checks the ones known
# from these suites (the leaks below, nothing else), and that the verdicts do not depend on
# the run: with --determinism K, K more runs of `cargo leakcheck test` and one more while a
# second job keeps both cores busy must give every test the same verdict as the timed runs.
#
# Usage: bench/real_suites.sh [--repeat N] [--determinism K] [--tool PATH] [--work DIR] [--tokio] [CRATE@VERSION…]
#   --repeat N   timed runs of each command per suite, the best counts (default 2)
#   --determinism K  K more runs, then one under load; verdicts compared (default 0: off)
#   --tool PATH  the cargo-leakcheck binary to time (default: a release build of this checkout)
#   --work DIR   where the crates are copied and built (default /tmp/leakcheck-real)
#   --tokio      also tokio 1.54.1's own suite (--features full,test-util), about 10 minutes
#   CRATE@VER    suites to time instead of the default list
# Needs cargo-nextest and crates.io. Run it on an otherwise idle machine: it measures wall time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repeat=2
determinism=0
tool=""
work=/tmp/leakcheck-real
tokio=0
crates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --determinism) determinism=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --tokio) tokio=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "real_suites.sh: unknown option $1" >&2; exit 2 ;;
    *) crates+=("$1"); shift ;;
  esac
done
if [ ${#crates[@]} -eq 0 ]; then
  crates=(rayon-core@1.13.0 crossbeam-epoch@0.9.21 crossbeam-channel@0.5.17 sharded-slab@0.1.7
          flume@0.11.1 memchr@2.8.3 indexmap@2.14.2 crossbeam-deque@0.8.8 crossbeam-queue@0.3.14
          concurrent-queue@2.5.0 arc-swap@1.9.5)
fi
[ "$tokio" = 1 ] && crates+=(tokio@1.54.1)

# Known verdicts: the leaks each suite has; every other test must be clean.
# (crossbeam-channel's select7 leaks only when its select strands a thread, so it may be either.)
expected_leaks() {
  case "$1" in
    rayon-core) echo "use_current_thread_basic" ;;
    crossbeam-channel) echo "chan1::main sieve1::main" ;;
    # Each abandons a runtime thread for good on purpose (shutdown_timeout); and
    # deadlocks_consistently wedges a two-worker runtime on purpose and leaves it, its
    # threads and its drivers behind on every run.
    tokio) echo "current_thread_scheduler::shutdown_timeout current_thread_scheduler::shutdown_timeout_0 threaded_scheduler_1_thread::shutdown_timeout threaded_scheduler_1_thread::shutdown_timeout_0 threaded_scheduler_4_threads::shutdown_timeout threaded_scheduler_4_threads::shutdown_timeout_0 deadlocks_consistently" ;;
    *) echo "" ;;
  esac
}
# Tests that fail under plain `cargo nextest run` too (tokio's try_exists fails as root).
known_failures() {
  case "$1" in
    tokio) echo "try_exists" ;;
    *) echo "" ;;
  esac
}
maybe_leaks() {
  case "$1" in
    crossbeam-channel) echo "select7::main" ;;
    *) echo "" ;;
  esac
}

if [ -z "$tool" ]; then
  echo "== building cargo-leakcheck (release)" >&2
  cargo build --release --locked -q --manifest-path "$here/Cargo.toml" -p cargo-leakcheck
  tool="$here/target/release/cargo-leakcheck"
fi
mkdir -p "$work/bin"
ln -sf "$(cd "$(dirname "$tool")" && pwd)/$(basename "$tool")" "$work/bin/cargo-leakcheck"
export PATH="$work/bin:$PATH"
command -v cargo-nextest >/dev/null || { echo "real_suites.sh: cargo-nextest is not installed" >&2; exit 2; }

# Brings each crate's published source into cargo's registry cache through a scratch project.
fetch_sources() {
  local dir="$work/fetch"
  mkdir -p "$dir/src"
  : > "$dir/src/lib.rs"
  {
    echo '[package]'; echo 'name = "fetch"'; echo 'version = "0.0.0"'; echo 'edition = "2021"'
    echo '[workspace]'; echo '[dependencies]'
    local i=0 c
    for c in "${crates[@]}"; do
      echo "dep$i = { package = \"${c%@*}\", version = \"=${c#*@}\", default-features = false }"
      i=$((i + 1))
    done
  } > "$dir/Cargo.toml"
  (cd "$dir" && cargo fetch -q)
}

# Copies a crate's source next to the others, as a workspace of its own, and builds its tests.
prepare() {
  local name=$1 version=$2 src dest
  dest="$work/$name-$version"
  if [ ! -f "$dest/.prepared" ]; then
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$name-$version" | head -n 1)
    rm -rf "$dest"
    cp -r "$src" "$dest"
    grep -q '^\[workspace\]' "$dest/Cargo.toml" || printf '\n[workspace]\n' >> "$dest/Cargo.toml"
    if [ "$name" = tokio ]; then
      # tokio-test and friends depend on tokio from crates.io: make them use this copy.
      printf '\n[patch.crates-io]\ntokio = { path = "." }\n' >> "$dest/Cargo.toml"
      # The published lock file pins crates.io's tokio for them: resolve again.
      rm -f "$dest/Cargo.lock"
    fi
    touch "$dest/.prepared"
  fi
  (cd "$dest" && cargo nextest run --no-run --cargo-quiet $(features "$name") >/dev/null 2>&1) ||
    { echo "$name $version: the tests do not build" >&2; return 1; }
  # Builds what cargo leakcheck builds (the same profile as cargo test) without running any test.
  (cd "$dest" && cargo leakcheck test -q --no-doc $(features "$name") -- --exact leakcheck-bench-no-such-test \
    >/dev/null 2>&1) || true
}

features() {
  case "$1" in
    tokio) echo "--features full,test-util" ;;
    *) echo "" ;;
  esac
}

secs() {
  local start end rc=0
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || rc=$?
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.1f} $rc')"
}

# Every test's verdict in a report, one `binary test verdict` line each, sorted.
verdicts_of() {
  python3 - "$1" <<'PY'
import json, sys
for t in sorted(json.load(open(sys.argv[1]))["tests"], key=lambda t: (t["binary"], t["name"])):
    print(t["binary"], t["name"], t["verdict"])
PY
}

# K more runs of the suite, then one while two busy loops load both cores: every test's
# verdict must be the one the last timed run gave.
check_determinism() {
  local dir=$1 name=$2 base k loaded diff_file
  base=$(verdicts_of "$dir/target/leakcheck/report.json")
  diff_file=$(mktemp)
  for k in $(seq "$determinism") loaded; do
    local pids=()
    if [ "$k" = loaded ]; then
      for _ in 1 2; do sh -c 'while :; do :; done' & pids+=($!); done
    fi
    (cd "$dir" && cargo leakcheck test -q --no-doc $(features "$name") >/dev/null 2>&1) || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
    if ! diff <(echo "$base") <(verdicts_of "$dir/target/leakcheck/report.json") > "$diff_file"; then
      echo "verdicts DIFFER in run $k: $(grep '^[<>]' "$diff_file" | head -n 6 | tr '\n' ';')"
      rm -f "$diff_file"
      return 1
    fi
  done
  rm -f "$diff_file"
  echo "verdicts identical over $((determinism + 1)) more runs, the last with both cores loaded"
}

fetch_sources
printf '%-24s %6s %12s %16s %7s  %s\n' suite tests "nextest (s)" "leakcheck (s)" ratio verdicts
failures=0
for c in "${crates[@]}"; do
  name=${c%@*}; version=${c#*@}
  prepare "$name" "$version" || { failures=$((failures + 1)); continue; }
  dir="$work/$name-$version"
  nt_best=""; lc_best=""; lc_rc=""; lc_all=""
  for _ in $(seq "$repeat"); do
    read -r t _rc <<<"$(cd "$dir" && secs cargo nextest run --no-fail-fast $(features "$name"))"
    nt_best=$(python3 -c "print(min(x for x in [$t, ${nt_best:-1e9}]))")
    read -r t rc <<<"$(cd "$dir" && secs cargo leakcheck test -q --no-doc $(features "$name"))"
    lc_rc=$rc
    lc_all="$lc_all $t"
    lc_best=$(python3 -c "print(min(x for x in [$t, ${lc_best:-1e9}]))")
  done
  summary=$(python3 - "$dir/target/leakcheck/report.json" "$(expected_leaks "$name")" "$(maybe_leaks "$name")" "$(known_failures "$name")" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
expected, maybe = set(sys.argv[2].split()), set(sys.argv[3].split())
failing = set(sys.argv[4].split())
tests = report["tests"]
bad = [t for t in tests if t["verdict"] != "clean"]
def known(t):
    return t["verdict"] == "leak" and (t["name"] in expected or t["name"] in maybe)
found = {t["name"] for t in bad if known(t)}
missing = sorted(expected - found)
# Not a leak, not clean: kept reachable memory its extra runs could not judge (they timed out).
unsettled = [t for t in bad if t["verdict"] == "unsettled"]
unexpected = [
    t for t in bad
    if not known(t) and t["verdict"] != "unsettled"
    and not (t["verdict"] == "failed" and t["name"] in failing)
]
words = [f"{len(tests)} judged, {len(bad)} not clean"]
words += [f"leak {t['name']}" for t in bad if known(t)]
words += [f"failed {t['name']} (fails under nextest too)" for t in bad
          if t["verdict"] == "failed" and t["name"] in failing]
words += [f"missing leak {m}" for m in missing]
words += [f"unsettled {t['name']}" for t in unsettled]
words += [f"UNEXPECTED {t['verdict']} {t['name']}" for t in unexpected]
# What judging cost: clean tests that needed more than one extra run (ideally none: a clean
# test that makes a second extra run pays its whole run again).
several = [t for t in tests if t["verdict"] == "clean" and t.get("extra_runs", {}).get("made", 0) > 1]
if several:
    words.append(f"{len(several)} clean with >1 extra run: " + ", ".join(
        f"{t['name']} ({t['extra_runs']['made']}, {t['method']})" for t in several[:6])
        + (", …" if len(several) > 6 else ""))
print(len(tests), "; ".join(words), "OK" if not missing and not unexpected else "DIFFERS")
PY
)
  read -r ntests rest <<<"$summary"
  ratio=$(python3 -c "print(f'{$lc_best / $nt_best:.2f}x')")
  printf '%-24s %6s %12s %16s %7s  %s (exit %s; each leakcheck run:%s s)\n' "$name $version" "$ntests" "$nt_best" "$lc_best" "$ratio" "$rest" "$lc_rc" "$lc_all"
  case "$rest" in *DIFFERS) failures=$((failures + 1)) ;; esac
  if [ "$determinism" -gt 0 ]; then
    same=$(check_determinism "$dir" "$name") || failures=$((failures + 1))
    printf '%-24s %s\n' "" "$same"
  fi
done
exit $((failures > 0))
