#!/usr/bin/env python3
"""Measures what cargo-leakcheck costs, and prints the numbers as a markdown table.

For each suite (this project's fixtures, and the test suite of a real crates.io crate),
with the tests already built:
  - `cargo test`                          (libtest, all tests in one process per binary)
  - `cargo nextest run`                   (one process per test, no profiling), if installed
  - one process per test, no profiling    (this script; gives the plain peak RSS per test)
  - `cargo leakcheck test`                (one process per test, exact heap profiling)
and the peak RSS of the largest test process, plain and profiled.

Usage: python3 bench/bench.py [--jobs N] [--only fixtures|real|pool] [--repeat N] [--tool PATH]
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


def per_process(bins, jobs, wrapper=()):
    """Runs every test in its own process without profiling (or under `wrapper`, e.g.
    valgrind); returns (seconds, number of tests, {test: peak RSS KiB})."""
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
        argv = [*wrapper, exe, "--exact", name, "--nocapture"]
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=devnull)
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
    return seconds, len(cases), {name: rss for rss, name in results}


def measure(label, manifest, tool, jobs, repeat, with_valgrind):
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
    secs, n, plain = per_process(bins, jobs)
    rss_test = max(plain, key=plain.get)
    row.update(per_process=secs, tests=n, plain_rss=plain[rss_test], plain_rss_test=rss_test)
    valgrind = shutil.which("valgrind")
    if valgrind and with_valgrind:
        log(f"[{label}] valgrind --leak-check=full, one process per test")
        row["valgrind"], _, _ = per_process(bins, jobs, (valgrind, "--leak-check=full", "--quiet"))
    log(f"[{label}] cargo leakcheck test")
    row["leakcheck"], code = timed([tool, "leakcheck", "test", "--manifest-path", str(manifest), "-j", str(jobs)], cwd=manifest.parent, env=env, repeat=repeat)
    row["leakcheck_exit"] = code
    metrics = json.loads((target_dir / "leakcheck" / "metrics.json").read_text())
    worst = max(metrics["tests"], key=lambda t: t["peak_rss_kib"] or 0)
    row.update(profiled_rss=worst["peak_rss_kib"], profiled_rss_test=worst["test"], run_phase=metrics["run_seconds"])
    # Per test: the counting run's peak RSS against the same test's plain run.
    ratios = [
        (t["peak_rss_kib"] / plain[t["test"]], t["test"])
        for t in metrics["tests"]
        if t.get("pass") == "count" and t["peak_rss_kib"] and plain.get(t["test"])
    ]
    row["count_rss_ratio"] = max(ratios) if ratios else (0, "")
    stacked = [t for t in metrics["tests"] if t.get("pass") == "stacks" and t["peak_rss_kib"] and plain.get(t["test"])]
    row["stacks_rss_ratio"] = max(((t["peak_rss_kib"] / plain[t["test"]], t["test"]) for t in stacked), default=(0, ""))
    report = json.loads((target_dir / "leakcheck" / "report.json").read_text())
    row["stacked"] = sum(1 for t in report["tests"] if t.get("method") == "stacks")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--only", choices=["fixtures", "real", "analysis", "pool"])
    ap.add_argument("--tool", type=pathlib.Path, help="a prebuilt cargo-leakcheck to measure (e.g. an earlier version) instead of building this one")
    ap.add_argument("--no-valgrind", action="store_true", help="skip the valgrind comparison")
    ap.add_argument("--repeat", type=int, default=1, help="best of N for each timing")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    tool = args.tool.resolve() if args.tool else build_tool()
    rows = []
    if args.only in (None, "fixtures"):
        for fixture in ["tests/fixtures/leaky", "tests/fixtures/lifetime", "examples/demo"]:
            src = ROOT / fixture
            dest = WORK / fixture.replace("/", "_")
            shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("target"))
            rows.append(measure(fixture, dest / "Cargo.toml", tool, args.jobs, args.repeat, not args.no_valgrind))
    if args.only in (None, "pool"):
        # 100 tests over one process-wide pool; it depends on the lifetime fixture by path.
        dest = WORK / "pool-suite"
        shutil.copytree(ROOT / "bench" / "pool-suite", dest / "bench" / "pool-suite", dirs_exist_ok=True, ignore=shutil.ignore_patterns("target"))
        shutil.copytree(ROOT / "tests" / "fixtures" / "lifetime", dest / "tests" / "fixtures" / "lifetime", dirs_exist_ok=True, ignore=shutil.ignore_patterns("target"))
        rows.append(measure("bench/pool-suite (100 tests, one global pool)", dest / "bench" / "pool-suite" / "Cargo.toml", tool, args.jobs, args.repeat, not args.no_valgrind))
    if args.only in (None, "real"):
        crate = fetch_real_crate()
        rows.append(measure(f"{REAL_CRATE[0]} {REAL_CRATE[1]} (crates.io)", crate / "Cargo.toml", tool, args.jobs, args.repeat, not args.no_valgrind))
    analysis = None
    if args.only in (None, "real", "analysis"):
        analysis = measure_analysis(tool, args.jobs)

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
    print("\n| suite | valgrind --leak-check=full per test | leakcheck / valgrind |")
    print("|---|---|---|")
    for r in rows:
        if r.get("valgrind"):
            print(f"| {r['suite']} | {r['valgrind']:.2f} s | {r['leakcheck'] / r['valgrind']:.2f}x |")
    print("\n| suite | worst counting-pass RSS / same test plain | worst stacks-pass RSS / same test plain |")
    print("|---|---|---|")
    for r in rows:
        c, s_ = r["count_rss_ratio"], r["stacks_rss_ratio"]
        print(f"| {r['suite']} | {c[0]:.2f}x ({c[1]}) | {s_[0]:.2f}x ({s_[1]}) |")
    print("\n| suite | largest plain test process (peak RSS) | largest profiled test process (peak RSS) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['suite']} | {r['plain_rss'] / 1024:.1f} MiB ({r['plain_rss_test']}) | "
            f"{r['profiled_rss'] / 1024:.1f} MiB ({r['profiled_rss_test']}) | {r['profiled_rss'] / max(r['plain_rss'], 1):.1f}x |"
        )
    if analysis:
        print_analysis(analysis)
    print("\nleakcheck exit codes:", ", ".join(f"{r['suite']}={r['leakcheck_exit']}" for r in rows))
    print("tests profiled with stacks (the rest settled by the counting pass):", ", ".join(f"{r['suite']}={r['stacked']}/{r['tests']}" for r in rows))
    print("leakcheck run phase (processes only, from metrics.json):", ", ".join(f"{r['suite']}={r['run_phase']:.2f} s" for r in rows))


LEAKS = """
#[cfg(test)]
mod leakcheck_bench_leaks {
    // Added by cargo-leakcheck's bench/bench.py to time the analysis of leaking tests in a
    // large debug test binary. Not part of indexmap. (indexmap is no_std.)
    extern crate std;
    use std::boxed::Box;
    use std::string::ToString;
    use std::vec;

    #[test]
    fn leaks_a_map() {
        let mut m = crate::IndexMap::new();
        for i in 0..1000u32 {
            m.insert(i, i.to_string());
        }
        std::mem::forget(m);
    }
    #[test]
    fn leaks_a_box() {
        Box::leak(Box::new([7u8; 64]));
    }
    #[test]
    fn leaks_a_vec() {
        std::mem::forget(vec![1u64; 4096]);
    }
}
"""


def measure_analysis(tool, jobs):
    """Times analysis (dumps -> report entry, and SVG) of leaking tests in indexmap's debug
    lib test binary, and jeprof --collapsed --base on the same dumps."""
    src = fetch_real_crate()
    dest = WORK / "indexmap-leaking"
    if not dest.exists():
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("target"))
        with open(dest / "src" / "lib.rs", "a") as f:
            f.write(LEAKS)
    env = dict(os.environ, LEAKCHECK_CACHE_DIR=str(WORK / "runtime-cache"))
    log("[analysis] cargo leakcheck test --lib on indexmap + 3 leaking tests")
    run([tool, "leakcheck", "test", "--lib", "--manifest-path", str(dest / "Cargo.toml"), "-j", str(jobs), "--", "leakcheck_bench_leaks"], env=env, check=False)
    metrics = json.loads((dest / "target" / "leakcheck" / "metrics.json").read_text())
    stacked = [t for t in metrics["tests"] if t.get("pass") == "stacks"]
    exe = stacked[0]["executable"]
    baseline = next(b for b in metrics["baselines"])
    out = {"exe_mib": os.path.getsize(exe) / 2**20, "prep": metrics["binary_preparation"][0]["seconds"], "tests": []}
    for t in stacked:
        row = {"test": t["test"], "analysis": t["analysis_seconds"], "svg": t["flamegraph_seconds"] or 0.0}
        if shutil.which("jeprof"):
            start = time.perf_counter()
            subprocess.run(["jeprof", "--collapsed", f"--base={baseline['dumps'][0]}", exe, t["dumps"][0]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            row["jeprof"] = time.perf_counter() - start
        out["tests"].append(row)
    return out


def print_analysis(a):
    print(f"\nAnalysis of leaking tests in indexmap's debug lib test binary ({a['exe_mib']:.1f} MiB); preparing the binary (baseline, allocator check): {a['prep'] * 1000:.0f} ms. Tests in the order analysed: the first one also builds the symbol context.\n")
    print("| test | dumps -> report entry | SVG + folded | total | jeprof --collapsed --base | jeprof / total |")
    print("|---|---|---|---|---|---|")
    for t in a["tests"]:
        total = t["analysis"] + t["svg"]
        jp = t.get("jeprof")
        print(f"| {t['test']} | {t['analysis'] * 1000:.0f} ms | {t['svg'] * 1000:.0f} ms | {total * 1000:.0f} ms | "
              f"{f'{jp:.2f} s' if jp else 'n/a'} | {f'{jp / total:.0f}x' if jp else 'n/a'} |")


if __name__ == "__main__":
    main()
