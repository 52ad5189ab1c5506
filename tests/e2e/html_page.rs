//! The run's `index.html`, opened in a real headless browser (Debian's `chromium`, installed
//! by `ci/install-deps.sh`): the DOM after the page's script ran has every test of the run
//! with its verdict, filtering by `leak` leaves exactly the leaking tests, and a leaking
//! test shows its flame graph and who holds its memory. A screenshot of the page is left in
//! the run's output directory for a person to look at.

use crate::harness::{run_fixture, scratch};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const LEAKY: &str = "tests/fixtures/leaky";

/// The headless browser, or a failure that says how to get it.
fn chromium() -> Command {
    let found = ["chromium", "chromium-browser"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let name = found.expect("chromium is missing: ci/install-deps.sh installs it");
    let mut cmd = Command::new(name);
    let profile = scratch().join("chromium-profile");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// The page's DOM once its script ran, at `fragment` (`verdict=leak`, or empty).
fn dom(page: &Path, fragment: &str) -> String {
    let out = chromium()
        .arg("--dump-dom")
        .arg(format!("file://{}#{fragment}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Each test row of the DOM: its name, its verdict, whether it is shown, and its HTML.
fn rows(dom: &str) -> BTreeMap<String, (String, bool, String)> {
    let mut out = BTreeMap::new();
    for chunk in dom.split("<tr ").skip(1) {
        let (tag, rest) = chunk.split_once('>').unwrap();
        if !tag.contains("class=\"test\"") {
            continue;
        }
        let attr = |name: &str| {
            let start = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            tag[start..start + tag[start..].find('"').unwrap()].to_string()
        };
        let body = rest.split("</tr>").next().unwrap().to_string();
        let name = attr("data-name")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
        out.insert(name, (attr("data-verdict"), !tag.contains(" hidden"), body));
    }
    out
}

#[test]
fn the_page_lists_every_test_filters_by_verdict_and_shows_a_leaks_flame_graph_and_holder() {
    let run = run_fixture(LEAKY, &[]);
    let page = run.out_dir.join("index.html");
    assert!(page.is_file(), "no page: {}", run.stderr);
    assert!(
        run.stderr.contains("Page ") && run.stderr.contains("index.html"),
        "the summary names the page:\n{}",
        run.stderr
    );
    let report = run.report();
    let expected: BTreeMap<String, String> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                format!(
                    "{} {}",
                    t["binary"].as_str().unwrap(),
                    t["name"].as_str().unwrap()
                ),
                t["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();

    // Every test, with its verdict, shown.
    let all = rows(&dom(&page, ""));
    let got: BTreeMap<String, String> = all
        .iter()
        .map(|(name, (verdict, _, _))| (name.clone(), verdict.clone()))
        .collect();
    assert_eq!(got, expected);
    assert!(all.values().all(|(_, shown, _)| *shown));

    // Filtered by `leak`: exactly the leaking tests are shown.
    let leak_dom = dom(&page, "verdict=leak");
    let filtered = rows(&leak_dom);
    let shown: Vec<&String> = filtered
        .iter()
        .filter(|(_, (_, shown, _))| *shown)
        .map(|(name, _)| name)
        .collect();
    let leaking: Vec<&String> = expected
        .iter()
        .filter(|(_, v)| *v == "leak")
        .map(|(name, _)| name)
        .collect();
    assert!(!leaking.is_empty());
    assert_eq!(shown, leaking);
    assert!(
        leak_dom.contains(&format!("{} of {} shown", leaking.len(), expected.len())),
        "the count of shown tests"
    );

    // A leaking test held by a static: its flame graph (a file of the run) and its holder.
    let (_, _, body) = &all["leaky tests::growing_global_registry"];
    let graph = body
        .split("<object type=\"image/svg+xml\" data=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a flame graph in the leaking test's details");
    assert!(
        graph.ends_with(".svg") && run.out_dir.join(graph).is_file(),
        "{graph}"
    );
    assert!(
        body.contains("held by static `leaky::tests::REGISTRY`"),
        "the retention path is shown: {body}"
    );
    assert!(
        body.contains("leak-site: growing_global_registry"),
        "the allocating source line is shown: {body}"
    );

    // For a person to look at: the leaks, one of them open.
    let shot = run.out_dir.join("page.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium()
        .arg("--window-size=1280,1400")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}#verdict=leak&open=leaky%20tests::growing_global_registry",
            page.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    println!("screenshot of the page: {}", shot.display());
}
