//! The expected verdict of every test of every fixture crate (`tests/fixtures/*`) and of the
//! bundled example (`examples/demo`), for the end-to-end tests.
//!
//! Conventions the fixtures follow, relied on here:
//! - every leaking allocation line ends with a `// leak-site: <name>` comment, where `<name>`
//!   is the test function's name; names are unique within a fixture (the integration tests of
//!   `leaky` are named differently from its unit tests for that reason), so a marker is found
//!   by scanning the fixture's `.rs` files for it;
//! - a marker exists exactly when the table below has `site: Some(..)` for that test. The
//!   `custom-alloc` fixture leaks without a marker: the tool cannot see that allocator, so no
//!   site can be expected;
//! - a doc-test is found by its code block in a doc comment; one whose doc comment a macro
//!   writes is declared by a `// macro-doc-test: <name as rustdoc gives it>` line.
//!
//! The test at the bottom checks the table against the fixtures' sources (test functions and
//! markers), without building anything.

/// One expected outcome of running cargo-leakcheck over a fixture: the verdict of one test,
/// and what its report must contain.
#[derive(Clone, Copy)]
pub struct Expected {
    /// The fixture's directory, relative to the repository root: "tests/fixtures/leaky",
    /// "examples/demo", ...
    pub fixture: &'static str,
    /// The cargo package name, e.g. "leaky", "jemalloc-global".
    pub package: &'static str,
    /// The test target: the lib target name for unit tests (the package name with `-`
    /// replaced by `_`, e.g. "jemalloc_global"), the integration test's target name
    /// ("integration") for `tests/*.rs`.
    pub binary: &'static str,
    /// The full libtest name, module path included, e.g. "tests::forget_vec".
    pub test: &'static str,
    /// "leak" | "clean" | "failed" | "crashed" | "timeout" | "unanalysable" | "unsettled", or
    /// [`IGNORED`].
    pub verdict: &'static str,
    /// `Some(name)` when the line marked `// leak-site: name` in the fixture's sources must
    /// appear as an allocation site of this test in the report; the name is the test
    /// function's name.
    pub site: Option<&'static str>,
    /// True when the test keeps memory for the process lifetime (one-time initialisation,
    /// a pool, a table built once) and the report must show it: as stacks of kind
    /// "one-time" or "process-lifetime", or, when the counting pass settled the test, as
    /// what its own run retained (`first_run_retained`) with completed extra runs.
    pub kept: bool,
    /// True for a benchmark (`cargo leakcheck bench`): `binary` is the bench target and
    /// `test` the benchmark's name; "leak" means a stack keeps growing.
    pub bench: bool,
    /// True for a request path of a service (`cargo leakcheck run`): `binary` is the
    /// service's binary and `test` the function that handles the path, loaded on its own;
    /// "leak" means its memory keeps growing under the load.
    pub service: bool,
    /// The cargo features the service is built with ("": none), e.g. "jemalloc" for the
    /// webapp on tikv-jemallocator as its global allocator.
    pub features: &'static str,
    /// The expected `extra_runs.status` ("completed", "not-needed", "should-panic", …);
    /// None: not checked.
    pub extra_runs: Option<&'static str>,
    /// The expected `method` ("counters": settled without stack profiling; "stacks");
    /// None: not checked.
    pub method: Option<&'static str>,
    /// `(root, function)`: a leak or process-lifetime stack of the test must say it is held
    /// by a root whose words contain `root`, with `function` (when given) in the frame
    /// holding it or among the allocation sites on the way.
    pub held_by: Option<(&'static str, Option<&'static str>)>,
    /// True when the report must say that draining (crossbeam-epoch's garbage) freed
    /// objects before the test was judged.
    pub drained: bool,
    /// `(runtime, name)`: a leak stack of the test must be the cells of `runtime`'s tasks
    /// ("tokio", "async-task") spawned at the line marked `// spawn-site: name`, at least
    /// one more alive after every extra run.
    pub spawns_tasks: Option<(&'static str, &'static str)>,
    /// True when, besides, another leak stack of the test must be held by that task.
    pub held_by_task: bool,
    /// `(name, state)`: a leak stack of the test must be held by a thread that never named
    /// itself, named instead by the line marked `// thread-spawn: name` that spawned it,
    /// with `state` in what it was doing.
    pub thread_holder: Option<(&'static str, &'static str)>,
    /// True when the test's counting runs must have stopped early because each left
    /// threads running (`threads-left` after two runs in `metrics.json`), its stacks
    /// process making the rest of the default five extra runs.
    pub threads_left: bool,
    /// `(name, entries)`: one of the program's own collections, defined on the line marked
    /// `// grows: name`, must fail the test by growing `entries` on every extra run.
    pub grows: Option<(&'static str, i64)>,
    /// What the leak stack at `site` holds, as the report's `memory` says: "mapped" or
    /// "mapped-file" for the program's own mappings; None: heap objects.
    pub memory: Option<&'static str>,
    /// A service's request path: how many requests its load makes.
    pub requests: u32,
    /// A service's request path: what its resident set grew by must be explained as pages
    /// the allocator kept (after bursts freed), by the allocator's own figures.
    pub allocator_pages: bool,
}

impl Expected {
    /// The same row, with its expected extra-runs status.
    const fn runs(self, status: &'static str) -> Expected {
        Expected {
            extra_runs: Some(status),
            ..self
        }
    }

    /// The same row, settled by the counting pass alone (no stack profiling).
    const fn by_counting(self) -> Expected {
        Expected {
            method: Some("counters"),
            ..self
        }
    }

    /// The same row, the service built with these cargo features.
    const fn features(self, features: &'static str) -> Expected {
        Expected { features, ..self }
    }

    /// The same row, with the root that must hold its memory (see [`Expected::held_by`]).
    const fn held_by(self, root: &'static str, function: Option<&'static str>) -> Expected {
        Expected {
            held_by: Some((root, function)),
            ..self
        }
    }

    /// The same row, whose report must say that draining freed garbage before it was judged.
    const fn drained(self) -> Expected {
        Expected {
            drained: true,
            ..self
        }
    }

    /// The same row, whose leak is tasks of `runtime` spawned at the line marked
    /// `// spawn-site: name` (see [`Expected::spawns_tasks`]).
    const fn spawns_tasks(self, runtime: &'static str, name: &'static str) -> Expected {
        Expected {
            spawns_tasks: Some((runtime, name)),
            ..self
        }
    }

    /// The same row, whose counting runs stop because each left threads running (see
    /// [`Expected::threads_left`]).
    const fn threads_left(self) -> Expected {
        Expected {
            threads_left: true,
            ..self
        }
    }

    /// The same row, whose leak is held by a thread spawned at the line marked
    /// `// thread-spawn: name`, doing `state` (see [`Expected::thread_holder`]).
    const fn thread_holder(self, name: &'static str, state: &'static str) -> Expected {
        Expected {
            thread_holder: Some((name, state)),
            ..self
        }
    }

    /// The same row, whose other leaking memory is held by the task it spawns.
    const fn held_by_task(self) -> Expected {
        Expected {
            held_by_task: true,
            ..self
        }
    }

    /// The same row, failed by the collection defined on the line marked `// grows: name`,
    /// `entries` longer on every extra run (see [`Expected::grows`]).
    const fn grows(self, name: &'static str, entries: i64) -> Expected {
        Expected {
            grows: Some((name, entries)),
            ..self
        }
    }

    /// The same row, its leak in memory the program mapped itself.
    const fn mapped(self) -> Expected {
        Expected {
            memory: Some("mapped"),
            ..self
        }
    }

    /// The same row, its leak a file the program mapped itself.
    const fn mapped_file(self) -> Expected {
        Expected {
            memory: Some("mapped-file"),
            ..self
        }
    }

    /// The same request path, under a load of `n` requests.
    const fn requests(self, n: u32) -> Expected {
        Expected {
            requests: n,
            ..self
        }
    }

    /// The same request path, its RSS growth explained as pages the allocator kept.
    const fn allocator_pages(self) -> Expected {
        Expected {
            allocator_pages: true,
            ..self
        }
    }

    /// A test of `fixture` that must leak at the line marked with its name (`leaks`), or be
    /// clean.
    pub fn generated(
        fixture: &'static str,
        package: &'static str,
        binary: &'static str,
        test: &'static str,
        leaks: bool,
    ) -> Expected {
        let target = Target {
            fixture,
            package,
            binary,
        };
        match leaks {
            true => leak(target, test, test),
            false => clean(target, test),
        }
    }

    /// A test of `fixture` that must leak at the line marked `site`, or be clean (no site).
    pub fn generated_at(
        fixture: &'static str,
        package: &'static str,
        binary: &'static str,
        test: &'static str,
        site: Option<&'static str>,
    ) -> Expected {
        let target = Target {
            fixture,
            package,
            binary,
        };
        match site {
            Some(site) => leak(target, test, site),
            None => clean(target, test),
        }
    }

    /// The same row, profiled with stacks.
    const fn by_stacks(self) -> Expected {
        Expected {
            method: Some("stacks"),
            ..self
        }
    }
}

/// Every verdict a report can give.
pub const VERDICTS: &[&str] = &[
    "leak",
    "clean",
    "failed",
    "crashed",
    "timeout",
    "unanalysable",
    "unsettled",
];

/// Not a verdict: an `#[ignore]`d test, absent from the report and counted in its
/// `ignored`.
pub const IGNORED: &str = "ignored";

/// A test binary of a fixture.
struct Target {
    fixture: &'static str,
    package: &'static str,
    binary: &'static str,
}

const LEAKY_UNIT: Target = Target {
    fixture: "tests/fixtures/leaky",
    package: "leaky",
    binary: "leaky",
};
const LEAKY_INTEGRATION: Target = Target {
    fixture: "tests/fixtures/leaky",
    package: "leaky",
    binary: "integration",
};
/// `tests/single_test.rs`: one test alone in its binary.
const LEAKY_SINGLE: Target = Target {
    fixture: "tests/fixtures/leaky",
    package: "leaky",
    binary: "single_test",
};
/// `tests/no_harness.rs`, declared with `harness = false`: run as one test named after it.
const LEAKY_NO_HARNESS: Target = Target {
    fixture: "tests/fixtures/leaky",
    package: "leaky",
    binary: "no_harness",
};
const JEMALLOC_GLOBAL: Target = Target {
    fixture: "tests/fixtures/jemalloc-global",
    package: "jemalloc-global",
    binary: "jemalloc_global",
};
const CUSTOM_ALLOC: Target = Target {
    fixture: "tests/fixtures/custom-alloc",
    package: "custom-alloc",
    binary: "custom_alloc",
};
/// A global allocator that takes large blocks from malloc and serves small ones itself.
const POOL_ALLOC: Target = Target {
    fixture: "tests/fixtures/pool-alloc",
    package: "pool-alloc",
    binary: "pool_alloc",
};
/// State a library tears down itself at exit (an ELF destructor, an `atexit` handler),
/// aborting when used after that.
const TEARDOWN: Target = Target {
    fixture: "tests/fixtures/teardown",
    package: "teardown",
    binary: "teardown",
};
const RETENTION: Target = Target {
    fixture: "tests/fixtures/retention",
    package: "retention",
    binary: "retention",
};
/// Reference cycles and a `Box::leak`: lost memory, and why nothing frees it.
const CYCLES: Target = Target {
    fixture: "tests/fixtures/cycles",
    package: "cycles",
    binary: "cycles",
};
const SLOW: Target = Target {
    fixture: "tests/fixtures/slow",
    package: "slow",
    binary: "slow",
};
const LIFETIME: Target = Target {
    fixture: "tests/fixtures/lifetime",
    package: "lifetime",
    binary: "lifetime",
};
/// A proc-macro crate: its test binary links std dynamically.
const TOKEN_MACROS: Target = Target {
    fixture: "tests/fixtures/token-macros",
    package: "token-macros",
    binary: "token_macros",
};
/// Test names that are hard to turn into file names.
const NAMES_INTEGRATION: Target = Target {
    fixture: "tests/fixtures/names",
    package: "names",
    binary: "names",
};
const NAMES_LONE: Target = Target {
    fixture: "tests/fixtures/names",
    package: "names",
    binary: "lone",
};
const NAMES: Target = Target {
    fixture: "tests/fixtures/names",
    package: "names",
    binary: "names",
};
/// A forwarding `#[global_allocator]` (counts, then calls `System`).
const COUNTING_ALLOC: Target = Target {
    fixture: "tests/fixtures/counting-alloc",
    package: "counting-alloc",
    binary: "counting_alloc",
};
/// Many live allocations at a test's peak.
const MANY_LIVE: Target = Target {
    fixture: "tests/fixtures/many-live",
    package: "many-live",
    binary: "many_live",
};
const MISBEHAVING: Target = Target {
    fixture: "tests/fixtures/misbehaving",
    package: "misbehaving",
    binary: "misbehaving",
};
const fn bench_target(binary: &'static str) -> Target {
    Target {
        fixture: "tests/fixtures/benches",
        package: "benches",
        binary,
    }
}

/// The service of `cargo leakcheck run`.
const WEBAPP: Target = Target {
    fixture: "tests/fixtures/webapp",
    package: "webapp",
    binary: "webapp",
};

/// A request path of a service under `cargo leakcheck run`, named by its handler.
const fn service(
    target: Target,
    handler: &'static str,
    verdict: &'static str,
    site: Option<&'static str>,
) -> Expected {
    Expected {
        service: true,
        ..outcome(target, handler, verdict, site, false)
    }
}

/// The async service of `cargo leakcheck run`, on tokio.
const ASYNCAPP: Target = Target {
    fixture: "tests/fixtures/asyncapp",
    package: "asyncapp",
    binary: "asyncapp",
};

/// Judged under the `leakcheck.toml` at its root.
const CONFIGURED: Target = Target {
    fixture: "tests/fixtures/configured",
    package: "configured",
    binary: "configured",
};
/// `tests/cases.rs`, `harness = false` on libtest-mimic: its trials listed and run one by
/// one, as nextest runs them.
const TRIALS: Target = Target {
    fixture: "tests/fixtures/trials",
    package: "trials",
    binary: "cases",
};
/// Integration tests that run the package's own binaries, and a shell.
const CHILDREN: Target = Target {
    fixture: "tests/fixtures/children",
    package: "children",
    binary: "cli",
};
/// Programs that lose memory once as they start, and their twins that lose it with their work.
const START_UP: Target = Target {
    fixture: "tests/fixtures/children",
    package: "children",
    binary: "start_up",
};
/// Doc-tests of a library on edition 2021: an executable each.
const DOC2021: Target = Target {
    fixture: "tests/fixtures/doctests",
    package: "doc2021",
    binary: "doc2021",
};
/// The same doc-tests on edition 2024: one merged executable.
const DOC2024: Target = Target {
    fixture: "tests/fixtures/doctests",
    package: "doc2024",
    binary: "doc2024",
};
/// Tasks on a process-wide tokio runtime and on async-executor.
const TASKS: Target = Target {
    fixture: "tests/fixtures/tasks",
    package: "tasks",
    binary: "tasks",
};
/// Tests whose stacks process starts beside their counting process once a run has shown
/// they need one (see tests/e2e/ahead.rs).
const HISTORY: Target = Target {
    fixture: "tests/fixtures/history",
    package: "history",
    binary: "history",
};
/// Process-wide collections that grow without allocating on most calls, and ones that stop.
const COLLECTIONS: Target = Target {
    fixture: "tests/fixtures/collections",
    package: "collections",
    binary: "collections",
};
/// Memory mapped outside the heap, through libc and memmap2.
const MAPPINGS: Target = Target {
    fixture: "tests/fixtures/mappings",
    package: "mappings",
    binary: "mappings",
};
const HEALTHY: Target = Target {
    fixture: "tests/fixtures/healthy",
    package: "healthy",
    binary: "healthy",
};

const DEMO: Target = Target {
    fixture: "examples/demo",
    package: "leakcheck-demo",
    binary: "leakcheck_demo",
};

const fn outcome(
    target: Target,
    test: &'static str,
    verdict: &'static str,
    site: Option<&'static str>,
    kept: bool,
) -> Expected {
    Expected {
        fixture: target.fixture,
        package: target.package,
        binary: target.binary,
        test,
        verdict,
        site,
        kept,
        bench: false,
        service: false,
        features: "",
        extra_runs: None,
        method: None,
        held_by: None,
        drained: false,
        spawns_tasks: None,
        held_by_task: false,
        thread_holder: None,
        threads_left: false,
        grows: None,
        memory: None,
        requests: 20_000,
        allocator_pages: false,
    }
}

/// A benchmark's expected verdict under `cargo leakcheck bench`.
const fn bench(
    target: Target,
    name: &'static str,
    verdict: &'static str,
    site: Option<&'static str>,
) -> Expected {
    Expected {
        bench: true,
        ..outcome(target, name, verdict, site, false)
    }
}

/// A test that must be reported as leaking, with its marked line among the sites.
const fn leak(target: Target, test: &'static str, site: &'static str) -> Expected {
    outcome(target, test, "leak", Some(site), false)
}

/// A test that must fail by the collection on the line marked `// grows: test`, `entries`
/// longer on every extra run, whatever its allocations show.
const fn grows(target: Target, test: &'static str, marker: &'static str, entries: i64) -> Expected {
    outcome(target, test, "leak", None, false).grows(marker, entries)
}

/// A test that must be reported clean, with no one-time stack required.
const fn clean(target: Target, test: &'static str) -> Expected {
    outcome(target, test, "clean", None, false)
}

/// A test that must be reported clean although it keeps memory for the process lifetime,
/// which the report must show.
const fn clean_kept(target: Target, test: &'static str) -> Expected {
    outcome(target, test, "clean", None, true)
}

/// Every test of every fixture, exactly once: the rows written out below, and the canary
/// matrix's, generated with its fixture's sources (`canary.rs`).
pub static EXPECTED: std::sync::LazyLock<Vec<Expected>> = std::sync::LazyLock::new(|| {
    FIXTURE_ROWS
        .iter()
        .copied()
        .chain(crate::canary::rows())
        .collect()
});

/// The rows of the fixtures whose tests are written by hand.
const FIXTURE_ROWS: &[Expected] = &[
    // --- tests/fixtures/leaky, unit tests (src/lib.rs) ---
    // Every leak grows on every extra run.
    leak(LEAKY_UNIT, "tests::forget_vec", "forget_vec").runs("completed"),
    leak(LEAKY_UNIT, "tests::box_leak", "box_leak").runs("completed"),
    leak(LEAKY_UNIT, "tests::rc_cycle", "rc_cycle").runs("completed"),
    leak(LEAKY_UNIT, "tests::arc_cycle", "arc_cycle").runs("completed"),
    leak(
        LEAKY_UNIT,
        "tests::arc_cycle_other_thread",
        "arc_cycle_other_thread",
    )
    .runs("completed"),
    // Still reachable, but grows with the work done: a leak.
    leak(
        LEAKY_UNIT,
        "tests::growing_global_registry",
        "growing_global_registry",
    )
    .runs("completed"),
    // Held by a detached thread that never ends, one more on every run.
    leak(
        LEAKY_UNIT,
        "tests::detached_thread_holds_memory",
        "detached_thread_holds_memory",
    )
    .runs("completed")
    .threads_left()
    .thread_holder(
        "detached_thread_holds_memory",
        "waiting on a lock, a channel or a condition variable",
    ),
    leak(
        LEAKY_UNIT,
        "tests::c_malloc_without_free",
        "c_malloc_without_free",
    )
    .runs("completed"),
    // The marked line is inside an #[inline(always)] helper: an inlined frame.
    leak(
        LEAKY_UNIT,
        "tests::inline_always_leak",
        "inline_always_leak",
    )
    .runs("completed"),
    // 4 bytes: found only when every allocation is accounted for.
    leak(LEAKY_UNIT, "tests::tiny_leak", "tiny_leak").runs("completed"),
    // A box of a thread block's size, after joins that freed thread blocks.
    leak(
        LEAKY_UNIT,
        "tests::leaks_after_churning_threads",
        "leaks_after_churning_threads",
    )
    .runs("completed"),
    // One-time initialisation: extra runs add nothing, so counting settles them.
    clean_kept(LEAKY_UNIT, "tests::once_lock_init")
        .runs("completed")
        .by_counting(),
    clean_kept(LEAKY_UNIT, "tests::lazy_lock_init")
        .runs("completed")
        .by_counting(),
    clean_kept(LEAKY_UNIT, "tests::lazy_static_init")
        .runs("completed")
        .by_counting(),
    clean_kept(LEAKY_UNIT, "tests::once_cell_init")
        .runs("completed")
        .by_counting(),
    // A joined thread leaves glibc's cached thread block behind, which is the thread
    // library's and not counted: nothing retained, no extra run.
    clean(LEAKY_UNIT, "tests::thread_local_freed")
        .runs("not-needed")
        .by_counting(),
    clean(LEAKY_UNIT, "tests::joined_thread")
        .runs("not-needed")
        .by_counting(),
    clean(LEAKY_UNIT, "tests::caught_panic")
        .runs("not-needed")
        .by_counting(),
    clean(LEAKY_UNIT, "tests::heavy_churn")
        .runs("not-needed")
        .by_counting(),
    clean(LEAKY_UNIT, "tests::prints_stdout")
        .runs("not-needed")
        .by_counting(),
    clean(LEAKY_UNIT, "tests::plain_alloc_and_drop")
        .runs("not-needed")
        .by_counting(),
    clean(LEAKY_UNIT, "tests::plain_string_building")
        .runs("not-needed")
        .by_counting(),
    // --- tests/fixtures/leaky, integration tests (tests/integration.rs) ---
    leak(
        LEAKY_INTEGRATION,
        "forget_vec_integration",
        "forget_vec_integration",
    )
    .runs("completed"),
    leak(
        LEAKY_INTEGRATION,
        "rc_cycle_integration",
        "rc_cycle_integration",
    )
    .runs("completed"),
    leak(
        LEAKY_INTEGRATION,
        "tiny_leak_integration",
        "tiny_leak_integration",
    )
    .runs("completed"),
    clean(LEAKY_INTEGRATION, "checksum_integration_clean").runs("not-needed"),
    // Alone in its binary: its entry point is found with the layout another binary proved.
    leak(LEAKY_SINGLE, "leaks_alone", "leaks_alone").runs("completed"),
    // A `harness = false` target: no libtest, no baseline to subtract, no entry point.
    leak(LEAKY_NO_HARNESS, "no_harness", "no_harness").runs("no-harness"),
    // --- tests/fixtures/lifetime: state kept for the process lifetime ---
    // A pool started by its first user, never joined; three users, one returning `Result`.
    clean_kept(LIFETIME, "tests::pool_sums_on_workers")
        .runs("completed")
        .by_counting(),
    clean_kept(LIFETIME, "tests::pool_formats_on_workers")
        .runs("completed")
        .by_counting(),
    clean_kept(LIFETIME, "tests::returns_result_from_pool")
        .runs("completed")
        .by_counting(),
    // Each worker warms a cache of its own on its first job: growth for a few runs.
    clean_kept(LIFETIME, "tests::worker_caches_warm_up")
        .runs("completed")
        .by_counting(),
    clean_kept(LIFETIME, "tests::table_installed_by_compare_and_swap")
        .runs("completed")
        .by_counting(),
    // log::set_boxed_logger, and a second call that returns Err.
    clean_kept(LIFETIME, "tests::logger_installed_once")
        .runs("completed")
        .by_counting(),
    clean_kept(LIFETIME, "tests::thread_registers_itself_and_is_joined")
        .runs("completed")
        .by_counting(),
    clean_kept(LIFETIME, "tests::static_buffer_refilled_to_same_size")
        .runs("completed")
        .by_counting(),
    // Epoch-style deferred frees: grows for three runs, then steady.
    clean_kept(LIFETIME, "tests::deferred_frees_catch_up")
        .runs("completed")
        .by_counting(),
    clean_kept(LIFETIME, "tests::env_var_set_to_the_same_value")
        .runs("completed")
        .by_counting(),
    // Threads still running their thread-local destructors when the test ends. Whether
    // they are gone by the time its own run is measured depends on timing, so how it is
    // settled (nothing retained, or an extra run that adds nothing) is not pinned; that it is
    // clean by counting is.
    clean(LIFETIME, "tests::scoped_threads_still_exiting").by_counting(),
    // Spawns and joins 8 threads; retains nothing extra runs add to.
    clean(LIFETIME, "tests::sixteen_threads_allocate_and_free"),
    // Its threads' blocks are glibc's (not counted): it retained nothing of its own.
    clean(LIFETIME, "tests::joins_eight_threads")
        .runs("not-needed")
        .by_counting(),
    // Leaks on a pool worker, and in a test body with closures of its own.
    leak(
        LIFETIME,
        "tests::pool_job_leaks_each_run",
        "pool_job_leaks_each_run",
    )
    .runs("completed")
    .by_stacks(),
    leak(
        LIFETIME,
        "tests::closures_in_the_body_leak_each_run",
        "closures_in_the_body_leak_each_run",
    )
    .runs("completed")
    .by_stacks(),
    // Cannot run twice in a process: judged on their own run, with the reason, by whether
    // what they retained is still reachable at exit.
    clean_kept(LIFETIME, "tests::panics_when_run_again")
        .runs("panicked")
        .by_stacks(),
    clean_kept(LIFETIME, "tests::should_panic_after_filling_a_buffer")
        .runs("should-panic")
        .by_stacks(),
    clean_kept(LIFETIME, "tests::should_panic_with_the_pool_running")
        .runs("should-panic")
        .by_stacks(),
    leak(
        LIFETIME,
        "tests::should_panic_after_losing_a_buffer",
        "should_panic_after_losing_a_buffer",
    )
    .runs("should-panic")
    .by_stacks(),
    leak(
        LIFETIME,
        "tests::runs_once_and_loses_a_box_on_a_thread",
        "runs_once_and_loses_a_box_on_a_thread",
    )
    .runs("panicked")
    .by_stacks(),
    // --- tests/fixtures/jemalloc-global: tikv-jemallocator as #[global_allocator] ---
    // Its own jemalloc is dumped between runs too.
    leak(
        JEMALLOC_GLOBAL,
        "tests::box_leak_under_jemalloc",
        "box_leak_under_jemalloc",
    )
    .runs("completed"),
    leak(
        JEMALLOC_GLOBAL,
        "tests::forget_vec_under_jemalloc",
        "forget_vec_under_jemalloc",
    )
    .runs("completed"),
    clean(JEMALLOC_GLOBAL, "tests::clean_under_jemalloc").runs("completed"),
    // --- tests/fixtures/custom-alloc: an allocator the tool cannot see; never "clean" ---
    outcome(
        CUSTOM_ALLOC,
        "tests::leaks_from_bump_arena",
        "unanalysable",
        None,
        false,
    ),
    outcome(
        CUSTOM_ALLOC,
        "tests::clean_with_bump_arena",
        "unanalysable",
        None,
        false,
    ),
    // --- tests/fixtures/pool-alloc: an allocator whose pools are malloc's, not its blocks ---
    // The pools show in the heap, the small objects inside them do not: asked at exit, the
    // allocator hands out blocks that are not malloc's, so neither test is called clean.
    // Its boxes are out of sight, but the vector that keeps them is the program's own: its
    // length grows on every run.
    grows(
        POOL_ALLOC,
        "tests::keeps_small_sessions",
        "keeps_small_sessions",
        1,
    ),
    outcome(
        POOL_ALLOC,
        "tests::frees_what_it_allocates",
        "unanalysable",
        None,
        false,
    ),
    // --- tests/fixtures/misbehaving ---
    // Fails (exit 101) after leaking: the leak is still reported; a failed test is not
    // run again.
    outcome(
        MISBEHAVING,
        "tests::fails_after_leaking",
        "failed",
        Some("fails_after_leaking"),
        false,
    )
    .runs("test-failed"),
    // Fails keeping memory in a static: held by it, not a leak (no leak site).
    outcome(
        MISBEHAVING,
        "tests::keeps_memory_then_fails",
        "failed",
        None,
        false,
    )
    .runs("test-failed")
    .held_by("static `misbehaving::tests::keeps_memory_then_fails::KEPT`", None),
    outcome(MISBEHAVING, "tests::aborts", "crashed", None, false).runs("test-failed"),
    // Its failure message shows what it wrote, bytes that are not UTF-8 included.
    outcome(
        MISBEHAVING,
        "tests::fails_with_bytes_that_are_not_utf8",
        "failed",
        None,
        false,
    )
    .runs("test-failed"),
    // 128 MiB on stderr: only the end is read.
    outcome(
        MISBEHAVING,
        "tests::fails_after_writing_a_lot",
        "failed",
        None,
        false,
    )
    .runs("test-failed"),
    outcome(MISBEHAVING, "tests::segfaults", "crashed", None, false).runs("test-failed"),
    // Only with a short --timeout: the test blocks forever.
    outcome(MISBEHAVING, "tests::hangs", "timeout", None, false).runs("test-failed"),
    // Passes its counting run, fails when profiled: reported as failing only then.
    outcome(
        MISBEHAVING,
        "tests::fails_only_when_profiled",
        "failed",
        Some("fails_only_when_profiled"),
        false,
    )
    .runs("test-failed"),
    clean(MISBEHAVING, "tests::passes_clean").runs("not-needed"),
    // End the process themselves with exit(0): judged on what their own code kept, not
    // on what libtest had in flight; never run again.
    clean(MISBEHAVING, "tests::exits_the_process_early").runs("exited-early"),
    leak(
        MISBEHAVING,
        "tests::exits_the_process_early_after_leaking",
        "exits_the_process_early_after_leaking",
    )
    .runs("exited-early"),
    leak(MISBEHAVING, "tests::passes_with_leak", "passes_with_leak").runs("completed"),
    // Fork: only the process the tool started writes the record and runs again.
    clean_kept(MISBEHAVING, "tests::forks_a_child_that_returns").runs("completed"),
    clean_kept(MISBEHAVING, "tests::forks_a_child_that_exits").runs("completed"),
    clean(MISBEHAVING, "tests::forks_while_another_thread_starts_threads"),
    // exit(0) after forgetting a buffer: the stale copy of its pointer in the test's frame
    // is in no variable's slot, so it does not keep the buffer reachable.
    leak(
        MISBEHAVING,
        "tests::forgets_then_exits_the_process",
        "forgets_then_exits_the_process",
    )
    .runs("exited-early"),
    // exit(0) with memory in locals and a static: still reachable, not lost.
    clean(MISBEHAVING, "tests::exits_the_process_holding_memory").runs("exited-early"),
    // Its child is ended when its process ends, and named in `left_processes`.
    clean(MISBEHAVING, "tests::leaves_a_child_running"),
    // Threads the runs started get a grace to end once, after the last run.
    clean(MISBEHAVING, "tests::thread_holds_memory_for_a_second")
        .runs("completed")
        .by_counting(),
    // Past the grace, threads asleep until a deadline of their own are waited for.
    clean(MISBEHAVING, "tests::thread_holds_memory_for_five_seconds")
        .runs("completed")
        .by_counting(),
    // A pool's worker due to run a job thirty seconds later: the clock is moved instead.
    clean(
        MISBEHAVING,
        "tests::pool_worker_waits_for_a_job_due_in_thirty_seconds",
    )
    .runs("completed")
    .by_counting(),
    leak(
        MISBEHAVING,
        "tests::thread_holds_memory_for_an_hour",
        "thread_holds_memory_for_an_hour",
    )
    .runs("completed")
    .by_stacks()
    .threads_left(),
    // --- tests/fixtures/trials: a harness of the target's own, trial by trial ---
    // Judged on their one run each: there is no libtest entry point to run them again.
    clean(TRIALS, "adds_small_numbers")
        .runs("no-entry-point")
        .by_stacks(),
    clean(TRIALS, "parses_words").runs("no-entry-point"),
    clean(TRIALS, "sorts_a_table").runs("no-entry-point"),
    // Lost at exit: a leak.
    leak(TRIALS, "forgets_its_buffer", "forgets_its_buffer").runs("no-entry-point"),
    // Still reachable, and no second run can tell whether it grows.
    outcome(TRIALS, "remembers_every_case", "unsettled", None, false).runs("no-entry-point"),
    outcome(TRIALS, "compares_every_pair", IGNORED, None, false),
    // --- tests/fixtures/children: processes a test starts ---
    // `wc2 --keep-lines` loses 200 objects at its exit in every run.
    leak(CHILDREN, "counts_and_keeps_lines", "counts_and_keeps_lines"),
    clean(CHILDREN, "counts_words"),
    // Its data is still on `main`'s stack when it calls `exit`: reachable.
    clean(CHILDREN, "reports_and_exits"),
    // A worker thread holds the buffers: reachable.
    clean(CHILDREN, "pools_buffers"),
    // `sh` is not the build's: listed, not checked.
    clean(CHILDREN, "runs_a_shell"),
    // Killed by its test: scanned before it is, and a copy of every request is lost.
    leak(CHILDREN, "serves_and_is_killed", "serves_and_is_killed"),
    // Left running: reported, scanned, and killed.
    clean(CHILDREN, "leaves_a_sleeper"),
    // `router` loses its three route names in every process, whichever test started it for
    // however many requests: once per process, reported as one-time memory.
    clean_kept(START_UP, "serves_one_request"),
    clean_kept(START_UP, "serves_five_requests"),
    clean_kept(START_UP, "serves_twenty_requests"),
    // Its twin loses a name per request: none for no request, six for six.
    clean(START_UP, "starts_a_server_that_serves_nothing"),
    leak(
        START_UP,
        "leaks_a_route_name_per_request",
        "leaks_a_route_name_per_request",
    ),
    // `guard` forgets its log guard once, whatever it reads.
    clean_kept(START_UP, "counts_two_lines"),
    clean_kept(START_UP, "counts_nine_lines"),
    // Its twin forgets every line.
    clean(START_UP, "reads_no_line"),
    leak(START_UP, "forgets_every_line_it_reads", "forgets_every_line_it_reads"),
    // --- tests/fixtures/doctests, edition 2021 ---
    // Its own run, on the main thread, is counted from its code's first allocation: it
    // retained nothing, and makes no extra run.
    clean(DOC2021, "doc2021/src/lib.rs - add (line 10)").by_counting().runs("not-needed"),
    leak(DOC2021, "doc2021/src/lib.rs - forget (line 19)", "doc2021_forget").runs("completed"),
    // Reachable all along: only the extra runs show the registry and its `Vec` grow.
    leak(DOC2021, "doc2021/src/lib.rs - register (line 27)", "doc2021_register")
        .runs("completed")
        .grows("doc2021_names", 1),
    clean(DOC2021, "doc2021/src/lib.rs - fallible (line 36)").by_counting().runs("not-needed"),
    clean(DOC2021, "doc2021/src/lib.rs - explode (line 45)").runs("should-panic"),
    // Its own `main` is the entry point, and its code's lines are its file's.
    leak(DOC2021, "doc2021/src/lib.rs - own_main (line 54)", "doc2021_own_main").runs("completed"),
    outcome(DOC2021, "doc2021/src/lib.rs - ignored (line 73)", IGNORED, None, false),
    // Its own `main` too, told from `own_main` by where its code is: counted, nothing
    // retained.
    clean(DOC2021, "doc2021/src/lib.rs - count_words (line 81)").by_counting().runs("not-needed"),
    // A macro writes both doc comments alike: their executables are told apart by running
    // them again one at a time. Their block is not in the file, so whether `fn main` returns
    // a value is not known: std's `lang_start` closure calls it again.
    leak(DOC2021, "doc2021/src/lib.rs - forget_buffer (line 113)", "doc2021_forget_buffer").runs("completed"),
    clean(DOC2021, "doc2021/src/lib.rs - drop_buffer (line 113)").by_counting().runs("not-needed"),
    // Its own `main` returns a `Result`: called again through std's `lang_start` closure.
    leak(DOC2021, "doc2021/src/lib.rs - fallible_main (line 119)", "doc2021_fallible_main").runs("completed"),
    // A function it defines is named inside rustdoc's wrapper: the wrapper still names it.
    clean(DOC2021, "doc2021/src/lib.rs - helper (line 130)").by_counting().runs("not-needed"),
    clean(DOC2021, "tests::doc2021_adds").by_counting(),
    // --- tests/fixtures/doctests, edition 2024 ---
    // Its own run, on the main thread, is counted from its code's first allocation: it
    // retained nothing, and makes no extra run.
    clean(DOC2024, "doc2024/src/lib.rs - add (line 10)").by_counting().runs("not-needed"),
    leak(DOC2024, "doc2024/src/lib.rs - forget (line 19)", "doc2024_forget").runs("completed"),
    // Reachable all along: only the extra runs show the registry and its `Vec` grow.
    leak(DOC2024, "doc2024/src/lib.rs - register (line 27)", "doc2024_register")
        .runs("completed")
        .grows("doc2024_names", 1),
    clean(DOC2024, "doc2024/src/lib.rs - fallible (line 36)").by_counting().runs("not-needed"),
    clean(DOC2024, "doc2024/src/lib.rs - explode (line 45)").runs("should-panic"),
    // Its own `main` is the entry point, and its code's lines are its file's.
    leak(DOC2024, "doc2024/src/lib.rs - own_main (line 54)", "doc2024_own_main").runs("completed"),
    outcome(DOC2024, "doc2024/src/lib.rs - ignored (line 73)", IGNORED, None, false),
    // Its own `main` too, told from `own_main` by where its code is: counted, nothing
    // retained.
    clean(DOC2024, "doc2024/src/lib.rs - count_words (line 81)").by_counting().runs("not-needed"),
    // A macro writes both doc comments alike: their executables are told apart by running
    // them again one at a time. Their block is not in the file, so whether `fn main` returns
    // a value is not known (edition 2024: merged, run through its closure).
    leak(DOC2024, "doc2024/src/lib.rs - forget_buffer (line 105)", "doc2024_forget_buffer").runs("completed"),
    clean(DOC2024, "doc2024/src/lib.rs - drop_buffer (line 105)").by_counting().runs("not-needed"),
    // Its own `main` returns a `Result`: merged, run through its closure.
    leak(DOC2024, "doc2024/src/lib.rs - fallible_main (line 118)", "doc2024_fallible_main").runs("completed"),
    clean(DOC2024, "tests::doc2024_adds").by_counting(),
    // --- tests/fixtures/token-macros: a proc-macro crate, std linked dynamically ---
    clean(TOKEN_MACROS, "tests::counts_words")
        .runs("not-needed")
        .by_counting(),
    // `#[ignore]`d: not run, counted in the report's `ignored`.
    outcome(
        TOKEN_MACROS,
        "tests::expands_in_a_compiler_session",
        IGNORED,
        None,
        false,
    ),
    leak(TOKEN_MACROS, "tests::forgets_a_buffer", "forgets_a_buffer")
        .runs("completed")
        .by_stacks(),
    // --- tests/fixtures/names: each gets flame graph files of its own ---
    // The integration test target `names`, whose test `names` has the name of the target
    // and of `module_path!()` at its root: its entry point is still found.
    leak(NAMES_INTEGRATION, "names", "names").runs("completed"),
    clean(NAMES_INTEGRATION, "logs_only").runs("not-needed"),
    // A target of one test: its entry point is found even when it is selected alone.
    leak(NAMES_LONE, "lone_test_grows_a_list", "lone_test_grows_a_list").runs("completed"),
    leak(NAMES, "m::größe", "größe"),
    leak(NAMES, "m::grüße", "grüße"),
    leak(NAMES, "a::b__c", "b__c"),
    leak(NAMES, "a__b::c", "c"),
    leak(NAMES, "long::a_test_name_long_enough_that_its_flame_graph_file_name_would_pass_the_limit_of_two_hundred_fifty_five_bytes_on_a_file_name_a_test_name_long_enough_that_its_flame_graph_file_name_would_pass_the_limit_of_two_hundred_fifty_five_bytes_on_a_file_name_ends_here", "a_test_name_long_enough_that_its_flame_graph_file_name_would_pass_the_limit_of_two_hundred_fifty_five_bytes_on_a_file_name_a_test_name_long_enough_that_its_flame_graph_file_name_would_pass_the_limit_of_two_hundred_fifty_five_bytes_on_a_file_name_ends_here"),
    // --- tests/fixtures/counting-alloc: the allocator's own frames are not the site ---
    // Its allocator forwards every block to malloc (asked at exit), so its tests are
    // counted like any other's.
    leak(COUNTING_ALLOC, "tests::forgets_a_buffer", "forgets_a_buffer").runs("completed"),
    clean(COUNTING_ALLOC, "tests::counts_and_frees").by_counting(),
    // --- tests/fixtures/retention: who holds what grows, and what a scan must not lose ---
    leak(
        RETENTION,
        "tests::registry_grows_on_every_run",
        "registry_grows_on_every_run",
    )
    .runs("completed")
    .held_by("static `retention::REGISTRY`", Some("retention::register")),
    leak(
        RETENTION,
        "tests::chains_a_panic_hook_per_call",
        "chains_a_panic_hook_per_call",
    )
    .runs("completed")
    .held_by(
        "static `std::panicking::HOOK`",
        Some("retention::tests::chains_a_panic_hook_per_call"),
    ),
    // --- tests/fixtures/teardown: extra runs come before the program's clean-up ---
    clean_kept(
        TEARDOWN,
        "tests::keeps_a_buffer_once_in_the_constructor_state",
    )
    .runs("completed"),
    leak(
        TEARDOWN,
        "tests::grows_the_constructor_state",
        "grows_the_constructor_state",
    )
    .runs("completed"),
    clean_kept(TEARDOWN, "tests::keeps_a_buffer_once_in_the_exit_table").runs("completed"),
    leak(TEARDOWN, "tests::grows_the_exit_table", "grows_the_exit_table").runs("completed"),
    // A process may open the device once: the extra run dies in it, and the test is judged
    // by what its own run keeps reachable.
    clean_kept(TEARDOWN, "tests::opens_the_device_once_per_process").runs("crashed"),
    // A signal the program raises and handles itself goes to its handler in every run.
    clean_kept(TEARDOWN, "tests::raises_a_signal_it_handles_itself").runs("completed"),
    // A panic hook chained per call is freed by libtest before the own run is measured:
    // the hook left in place is what sends the test on to its extra runs.
    leak(
        RETENTION,
        "tests::chains_a_panic_hook_and_nothing_else",
        "chains_a_panic_hook_and_nothing_else",
    )
    .runs("completed"),
    clean(RETENTION, "tests::sets_a_panic_hook_once").runs("completed"),
    clean(RETENTION, "tests::restores_the_panic_hook")
        .runs("not-needed")
        .by_counting(),
    leak(
        RETENTION,
        "tests::thread_local_cache_grows_on_every_run",
        "thread_local_cache_grows_on_every_run",
    )
    .runs("completed")
    .held_by(
        "thread-local `retention::CACHE` of a thread `cache-worker` spawned at",
        Some("retention::cache_worker_loop"),
    ),
    leak(
        RETENTION,
        "tests::worker_local_vec_grows_on_every_run",
        "worker_local_vec_grows_on_every_run",
    )
    .runs("completed")
    .held_by(
        "the stack of a thread `vec-worker` spawned at",
        Some("retention::vec_worker_loop"),
    ),
    // Judged by reachability (they cannot run again): found through a register of a thread
    // blocked in read(2), and through another thread's thread-local.
    clean_kept(
        RETENTION,
        "tests::pointer_only_in_a_register_of_a_blocked_thread",
    )
    .runs("should-panic")
    .held_by(
        "a register of a thread `register-holder` spawned at `retention::tests::pointer_only_in_a_register_of_a_blocked_thread` that never ended, blocked reading",
        None,
    ),
    clean_kept(
        RETENTION,
        "tests::reachable_only_from_another_threads_thread_local",
    )
    .runs("should-panic")
    .held_by(
        "thread-local `retention::tests::HELD` of a thread `tls-holder` spawned at",
        None,
    ),
    // --- tests/fixtures/cycles: lost in reference cycles, or pointed to by nothing ---
    leak(
        CYCLES,
        "tests::cache_callback_cycle_grows_on_every_run",
        "cache_callback_cycle_grows_on_every_run",
    )
    .runs("completed"),
    leak(
        CYCLES,
        "tests::parent_child_rc_cycle_grows_on_every_run",
        "parent_child_rc_cycle_grows_on_every_run",
    )
    .runs("completed"),
    leak(CYCLES, "tests::box_leak_per_call", "box_leak_per_call").runs("completed"),
    leak(
        CYCLES,
        "tests::record_and_its_parts_lost_per_call",
        "record_and_its_parts_lost_per_call",
    )
    .runs("completed"),
    leak(
        CYCLES,
        "tests::buffer_lost_once_its_keeper_ends",
        "buffer_lost_once_its_keeper_ends",
    )
    .runs("completed"),
    clean(CYCLES, "tests::weak_parent_pointers_are_freed"),
    // --- tests/fixtures/many-live: profiled at a few bytes per live allocation ---
    leak(
        MANY_LIVE,
        "tests::holds_many_boxes_then_leaks_a_byte",
        "holds_many_boxes_then_leaks_a_byte",
    )
    .runs("completed")
    .by_stacks(),
    clean(MANY_LIVE, "tests::holds_many_boxes_and_frees_them").by_counting(),
    // --- examples/demo: the bundled example ---
    // A cache keyed by session: grows on every visit.
    leak(
        DEMO,
        "cache::tests::repeated_requests_hit_the_cache",
        "repeated_requests_hit_the_cache",
    )
    .runs("completed"),
    leak(
        DEMO,
        "tree::tests::paths_follow_parent_links",
        "paths_follow_parent_links",
    )
    .runs("completed"),
    leak(
        DEMO,
        "frame::tests::frame_starts_with_length",
        "frame_starts_with_length",
    )
    .runs("completed"),
    clean(DEMO, "frame::tests::frame_round_trip"),
    clean(DEMO, "tree::tests::lone_node_is_its_own_root"),
    clean_kept(DEMO, "config::tests::defaults_are_sane")
        .runs("completed")
        .by_counting(),
    // --- tests/fixtures/benches: `cargo leakcheck bench` ---
    bench(bench_target("grows"), "grows", "leak", Some("grows")),
    bench(bench_target("plateau"), "plateau", "clean", None),
    bench(bench_target("crit"), "sort_1000", "clean", None),
    // Interns 200,000 records in a registry in a few hundred milliseconds: growing, however
    // fast the machine (it was judged clean on four snapshots once).
    bench(bench_target("interns"), "interns", "leak", Some("interns")),
    // Over before a second snapshot: too short to judge, never clean.
    bench(bench_target("instant"), "instant", "unsettled", None),
    // `grows` on tikv-jemallocator as its global allocator: read from that jemalloc's own
    // dumps.
    bench(
        bench_target("jemalloc_grows"),
        "jemalloc_grows",
        "leak",
        Some("jemalloc_grows"),
    ),
    // `/login` keeps a session per request in a map nothing prunes; `/item` answers from a
    // cache that fills in its first requests and then only replaces.
    service(WEBAPP, "login", "leak", Some("login")).held_by("static `webapp::SESSIONS`", None),
    service(WEBAPP, "item", "clean", None),
    // `/visit` counts visits per id in a map of numbers: it gains an entry per request and
    // reallocates only when it doubles, so no stack grows across both later quarters; its
    // length does.
    service(WEBAPP, "visit", "leak", None).grows("visit", 1),
    // 256 KiB mapped per request and never unmapped: mapped memory, at the `mmap` call.
    service(WEBAPP, "scratch", "leak", Some("scratch"))
        .mapped()
        .requests(800),
    // 16 MiB allocated and freed per request: the resident set stays up by the pages the
    // allocator keeps, which is not a leak.
    service(WEBAPP, "burst", "clean", None)
        .requests(800)
        .allocator_pages(),
    // The same on tikv-jemallocator as its global allocator: its allocations bypass malloc,
    // and are read from that jemalloc's own sampled dumps (who holds them is not known).
    service(WEBAPP, "login", "leak", Some("login")).features("jemalloc"),
    service(WEBAPP, "item", "clean", None).features("jemalloc"),
    // --- tests/fixtures/asyncapp under `cargo leakcheck run`: a task per request ---
    // Each `/subscribe` spawns a task that never ends, holding the request's buffer.
    service(ASYNCAPP, "subscribe", "leak", Some("subscribe"))
        .spawns_tasks("tokio", "subscribe")
        .held_by_task(),
    // Each `/job` spawns a task and awaits it.
    service(ASYNCAPP, "job", "clean", None),
    // --- tests/fixtures/configured: verdicts under its own leakcheck.toml ---
    clean(CONFIGURED, "tests::cache_warmed_on_purpose").runs("completed"),
    leak(CONFIGURED, "tests::cache_overflow", "cache_overflow").runs("completed"),
    clean(CONFIGURED, "tests::pool_keeps_slabs").runs("completed"),
    leak(CONFIGURED, "tests::real_leak", "real_leak").runs("completed"),
    clean(CONFIGURED, "tests::plain_clean"),
    outcome(CONFIGURED, "tests::hangs_forever", "timeout", None, false),
    outcome(
        CONFIGURED,
        "tests::second_run_never_returns",
        "unsettled",
        None,
        false,
    )
    .runs("timed-out"),
    leak(CONFIGURED, "tests::slow_registry_grows", "slow_registry_grows").runs("completed"),
    leak(
        CONFIGURED,
        "tests::slow_registry_under_a_short_timeout",
        "slow_registry_under_a_short_timeout",
    )
    .runs("completed"),
    leak(
        CONFIGURED,
        "tests::slow_registry_repeated",
        "slow_registry_repeated",
    )
    .runs("completed"),
    // --- tests/fixtures/slow: every test judged, whatever its runs cost ---
    leak(
        SLOW,
        "tests::one_byte_after_a_million_objects",
        "one_byte_after_a_million_objects",
    )
    .runs("completed"),
    leak(
        SLOW,
        "tests::sixteen_threads_one_forgets_a_box",
        "sixteen_threads_one_forgets_a_box",
    )
    .runs("completed"),
    leak(
        SLOW,
        "tests::slow_job_grows_a_static_map",
        "slow_job_grows_a_static_map",
    )
    .runs("completed")
    .held_by("static `slow::RESULTS`", Some("slow::record_results")),
    clean_kept(SLOW, "tests::slow_job_fills_a_table_once")
        .runs("completed")
        .by_counting(),
    clean_kept(SLOW, "tests::slow_job_on_a_pool_started_on_first_use")
        .runs("completed")
        .by_counting(),
    // Only crossbeam-epoch garbage: drained before it is measured, so no extra run.
    clean(SLOW, "tests::epoch_garbage_is_freed_later")
        .runs("not-needed")
        .by_counting()
        .drained(),
    leak(
        SLOW,
        "tests::lock_free_list_grows_on_every_call",
        "lock_free_list_grows_on_every_call",
    )
    .runs("completed")
    .held_by("static `slow::EVENTS`", None),
    leak(
        SLOW,
        "tests::deferred_destructor_forgets_its_buffer",
        "deferred_destructor_forgets_its_buffer",
    )
    .runs("completed"),
    // A deferred destructor that panics when the runtime's drain runs it: the test passed,
    // and the report says the process ended in the drain, not that the test crashed.
    clean(SLOW, "tests::deferred_destructor_panics_in_a_drain").runs("drain-failed"),
    // --- tests/fixtures/tasks: async tasks that never end, held by their spawn site ---
    leak(
        TASKS,
        "tests::task_per_call_waits_forever",
        "task_per_call_waits_forever",
    )
    .runs("completed")
    .spawns_tasks("tokio", "task_per_call_waits_forever")
    .held_by_task(),
    // A task that owns nothing but itself: its few hundred bytes a run are the leak.
    leak(TASKS, "tests::pending_task_per_call", "pending_task_per_call")
        .runs("completed")
        .spawns_tasks("tokio", "pending_task_per_call"),
    leak(
        TASKS,
        "tests::executor_task_per_call_waits_forever",
        "executor_task_per_call_waits_forever",
    )
    .runs("completed")
    .spawns_tasks("async-task", "executor_task_per_call_waits_forever")
    .held_by_task(),
    // An unnamed thread per call that sleeps for ever: held by that thread, named by the
    // line that spawned it, in a debug build and in a release build with line tables.
    leak(
        TASKS,
        "tests::thread_per_call_sleeps_forever",
        "thread_per_call_sleeps_forever",
    )
    .runs("completed")
    .threads_left()
    .thread_holder("thread_per_call_sleeps_forever", "asleep, waking within 1 h"),
    // Started once for the life of the process (behind a OnceLock).
    clean_kept(TASKS, "tests::background_task_started_once").runs("completed"),
    clean(TASKS, "tests::job_spawned_and_awaited"),
    clean(TASKS, "tests::executor_job_spawned_and_awaited"),
    // --- tests/fixtures/healthy: a suite that must pass (exit 0) ---
    // A worker thread started by the first call, never joined.
    // --- tests/fixtures/history: the same verdicts whatever the previous run said ---
    leak(HISTORY, "tests::leaks_until_fixed", "leaks_until_fixed")
        .runs("completed")
        .held_by("static `history::REQUESTS`", Some("history::record")),
    // Two of its processes side by side collide over its lock: one of them fails.
    leak(
        HISTORY,
        "tests::holds_a_lock_while_it_leaks",
        "holds_a_lock_while_it_leaks",
    )
    .runs("completed")
    .held_by("static `history::SESSIONS`", None),
    // Its counting process waits, in its third extra run, for its stacks process to start.
    leak(
        HISTORY,
        "tests::leaks_while_its_stacks_start",
        "leaks_while_its_stacks_start",
    )
    .runs("completed")
    .held_by("static `history::REPORTS`", None),
    // A thread per call that waits for ever: its counting process stops after two runs that
    // left threads; the second waits for its stacks process to start.
    leak(
        HISTORY,
        "tests::leaks_a_waiting_thread_per_call",
        "leaks_a_waiting_thread_per_call",
    )
    .runs("completed")
    .threads_left(),
    clean(HISTORY, "tests::answers_without_keeping_anything").runs("not-needed"),
    clean_kept(HEALTHY, "tests::worker_squares")
        .runs("completed")
        .by_counting(),
    // A registry filled once; registering again adds nothing.
    clean_kept(HEALTHY, "tests::names_register_once")
        .runs("completed")
        .by_counting(),
    clean(HEALTHY, "tests::words_are_sorted_and_unique").runs("not-needed"),
    // What glibc keeps of joined threads depends on timing: no kept memory is required.
    clean(HEALTHY, "tests::threads_join_with_their_results").by_counting(),
    // --- tests/fixtures/collections ---
    // A collection that gains entries on every call is a leak, though most calls allocate
    // nothing (the collection has room): its length grows on every extra run.
    grows(COLLECTIONS, "tests::seen_ids", "seen_ids", 1),
    grows(
        COLLECTIONS,
        "tests::connection_counters",
        "connection_counters",
        1,
    ),
    grows(COLLECTIONS, "tests::latency_samples", "latency_samples", 10),
    grows(COLLECTIONS, "tests::shared_seen_ids", "shared_seen_ids", 1),
    grows(
        COLLECTIONS,
        "tests::worker_thread_local_ids",
        "worker_thread_local_ids",
        1,
    ),
    grows(COLLECTIONS, "tests::ordered_index", "ordered_index", 1),
    grows(
        COLLECTIONS,
        "tests::sessions_in_shards",
        "sessions_in_shards",
        1,
    ),
    grows(COLLECTIONS, "tests::slab_handles", "slab_handles", 1),
    grows(COLLECTIONS, "tests::deadlines_by_time", "deadlines_by_time", 1),
    grows(COLLECTIONS, "tests::log_lines", "log_lines", 15),
    grows(
        COLLECTIONS,
        "tests::small_vec_spilled",
        "small_vec_spilled",
        1,
    ),
    // Two statics share one list behind an `Arc`: one collection, reached from both.
    grows(
        COLLECTIONS,
        "tests::subscribers_of_a_shared_bus",
        "subscribers_of_a_shared_bus",
        1,
    ),
    // A static's raw pointer to the value it leaked on first use.
    grows(
        COLLECTIONS,
        "tests::plugins_behind_a_raw_pointer",
        "plugins_behind_a_raw_pointer",
        1,
    ),
    // Bounded, refilled, emptied, warmed up, or not a collection at all.
    clean(COLLECTIONS, "tests::window_of_64_samples"),
    clean(COLLECTIONS, "tests::refilled_set"),
    clean(COLLECTIONS, "tests::scratch_cleared_after_use"),
    clean(COLLECTIONS, "tests::pool_warms_up_then_stops"),
    clean(COLLECTIONS, "tests::atomic_counter_is_not_a_collection"),
    // --- tests/fixtures/mappings ---
    // 64 KiB mapped on every call and never unmapped, named at the call that mapped it.
    leak(MAPPINGS, "tests::scratch_arena_per_call", "scratch_arena_per_call").mapped(),
    leak(MAPPINGS, "tests::memmap2_arena_per_call", "memmap2_arena_per_call").mapped(),
    leak(MAPPINGS, "tests::file_mapped_per_call", "file_mapped_per_call").mapped_file(),
    clean(MAPPINGS, "tests::file_mapped_and_dropped"),
    // Unmapped after use, mapped once for the process, or address space only.
    clean(MAPPINGS, "tests::scratch_unmapped_after_use"),
    clean(MAPPINGS, "tests::memmap2_arena_dropped_after_use"),
    clean_kept(MAPPINGS, "tests::table_mapped_once"),
    clean(MAPPINGS, "tests::address_space_reserved_once"),
];

/// Checks the table against the fixtures' sources: the same test functions, one marker per
/// expected site and none without one. Reads files only; builds and runs nothing.
/// The item of a doc-test's name (`forget` of `src/lib.rs - forget (line 19)`).
fn doc_test_item(name: &str) -> Option<&str> {
    let (_, rest) = name.split_once(" - ")?;
    rest.rsplit_once(" (line ").map(|(item, _)| item)
}

/// The doc-tests of a source file at `path`, named as rustdoc names them: each fence
/// opening a code block in a `///` comment, before a `pub fn`; those only compiled
/// (`no_run`, `compile_fail`) are left out.
fn doc_tests_in(text: &str, path: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut names = Vec::new();
    let mut open = false;
    for (i, line) in lines.iter().enumerate() {
        let Some(fence) = line.strip_prefix("/// ```") else {
            continue;
        };
        open = !open;
        if !open || fence.contains("no_run") || fence.contains("compile_fail") {
            continue;
        }
        let item = lines[i..]
            .iter()
            .find_map(|l| l.strip_prefix("pub fn "))
            .and_then(|l| l.split('(').next())
            .expect("a doc-test documents a `pub fn`");
        names.push(format!("{path} - {item} (line {})", i + 1));
    }
    names
}

#[test]
fn expected_table_matches_fixture_sources() {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .ancestors()
        .find(|dir| dir.join("tests/fixtures").is_dir())
        .expect("repository root with tests/fixtures above CARGO_MANIFEST_DIR");

    let mut seen = BTreeSet::new();
    for e in EXPECTED.iter() {
        assert!(
            VERDICTS.contains(&e.verdict) || e.verdict == IGNORED,
            "{}: bad verdict {}",
            e.test,
            e.verdict
        );
        assert!(
            seen.insert((e.package, e.binary, e.test, e.features)),
            "{} {} {} (features `{}`) listed twice",
            e.package,
            e.binary,
            e.test,
            e.features
        );
        // A doc-test's markers are named after its package and item: `doc2021_forget` for
        // `doc2021/src/lib.rs - forget (line 19)`.
        let doc_item = doc_test_item(e.test).map(|item| format!("{}_{item}", e.package));
        let fn_name = doc_item
            .as_deref()
            .unwrap_or_else(|| e.test.rsplit("::").next().unwrap());
        if let Some(site) = e.site {
            assert_eq!(
                site, fn_name,
                "a site marker is named after its test function"
            );
            assert!(
                matches!(e.verdict, "leak" | "failed"),
                "{}: a site is expected only from a test that ran to its end",
                e.test
            );
        }
        if e.verdict == "leak" {
            assert!(
                e.site.is_some() || e.grows.is_some(),
                "{}: a leak needs its marked site, or its marked collection",
                e.test
            );
        }
        if let Some((name, _)) = e.grows {
            assert!(
                name == fn_name || e.service || doc_item.is_some(),
                "a collection marker is named after its test function"
            );
            assert_eq!(
                e.verdict, "leak",
                "{}: a growing collection is a leak",
                e.test
            );
        }
        if e.kept {
            assert_eq!(e.verdict, "clean", "{}: kept only for clean tests", e.test);
        }
        assert!(
            e.binary == e.package.replace('-', "_")
                || (e.bench
                    && root
                        .join(e.fixture)
                        .join("benches")
                        .join(format!("{}.rs", e.binary))
                        .is_file())
                || root
                    .join(e.fixture)
                    .join("tests")
                    .join(format!("{}.rs", e.binary))
                    .is_file(),
            "{}: binary {} is neither the lib target nor a tests/*.rs target",
            e.test,
            e.binary
        );
    }

    let fixtures: BTreeSet<&str> = EXPECTED.iter().map(|e| e.fixture).collect();
    for fixture in fixtures {
        let dir = root.join(fixture);
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        rust_files(&dir.join("tests"), &mut files);
        rust_files(&dir.join("benches"), &mut files);
        // A workspace fixture's members, each in a directory of its own.
        let members: BTreeSet<&str> = EXPECTED
            .iter()
            .filter(|e| e.fixture == fixture && dir.join(e.package).join("src").is_dir())
            .map(|e| e.package)
            .collect();
        for member in members {
            rust_files(&dir.join(member).join("src"), &mut files);
        }
        assert!(!files.is_empty(), "no sources under {}", dir.display());

        // Test functions: the first `fn` after each `#[test]` attribute, and each
        // `harness = false` target, whose single test is named after the target.
        let mut test_fns = BTreeSet::new();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for e in EXPECTED.iter().filter(|e| e.fixture == fixture && e.bench) {
            assert!(
                dir.join("benches")
                    .join(format!("{}.rs", e.binary))
                    .is_file(),
                "{fixture}: bench target {} has a benches/*.rs file",
                e.binary
            );
            test_fns.insert(e.test.rsplit("::").next().unwrap().to_owned());
        }
        for e in EXPECTED
            .iter()
            .filter(|e| e.fixture == fixture && e.service)
        {
            let handler = format!("fn {}(", e.test);
            assert!(
                files
                    .iter()
                    .any(|f| std::fs::read_to_string(f).unwrap().contains(&handler)),
                "{fixture}: the service has a handler `{}`",
                e.test
            );
            test_fns.insert(e.test.to_owned());
        }
        // (A test named like its target in a fixture with no `harness = false` target is an
        // ordinary `#[test]` function, found below.)
        for e in EXPECTED.iter().filter(|e| {
            e.fixture == fixture
                && e.test == e.binary
                && !e.bench
                && manifest.contains("harness = false")
        }) {
            assert!(
                manifest.contains(&format!("name = \"{}\"", e.binary))
                    && manifest.contains("harness = false"),
                "{fixture}: {} is listed as a harness = false target",
                e.binary
            );
            test_fns.insert(e.binary.to_owned());
        }
        // Marker name -> number of occurrences.
        let mut markers: BTreeMap<String, usize> = BTreeMap::new();
        let mut spawn_markers: BTreeMap<String, usize> = BTreeMap::new();
        let mut grow_markers: BTreeMap<String, usize> = BTreeMap::new();
        let mut thread_markers: BTreeMap<String, usize> = BTreeMap::new();
        // Doc-tests, named as rustdoc names them (only compiled ones are not tests).
        for file in &files {
            let rel = file.strip_prefix(root.join(fixture)).unwrap();
            let text = std::fs::read_to_string(file).unwrap();
            for name in doc_tests_in(&text, &rel.display().to_string()) {
                assert!(test_fns.insert(name.clone()), "doc-test {name} twice");
            }
        }
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let mut after_test_attr = false;
            for line in text.lines() {
                let line = line.trim();
                if line == "#[test]" {
                    after_test_attr = true;
                } else if after_test_attr && line.starts_with("fn ") {
                    let name = line[3..].split('(').next().unwrap().trim().to_owned();
                    assert!(
                        test_fns.insert(name.clone()),
                        "test fn {name} twice in {fixture}"
                    );
                    after_test_attr = false;
                }
                let marked = |marker: &str| {
                    let (_, rest) = line.split_once(marker)?;
                    rest.split_whitespace().next().map(str::to_owned)
                };
                // A trial of a harness of the target's own is declared on a line marked
                // `// trial: name`.
                if let Some(name) = marked("// trial: ") {
                    assert!(
                        test_fns.insert(name.clone()),
                        "trial {name} twice in {fixture}"
                    );
                }
                // A doc-test whose doc comment a macro writes is declared on a line marked
                // `// macro-doc-test: name`, with its whole name as rustdoc gives it.
                if let Some((_, name)) = line.split_once("// macro-doc-test: ") {
                    assert!(
                        test_fns.insert(name.trim().to_owned()),
                        "doc-test {name} twice in {fixture}"
                    );
                }
                if let Some(name) = marked("// leak-site: ") {
                    *markers.entry(name).or_default() += 1;
                }
                if let Some(name) = marked("// spawn-site: ") {
                    *spawn_markers.entry(name).or_default() += 1;
                }
                if let Some(name) = marked("// grows: ") {
                    *grow_markers.entry(name).or_default() += 1;
                }
                if let Some(name) = marked("// thread-spawn: ") {
                    *thread_markers.entry(name).or_default() += 1;
                }
            }
        }

        let rows: Vec<&Expected> = EXPECTED.iter().filter(|e| e.fixture == fixture).collect();
        let table_fns: BTreeSet<String> = rows
            .iter()
            .map(|e| e.test.rsplit("::").next().unwrap().to_owned())
            .collect();
        assert_eq!(
            table_fns, test_fns,
            "{fixture}: table and #[test] functions differ"
        );

        let table_sites: BTreeSet<String> = rows
            .iter()
            .filter_map(|e| e.site)
            .map(str::to_owned)
            .collect();
        let source_sites: BTreeSet<String> = markers.keys().cloned().collect();
        assert_eq!(
            table_sites, source_sites,
            "{fixture}: table sites and markers differ"
        );
        for (name, count) in markers {
            assert_eq!(count, 1, "{fixture}: marker {name} appears {count} times");
        }
        // Each kind of marker appears once per name, for exactly the rows that name it.
        let same = |what: &str, table: BTreeSet<String>, markers: BTreeMap<String, usize>| {
            let source: BTreeSet<String> = markers.keys().cloned().collect();
            assert_eq!(table, source, "{fixture}: table {what} and markers differ");
            for (name, count) in markers {
                assert_eq!(
                    count, 1,
                    "{fixture}: {what} marker {name} appears {count} times"
                );
            }
        };
        let names = |f: fn(&Expected) -> Option<&'static str>| -> BTreeSet<String> {
            rows.iter()
                .filter_map(|e| f(e))
                .map(str::to_owned)
                .collect()
        };
        same(
            "spawn sites",
            names(|e| e.spawns_tasks.map(|(_, name)| name)),
            spawn_markers,
        );
        same(
            "collections",
            names(|e| e.grows.map(|(name, _)| name)),
            grow_markers,
        );
        same(
            "thread holders",
            names(|e| e.thread_holder.map(|(name, _)| name)),
            thread_markers,
        );
    }
}
