//! `leakcheck.toml`: per-test thresholds, timeouts and suppressions.
//!
//! Read in two steps, as cargo-deny does: the raw TOML (with spans) is walked once
//! (`read`), collecting every problem with the key and line it concerns, and only a file
//! without errors becomes a [`Config`]. Unknown keys are warnings (a typo must not pass
//! silently, but must not stop a run either). Settings are layered (`settings`): command-line
//! flags over the last matching `[[tests]]` entry over `[defaults]` over the built-in
//! defaults. The per-test settings are declared once, in `settings`' `per_test_settings!`,
//! which gives the layer type, its keys and reading, the merge and the resolved settings;
//! `flags` checks the command line's values for them. `load` finds the file and checks its
//! encoding; `size` and `glob` read the values the file and the command line share.

pub mod flags;
mod glob;
mod load;
mod read;
mod settings;
mod size;

pub use glob::Glob;
pub use load::{load, LoadError};
#[cfg(test)]
pub(crate) use read::parse;
pub use settings::*;
pub use size::parse_size;

#[cfg(test)]
mod tests {
    use super::load::decode;
    use super::*;
    use crate::model::FrameReport;
    use std::path::{Path, PathBuf};

    fn parse_ok(text: &str) -> (Config, Vec<String>) {
        parse(text, Path::new("leakcheck.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(text: &str) -> String {
        parse(text, Path::new("leakcheck.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn outputs_name_paths_and_nothing_else() {
        let (c, _) = parse_ok("[output]\njunit = \"target/junit.xml\"\n");
        assert_eq!(
            c.outputs.get("junit"),
            Some(&(PathBuf::from("target/junit.xml"), 2))
        );
        assert!(parse_ok("").0.outputs.is_empty());
        let e = parse_err("[output]\njunit = 3\n");
        assert!(e.contains("output.junit"), "{e}");
    }

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("0B"), Ok(0));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4 kib"), Ok(4096));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3KB"), Ok(3000));
    }

    #[test]
    fn rejects_bad_sizes_naming_them() {
        let e = parse_size("4XB").unwrap_err().to_string();
        assert!(
            e.contains("`4XB`") && e.contains("unknown unit `xb`"),
            "{e}"
        );
        assert!(parse_size("KiB")
            .unwrap_err()
            .to_string()
            .contains("expected a number"));
        assert!(parse_size("1.5B")
            .unwrap_err()
            .to_string()
            .contains("whole number"));
        assert!(parse_size("-1B").is_err());
        assert!(parse_size("1..5B")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert!(parse_size(".")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
    }

    #[test]
    fn a_config_file_in_another_encoding_is_named_as_such() {
        let utf16le: Vec<u8> = "[defaults]\n"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect();
        let with_bom = [&[0xFF, 0xFE][..], &utf16le].concat();
        assert!(decode(&with_bom)
            .unwrap_err()
            .to_string()
            .contains("looks like UTF-16 (little-endian, with a byte-order mark)"));
        assert!(decode(&utf16le)
            .unwrap_err()
            .to_string()
            .contains("looks like UTF-16 (little-endian)"));
        let utf16be: Vec<u8> = "[defaults]\n"
            .encode_utf16()
            .flat_map(|u| u.to_be_bytes())
            .collect();
        assert!(decode(&utf16be)
            .unwrap_err()
            .to_string()
            .contains("UTF-16 (big-endian)"));
        assert_eq!(
            decode(b"a = 1\nb = \"\xFF\"\n").unwrap_err().to_string(),
            "the file is not valid UTF-8 (line 2, byte 11)"
        );
        assert_eq!(decode(b"\xEF\xBB\xBFa = 1\n"), Ok("a = 1\n"));
    }

    #[test]
    fn global_settings_ignore_every_tests_rule_even_a_catch_all() {
        let (c, _) = parse_ok(
            "[defaults]\ntimeout = 100\nstack-threshold = \"1KiB\"\n\n[[tests]]\nfilter = \"*\"\ntimeout = 7\nstack-threshold = \"2KiB\"\n",
        );
        let none = SettingsLayer::default();
        let global = c.global(&none);
        assert_eq!((global.timeout, global.stack_threshold), (Some(100), 1024));
        let any = c.effective("any::test", &none);
        assert_eq!((any.timeout, any.stack_threshold), (Some(7), 2048));
        assert_eq!(Config::default().global(&none).timeout, None, "no default");
    }

    #[test]
    fn a_timeout_in_minutes_too_large_to_hold_is_refused() {
        let e = parse_err("[defaults]\ntimeout = \"307445734561825861m\"\n");
        assert!(e.contains("expected a positive number of seconds"), "{e}");
        let (c, _) = parse_ok("[defaults]\ntimeout = \"5m\"\n");
        assert_eq!(
            c.effective("t", &SettingsLayer::default()).timeout,
            Some(300)
        );
    }

    #[test]
    fn sizes_are_exact_at_the_top_of_the_range() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for over in [
            "18446744073709551616",
            "16777216TiB",
            "17179869184GiB",
            "1e30",
            "99999999999999999999999999999999999999999B",
        ] {
            let e = parse_size(over).unwrap_err().to_string();
            assert!(
                e.contains("out of range") || e.contains("unknown unit"),
                "{over}: {e}"
            );
        }
        assert!(parse_size("17179869184GiB")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(parse_size("18446744073709551616")
            .unwrap_err()
            .to_string()
            .contains("at most 2^64 - 1"));
        assert_eq!(
            parse_size("17179869183.999999999GiB")
                .unwrap_err()
                .to_string(),
            "invalid size `17179869183.999999999GiB`: not a whole number of bytes"
        );
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        assert_eq!(parse_size("0.1KB"), Ok(100));
        assert_eq!(parse_size("1.000KB"), Ok(1000));
        assert_eq!(parse_size(".5KiB"), Ok(512));
    }

    #[test]
    fn a_services_growth_threshold_is_the_command_lines_then_runs_not_the_benches() {
        let (c, w) = parse_ok(
            "[bench]\ngrowth-threshold = \"1MiB\"\n\n[run]\ngrowth-threshold = \"2MiB\"\n",
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.service_growth_threshold(None), (2 << 20, "[run]".into()));
        assert_eq!(
            c.service_growth_threshold(Some(7)),
            (7, "the command line".into())
        );
        let (bench_only, _) = parse_ok("[bench]\ngrowth-threshold = \"1MiB\"\n");
        assert_eq!(
            bench_only.service_growth_threshold(None),
            (64 << 10, "built-in default".into())
        );
        let (_, w) = parse_ok("[run]\nthreshold = 3\n");
        assert!(w[0].contains("`run.threshold`: unknown key"), "{w:?}");
        assert!(parse_err("run = 3\n").contains("expected a table ([run])"));
    }

    #[test]
    fn bench_growth_thresholds_layer_like_test_settings() {
        let (c, w) = parse_ok("[bench]\ngrowth-threshold = \"1MiB\"\n\n[[benches]]\nfilter = \"cache/*\"\ngrowth-threshold = \"8MiB\"\n");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            c.growth_threshold("parse", None),
            (1 << 20, "[bench]".into())
        );
        assert_eq!(c.growth_threshold("cache/fill", None).0, 8 << 20);
        assert_eq!(
            c.growth_threshold("cache/fill", Some(5)),
            (5, "the command line".into())
        );
        assert_eq!(
            Config::default().growth_threshold("x", None).0,
            DEFAULT_GROWTH_THRESHOLD
        );
        assert!(parse_err("[[benches]]\ngrowth-threshold = 1\n")
            .contains("`benches[1].filter`: required"));
    }

    #[test]
    fn globs() {
        let g = Glob::new("cache::*");
        assert!(g.matches("cache::tests::warm") && g.matches("cache::") && !g.matches("xcache::a"));
        assert!(Glob::new("*::pool::*").matches("some_crate::pool::Slab::new"));
        assert!(
            Glob::new("pool_*").matches("pool_reuse")
                && !Glob::new("pool_*").matches("tests::pool_reuse")
        );
        assert!(
            Glob::new("a*b*c").matches("abc")
                && Glob::new("a*b*c").matches("a-b-b-c")
                && !Glob::new("a*b*c").matches("acb")
        );
        assert!(Glob::new("exact").matches("exact") && !Glob::new("exact").matches("exact2"));
        assert!(Glob::new("*").matches(""));
        let star = Glob::new(&Glob::escape("<*const T as Foo>::f"));
        assert!(star.matches("<*const T as Foo>::f") && !star.matches("<const T as Foo>::f"));
        assert!(!Glob::new("ab*ab").matches("ab"), "pieces do not overlap");
    }

    #[test]
    fn the_embedded_reference_parses_with_no_warnings_and_equals_the_built_in_defaults() {
        let (config, warnings) = parse_ok(DEFAULT_CONFIG);
        assert!(warnings.is_empty(), "{warnings:?}");
        let built_in = Config::default().effective("any", &SettingsLayer::default());
        let mut from_file = config.effective("any", &SettingsLayer::default());
        from_file.stack_threshold_source = built_in.stack_threshold_source.clone();
        from_file.test_threshold_source = built_in.test_threshold_source.clone();
        assert_eq!(from_file, built_in);
    }

    #[test]
    fn precedence_cli_over_last_matching_rule_over_defaults() {
        let (c, w) = parse_ok(
            r#"
[defaults]
stack-threshold = "1KiB"
timeout = "30s"

[[tests]]
filter = "cache::*"
stack-threshold = "256KiB"
test-threshold = "2MiB"

[[tests]]
filter = "cache::tests::huge"
stack-threshold = "1MiB"
one-time-fails = true
timeout = "2m"
"#,
        );
        assert!(w.is_empty());
        let none = SettingsLayer::default();
        let plain = c.effective("other::t", &none);
        assert_eq!(
            (plain.stack_threshold, plain.test_threshold, plain.timeout),
            (1024, None, Some(30))
        );
        assert!(plain.stack_threshold_source.starts_with("[defaults]"));
        let cache = c.effective("cache::tests::warm", &none);
        assert_eq!(
            (cache.stack_threshold, cache.test_threshold),
            (256 << 10, Some(2 << 20))
        );
        assert!(
            cache
                .stack_threshold_source
                .starts_with("[[tests]] #1 (filter \"cache::*\")"),
            "{}",
            cache.stack_threshold_source
        );
        let huge = c.effective("cache::tests::huge", &none);
        assert_eq!(
            (
                huge.stack_threshold,
                huge.test_threshold,
                huge.one_time_fails,
                huge.timeout
            ),
            (1 << 20, Some(2 << 20), true, Some(120))
        );
        let cli = SettingsLayer {
            stack_threshold: Some(0),
            timeout: Some(5),
            ..SettingsLayer::default()
        };
        let over = c.effective("cache::tests::huge", &cli);
        assert_eq!(
            (over.stack_threshold, over.timeout, over.test_threshold),
            (0, Some(5), Some(2 << 20))
        );
        assert_eq!(over.stack_threshold_source, "the command line");
    }

    #[test]
    fn extra_runs_are_layered_and_checked() {
        let (c, w) = parse_ok(
            r#"
[defaults]
extra-runs = 3

[[tests]]
filter = "slow::*"
extra-runs = 0
"#,
        );
        assert!(w.is_empty(), "{w:?}");
        let none = SettingsLayer::default();
        assert_eq!(Config::default().effective("t", &none).extra_runs, 5);
        assert_eq!(c.effective("fast::t", &none).extra_runs, 3);
        assert_eq!(c.effective("slow::t", &none).extra_runs, 0);
        let cli = SettingsLayer {
            extra_runs: Some(8),
            ..SettingsLayer::default()
        };
        assert_eq!(c.effective("slow::t", &cli).extra_runs, 8);
        assert_eq!(
            parse_err(
                "[defaults]\nextra-runs = -1\n\n[[tests]]\nfilter = \"a\"\nextra-runs = \"5\"\n"
            ),
            "invalid configuration `leakcheck.toml` (2 errors)
  leakcheck.toml:2: `defaults.extra-runs`: expected a whole number of runs from 0 (off) to 100
  leakcheck.toml:6: `tests[1].extra-runs`: expected a whole number of runs from 0 (off) to 100"
        );
        assert!(parse_err("[defaults]\nextra-runs = 101\n").contains("from 0 (off) to 100"));
    }

    #[test]
    fn suppressions_need_a_frame_and_a_reason_and_match_frames() {
        let (c, _) = parse_ok(
            r#"
[[suppress]]
frame = "some_crate::pool::*"
reason = "the pool keeps its slabs"

[[suppress]]
frame = "*::warm_cache"
reason = "warmed on purpose"
filter = "cache::*"
"#,
        );
        // What the analysis asks: the filter selects the test, and a frame matches.
        let covers = |s: &Suppression, test: &str, frames: &[FrameReport]| {
            s.applies_to(test) && s.matches_stack(frames)
        };
        let frames = |names: &[&str]| -> Vec<FrameReport> {
            names
                .iter()
                .map(|n| FrameReport {
                    function: n.to_string(),
                    file: None,
                    line: None,
                    inlined: false,
                })
                .collect()
        };
        assert!(covers(
            &c.suppress[0],
            "t",
            &frames(&["alloc::vec::from_elem", "some_crate::pool::Slab::new", "t"])
        ));
        assert!(!covers(&c.suppress[0], "t", &frames(&["other::pool::x"])));
        assert!(covers(
            &c.suppress[1],
            "cache::a",
            &frames(&["app::warm_cache"])
        ));
        assert!(
            !covers(&c.suppress[1], "other::a", &frames(&["app::warm_cache"])),
            "filtered to cache::*"
        );
        assert_eq!(c.suppressions_for("other::a").count(), 1);
        assert_eq!(c.suppress[1].line, 6);
    }

    #[test]
    fn every_error_names_file_key_and_line() {
        let text = r#"[defaults]
stack-threshold = "4XB"
one-time-fails = "yes"

[[tests]]
stack-threshold = "1KiB"

[[tests]]
filter = "a"
timeout = 0

[[suppress]]
frame = "x"
reason = "  "

[[suppress]]
reason = "no frame"
"#;
        assert_eq!(
            parse_err(text),
            "invalid configuration `leakcheck.toml` (6 errors)
  leakcheck.toml:2: `defaults.stack-threshold`: invalid size `4XB`: unknown unit `xb` (use B, KiB, MiB, GiB, KB, MB or GB)
  leakcheck.toml:3: `defaults.one-time-fails`: expected true or false, found string
  leakcheck.toml:5: `tests[1].filter`: required: a glob over test names
  leakcheck.toml:10: `tests[2].timeout`: expected a positive number of seconds (300, \"30s\" or \"5m\")
  leakcheck.toml:14: `suppress[1].reason`: must say why the leak is accepted
  leakcheck.toml:16: `suppress[2].frame`: required: a glob over function names"
        );
        assert_eq!(
            parse_err("[defaults\nx = 1\n"),
            "invalid configuration `leakcheck.toml` (1 error)\n  leakcheck.toml:1: not valid TOML: unclosed table, expected `]`"
        );
        assert!(parse_err("tests = 3\n").contains(
            "leakcheck.toml:1: `tests`: expected an array of tables ([[tests]]), found integer"
        ));
    }

    #[test]
    fn found_at_the_root_or_in_dot_config_and_an_explicit_path_must_exist() {
        let dir = std::env::temp_dir().join(format!("leakcheck-config-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".config")).unwrap();
        let (none, _) = load(None, &dir).unwrap();
        assert_eq!(none, Config::default(), "no file: built-in defaults");
        std::fs::write(
            dir.join(".config/leakcheck.toml"),
            "[defaults]\nstack-threshold = \"2KiB\"\n",
        )
        .unwrap();
        let (c, w) = load(None, &dir).unwrap();
        assert_eq!(c.defaults.stack_threshold, Some(2048));
        assert!(w.is_empty());
        std::fs::write(
            dir.join("leakcheck.toml"),
            "[defaults]\nstack-threshold = \"4KiB\"\n",
        )
        .unwrap();
        let (c, w) = load(None, &dir).unwrap();
        assert_eq!(c.defaults.stack_threshold, Some(4096), "the root file wins");
        assert_eq!(w.len(), 1, "and the other is reported as ignored: {w:?}");
        let missing = dir.join("nope.toml");
        let e = load(Some(&missing), &dir).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot read configuration `{}`",
                missing.display()
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_keys_are_warnings_naming_key_and_line() {
        let (_, w) = parse_ok("[defaults]\nstack-treshold = \"1KiB\"\n\n[[suppress]]\nframe = \"x\"\nreason = \"y\"\nreasn = \"z\"\n\n[extra]\n");
        assert_eq!(
            w,
            vec![
                // Every per-test key, as declared (a new setting is known without an edit here).
                format!("leakcheck.toml:2: `defaults.stack-treshold`: unknown key, ignored (known here: {})", settings::SettingsLayer::KEYS.join(", ")).as_str(),
                "leakcheck.toml:7: `suppress[1].reasn`: unknown key, ignored (known here: frame, reason, filter)",
                "leakcheck.toml:9: `extra`: unknown key, ignored (known here: defaults, tests, suppress, bench, benches, run, output)",
            ]
        );
    }
}
