//! Reports to start tests from (test builds only): each type's `example()`, a frame at a
//! line, a holder of a static, for a test to adjust the fields it is about.

use super::*;

impl FrameReport {
    /// A frame of `function` at `file:line`, not inlined.
    pub fn at(function: &str, file: &str, line: u32) -> FrameReport {
        FrameReport {
            file: Some(file.into()),
            line: Some(line),
            ..FrameReport::named(function)
        }
    }
}

impl StackReport {
    /// One object of `bytes` retained by a stack of `kind` with no frames, failing when it
    /// is a leak: a starting point for tests to adjust.
    pub fn example(kind: StackKind, bytes: u64) -> StackReport {
        StackReport {
            bytes,
            objects: 1,
            kind,
            reason: None,
            fails: kind == StackKind::Leak,
            memory: Memory::Heap,
            allowed: None,
            suppression: None,
            growth_per_run: Vec::new(),
            frames: Vec::new(),
            retained_by: None,
            unreachable: None,
            task: None,
            process: None,
        }
    }
}

impl Report {
    /// A report of no tests, with default settings: a starting point for tests to adjust.
    pub fn example() -> Report {
        Report::new(ReportSettings {
            sample_period: 1,
            stack_threshold: 0,
            config: None,
        })
    }
}

impl TestReport {
    /// A clean test `tests::t` of package `p` (lib), nothing retained, profiled with
    /// stacks and run again twice: a starting point for tests to adjust.
    pub fn example() -> TestReport {
        TestReport {
            package: "p".into(),
            binary: "p".into(),
            kind: TargetKind::Lib,
            name: "tests::t".into(),
            verdict: Verdict::Clean,
            retained_bytes: 0,
            retained_objects: 0,
            stack_threshold: 0,
            test_threshold: None,
            exit: "exit code 0".into(),
            method: Method::Stacks,
            message: None,
            stacks: Vec::new(),
            artifacts: Artifacts::default(),
            extra_runs: ExtraRuns {
                made: 2,
                in_all: 2,
                status: ExtraRunsStatus::Completed,
                detail: None,
            },
            first_run_retained: None,
            drained: None,
            passed_without_profiling: false,
            left_processes: Vec::new(),
            unsettled_fails: false,
            collections: Vec::new(),
            processes: Vec::new(),
        }
    }
}

/// Held by a static of that name, directly: a starting point for tests.
fn held_by_static(name: &str) -> Option<RetainedBy> {
    Some(RetainedBy {
        root_kind: RootKind::Static,
        root: format!("static `{name}`"),
        symbol: Some(name.into()),
        thread: None,
        frame: None,
        definition: None,
        via: Vec::new(),
        skipped: 0,
        task: None,
        holder: None,
    })
}

impl GrowthReport {
    /// Bench `grows` of target `grows` in package `benches`: a growing stack allocated by
    /// `grows::handle_request` (`/ws/benches/grows.rs:12`), held by static `grows::SEEN`,
    /// with its artifacts; `verdict` other than a leak leaves the stacks out. A starting
    /// point for tests to adjust.
    pub fn example(name: &str, verdict: Verdict) -> GrowthReport {
        let at = |name: &str, file: &str| FrameReport::at(name, file, 12);
        let grows = verdict == Verdict::Leak;
        GrowthReport {
            package: "benches".into(),
            binary: "grows".into(),
            name: name.into(),
            verdict,
            exit: "exit code 0".into(),
            message: None,
            sample_period: 4096,
            growth_threshold: 64 << 10,
            growth_threshold_source: "built-in default".into(),
            snapshots: 40,
            duration_seconds: 10.0,
            heap: vec![(0.0, 2 << 20), (10.0, 4 << 20)],
            rss: Vec::new(),
            memory: None,
            stacks: if grows {
                vec![BenchStack {
                    retained_by: held_by_static("grows::SEEN"),
                    objects: 3 << 10,
                    task: None,
                    memory: Memory::Heap,
                    bytes: 3 << 20,
                    growth_bytes: 2 << 20,
                    growth_bytes_per_second: 409_600.0,
                    flagged: true,
                    kind: StackKind::Leak,
                    frames: vec![
                        at(
                            "alloc::vec::Vec<T>::push",
                            "/rustc/x/library/alloc/src/vec/mod.rs",
                        ),
                        at("grows::handle_request", "/ws/benches/grows.rs"),
                    ],
                    series: vec![(0.0, 1 << 20), (10.0, 3 << 20)],
                }]
            } else {
                Vec::new()
            },
            artifacts: if grows {
                BenchArtifacts {
                    flamegraph: Some("benches-bench-grows/grows.svg".into()),
                    folded: Some("benches-bench-grows/grows.folded".into()),
                    plot: Some("benches-bench-grows/grows.plot.svg".into()),
                    pprof: Some("benches-bench-grows/grows.pb.gz".into()),
                    memory_plot: None,
                }
            } else {
                BenchArtifacts::default()
            },
            unsettled_fails: false,
            service: false,
            not_checked: false,
            collections: Vec::new(),
        }
    }
}
