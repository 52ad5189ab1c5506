//! Command-line types (clap only; validation happens in the library).

pub use crate::execution::cargo::Selection;
use crate::report::export;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// cargo invokes us as `cargo-leakcheck leakcheck <args>`.
#[derive(Debug, Parser)]
#[command(
    bin_name = "cargo",
    version,
    long_version = crate::execution::runtime::LONG_VERSION,
    about = None,
    long_about = None
)]
pub enum CargoCli {
    /// Find memory leaks in tests, per test and per allocation stack.
    Leakcheck(Cli),
}

/// Find memory leaks in a Cargo project's tests: each test runs in its own process with
/// jemalloc heap profiling preloaded; whatever it allocated and never freed is reported per
/// allocation stack, with source locations, and makes the run fail.
#[derive(Debug, Parser)]
#[command(
    name = "cargo-leakcheck",
    display_name = "cargo-leakcheck",
    version,
    long_version = crate::execution::runtime::LONG_VERSION,
    after_long_help = "EXIT CODES:\n  0  every test passed and nothing leaked beyond its threshold\n  2  could not run: bad arguments, not a cargo project, an invalid leakcheck.toml\n  3  leaks found\n  4  a test failed, crashed or timed out (takes precedence over 3)\n  5  nothing leaked or failed, but some test could not be analysed or never ran\n  6  the code under test did not build\n  7  the machine failed the tool (runtime, files, missing cargo-nextest)\n\nArtifacts go to <target-dir>/leakcheck/: report.json, and for every leaking test an SVG\nflame graph and the folded stacks it was drawn from."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the tests and run each one in its own profiled process; report what it leaked.
    Test(TestArgs),
    /// Build the benchmarks, run each with periodic heap snapshots, and report the
    /// allocation stacks that keep growing after warm-up.
    Bench(BenchArgs),
    /// Build a binary (as `cargo run` would) or take any command, start it with the runtime
    /// preloaded, wait until it is ready, put it under your load, and report the allocation
    /// stacks that kept growing, with heap snapshots over time.
    #[command(
        after_long_help = "EXIT CODES:\n  0  the service's memory did not grow beyond --growth-threshold under the load\n  2  it could not be checked: bad arguments, a binary that does not exist, a service that never got ready, a load command that failed or hung\n  3  growth over the threshold\n  4  the service crashed or exited before it was stopped\n  6  it did not build\n  7  the machine failed the tool"
    )]
    Run(RunArgs),
    /// Run the suite with cargo-nextest (every argument after the options below passes to
    /// `cargo nextest run`: filtersets, --partition, --archive-file, --profile, --retries…),
    /// each test process checked as `test` checks it; report as `test` does.
    Nextest(NextestArgs),
    /// What nextest runs in place of each test binary (set up by `nextest`).
    #[command(name = "__nextest-runner", hide = true)]
    NextestRunner(RunnerArgs),
    /// What rustdoc runs each doc-test executable with while `test` collects them.
    #[command(name = "__doctest-runner", hide = true)]
    DoctestRunner(DoctestRunnerArgs),
    /// Combine the report.json of several runs (the shards of a `--partition`ed suite, or
    /// runs on different machines) into one report, summary and exit code.
    Merge(MergeArgs),
    /// What grew between two jemalloc heap dumps of a running program (`prof.dump`, or
    /// `prof_prefix` with `lg_prof_interval`), by allocation stack; with one dump, what is
    /// live. Writes a summary, a flame graph, a pprof profile and JSON.
    #[command(
        after_long_help = "EXIT CODES:\n  0  done (and growth within --threshold)\n  2  a dump or a binary could not be used (the message names it)\n  3  growth over --threshold"
    )]
    Diff(DiffArgs),
}

/// Arguments of `cargo leakcheck diff`.
#[derive(Debug, Args, Clone, Default)]
pub struct DiffArgs {
    /// `[BASE.heap] NEW.heap`: jemalloc `heap_v2` dumps of one process, the earlier first.
    #[arg(value_name = "DUMP", required = true, num_args = 1..=2)]
    pub dumps: Vec<PathBuf>,

    /// The program the dumps came from, when it is not at the path the dumps name (dumps
    /// from another machine); checked against the dumps' maps.
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,

    /// Exit with 3 when the total growth is over this size (`512KiB`, `10MiB`), to gate a
    /// soak test in CI.
    #[arg(long, value_name = "SIZE")]
    pub threshold: Option<String>,

    /// Where growth.svg, growth.folded, growth.pb.gz and growth.json go.
    #[arg(long, value_name = "DIR", default_value = "leakcheck-diff")]
    pub output_dir: PathBuf,

    /// How many of the largest stacks the summary shows.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

/// How tests are checked, shared by `test` and `nextest`.
#[derive(Debug, Args, Clone, Default)]
pub struct Checking {
    #[command(flatten)]
    pub settings: SettingFlags,

    /// Profile the stacks of every test, instead of only those the exact counting pass
    /// finds retaining memory (slower; the verdicts are the same).
    #[arg(long)]
    pub stacks_for_all: bool,

    /// No effect any more (kept so that scripts that pass it still run): every test that
    /// retained memory is run again as often as its evidence needs, whatever the runs cost.
    #[arg(long, hide = true)]
    pub full_repetition: bool,

    #[command(flatten)]
    pub against: Against,
}

/// Declares the flags that set a per-test setting (`config::SettingsLayer`) for every test:
/// each is a clap field named as its flag, the setting it sets and the function of
/// `config::flags` that checks its value. From them come [`SettingFlags`] and
/// [`SettingFlags::layer`], the command line's layer of settings.
macro_rules! setting_flags {
    ($(
        $(#[$attr:meta])*
        $flag:ident: $t:ty => $setting:ident via $check:ident,
    )+) => {
        /// The flags that set a per-test setting for every test, over leakcheck.toml.
        #[derive(Debug, Args, Clone, Default)]
        pub struct SettingFlags {
            $($(#[$attr])* pub $flag: $t,)+
        }

        impl SettingFlags {
            /// The command line's layer of settings, or the text of the first flag's problem.
            #[allow(clippy::needless_update)]
            pub fn layer(&self) -> Result<crate::config::SettingsLayer, String> {
                Ok(crate::config::SettingsLayer {
                    $($setting: crate::config::flags::$check(
                        &format!("--{}", stringify!($flag).replace('_', "-")),
                        &self.$flag,
                    )?,)+
                    ..Default::default()
                })
            }
        }
    };
}

setting_flags! {
    /// Kill a test whose own run takes longer than this many seconds; it is reported as
    /// `timeout` [default: none, as under nextest, or `timeout` in leakcheck.toml].
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64> => timeout via seconds,

    /// A stack that retains more than this fails its test (e.g. `0B`, `512B`, `4KiB`,
    /// `1MiB`); overrides leakcheck.toml for every test [default: 0B].
    #[arg(long, value_name = "SIZE")]
    threshold: Option<String> => stack_threshold via size,

    /// A test whose leaked stacks retain more than this in total fails; overrides
    /// leakcheck.toml for every test [default: none].
    #[arg(long, value_name = "SIZE")]
    test_threshold: Option<String> => test_threshold via size,

    /// How many times a test that retained memory runs again in its own process, to tell
    /// what grows on every run (a leak) from what the process keeps (0 turns it off)
    /// [default: 5, or `extra-runs` in leakcheck.toml].
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::config::MAX_EXTRA_RUNS))
    )]
    extra_runs: Option<u32> => extra_runs via given,
}

/// A base run to compare with, shared by `test`, `nextest` and `merge`.
#[derive(Debug, Args, Clone, Default)]
pub struct Against {
    /// The report.json of a base run (the last run on `main`, say), or its directory:
    /// every leak is marked new, grown, unchanged or gone against it.
    #[arg(long, value_name = "PATH")]
    pub baseline: Option<PathBuf>,

    /// What fails the run: `any` leak, or only `new` and grown ones (needs --baseline)
    /// [default: any].
    #[arg(long, value_name = "WHAT", value_enum)]
    pub fail_on: Option<FailOn>,
}

/// Which leaks fail the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Every leak.
    Any,
    /// Leaks the base run did not have, and leaks that grew since it.
    New,
}

/// Arguments of `cargo leakcheck nextest`.
#[derive(Debug, Args, Clone, Default)]
pub struct NextestArgs {
    /// Thresholds, timeout, extra runs.
    #[command(flatten)]
    pub checking: Checking,

    #[command(flatten)]
    pub outputs: OutputArgs,

    /// The leakcheck.toml to use [default: at the workspace root].
    #[arg(long = "leakcheck-config", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Arguments for `cargo nextest run`, passed through unchanged.
    #[arg(
        value_name = "NEXTEST ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,
}

/// Arguments of the hidden runner command: the test binary and its arguments.
#[derive(Debug, Args, Clone, Default)]
pub struct RunnerArgs {
    /// The binary nextest runs, then its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// Arguments of the doc-test runner: where to keep the executable, then it and its
/// arguments.
#[derive(Debug, Args, Clone, Default)]
pub struct DoctestRunnerArgs {
    /// The directory the executables are kept in.
    pub dir: PathBuf,
    /// The doc-test executable rustdoc runs, then its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// Arguments of `cargo leakcheck merge`.
#[derive(Debug, Args, Clone, Default)]
pub struct MergeArgs {
    /// The reports: `report.json` files, or the directories holding them (a run's
    /// `target/leakcheck`, flame graphs beside it).
    #[arg(value_name = "REPORT", required = true)]
    pub reports: Vec<PathBuf>,

    /// Where the merged report.json and the flame graphs go; a new or empty directory, or
    /// an earlier merge's output (replaced).
    #[arg(long, value_name = "DIR", default_value = "leakcheck-merged")]
    pub output_dir: PathBuf,

    #[command(flatten)]
    pub outputs: OutputArgs,

    #[command(flatten)]
    pub against: Against,
}

/// The outputs a run writes besides report.json, the page and the summary: `--NAME FILE`
/// for each file output the exporters offer (`--junit`, `--sarif`), and `--annotations`.
/// Shared by every command that reports.
#[derive(Debug, Clone, Default)]
pub struct OutputArgs(pub export::Asked);

impl clap::FromArgMatches for OutputArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut args = OutputArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for e in export::file_exporters() {
            if let Some(path) = matches.get_one::<PathBuf>(e.name()) {
                self.0.files.insert(e.name(), path.clone());
            }
        }
        if let Some(kind) = matches.get_one::<String>("annotations") {
            self.0.annotations = Some(kind.clone());
        }
        Ok(())
    }
}

impl Args for OutputArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for e in export::file_exporters() {
            let Some(output) = e.file() else {
                continue;
            };
            let holds = format!("{}: {}", output.format, output.holds);
            cmd = cmd.arg(
                clap::Arg::new(e.name())
                    .long(e.name())
                    .value_name("PATH")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(format!(
                        "Also write the results to this file: {holds} [default: `[output] {}` in leakcheck.toml, else none]",
                        e.name()
                    )),
            );
        }
        cmd.arg(
            clap::Arg::new("annotations")
                .long("annotations")
                .value_name("KIND")
                .value_parser(["github", "none"])
                .help("GitHub Actions annotations at each leak's allocating line and a job summary: `github` or `none` [default: on when GITHUB_ACTIONS=true]"),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Arguments of `cargo leakcheck bench`.
#[derive(Debug, Args, Clone, Default)]
pub struct BenchArgs {
    /// Packages, features and target directory.
    #[command(flatten)]
    pub selection: Selection,

    /// Only the named bench target (repeatable).
    #[arg(long = "bench", value_name = "NAME")]
    pub benches: Vec<String>,

    /// How long each benchmark runs under the tool, in seconds: criterion benches are run
    /// in profiling mode for this long; other benches are stopped after it.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub bench_time: u64,

    /// Time between heap snapshots, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 250)]
    pub snapshot_interval: u64,

    /// A stack whose retained bytes rise by more than this over the later half of the run
    /// fails its bench [default: 64KiB, or leakcheck.toml].
    #[arg(long, value_name = "SIZE")]
    pub growth_threshold: Option<String>,

    /// The configuration file [default: leakcheck.toml or .config/leakcheck.toml].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Print the commands being run, and a line for every test as it ends.
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print only errors, warnings and the summary's totals: no progress, no per-test lines.
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub outputs: OutputArgs,

    /// Benchmark-name filters (criterion benches): substrings to match.
    #[arg(last = true, value_name = "FILTERS")]
    pub filters: Vec<String>,
}

/// Arguments of `cargo leakcheck run`.
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    /// Packages, features and target directory.
    #[command(flatten)]
    pub selection: Selection,

    /// The binary target to build and run.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["example", "command"])]
    pub bin: Option<String>,

    /// The example to build and run.
    #[arg(long, value_name = "NAME", conflicts_with = "command")]
    pub example: Option<String>,

    /// Build in release mode.
    #[arg(long, short = 'r')]
    pub release: bool,

    /// Run this command instead of building one (`PATH ARGS…`, split as a shell would split
    /// words, without expansions).
    #[arg(long, value_name = "COMMAND")]
    pub command: Option<String>,

    /// Ready once something accepts connections on 127.0.0.1:PORT.
    #[arg(long, value_name = "PORT")]
    pub ready_port: Option<u16>,

    /// Ready once the service prints a line containing TEXT (stdout or stderr).
    #[arg(long, value_name = "TEXT")]
    pub ready_line: Option<String>,

    /// Ready once this shell command succeeds (tried every 100 ms).
    #[arg(long = "ready", value_name = "COMMAND")]
    pub ready_command: Option<String>,

    /// How long to wait for it to get ready, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub ready_timeout: u64,

    /// The load: a shell command run once the service is ready (a script, curl in a loop,
    /// wrk, oha, k6…). Without it, the service runs for --duration.
    #[arg(long, value_name = "COMMAND")]
    pub load: Option<String>,

    /// How long the load may run, in seconds; past it, the load is stopped and the run fails.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub load_timeout: u64,

    /// Without --load, how long the service runs once ready, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub duration: u64,

    /// Time between heap snapshots, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub snapshot_interval: u64,

    /// Take every allocation's stack (exact snapshots) rather than one per 4 KiB allocated
    /// on average. Costs throughput: every allocation is unwound. Who holds each growing
    /// stack is found either way.
    #[arg(long)]
    pub exact: bool,

    /// A pause after the load before the last snapshot, in seconds, so caches that drain are
    /// not counted.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub settle: u64,

    /// A shell command that stops the service gracefully (otherwise SIGTERM, then SIGKILL
    /// after --grace).
    #[arg(long, value_name = "COMMAND")]
    pub stop: Option<String>,

    /// How long the service has to end after it is asked to stop, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub grace: u64,

    /// A stack whose retained bytes rise by more than this over the later half of the load
    /// is a leak [default: 64KiB, or leakcheck.toml's [bench]].
    #[arg(long, value_name = "SIZE")]
    pub growth_threshold: Option<String>,

    /// The configuration file [default: leakcheck.toml or .config/leakcheck.toml].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Print the commands being run.
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print only errors, warnings and the summary.
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub outputs: OutputArgs,

    /// Arguments for the service.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

/// Arguments of `cargo leakcheck test`.
#[derive(Debug, Args, Clone, Default)]
pub struct TestArgs {
    /// Packages, features and target directory.
    #[command(flatten)]
    pub selection: Selection,

    /// Test only the library's unit tests.
    #[arg(long)]
    pub lib: bool,

    /// Test only the named integration test target (repeatable).
    #[arg(long = "test", value_name = "NAME")]
    pub tests: Vec<String>,

    /// Test only the libraries' doc-tests (they are tested by default, as by `cargo test`,
    /// when no target is selected).
    #[arg(long, conflicts_with_all = ["lib", "tests", "no_doc"])]
    pub doc: bool,

    /// Do not test doc-tests.
    #[arg(long)]
    pub no_doc: bool,

    /// Build and test in release mode.
    #[arg(long, short = 'r')]
    pub release: bool,

    /// Thresholds, timeout, extra runs.
    #[command(flatten)]
    pub checking: Checking,

    /// Number of test processes computing at once (default: number of cores); a process that
    /// only waits (sleeps, a timeout) frees its place, up to twice N processes in all.
    #[arg(short = 'j', long, value_name = "N")]
    pub jobs: Option<usize>,

    /// The configuration file [default: leakcheck.toml or .config/leakcheck.toml at the
    /// workspace root].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub outputs: OutputArgs,

    /// After the run, append a `[[suppress]]` entry for every failing stack to FILE (with a
    /// placeholder reason), so a legacy codebase can turn the check on today.
    #[arg(long, value_name = "FILE")]
    pub write_suppressions: Option<PathBuf>,

    /// Read the previous run's timings from FILE and keep this run's there too, for a CI
    /// cache to carry from job to job: they decide which tests start first and which get
    /// their stacks process beside their counting process, never a verdict (no FILE yet:
    /// the target directory's, as without this option) [default:
    /// `<target>/leakcheck/metrics.json`].
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,

    /// Check only this share of the suite, to split it across machines: `slice:M/N` deals
    /// the listed tests round-robin, `hash:M/N` by a hash of binary and test name,
    /// `count:M/N` round-robin within each binary (shard M of N, from 1; nextest's kinds).
    /// Merge the shards' reports with `cargo leakcheck merge`.
    #[arg(long, value_name = "KIND:M/N")]
    pub partition: Option<crate::execution::partition::Partition>,

    /// Print the commands being run, and a line for every test as it ends.
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print only errors, warnings and the summary's totals: no progress, no per-test lines.
    #[arg(short, long)]
    pub quiet: bool,

    /// Test-name filters and libtest options after `--`: substrings to match (`--exact` to
    /// match whole names), `--skip PATTERN`, `--ignored`, `--include-ignored`.
    #[arg(last = true, value_name = "FILTERS")]
    pub filters: Vec<String>,
}

/// Parses the process arguments, accepting both `cargo leakcheck …` and `cargo-leakcheck …`.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|a| a == "leakcheck") {
        let CargoCli::Leakcheck(cli) = CargoCli::try_parse_from(args)?;
        Ok(cli)
    } else {
        Cli::try_parse_from(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SettingsLayer;
    use clap::CommandFactory;

    fn checking(args: &[&str]) -> Checking {
        let words = ["cargo-leakcheck", "test"].iter().chain(args);
        match parse_args(words) {
            Ok(Cli {
                command: Command::Test(t),
            }) => t.checking,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_setting_flag_is_spelled_as_its_field_which_its_problems_name() {
        let test = Cli::command();
        let test = test.find_subcommand("test").unwrap();
        let flags = SettingFlags::augment_args(clap::Command::new("flags"));
        for arg in flags.get_arguments() {
            let id = arg.get_id().as_str();
            assert_eq!(arg.get_long(), Some(id.replace('_', "-").as_str()), "{id}");
            assert!(test.get_arguments().any(|a| a.get_id() == id), "{id}");
        }
    }

    #[test]
    fn the_setting_flags_give_the_command_lines_layer() {
        let given = checking(&[
            "--timeout",
            "7",
            "--threshold",
            "1KiB",
            "--test-threshold",
            "2KiB",
            "--extra-runs",
            "3",
        ]);
        let expected = SettingsLayer {
            stack_threshold: Some(1024),
            test_threshold: Some(2048),
            timeout: Some(7),
            extra_runs: Some(3),
            ..SettingsLayer::default()
        };
        assert_eq!(given.settings.layer(), Ok(expected));
        assert_eq!(checking(&[]).settings.layer(), Ok(SettingsLayer::default()));
        let zero = checking(&["--timeout", "0", "--threshold", "4XB"]);
        assert_eq!(
            zero.settings.layer(),
            Err("--timeout must be at least 1 second".into())
        );
        let bad = checking(&["--test-threshold", "4XB"]).settings.layer();
        assert!(
            bad.as_ref()
                .is_err_and(|e| e.starts_with("--test-threshold: invalid size `4XB`")),
            "{bad:?}"
        );
    }
}
