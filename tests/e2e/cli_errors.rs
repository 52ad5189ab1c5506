//! Bad input: each gets a message naming what failed and the "could not run" exit code (2);
//! a build failure (6) and a broken environment (7) have codes of their own.

use crate::harness::{copy_fixture, run_fixture, scratch, tool};

const COULD_NOT_RUN: i32 = 2;
/// The code under test does not build.
const BUILD_FAILED: i32 = 6;
/// The tool's environment failed it (here: the runtime it was pointed at).
const ENVIRONMENT: i32 = 7;

fn run(args: &[&str]) -> (i32, String) {
    let out = tool().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_names_the_embedded_runtime_and_jemalloc() {
    let out = tool().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        concat!("cargo-leakcheck ", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    assert!(
        lines[1].starts_with("runtime: leakcheck-runtime ") && lines[1].contains(", embedded ("),
        "{text}"
    );
    // The jemalloc version comes from the header of the jemalloc actually built.
    let jemalloc = lines[2]
        .strip_prefix("jemalloc: ")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        jemalloc.starts_with("5.") && jemalloc.contains("(tikv-jemalloc-sys 0."),
        "{text}"
    );
    // The README shows the same output, with the runtime's size and hash (which change
    // with every build) left as placeholders rather than numbers that go stale.
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
    )
    .unwrap();
    assert!(readme.contains(lines[0]), "README shows `{}`", lines[0]);
    assert!(readme.contains(lines[2]), "README shows `{}`", lines[2]);
    let shown = lines[1].split(", embedded (").next().unwrap();
    assert!(
        readme.contains(&format!(
            "{shown}, embedded (<size> bytes, fnv <hash of the library>)"
        )),
        "README shows the runtime line of `{}` with placeholders",
        lines[1]
    );
}

#[test]
fn partition_help_names_every_kind_it_accepts() {
    let out = tool().args(["test", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for kind in ["slice:M/N", "hash:M/N", "count:M/N"] {
        assert!(
            text.contains(kind),
            "--partition help names {kind}:\n{text}"
        );
    }
}

#[test]
fn help_documents_flags_and_exit_codes() {
    let out = tool().args(["test", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--manifest-path",
        "--package",
        "--workspace",
        "--lib",
        "--test",
        "--features",
        "--all-features",
        "--release",
        "--target-dir",
        "--jobs",
        "--timeout",
        "--threshold",
        "--extra-runs",
    ] {
        assert!(text.contains(flag), "--help mentions {flag}:\n{text}");
    }
    let top = tool().arg("--help").output().unwrap();
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.contains("EXIT CODES") && top.contains("3  leaks found"),
        "{top}"
    );
}

#[test]
fn not_a_cargo_project() {
    let dir = scratch().join("not-a-project");
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("Cargo.toml");
    let _ = std::fs::remove_file(&manifest);
    let (code, err) = run(&["test", "--manifest-path", manifest.to_str().unwrap()]);
    assert_eq!(code, COULD_NOT_RUN, "{err}");
    assert!(
        err.contains(manifest.to_str().unwrap()),
        "names the manifest: {err}"
    );
}

#[test]
fn unknown_package_is_named() {
    let project = copy_fixture("tests/fixtures/leaky");
    let (code, err) = run(&[
        "test",
        "--manifest-path",
        project.join("Cargo.toml").to_str().unwrap(),
        "-p",
        "nope",
    ]);
    assert_eq!(code, COULD_NOT_RUN, "{err}");
    assert!(
        err.contains("package `nope` is not in this workspace (members: leaky)"),
        "{err}"
    );
}

#[test]
fn unknown_test_target_is_named() {
    let project = copy_fixture("tests/fixtures/leaky");
    let (code, err) = run(&[
        "test",
        "--manifest-path",
        project.join("Cargo.toml").to_str().unwrap(),
        "--test",
        "nope",
    ]);
    assert_eq!(code, COULD_NOT_RUN, "{err}");
    assert!(
        err.contains(
            "no integration test target named `nope` (available: integration, no_harness, single_test)"
        ),
        "{err}"
    );
}

#[test]
fn bad_threshold_is_named() {
    let project = copy_fixture("tests/fixtures/leaky");
    let (code, err) = run(&[
        "test",
        "--manifest-path",
        project.join("Cargo.toml").to_str().unwrap(),
        "--threshold",
        "4XB",
    ]);
    assert_eq!(code, COULD_NOT_RUN, "{err}");
    assert!(
        err.contains("--threshold") && err.contains("`4XB`"),
        "{err}"
    );
}

#[test]
fn a_threshold_past_the_largest_size_is_refused_not_capped() {
    let project = copy_fixture("tests/fixtures/leaky");
    for (flag, size) in [
        ("--threshold", "18446744073709551616"),
        ("--test-threshold", "16777216TiB"),
        ("--threshold", "17179869184GiB"),
    ] {
        let (code, err) = run(&[
            "test",
            "--manifest-path",
            project.join("Cargo.toml").to_str().unwrap(),
            flag,
            size,
        ]);
        assert_eq!(code, COULD_NOT_RUN, "{size}: {err}");
        assert!(
            err.contains(flag) && err.contains(&format!("`{size}`")),
            "{err}"
        );
    }
}

#[test]
fn a_utf16_config_file_is_named_as_such() {
    let project = copy_fixture("tests/fixtures/leaky");
    let path = scratch().join("utf16-leakcheck.toml");
    let text: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(
            "[defaults]\nstack-threshold = \"1KiB\"\n"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    std::fs::create_dir_all(scratch()).unwrap();
    std::fs::write(&path, text).unwrap();
    let (code, err) = run(&[
        "test",
        "--manifest-path",
        project.join("Cargo.toml").to_str().unwrap(),
        "--config",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, COULD_NOT_RUN, "{err}");
    assert!(
        err.contains(&format!("`{}`", path.display()))
            && err.contains("looks like UTF-16 (little-endian, with a byte-order mark)"),
        "{err}"
    );
}

#[test]
fn bad_extra_runs_are_named() {
    let project = copy_fixture("tests/fixtures/leaky");
    let manifest = project.join("Cargo.toml");
    for bad in ["101", "-1", "five"] {
        let (code, err) = run(&[
            "test",
            "--manifest-path",
            manifest.to_str().unwrap(),
            "--extra-runs",
            bad,
        ]);
        assert_eq!(code, COULD_NOT_RUN, "{bad}: {err}");
        assert!(err.contains("--extra-runs"), "{bad}: {err}");
    }
}

#[test]
fn build_errors_show_cargo_diagnostics() {
    let run = run_fixture("tests/fixtures/broken-build", &[]);
    assert_eq!(run.code, BUILD_FAILED, "{}", run.stderr);
    assert!(
        run.stderr.contains("error[E0308]"),
        "cargo's diagnostic is shown: {}",
        run.stderr
    );
    assert!(run.stderr.contains("build failed"), "{}", run.stderr);
    assert!(run.report.is_none(), "no report for a run that never ran");
}

#[test]
fn unavailable_runtime_is_named() {
    let project = copy_fixture("tests/fixtures/leaky");
    let out = tool()
        .env("LEAKCHECK_RUNTIME", "/nonexistent/libleakcheck_runtime.so")
        .args([
            "test",
            "--manifest-path",
            project.join("Cargo.toml").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(ENVIRONMENT), "{err}");
    assert!(
        err.contains("the profiling runtime is unavailable")
            && err.contains("/nonexistent/libleakcheck_runtime.so"),
        "{err}"
    );
}
