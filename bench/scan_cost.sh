#!/usr/bin/env bash
# What retention paths cost on a heap of about a million live objects: the reachability
# scan (sort and mark) of a test judged by reachability, without paths
# (LEAKCHECK_PATHS=0) and with them, time and memory, best of N, back to back.
#
# Usage: bench/scan_cost.sh [--repeat N] [--tool PATH]
set -euo pipefail
repeat=3
tool=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    *) echo "scan_cost.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
work=${TMPDIR:-/tmp}/leakcheck-scan-cost
if [ -z "$tool" ]; then
  echo "== building cargo-leakcheck (release)" >&2
  cargo build --release --quiet --manifest-path "$here/Cargo.toml" -p cargo-leakcheck
  tool="$here/target/release/cargo-leakcheck"
fi
tool=$(realpath "$tool")
rm -rf "$work" && mkdir -p "$work/src"
cat > "$work/Cargo.toml" <<'TOML'
[package]
name = "scan-cost"
version = "0.1.0"
edition = "2021"
publish = false

[workspace]
TOML
cat > "$work/src/lib.rs" <<'RUST'
//! A heap of about a million live objects, held three ways, at the exit of a test that
//! cannot run again (so it is judged by reachability).
use std::collections::HashMap;
use std::sync::Mutex;

pub struct Node {
    pub next: Option<Box<Node>>,
    pub value: u64,
}

pub static BOXES: Mutex<Vec<Box<[u64; 2]>>> = Mutex::new(Vec::new());
pub static LIST: Mutex<Option<Box<Node>>> = Mutex::new(None);
pub static MAP: Mutex<Option<HashMap<u64, String>>> = Mutex::new(None);

pub fn build() {
    BOXES.lock().unwrap().extend((0..500_000u64).map(|i| Box::new([i, i])));
    let mut list = LIST.lock().unwrap();
    for value in 0..250_000u64 {
        *list = Some(Box::new(Node { next: list.take(), value }));
    }
    *MAP.lock().unwrap() = Some((0..250_000u64).map(|i| (i, i.to_string())).collect());
}

#[cfg(test)]
mod tests {
    #[test]
    #[should_panic(expected = "judged by reachability")]
    fn a_million_live_objects() {
        super::build();
        panic!("judged by reachability");
    }
}
RUST
(cd "$work" && cargo generate-lockfile --offline --quiet && cargo test --offline --quiet --no-run 2>/dev/null)

# Best of N: prints "objects reached mark_us paths_us scan_bytes paths_bytes wall_s".
measure() {
  local best=""
  for _ in $(seq "$repeat"); do
    rm -rf "$work/target/leakcheck"
    local s e
    s=$(date +%s.%N)
    (cd "$work" && env "$@" LEAKCHECK_KEEP_DUMPS=1 "$tool" leakcheck test --extra-runs 0 >/dev/null 2>&1) || true
    e=$(date +%s.%N)
    local f
    f=$(ls "$work"/target/leakcheck/dumps/b0-t0-stacks-*.heap.paths.scan 2>/dev/null | head -1)
    [ -n "$f" ] || { echo "scan_cost.sh: no scan record (was the test judged by reachability?)" >&2; exit 1; }
    local line total
    line="$(cat "$f") $(python3 -c "print(f'{$e - $s:.2f}')")"
    total=$(echo "$line" | awk '{print $3 + $4}')
    if [ -z "$best" ] || [ "$total" -lt "$(echo "$best" | awk '{print $3 + $4}')" ]; then best=$line; fi
  done
  echo "$best"
}
without=$(measure LEAKCHECK_PATHS=0)
with=$(measure LEAKCHECK_PATHS=1)
python3 - "$without" "$with" <<'PY'
import sys
w = [float(x) for x in sys.argv[1].split()]
p = [float(x) for x in sys.argv[2].split()]
print(f"live objects scanned: {int(p[0]):,} ({int(p[1]):,} reached)")
print(f"scan without paths: {w[2] / 1000:.1f} ms marking, {w[4] / 2**20:.1f} MiB")
print(f"scan with paths:    {p[2] / 1000:.1f} ms marking + {p[3] / 1000:.1f} ms paths, "
      f"{(p[4] + p[5]) / 2**20:.1f} MiB")
t = (p[2] + p[3]) / max(w[2], 1)
m = (p[4] + p[5]) / max(w[4], 1)
print(f"ratio with/without: time {t:.2f}x, memory {m:.2f}x")
print(f"whole run (wall): without {w[6]:.2f} s, with {p[6]:.2f} s")
sys.exit(0 if t <= 2.0 else 1)
PY
