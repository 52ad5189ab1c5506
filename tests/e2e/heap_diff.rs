//! `cargo leakcheck diff`: heap dumps a running program took of itself (the service
//! fixture: tikv-jemallocator with profiling, sampled at `lg_prof_sample:19`), compared
//! without running anything of cargo-leakcheck's inside it.

use crate::harness::{copy_fixture, leak_site, scratch, tool};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The service fixture built once, and the two dumps one run of it took.
struct Dumps {
    binary: PathBuf,
    base: PathBuf,
    new: PathBuf,
}

fn dumps() -> &'static Dumps {
    static DUMPS: OnceLock<Dumps> = OnceLock::new();
    DUMPS.get_or_init(|| {
        let project = copy_fixture("tests/fixtures/service");
        let target = scratch().join("targets/service");
        // `--locked`, not `--offline`: what the fixture needs is fetched by
        // `ci/install-deps.sh`, but a run of `cargo test` on its own must not depend on
        // another test having filled cargo's cache first.
        let built = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--locked", "--manifest-path"])
            .arg(project.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "the service fixture builds: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let binary = target.join("debug/service");
        let dir = scratch().join("heap-diff");
        std::fs::create_dir_all(&dir).unwrap();
        let (base, new) = (dir.join("base.heap"), dir.join("new.heap"));
        let ran = Command::new(&binary)
            .arg(&base)
            .arg(&new)
            .env("_RJEM_MALLOC_CONF", "prof:true,lg_prof_sample:19")
            .status()
            .unwrap();
        assert!(ran.success(), "the service ran and dumped");
        Dumps { binary, base, new }
    })
}

fn diff(args: &[&std::ffi::OsStr], out: &str) -> (i32, String, PathBuf) {
    let dir = scratch().join(out);
    let _ = std::fs::remove_dir_all(&dir);
    let output = tool()
        .arg("diff")
        .args(args)
        .arg("--output-dir")
        .arg(&dir)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        dir,
    )
}

fn os(p: &Path) -> &std::ffi::OsStr {
    p.as_os_str()
}

/// The leaking function and line come first, the totals hold the growth (20,000 sessions of
/// 1 KiB, estimated from samples), the flame graph, pprof profile and JSON are written, and
/// `--threshold` turns the growth into exit 3.
#[test]
fn growth_between_two_dumps_names_the_leaking_line_first() {
    let d = dumps();
    let (code, err, dir) = diff(
        &[
            os(&d.base),
            os(&d.new),
            "--threshold".as_ref(),
            "1MiB".as_ref(),
        ],
        "heap-diff-out",
    );
    assert_eq!(code, 3, "{err}");
    let (file, line) = leak_site("tests/fixtures/service", "remember_session");
    let first_at = err
        .lines()
        .find(|l| l.trim_start().starts_with("at "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        first_at.contains("service::remember_session")
            && first_at.contains(&format!("{file}:{line})")),
        "{err}"
    );
    assert!(err.contains("over the threshold of 1.0 MiB"), "{err}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("growth.json")).unwrap()).unwrap();
    let total = json["total"]["bytes"].as_u64().unwrap();
    // 20,000 KiB kept; sampling one allocation per 512 KiB on average estimates it within
    // a few tens of percent.
    assert!((10 << 20..40 << 20).contains(&total), "{total}");
    assert_eq!(json["sample_period"], 524288);
    let top = &json["stacks"][0];
    assert!(top["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"] == "service::remember_session"));
    for f in ["growth.svg", "growth.folded", "growth.pb.gz"] {
        assert!(std::fs::metadata(dir.join(f)).unwrap().len() > 0, "{f}");
    }
    let folded = std::fs::read_to_string(dir.join("growth.folded")).unwrap();
    assert!(folded.contains("service::remember_session"), "{folded}");
    // The page: what grew, the leaking function first, and the flame graph beside it.
    let page = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let first_stack = page.split("<div class=\"stack").nth(1).unwrap_or_default();
    assert!(first_stack.contains("service::remember_session"), "{page}");
    assert!(page.contains("data=\"growth.svg\""), "{page}");
}

/// With one dump, what is live; without --threshold, exit 0.
#[test]
fn one_dump_shows_what_is_live() {
    let d = dumps();
    let (code, err, _) = diff(&[os(&d.new)], "heap-diff-live");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("Live `"), "{err}");
    assert!(err.contains("service::remember_session"), "{err}");
}

/// Bad input: each is refused with exit 2 and a message naming the file.
#[test]
fn truncated_foreign_and_mismatched_inputs_are_refused_naming_the_file() {
    let d = dumps();
    let dir = scratch().join("heap-diff-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(&d.new).unwrap();
    let cut = dir.join("cut.heap");
    std::fs::write(&cut, &text[..text.find("MAPPED_LIBRARIES").unwrap()]).unwrap();
    let program = d.binary.canonicalize().unwrap().display().to_string();
    let other = dir.join("other.heap");
    let base_text = std::fs::read_to_string(&d.base).unwrap();
    assert!(base_text.contains(&program), "the dump names {program}");
    std::fs::write(&other, base_text.replace(&program, "/srv/another-program")).unwrap();
    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "not a heap dump\n").unwrap();
    for (args, expect) in [
        (vec![os(&d.base), os(&cut)], "cut.heap"),
        (vec![os(&foreign)], "not a jemalloc heap profile"),
        (
            vec![os(&other), os(&d.new)],
            "the dumps of two programs do not compare",
        ),
        // Another program's binary: its code is not where the dump mapped code.
        (
            vec![
                os(&d.new),
                "--binary".as_ref(),
                env!("CARGO_BIN_EXE_cargo-leakcheck").as_ref(),
            ],
            "is not the binary this dump was taken from",
        ),
        (
            vec![
                os(&d.new),
                "--binary".as_ref(),
                "/nonexistent/service".as_ref(),
            ],
            "cannot read the binary `/nonexistent/service`",
        ),
    ] {
        let (code, err, _) = diff(&args, "heap-diff-refused");
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(expect), "{expect}: {err}");
    }
    // The right binary at another path is accepted (dumps from another machine).
    let copy = dir.join("service-copy");
    std::fs::copy(&d.binary, &copy).unwrap();
    let (code, err, _) = diff(
        &[os(&d.new), "--binary".as_ref(), os(&copy)],
        "heap-diff-copy",
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("service::remember_session"), "{err}");
}
