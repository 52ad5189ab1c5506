//! `cargo leakcheck run` on the webapp fixture under a load of 20,000 requests from curl:
//! the leaking request path is named at its line, with the static that holds it, and fails
//! the run, with sampled stacks (the default) and with every stack (`--exact`); the bounded
//! cache does not; against the table in `expected.rs`; and every way a run can go wrong is
//! named, with its exit code, and leaves no process behind.

use crate::expected::EXPECTED;
use crate::harness::{copy_fixture, grows_site, leak_site, scratch, tool};
use std::path::{Path, PathBuf};
use std::process::Output;

const FIXTURE: &str = "tests/fixtures/webapp";

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Nothing listens on the port any more, and no process runs the fixture's binary.
fn nothing_left(port: u16, target: &Path) {
    nothing_of(port, target, "webapp");
}

fn nothing_of(port: u16, target: &Path, binary: &str) {
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the service still answers on {port}"
    );
    let exe = target
        .join("debug")
        .join(binary)
        .to_string_lossy()
        .into_owned();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.split(' ').next() != Some(exe.as_str()),
            "still running: {cmdline} ({})",
            entry.path().display()
        );
    }
}

/// Every service's memory is explained from the allocator's figures and the kernel's split,
/// the parts plotted under the lines; a path that frees its bursts leaves the resident set up
/// by pages the allocator keeps, and the explanation says so, by the allocator's own count of
/// its dirty pages.
fn explains_memory(
    row: &crate::expected::Expected,
    b: &serde_json::Value,
    svg: &str,
    stderr: &str,
    row_name: &str,
) {
    let m = &b["memory"];
    let parts = m["parts"]
        .as_array()
        .unwrap_or_else(|| panic!("{row_name}: {b}"));
    assert_eq!(parts.len(), 6, "{m}");
    assert!(m["series"].as_array().unwrap().len() >= 2, "{m}");
    assert!(
        svg.contains("<title>pages the allocator holds, no object in them</title>"),
        "the plot stacks the parts: {svg}"
    );
    assert!(stderr.contains("         RSS "), "{row_name}:\n{stderr}");
    let growth = |name: &str| {
        let p = parts.iter().find(|p| p["part"] == name).unwrap();
        p["to"].as_i64().unwrap() - p["from"].as_i64().unwrap()
    };
    let rss = m["rss_to"].as_i64().unwrap() - m["rss_from"].as_i64().unwrap();
    if row.allocator_pages {
        // While the load ran, the bursts' freed pages stayed with the allocator, by its own
        // figures; whatever of them it still held at the end is what the resident set kept,
        // and the explanation says so. (jemalloc returns dirty pages on a clock of its own:
        // how many are left at the end depends on the time since the last burst.)
        let held_at = parts
            .iter()
            .position(|p| p["part"] == "allocator-pages")
            .unwrap();
        let peak_held = m["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["parts"][held_at].as_i64().unwrap())
            .max()
            .unwrap();
        assert!(
            peak_held > 8 << 20,
            "{row_name}: at most {peak_held} held: {m}"
        );
        let held = growth("allocator-pages");
        let dirty = m["dirty"].as_i64().unwrap();
        assert!(growth("live-heap").abs() < 1 << 20, "{m}");
        if rss > 8 << 20 {
            assert!(held * 2 > rss, "{row_name}: {held} of {rss} explained: {m}");
            assert!(
                dirty * 2 > held,
                "{row_name}: the allocator says {dirty} dirty: {m}"
            );
            assert!(
                stderr.contains(
                    "of the growth are pages the allocator kept after their objects were freed"
                ),
                "{row_name}:\n{stderr}"
            );
        }
    }
    if row.memory == Some("mapped") {
        assert!(growth("mappings") > 100 << 20, "{row_name}: {m}");
    }
}

/// The stacks of a bench report that its growth rule flagged.
fn flagged_stacks(b: &serde_json::Value) -> Vec<&serde_json::Value> {
    b["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["flagged"] == true)
        .collect()
}

struct Setup {
    project: PathBuf,
    target: PathBuf,
}

fn setup(name: &str) -> Setup {
    setup_of(FIXTURE, name)
}

fn setup_of(fixture: &str, name: &str) -> Setup {
    let project = copy_fixture(fixture);
    let target = scratch().join("targets").join(name);
    Setup { project, target }
}

fn run(s: &Setup, args: &[&str]) -> (Output, String) {
    let out = tool()
        .arg("run")
        .args([
            "--manifest-path",
            s.project.join("Cargo.toml").to_str().unwrap(),
        ])
        .args(["--target-dir", s.target.to_str().unwrap()])
        .args(args)
        .current_dir(&s.project)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

fn load(port: u16, path: &str, requests: u32) -> String {
    format!("curl -sS 'http://127.0.0.1:{port}/{path}?n=[1-{requests}]' > /dev/null")
}

#[test]
fn service_request_paths_match_the_table() {
    let s = setup("webapp");
    let rows: Vec<_> = EXPECTED
        .iter()
        .filter(|e| e.service && e.fixture == FIXTURE)
        .collect();
    assert_eq!(rows.len(), 7);
    // The leak on std's allocator is checked exact too; the rest sampled only.
    let runs = rows.iter().flat_map(|row| {
        let modes: &[bool] = if row.site.is_some() && row.features.is_empty() {
            &[false, true]
        } else {
            &[false]
        };
        modes.iter().map(move |&exact| (*row, exact))
    });
    for (row, exact) in runs {
        let port = free_port();
        let port_text = port.to_string();
        let load = load(port, row.test, row.requests);
        let mut args = vec!["--ready-port", &port_text, "--load", &load];
        let junit = s.target.join("run-junit.xml");
        let junit_text = junit.to_str().unwrap().to_owned();
        if !row.features.is_empty() {
            args.extend(["--features", row.features]);
        }
        if exact {
            args.push("--exact");
        } else {
            // The CI outputs, on the default run.
            args.extend(["--junit", &junit_text, "--annotations", "github"]);
        }
        args.extend(["--", "--port", &port_text]);
        let (out, stderr) = run(&s, &args);
        let code = if row.verdict == "leak" { 3 } else { 0 };
        let row_name = format!(
            "{}{}{}",
            row.test,
            if exact { " (--exact)" } else { "" },
            if row.features.is_empty() {
                ""
            } else {
                " (--features jemalloc)"
            }
        );
        // On its own jemalloc, the report says where its heap was read from.
        assert_eq!(
            stderr.contains("its heap is read from that jemalloc's sampled dumps"),
            !row.features.is_empty(),
            "{row_name}:\n{stderr}"
        );
        assert_eq!(out.status.code(), Some(code), "{row_name}:\n{stderr}");
        nothing_left(port, &s.target);
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(s.target.join("leakcheck/report.json")).unwrap(),
        )
        .unwrap();
        let b = &report["benches"][0];
        assert_eq!(b["verdict"], row.verdict, "{row_name}: {b}");
        assert_eq!(b["sample_period"], if exact { 1 } else { 4096 }, "{b}");
        assert_eq!(b["binary"], "webapp");
        assert!(b["snapshots"].as_u64().unwrap() >= 4, "{b}");
        // The process's memory over the run, plotted whatever the verdict. The first
        // snapshots come 10 ms apart, before a sampled heap has a sample: the heap's series
        // may start at 0, never the resident set. A path whose growth is mapped memory, or
        // whose bursts are freed, keeps next to nothing in its heap at the end, which a
        // sampled heap may show as nothing.
        let keeps_heap = row.memory.is_none() && !row.allocator_pages;
        for series in ["rss", "heap"] {
            let points = b[series].as_array().unwrap();
            let filled = points.iter().filter(|p| p[1].as_u64().unwrap() > 0);
            assert!(points.len() >= 4, "{series}: {b}");
            if series == "rss" || keeps_heap {
                assert!(filled.count() >= 4, "{series}: {b}");
                assert!(
                    points.last().is_some_and(|p| p[1].as_u64().unwrap() > 0),
                    "{series}: {b}"
                );
            }
            if series == "rss" {
                assert!(points.iter().all(|p| p[1].as_u64().unwrap() > 0), "{b}");
            }
        }
        let plot = s
            .target
            .join("leakcheck")
            .join(b["artifacts"]["memory_plot"].as_str().unwrap());
        let svg = std::fs::read_to_string(&plot).unwrap();
        assert!(
            svg.contains("resident set size (RSS)") && svg.contains("<polyline"),
            "{svg}"
        );
        explains_memory(row, b, &svg, &stderr, &row_name);
        let flagged = flagged_stacks(b);
        match row.site {
            Some(site) => {
                // The first stack listed is the leak, at its marked line.
                let (file, line) = leak_site(FIXTURE, site);
                let first = &b["stacks"][0];
                assert_eq!(first["flagged"], true, "{b}");
                let at_site = first["frames"].as_array().unwrap().iter().any(|f| {
                    f["file"].as_str().is_some_and(|p| p.ends_with(&file))
                        && f["line"] == line
                        && f["function"] == format!("webapp::{}", row.test)
                });
                assert!(at_site, "{}:{line} not in {first}", file);
                assert!(
                    first["growth_bytes"].as_i64().unwrap() > 64 * 1024,
                    "{first}"
                );
                // Heap objects, or the program's own mappings, as the table says.
                assert_eq!(
                    first["memory"].as_str().unwrap_or("heap"),
                    row.memory.unwrap_or("heap"),
                    "{row_name}: {first}"
                );
                if row.memory == Some("mapped") {
                    assert!(
                        stderr.contains(&format!("of mapped memory at webapp::{}", row.test)),
                        "the summary says it is mapped memory:\n{stderr}"
                    );
                }
                assert!(
                    stderr.contains(&format!("webapp::{} (src/main.rs:{line})", row.test)),
                    "the summary names the line:\n{stderr}"
                );
                if let Some((root, _)) = row.held_by {
                    let held = &first["retained_by"]["root"];
                    assert!(
                        held.as_str().is_some_and(|r| r.contains(root)),
                        "{row_name}: held by {held}, expected {root}: {first}"
                    );
                    assert!(
                        stderr.contains(&format!("held by {root}")),
                        "the summary names the holder:\n{stderr}"
                    );
                }
                if let (false, Some((root, _))) = (exact, row.held_by) {
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    assert!(
                        stdout.contains(&format!(
                            "::error file={file},line={line},title=memory grows in webapp::"
                        )),
                        "a GitHub annotation at the line:\n{stdout}"
                    );
                    let xml = std::fs::read_to_string(&junit).unwrap();
                    assert!(
                        xml.contains("<testcase name=\"webapp\" classname=\"webapp::webapp\"")
                            && xml.contains("<failure type=\"leak\"")
                            && xml.contains(&format!("held by {root}")),
                        "{xml}"
                    );
                }
            }
            None => assert!(flagged.is_empty(), "{row_name}: {flagged:?}"),
        }
        match row.grows {
            Some((name, _)) => {
                // The map at its definition, flagged, growing by the requests' ids.
                let (file, line) = grows_site(FIXTURE, name);
                let first = &b["collections"][0];
                assert_eq!(first["flagged"], true, "{row_name}: {b}");
                assert!(
                    first["file"].as_str().is_some_and(|f| f.ends_with(&file))
                        && first["line"] == line,
                    "{row_name}: not the map at {file}:{line}: {first}"
                );
                assert_eq!(first["type_name"], "HashMap<u64, u64>", "{first}");
                assert!(first["growth"].as_i64().unwrap() > 1000, "{first}");
                assert!(first["per_second"].as_f64().unwrap() > 0.0, "{first}");
                assert!(
                    stderr.contains(&format!(
                        "static `webapp::VISITS` ({file}:{line}): HashMap<u64, u64>, +"
                    )),
                    "the summary names the map:\n{stderr}"
                );
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    stdout.contains(&format!(
                        "::error file={file},line={line},title=collection grows in webapp"
                    )),
                    "a GitHub annotation at the map:\n{stdout}"
                );
                let xml = std::fs::read_to_string(&junit).unwrap();
                assert!(
                    xml.contains("collection(s) longer over the later half"),
                    "{xml}"
                );
            }
            // A clean path grows no collection (a leaking one may: `/login`'s map does).
            None if row.verdict == "clean" => assert!(
                !b["collections"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["flagged"] == true)),
                "{row_name}: {}",
                b["collections"]
            ),
            None => {}
        }
    }
}

/// The async service: a task per request that never ends is named at its spawn line, with
/// the number of tasks alive at the end, and holds the request's buffer; a task spawned and
/// awaited per request is no leak.
#[test]
fn an_async_service_names_the_spawn_site_and_its_live_tasks() {
    const ASYNC: &str = "tests/fixtures/asyncapp";
    const REQUESTS: u64 = 20_000;
    let s = setup_of(ASYNC, "asyncapp");
    let rows: Vec<_> = EXPECTED
        .iter()
        .filter(|e| e.service && e.fixture == ASYNC)
        .collect();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let port = free_port();
        let port_text = port.to_string();
        let load = format!(
            "curl -sS 'http://127.0.0.1:{port}/{}?n=[1-{REQUESTS}]' > /dev/null",
            row.test
        );
        let (out, stderr) = run(
            &s,
            &[
                "--ready-port",
                &port_text,
                "--load",
                &load,
                "--",
                "--port",
                &port_text,
            ],
        );
        let code = if row.verdict == "leak" { 3 } else { 0 };
        assert_eq!(out.status.code(), Some(code), "{}:\n{stderr}", row.test);
        nothing_of(port, &s.target, "asyncapp");
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(s.target.join("leakcheck/report.json")).unwrap(),
        )
        .unwrap();
        let b = &report["benches"][0];
        assert_eq!(b["verdict"], row.verdict, "{}: {b}", row.test);
        let flagged = flagged_stacks(b);
        let Some((runtime, name)) = row.spawns_tasks else {
            assert!(flagged.is_empty(), "{}: {flagged:?}", row.test);
            continue;
        };
        let (file, line) = crate::harness::spawn_site(ASYNC, name);
        let at_spawn = |task: &serde_json::Value| {
            task["runtime"] == runtime
                && task["spawned_at"]["file"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(&file))
                && task["spawned_at"]["line"] == line
                && (task["state"] == "pending" || task["state"] == "scheduled")
        };
        // The tasks themselves: their cells, named by the spawn line, about one per request.
        let cells = flagged
            .iter()
            .find(|s| at_spawn(&s["task"]))
            .unwrap_or_else(|| panic!("no growing stack of tasks spawned at {file}:{line}: {b}"));
        let live = cells["objects"].as_u64().unwrap();
        assert!(
            (REQUESTS * 7 / 10..=REQUESTS * 13 / 10).contains(&live),
            "about {REQUESTS} tasks alive at the end, not {live}: {cells}"
        );
        assert!(
            stderr.contains("tokio tasks alive at the end, spawned at asyncapp::subscribe"),
            "{stderr}"
        );
        // What each task holds: the request's buffer, at its own line.
        let (site_file, site_line) = leak_site(ASYNC, row.site.unwrap());
        let buffer = flagged
            .iter()
            .find(|s| {
                s["frames"].as_array().unwrap().iter().any(|f| {
                    f["file"].as_str().is_some_and(|p| p.ends_with(&site_file))
                        && f["line"] == site_line
                })
            })
            .unwrap_or_else(|| panic!("no growing stack at {site_file}:{site_line}: {b}"));
        if row.held_by_task {
            assert!(
                at_spawn(&buffer["retained_by"]["task"]),
                "the buffer is held by the task: {buffer}"
            );
            assert!(
                stderr.contains(&format!(
                    "held by a tokio task spawned at asyncapp::subscribe (src/main.rs:{line})"
                )),
                "{stderr}"
            );
        }
    }
}

#[test]
fn every_way_a_run_fails_is_named_with_its_code_and_leaves_nothing_running() {
    let s = setup("webapp-faults");
    // Built once, then run as any command.
    let port = free_port();
    let port_text = port.to_string();
    let (out, stderr) = run(
        &s,
        &[
            "--ready-port",
            &port_text,
            "--duration",
            "1",
            "--",
            "--port",
            &port_text,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let exe = s.target.join("debug/webapp");
    let exe_text = exe.to_str().unwrap();
    let with_port = |extra: &str, port: u16| format!("{exe_text} --port {port}{extra}");

    // A program that does not exist.
    let (out, stderr) = run(&s, &["--command", "/nonexistent/service"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`/nonexistent/service` does not exist"),
        "{stderr}"
    );

    // A service that exits at once.
    let port = free_port();
    let (out, stderr) = run(
        &s,
        &[
            "--command",
            "sh -c 'echo starting; exit 7'",
            "--ready-port",
            &port.to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("ended before it was ready"), "{stderr}");

    // A service that never gets ready: it listens elsewhere.
    let (port, other) = (free_port(), free_port());
    let (out, stderr) = run(
        &s,
        &[
            "--command",
            &with_port("", port),
            "--ready-port",
            &other.to_string(),
            "--ready-timeout",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let said = format!("never got ready: nothing accepted connections on 127.0.0.1:{other}");
    assert!(stderr.contains(&said), "{stderr}");
    // Not a missing report: a row with its reason, in report.json and on the page.
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.target.join("leakcheck/report.json")).unwrap(),
    )
    .unwrap();
    let row = &report["benches"][0];
    assert_eq!(row["verdict"], "error", "{row}");
    assert_eq!(row["not_checked"], true, "{row}");
    assert!(row["message"].as_str().unwrap().contains(&said), "{row}");
    let page = std::fs::read_to_string(s.target.join("leakcheck/index.html")).unwrap();
    assert!(
        page.contains("The run fails: exit code 2") && page.contains(&said),
        "the page says why"
    );
    nothing_left(port, &s.target);

    // A crash under load.
    let port = free_port();
    let (out, stderr) = run(
        &s,
        &[
            "--command",
            &with_port("", port),
            "--ready-port",
            &port.to_string(),
            "--load",
            &format!("curl -s 'http://127.0.0.1:{port}/crash' > /dev/null; sleep 30"),
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("SIGABRT"), "{stderr}");
    nothing_left(port, &s.target);

    // A load command that fails, and one that hangs.
    for (load, extra, said) in [
        ("exit 9", "600", "the load command failed (exit status: 9)"),
        ("sleep 60", "2", "did not finish within --load-timeout"),
    ] {
        let port = free_port();
        let (out, stderr) = run(
            &s,
            &[
                "--command",
                &with_port("", port),
                "--ready-port",
                &port.to_string(),
                "--load",
                load,
                "--load-timeout",
                extra,
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{load}: {stderr}");
        assert!(stderr.contains(said), "{load}: {stderr}");
        let report = std::fs::read_to_string(s.target.join("leakcheck/report.json")).unwrap();
        assert!(report.contains(said), "{load}: {report}");
        nothing_left(port, &s.target);
    }

    // Interrupted (Ctrl-C) while the service runs: it is stopped with its group, nothing
    // is judged, and the tool exits as shells report a SIGINT.
    let port = free_port();
    let child = tool()
        .args(["run", "--manifest-path"])
        .arg(s.project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&s.target)
        .args(["--command", &with_port("", port)])
        .args(["--ready-port", &port.to_string(), "--duration", "120"])
        .current_dir(&s.project)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the service never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) of our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(started.elapsed().as_secs() < 60, "it did not run its 120 s");
    nothing_left(port, &s.target);

    // Any program, from a directory outside every cargo project: its outputs go there.
    let bare = std::env::temp_dir().join(format!("leakcheck-run-bare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bare);
    std::fs::create_dir_all(&bare).unwrap();
    let port = free_port();
    let out = tool()
        .args(["run", "--command", &with_port("", port)])
        .args(["--ready-port", &port.to_string(), "--duration", "1"])
        .current_dir(&bare)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = std::fs::read_to_string(bare.join("target/leakcheck/report.json")).unwrap();
    assert!(report.contains("\"binary\": \"webapp\""), "{report}");
    nothing_left(port, &s.target);
    std::fs::remove_dir_all(&bare).unwrap();
}
