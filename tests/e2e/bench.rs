//! `cargo leakcheck bench` on the bench fixture: growth is flagged with its stack, a
//! plateau and a clean criterion bench are not, against the table in `expected.rs`.

use crate::expected::EXPECTED;
use crate::harness::{copy_fixture, leak_site, tool};

#[test]
fn bench_fixture_matches_the_table() {
    let project = copy_fixture("tests/fixtures/benches");
    let target = crate::harness::scratch().join("targets").join("benches");
    let out = tool()
        .args([
            "bench",
            "--manifest-path",
            project.join("Cargo.toml").to_str().unwrap(),
        ])
        .args([
            "--target-dir",
            target.to_str().unwrap(),
            "--bench-time",
            "3",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a growing bench fails the run:\n{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(target.join("leakcheck/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["settings"]["sample_period"], 4096);
    let benches = report["benches"].as_array().unwrap();
    let rows: Vec<_> = EXPECTED.iter().filter(|e| e.bench).collect();
    assert_eq!(benches.len(), rows.len(), "{stderr}");
    for row in rows {
        let b = benches
            .iter()
            .find(|b| b["binary"] == row.binary && b["name"] == row.test)
            .unwrap_or_else(|| panic!("{} {} missing:\n{stderr}", row.binary, row.test));
        assert_eq!(b["verdict"], row.verdict, "{}: {b}", row.test);
        if row.verdict == "unsettled" {
            assert!(
                b["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("too short to judge"),
                "{b}"
            );
            continue;
        }
        assert!(b["snapshots"].as_u64().unwrap() >= 4, "{b}");
        let flagged: Vec<_> = b["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["flagged"] == true)
            .collect();
        if row.verdict == "leak" {
            // The marker exists; bench builds carry no line info, so the function is asserted.
            leak_site(row.fixture, row.site.unwrap());
            let s = flagged
                .first()
                .unwrap_or_else(|| panic!("no flagged stack: {b}"));
            assert!(s["growth_bytes"].as_i64().unwrap() > 64 * 1024);
            assert!(s["growth_bytes_per_second"].as_f64().unwrap() > 0.0);
            assert!(
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["function"] == format!("{}::handle_request", row.binary)),
                "{s}"
            );
            for artifact in ["flamegraph", "plot", "folded"] {
                let path = target
                    .join("leakcheck")
                    .join(b["artifacts"][artifact].as_str().unwrap());
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(!text.is_empty(), "{}", path.display());
            }
            let plot = std::fs::read_to_string(
                target
                    .join("leakcheck")
                    .join(b["artifacts"]["plot"].as_str().unwrap()),
            )
            .unwrap();
            // The growth as a pprof profile: its total is the flagged stacks' growth.
            let profile = target
                .join("leakcheck")
                .join(b["artifacts"]["pprof"].as_str().expect("a pprof profile"));
            let total = crate::outputs::pprof_total_bytes(&profile);
            let growth: i64 = flagged
                .iter()
                .map(|s| s["growth_bytes"].as_i64().unwrap())
                .filter(|g| *g > 0)
                .sum();
            assert_eq!(total, growth, "{}", profile.display());
            assert!(
                plot.contains("<polyline")
                    && plot.contains(&format!("GROWS: {}::handle_request", row.binary)),
                "the plot names the growing stack"
            );
        } else {
            assert!(flagged.is_empty(), "{}: {b}", row.test);
            assert!(b["artifacts"]["plot"].is_null());
        }
    }
    assert!(
        stderr.contains("GROWS grows grows") && stderr.contains("at grows::handle_request"),
        "{stderr}"
    );
    // The short bench is named at its own function, not at the formatting that allocated.
    assert!(
        stderr.contains("GROWS interns interns") && stderr.contains("at interns::handle_request"),
        "{stderr}"
    );
    assert!(
        stderr.contains("UNSETTLED instant instant") && stderr.contains("1 too short to judge"),
        "{stderr}"
    );
}
