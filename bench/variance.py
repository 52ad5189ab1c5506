#!/usr/bin/env python3
"""How much a suite's time varies from run to run, under `cargo nextest run` and under
`cargo leakcheck test`: both run back to back K times on a crate already prepared by
bench/real_suites.sh (its tests built). Prints each run's wall time, the slowest tests of
each run (nextest's own per-test times; the tool's from metrics.json: the test's own run
and what its extra runs added), and the spread (max/min) of the totals.

Usage: bench/variance.py DIR [--runs K] [--tool PATH] [--top N]
  DIR      a prepared crate, e.g. /tmp/leakcheck-real/crossbeam-queue-0.3.14
Run it on an otherwise idle machine: it measures wall time.
"""
import argparse
import json
import os
import re
import subprocess
import time


def nextest(dir):
    start = time.monotonic()
    out = subprocess.run(["cargo", "nextest", "run", "--no-fail-fast"], cwd=dir,
                         capture_output=True, text=True)
    took = time.monotonic() - start
    per_test = {}
    for line in (out.stdout + out.stderr).splitlines():
        m = re.search(r"(?:PASS|FAIL|SLOW|TIMEOUT) \[\s*([0-9.]+)s\] (?:\(\s*\d+/\d+\) )?(\S+) (\S+)$", line)
        if m:
            per_test[f"{m.group(2)} {m.group(3)}"] = float(m.group(1))
    return took, per_test


def leakcheck(dir, tool):
    start = time.monotonic()
    subprocess.run([tool, "leakcheck", "test", "-q"], cwd=dir, capture_output=True)
    took = time.monotonic() - start
    metrics = json.load(open(os.path.join(dir, "target/leakcheck/metrics.json")))
    per_test = {}
    for t in metrics["tests"]:
        cost = t.get("cost")
        if cost:
            per_test[f'{t["binary"]} {t["test"]}'] = (cost["own_seconds"], cost["extra_seconds"])
    return took, per_test


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tool", default="cargo-leakcheck")
    p.add_argument("--top", type=int, default=3)
    a = p.parse_args()
    nt, lc = [], []
    for k in range(1, a.runs + 1):
        t, tests = nextest(a.dir)
        nt.append(t)
        top = sorted(tests.items(), key=lambda x: -x[1])[: a.top]
        print(f"run {k} nextest   {t:6.1f} s  slowest: "
              + ", ".join(f"{n} {s:.2f} s" for n, s in top))
        t, tests = leakcheck(a.dir, a.tool)
        lc.append(t)
        top = sorted(tests.items(), key=lambda x: -(x[1][0] + x[1][1]))[: a.top]
        print(f"run {k} leakcheck {t:6.1f} s  slowest: "
              + ", ".join(f"{n} {o:.2f} s own + {e:.2f} s extra" for n, (o, e) in top))
    for name, xs in (("nextest", nt), ("leakcheck", lc)):
        print(f"{name:9} min {min(xs):.1f} s, median {sorted(xs)[len(xs) // 2]:.1f} s, "
              f"max {max(xs):.1f} s, spread (max/min) {max(xs) / min(xs):.2f}")


if __name__ == "__main__":
    main()
