#!/usr/bin/env bash
# What tracking every allocation would cost the counting pass: a small program that
# allocates and frees ~6 million small objects per thread, run plain, under the preloaded
# runtime, with every allocation's address tracked (stacks sampled so rarely that none is
# taken), and with every stack taken (the stacks pass). Best of 3, on 1 and 2 threads.
#
# Usage: bash bench/tracking_cost.sh [--runtime PATH-TO-libleakcheck_runtime.so]
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=target/release/libleakcheck_runtime.so
[ "${1:-}" = --runtime ] && runtime=$2
[ -f "$runtime" ] || cargo build --release -p leakcheck-runtime >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rustc -O -o "$work/alloc" bench/tracking_cost.rs
best() {
  local best=
  for _ in 1 2 3; do
    local s e
    s=$(date +%s%N)
    "$@" >/dev/null
    e=$(date +%s%N)
    local ms=$(((e - s) / 1000000))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  echo "$best"
}
rt=$(realpath "$runtime")
printf '%-8s %8s %10s %14s %12s\n' threads plain preloaded addresses stacks
for t in 1 2; do
  plain=$(best "$work/alloc" "$t")
  pre=$(best env LD_PRELOAD="$rt" "$work/alloc" "$t")
  addr=$(best env LD_PRELOAD="$rt" LEAKCHECK_TRACK=1 LEAKCHECK_TRACK_SAMPLE=1000000000000000 "$work/alloc" "$t")
  stacks=$(best env LD_PRELOAD="$rt" LEAKCHECK_TRACK=1 "$work/alloc" "$t")
  printf '%-8s %6s ms %8s ms %12s ms %10s ms\n' "$t" "$plain" "$pre" "$addr" "$stacks"
done
