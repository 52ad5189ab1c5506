#!/usr/bin/env python3
"""Measures what exact stack profiling costs in memory and time on a test with many live
allocations at its peak (bench/peak-suite: 1M boxes, then a one-byte leak), and prints a
markdown table: the test run plainly, and each pass of `cargo leakcheck test` on it.

Usage: python3 bench/profiling_memory.py [--tool PATH]
Builds under target/bench/peak-suite. Not a test: nothing is asserted.
"""

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORK = ROOT / "target" / "bench" / "peak-suite"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default=str(ROOT / "target" / "release" / "cargo-leakcheck"))
    args = ap.parse_args()
    if WORK.exists():
        shutil.rmtree(WORK / "src", ignore_errors=True)
    WORK.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "bench" / "peak-suite" / "src", WORK / "src", dirs_exist_ok=True)
    for f in ["Cargo.toml"]:
        shutil.copy(ROOT / "bench" / "peak-suite" / f, WORK / f)
    target = WORK / "target"
    built = subprocess.run(
        ["cargo", "test", "--no-run", "--message-format=json", "--target-dir", str(target)],
        cwd=WORK, capture_output=True, text=True, check=True,
    )
    exe = next(
        json.loads(l)["executable"]
        for l in built.stdout.splitlines()
        if l.startswith("{") and json.loads(l).get("executable")
    )
    test = "tests::a_million_boxes_at_peak_and_a_one_byte_leak"
    started = time.monotonic()
    plain = subprocess.run(
        ["/usr/bin/time", "-f", "%M", exe, "--exact", test],
        capture_output=True, text=True, check=True,
    )
    plain_s = time.monotonic() - started
    plain_kib = int(plain.stderr.strip().splitlines()[-1])
    started = time.monotonic()
    run = subprocess.run(
        [args.tool, "leakcheck", "test", "--target-dir", str(target)],
        cwd=WORK, capture_output=True, text=True,
    )
    tool_s = time.monotonic() - started
    metrics = json.loads((target / "leakcheck" / "metrics.json").read_text())
    print("| run | peak RSS | wall time |")
    print("|---|---|---|")
    print(f"| plain (`{pathlib.Path(exe).name} --exact …`) | {plain_kib / 1024:.0f} MiB | {plain_s:.2f} s |")
    for t in metrics["tests"]:
        print(f"| leakcheck {t['pass']} pass | {(t['peak_rss_kib'] or 0) / 1024:.0f} MiB | {t['seconds']:.2f} s |")
    print(f"| `cargo leakcheck test` in all (exit {run.returncode}) | | {tool_s:.2f} s |")


if __name__ == "__main__":
    sys.exit(main())
