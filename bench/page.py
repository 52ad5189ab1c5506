#!/usr/bin/env python3
"""How big and how quick the HTML page of a large run is.

Runs `cargo leakcheck test` on the leaky fixture once, then grows its report.json to
--tests tests (copies of its tests under new names, a quarter of them leaking, with their
stacks), and times `cargo leakcheck merge` writing the page of that report, and headless
chromium loading it with and without a filter (`--dump-dom`, which returns once the page's
script has run). Prints the page's size and the times, best of --repeat.

Usage: bench/page.py [--tool PATH] [--tests N] [--repeat N]
Needs chromium (ci/install-deps.sh installs it); not run in CI.
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--tool")
ap.add_argument("--tests", type=int, default=2000)
ap.add_argument("--repeat", type=int, default=3)
args = ap.parse_args()
tool = args.tool
if not tool:
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "cargo-leakcheck"], cwd=here, check=True)
    tool = os.path.join(here, "target/release/cargo-leakcheck")
tool = os.path.abspath(tool)
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    sys.exit("page.py: chromium is missing (ci/install-deps.sh installs it)")

work = tempfile.mkdtemp(prefix="leakcheck-page-")
fixture = os.path.join(work, "leaky")
shutil.copytree(os.path.join(here, "tests/fixtures/leaky"), fixture)
subprocess.run([tool, "leakcheck", "test", "-q"], cwd=fixture, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
report = json.load(open(os.path.join(fixture, "target/leakcheck/report.json")))
leaks = [t for t in report["tests"] if t["verdict"] == "leak"]
cleans = [t for t in report["tests"] if t["verdict"] != "leak"]
tests = []
for i in range(args.tests):
    source = leaks[i % len(leaks)] if i % 4 == 0 else cleans[i % len(cleans)]
    t = copy.deepcopy(source)
    t["name"] = f"generated::t{i:05}::{source['name']}"
    # The flame graph of the copy is not there: no dangling link in the page.
    t["artifacts"] = {}
    tests.append(t)
tests.sort(key=lambda t: (t["binary"], t["name"]))
report["tests"] = tests
big = os.path.join(work, "big")
os.makedirs(big)
json.dump(report, open(os.path.join(big, "report.json"), "w"))


def best(f):
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


out = os.path.join(work, "merged")


def merge():
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([tool, "leakcheck", "merge", big, "--output-dir", out],
                   cwd=fixture, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


merge_s = best(merge)
page = os.path.join(out, "index.html")
size = os.path.getsize(page)
profile = os.path.join(work, "profile")


def load(fragment):
    def go():
        r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            f"--user-data-dir={profile}", "--dump-dom",
                            f"file://{page}#{fragment}"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert r.returncode == 0 and b"generated::t00000" in r.stdout
    return go


# An empty page, for what chromium itself costs to start.
empty = os.path.join(work, "empty.html")
open(empty, "w").write("<!DOCTYPE html><title>x</title><p>generated::t00000")
def load_empty():
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--user-data-dir={profile}", "--dump-dom", f"file://{empty}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


empty_s = best(load_empty)
all_s = best(load(""))
leak_s = best(load("verdict=leak"))
print(f"{args.tests} tests ({sum(1 for t in tests if t['verdict'] == 'leak')} leaking): "
      f"page {size / 1024:.0f} KiB; merge writing it {merge_s:.2f} s; "
      f"chromium --dump-dom: empty page {empty_s:.2f} s, the page {all_s:.2f} s, "
      f"filtered to leaks {leak_s:.2f} s (best of {args.repeat})")
shutil.rmtree(work)
