#!/usr/bin/env bash
# `cargo leakcheck run` on two services: the webapp fixture, and tiny_http 0.12.0's
# `hello-world` example (a published HTTP server nobody here wrote), built from the crate's
# own sources as its users build it, clean and with a leak patched in.
#
# Prints, for each service, the time the same curl load (--requests in all, from --clients
# curl processes at once, each over one keep-alive connection) takes against the plain
# release binary and under `cargo leakcheck run` (best of --repeat each, back to back), and
# their ratio as throughput; the verdicts and exit codes of tiny_http clean and patched;
# and, with --soak SECS, the tool's peak RSS and the snapshots on disk over a run of that
# long under continuous load.
#
# Usage: bench/run_service.sh [--tool PATH] [--requests N] [--clients K] [--repeat N]
#                              [--soak SECS [--soak-exact] [--soak-only]]
# Needs curl, and the crate registry (tiny_http is fetched by cargo); not run in CI.
set -euo pipefail
tool=""
requests=20000
repeat=3
soak=0
clients=4
soak_mode=""
compare_too=1
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --soak) soak=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --soak-exact) soak_mode=--exact; shift ;;
    --soak-only) compare_too=0; shift ;;
    *) echo "run_service.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v curl >/dev/null || { echo "run_service.sh: curl is missing" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
# Line tables in the release builds, so reports name lines (a release build without them
# names functions only).
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
work=${TMPDIR:-/tmp}/leakcheck-run-service
rm -rf "$work" && mkdir -p "$work"
if [ -n "$tool" ]; then tool=$(cd "$(dirname "$tool")" && pwd)/$(basename "$tool"); fi
if [ -z "$tool" ]; then
  echo "== building cargo-leakcheck (release)" >&2
  cargo build --release --quiet --manifest-path "$here/Cargo.toml" -p cargo-leakcheck
  tool="$here/target/release/cargo-leakcheck"
fi

wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
ms_now() { date +%s%N | cut -c1-13; }
# The load, timing itself into $work/load_ms.
# $clients curl processes at once, each with its share of the requests.
load_cmd() {
  local share=$((requests / clients))
  echo "s=\$(date +%s%N); for c in \$(seq $clients); do curl -s \"http://127.0.0.1:$1/$2?c=\$c&n=[1-$share]\" > /dev/null & done; wait; e=\$(date +%s%N); echo \$(( (e - s) / 1000000 )) > $work/load_ms"
}
min() { python3 -c "print(min([$(IFS=,; echo "$*")]))"; }

# plain NAME EXE PORT PATH ARGS...: the load against the plain binary, ms.
plain() {
  local exe=$2 port=$3 path=$4; shift 4
  "$exe" "$@" >/dev/null 2>&1 &
  local pid=$!
  wait_port "$port"
  bash -c "$(load_cmd "$port" "$path")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  cat "$work/load_ms"
}

# checked DIR PORT PATH CODE RUNARGS...: the load under `cargo leakcheck run`, ms; the run
# must exit with CODE.
checked() {
  local dir=$1 port=$2 path=$3 code=$4; shift 4
  local got=0
  # shellcheck disable=SC2086 # $sel is a list of words
  (cd "$dir" && "$tool" leakcheck run --release $sel --ready-port "$port" --load "$(load_cmd "$port" "$path")" "$@" \
    > "$work/run.out" 2>&1) || got=$?
  if [ "$got" != "$code" ]; then
    echo "run_service.sh: expected exit $code, got $got:" >&2; cat "$work/run.out" >&2; exit 1
  fi
  cat "$work/load_ms"
}

# Plain, `run` (sampled stacks) and `run --exact` (every stack), back to back, best of
# --repeat each.
compare() {
  local name=$1 dir=$2 exe=$3 port=$4 path=$5 code=$6; shift 6
  local plains=() runs=() helds=()
  for _ in $(seq "$repeat"); do
    plains+=("$(plain "$name" "$exe" "$port" "$path" "$@")")
    helds+=("$(checked "$dir" "$port" "$path" "$code" --exact -- "$@")")
    # Last, so that run.out is the default run's: it must name the holder too.
    runs+=("$(checked "$dir" "$port" "$path" "$code" -- "$@")")
  done
  local p r h
  p=$(min "${plains[@]}"); r=$(min "${runs[@]}"); h=$(min "${helds[@]}")
  printf '%-34s plain %5s ms; run %5s ms: %s of plain throughput; run --exact %5s ms: %s (all: plain %s; run %s; --exact %s)\n' \
    "$name ($requests requests, $clients clients)" "$p" "$r" "$(python3 -c "print(f'{$p / $r:.2f}x')")" \
    "$h" "$(python3 -c "print(f'{$p / $h:.2f}x')")" "${plains[*]}" "${runs[*]}" "${helds[*]}"
}

echo "== webapp fixture" >&2
sel=""
cp -r "$here/tests/fixtures/webapp" "$work/webapp"
cargo build --release --quiet --manifest-path "$work/webapp/Cargo.toml"
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
if [ "$compare_too" = 1 ]; then
compare "webapp /item (clean)" "$work/webapp" "$work/webapp/target/release/webapp" "$port" item 0 --port "$port"
compare "webapp /login (leaks)" "$work/webapp" "$work/webapp/target/release/webapp" "$port" login 3 --port "$port"

echo "== tiny_http 0.12.0, examples/hello-world.rs" >&2
mkdir -p "$work/fetch/src"
printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\ntiny_http = "=0.12.0"\n[workspace]\n' > "$work/fetch/Cargo.toml"
echo 'fn main() {}' > "$work/fetch/src/main.rs"
cargo fetch --quiet --manifest-path "$work/fetch/Cargo.toml"
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/tiny_http-0.12.0 | head -1)
cp -r "$src" "$work/tiny_http"
printf '\n[workspace]\n' >> "$work/tiny_http/Cargo.toml"
# Its examples build with its dev-dependencies; for its rust-version the resolver picks
# rustc-serialize 0.3.24, which today's rustc rejects (E0310); 0.3.25 is the fix.
(cd "$work/tiny_http" && cargo update --quiet -p rustc-serialize --precise 0.3.25)
(cd "$work/tiny_http" && cargo build --release --quiet --example hello-world)
sel="--example hello-world"
compare "tiny_http hello-world (clean)" "$work/tiny_http" "$work/tiny_http/target/release/examples/hello-world" 9975 hello 0
# The leak: every request's URL kept in a static list nothing empties.
python3 - "$work/tiny_http/examples/hello-world.rs" <<'EOF'
import sys
p = sys.argv[1]; s = open(p).read()
s = s.replace("use std::thread;", "use std::thread;\n\nstatic SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());")
s = s.replace("            for rq in server.incoming_requests() {",
              "            for rq in server.incoming_requests() {\n                SEEN.lock().unwrap().push(rq.url().to_string()); // the patched leak")
open(p, "w").write(s)
EOF
line=$(grep -n "the patched leak" "$work/tiny_http/examples/hello-world.rs" | cut -d: -f1)
(cd "$work/tiny_http" && cargo build --release --quiet --example hello-world)
compare "tiny_http hello-world (patched)" "$work/tiny_http" "$work/tiny_http/target/release/examples/hello-world" 9975 hello 3
grep -q "hello-world.rs:$line)" "$work/run.out" || { echo "the patched line $line is not named:" >&2; cat "$work/run.out" >&2; exit 1; }
grep -q "held by static \`hello_world::SEEN\`" "$work/run.out" || { echo "the holder is not named:" >&2; cat "$work/run.out" >&2; exit 1; }
echo "tiny_http patched: named $(grep -o "at [^ ]* (examples/hello-world.rs:$line)" "$work/run.out" | head -1), $(grep -o "held by [^(]*" "$work/run.out" | head -1)"
fi

if [ "$soak" -gt 0 ]; then
  echo "== soak: webapp under run for $soak s of continuous load" >&2
  port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  load="end=\$(( \$(date +%s) + $soak )); while [ \$(date +%s) -lt \$end ]; do curl -s 'http://127.0.0.1:$port/item?n=[1-20000]' > /dev/null; done"
  (cd "$work/webapp" && exec "$tool" leakcheck run --release $soak_mode --ready-port "$port" --load "$load" --load-timeout $((soak + 300)) -- --port "$port" > "$work/soak.out" 2>&1) &
  pid=$!
  peak=0; samples=()
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ -n "$rss" ] && [ "$rss" -gt "$peak" ] && peak=$rss
    samples+=("$rss")
    sleep 1
  done
  wait "$pid" || true
  dumps=$(find "$work/webapp/target/leakcheck/dumps" -name '*.heap' | wc -l)
  disk=$(du -sh "$work/webapp/target/leakcheck/dumps" | cut -f1)
  printf 'soak %s s: tool peak RSS %s KiB; RSS every 60 s (KiB): %s; %s snapshots on disk (%s); verdict line: %s\n' \
    "$soak" "$peak" "$(printf '%s\n' "${samples[@]}" | awk 'NR % 60 == 1' | tr '\n' ' ')" "$dumps" "$disk" "$(grep -E 'Summary' "$work/soak.out" | head -1)"
  grep -E '^ *Memory|snapshots taken' "$work/soak.out" | tail -2
fi
