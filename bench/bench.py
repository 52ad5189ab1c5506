#!/usr/bin/env python3
"""Measures what cargo-leakcheck costs, and prints the numbers as a markdown table.

For each suite (this project's fixtures, and the test suite of a real crates.io crate),
with the tests already built:
  - `cargo test`                          (libtest, all tests in one process per binary)
  - `cargo nextest run`                   (one process per test, no profiling), if installed
  - one process per test, no profiling    (this script; gives the plain peak RSS per test)
  - `cargo leakcheck test`                (one process per test, exact heap profiling)
and the peak RSS of the largest test process, plain and profiled.

Usage: python3 bench/bench.py [--jobs N] [--only fixtures|real] [--repeat N]
Everything is built and fetched under target/bench/. Not a test: nothing is asserted.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORK = ROOT / "target" / "bench"
REAL_CRATE = ("indexmap", "2.14.2")


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run(cmd, cwd=None, env=None, check=True, quiet=True):
    out = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.PIPE if quiet else None,
        text=True,
    )
    if check and out.returncode != 0:
        sys.exit(f"bench: `{' '.join(map(str, cmd))}` failed ({out.returncode}):\n{out.stderr}")
    return out


def timed(cmd, cwd, env=None, repeat=1):
    """Best-of-N wall time of a command (its exit code is returned, not checked)."""
    times, code = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
        code = p.returncode
    return min(times), code


def build_tool():
    log("building cargo-leakcheck (release)")
    run(["cargo", "build", "--release", "--locked", "-p", "cargo-leakcheck"], cwd=ROOT)
    return ROOT / "target" / "release" / "cargo-leakcheck"


def fetch_real_crate():
    """Fetches the crate's published source with cargo, through a throwaway project."""
    name, version = REAL_CRATE
    dest = WORK / f"{name}-{version}"
    if (dest / "Cargo.toml").exists():
        return dest
    proj = WORK / "fetch"
    (proj / "src").mkdir(parents=True, exist_ok=True)
    (proj / "src" / "lib.rs").write_text("")
    (proj / "Cargo.toml").write_text(
        f'[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n\n'
        f'[dependencies]\n{name} = "={version}"\n\n[workspace]\n'
    )
    log(f"fetching {name} {version} from crates.io")
    run(["cargo", "fetch", "--manifest-path", str(proj / "Cargo.toml")])
    meta = json.loads(run(["cargo", "metadata", "--format-version", "1", "--manifest-path", str(proj / "Cargo.toml")]).stdout)
    pkg = next(p for p in meta["packages"] if p["name"] == name)
    src = pathlib.Path(pkg["manifest_path"]).parent
    shutil.copytree(src, dest)
    # It lives under this workspace's target dir: make it its own workspace.
    with open(dest / "Cargo.toml", "a") as f:
        f.write("\n[workspace]\n")
    return dest


def test_binaries(manifest, target_dir):
    out = run(["cargo", "test", "--no-run", "--message-format=json", "--manifest-path", str(manifest), "--target-dir", str(target_dir)])
    bins = []
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
            bins.append((msg["executable"], pathlib.Path(msg["manifest_path"]).parent))
    return bins


def per_process(bins, jobs):
    """Runs every test in its own process without profiling; returns (seconds, tests,
    peak RSS KiB of the largest process, its test)."""
    cases = []
    for exe, cwd in bins:
        listed = run([exe, "--list", "--format", "terse"], cwd=cwd).stdout
        ignored = set(run([exe, "--list", "--format", "terse", "--ignored"], cwd=cwd).stdout.splitlines())
        for line in listed.splitlines():
            if line.endswith(": test") and line not in ignored:
                cases.append((exe, cwd, line[: -len(": test")]))

    def one(case):
        exe, _cwd, name = case
        # posix_spawn (vfork underneath), not fork: a forked child starts with this Python
        # process's memory, which would count in its peak RSS.
        devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
        pid = os.posix_spawn(exe, [exe, "--exact", name, "--nocapture"], os.environ, file_actions=devnull)
        _, _, usage = os.wait4(pid, 0)
        return usage.ru_maxrss, name

    # Tests run in their package directory, as under cargo (posix_spawn has no cwd option).
    previous = os.getcwd()
    os.chdir(bins[0][1] if bins else previous)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, cases))
    seconds = time.perf_counter() - start
    os.chdir(previous)
    rss, name = max(results) if results else (0, "")
    return seconds, len(cases), rss, name


def measure(label, manifest, tool, jobs, repeat):
    target_dir = manifest.parent / "target"
    log(f"[{label}] building tests")
    bins = test_binaries(manifest, target_dir)
    env = dict(os.environ, LEAKCHECK_CACHE_DIR=str(WORK / "runtime-cache"))
    # Warm-up run of the tool: builds the runtime once and anything its build flags change.
    run([tool, "leakcheck", "test", "--manifest-path", str(manifest), "-j", str(jobs)], env=env, check=False)
    row = {"suite": label}
    log(f"[{label}] cargo test")
    row["cargo_test"], _ = timed(["cargo", "test", "--manifest-path", str(manifest), "--", f"--test-threads={jobs}"], cwd=manifest.parent, repeat=repeat)
    if shutil.which("cargo-nextest"):
        log(f"[{label}] cargo nextest run")
        row["nextest"], _ = timed(["cargo", "nextest", "run", "--manifest-path", str(manifest), "-j", str(jobs), "--no-fail-fast"], cwd=manifest.parent, repeat=repeat)
    log(f"[{label}] one process per test, no profiling")
    secs, n, rss, rss_test = per_process(bins, jobs)
    row.update(per_process=secs, tests=n, plain_rss=rss, plain_rss_test=rss_test)
    log(f"[{label}] cargo leakcheck test")
    row["leakcheck"], code = timed([tool, "leakcheck", "test", "--manifest-path", str(manifest), "-j", str(jobs)], cwd=manifest.parent, env=env, repeat=repeat)
    row["leakcheck_exit"] = code
    metrics = json.loads((target_dir / "leakcheck" / "metrics.json").read_text())
    worst = max(metrics["tests"], key=lambda t: t["peak_rss_kib"] or 0)
    row.update(profiled_rss=worst["peak_rss_kib"], profiled_rss_test=worst["test"], run_phase=metrics["run_seconds"])
    report = json.loads((target_dir / "leakcheck" / "report.json").read_text())
    row["stacked"] = sum(1 for t in report["tests"] if t.get("method") == "stacks")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--only", choices=["fixtures", "real"])
    ap.add_argument("--repeat", type=int, default=1, help="best of N for each timing")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    tool = build_tool()
    rows = []
    if args.only in (None, "fixtures"):
        for fixture in ["tests/fixtures/leaky", "examples/demo"]:
            src = ROOT / fixture
            dest = WORK / fixture.replace("/", "_")
            shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("target"))
            rows.append(measure(fixture, dest / "Cargo.toml", tool, args.jobs, args.repeat))
    if args.only in (None, "real"):
        crate = fetch_real_crate()
        rows.append(measure(f"{REAL_CRATE[0]} {REAL_CRATE[1]} (crates.io)", crate / "Cargo.toml", tool, args.jobs, args.repeat))

    print(f"\nMachine: {os.cpu_count()} cores; -j {args.jobs}; best of {args.repeat}; tests already built.\n")
    print("| suite | tests | cargo test | nextest | per process, no profiling | cargo leakcheck test | leakcheck / cargo test | leakcheck / nextest | leakcheck / per process |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        nx = r.get("nextest")
        nx_time = f"{nx:.2f} s" if nx else "n/a"
        nx_ratio = f"{r['leakcheck'] / nx:.1f}x" if nx else "n/a"
        print(
            f"| {r['suite']} | {r['tests']} | {r['cargo_test']:.2f} s | {nx_time} | {r['per_process']:.2f} s | "
            f"{r['leakcheck']:.2f} s | {r['leakcheck'] / r['cargo_test']:.1f}x | {nx_ratio} | "
            f"{r['leakcheck'] / r['per_process']:.1f}x |"
        )
    print("\n| suite | largest plain test process (peak RSS) | largest profiled test process (peak RSS) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['suite']} | {r['plain_rss'] / 1024:.1f} MiB ({r['plain_rss_test']}) | "
            f"{r['profiled_rss'] / 1024:.1f} MiB ({r['profiled_rss_test']}) | {r['profiled_rss'] / max(r['plain_rss'], 1):.1f}x |"
        )
    print("\nleakcheck exit codes:", ", ".join(f"{r['suite']}={r['leakcheck_exit']}" for r in rows))
    print("tests profiled with stacks (the rest settled by the counting pass):", ", ".join(f"{r['suite']}={r['stacked']}/{r['tests']}" for r in rows))
    print("leakcheck run phase (processes only, from metrics.json):", ", ".join(f"{r['suite']}={r['run_phase']:.2f} s" for r in rows))


if __name__ == "__main__":
    main()
