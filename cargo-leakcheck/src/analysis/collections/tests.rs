use super::*;
use crate::analysis::lengths::growth_by_run;
use crate::config::{Config, SettingsLayer};
use crate::evidence::sites::parse_sites;
use crate::evidence::symbols::{Captured, Replay};
use crate::evidence::{Collection, Record};
use crate::model::AllowedBy;
use crate::report::text::collection_text;

fn table() -> CollectionTable {
    let c = |root: &str, type_name: &str, entry_size: u64| Collection {
        root: root.into(),
        thread_local: false,
        file: Some("src/lib.rs".into()),
        line: Some(9),
        field: String::new(),
        type_name: type_name.into(),
        bytes: false,
        entry_size,
        program: String::new(),
    };
    CollectionTable {
        collections: vec![
            c("app::SEEN", "HashSet<u64>", 8),
            c("app::WINDOW", "VecDeque<u32>", 4),
            c("app::POOL", "Vec<Conn>", 64),
        ],
        note: None,
    }
}

fn judged(record: &str, config: &Config) -> Vec<CollectionReport> {
    judged_with(record, config, &HashMap::new())
}

fn judged_with(
    record: &str,
    config: &Config,
    sites: &HashMap<u32, BufferSite>,
) -> Vec<CollectionReport> {
    let record = Record::parse(record);
    let effective = config.effective("tests::t", &SettingsLayer::default());
    let policy = Policy {
        effective: &effective,
        suppressions: config.suppressions_for("tests::t").collect(),
    };
    let mut symbols = Replay::new(Captured::default());
    judge(
        &table(),
        &record.lengths,
        record.runs.len(),
        sites,
        &mut symbols,
        &policy,
    )
}

/// A stacks process's record: the own run, three extra runs, the lengths as written.
const THREE_RUNS: &str = "first 0 0 0 1
len 0 0 1
len 0 1 16
len 0 2 4
run 1 start
len 1 0 2
len 1 1 32
len 1 2 6
run 1 ok 0 0 1 1
run 2 start
len 2 0 3
len 2 1 48
run 2 ok 0 0 1 1
run 3 start
len 3 0 4
len 3 1 64
run 3 ok 0 0 1 1
end done
";

#[test]
fn readings_are_the_last_one_written_at_each_point() {
    let record = Record::parse(THREE_RUNS);
    let r = readings(&record.lengths, 3);
    assert_eq!(r[&0].points, [1, 2, 3, 4]);
    assert_eq!(r[&2].points, [4, 6, 6, 6], "unchanged after run 1");
    // A grace reading replaces the last run's.
    let mut g = r[&1].clone();
    g.grace = Some(60);
    assert_eq!(g.judged(), [16, 32, 48, 60]);
    // A reading of a run the record does not count (the process died in it) is ignored.
    let cut = Record::parse("len 0 0 1\nlen 1 0 2\n");
    assert_eq!(readings(&cut.lengths, 0)[&0].points, [1]);
}

#[test]
fn a_collection_that_grows_on_every_run_is_a_leak_one_that_stops_is_kept_state() {
    let found = judged(THREE_RUNS, &Config::default());
    let seen = found
        .iter()
        .find(|c| c.collection.root == "app::SEEN")
        .unwrap();
    assert_eq!(seen.kind, StackKind::Leak);
    assert!(seen.fails);
    assert_eq!(seen.growth_per_run, [1, 1, 1]);
    assert_eq!(
        collection_text(seen, std::path::Path::new("/ws")),
        "static `app::SEEN` (src/lib.rs:9): HashSet<u64>, +1 entry per run (4 entries after 4 runs)"
    );
    let window = found
        .iter()
        .find(|c| c.collection.root == "app::WINDOW")
        .unwrap();
    assert_eq!(window.kind, StackKind::Leak, "16 more on every run");
    let pool = found
        .iter()
        .find(|c| c.collection.root == "app::POOL")
        .unwrap();
    assert_eq!(pool.kind, StackKind::ProcessLifetime, "warmed in one run");
    assert!(!pool.fails);
    assert_eq!(found[0].collection.root, "app::SEEN", "failing ones first");
}

/// Each of `indices` at the same buffer, with no stack.
fn one_buffer(indices: &[u32], buffer: u64) -> HashMap<u32, BufferSite> {
    indices
        .iter()
        .map(|&i| {
            let site = BufferSite {
                buffer,
                frames: Vec::new(),
            };
            (i, site)
        })
        .collect()
}

/// SEEN and WINDOW growing alike, by one entry a run.
const ALIKE: &str = "first 0 0 0 1
len 0 0 1
len 0 1 1
run 1 start
len 1 0 2
len 1 1 2
run 1 ok 0 0 1 1
run 2 start
len 2 0 3
len 2 1 3
run 2 ok 0 0 1 1
end done
";

#[test]
fn one_collection_reached_from_two_statics_is_reported_once() {
    let found = judged_with(
        ALIKE,
        &Config::default(),
        &one_buffer(&[0, 1], 0x7f00_0000_1000),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].collection.root, "app::SEEN");
    assert_eq!(found[0].also_held_by.len(), 1);
    assert_eq!(found[0].also_held_by[0].root, "app::WINDOW");
    assert!(collection_text(&found[0], std::path::Path::new("/ws"))
        .ends_with("; also reached from static `app::WINDOW` (src/lib.rs:9)"));
    // A suppression of either holder allows it.
    let (config, _) = crate::config::parse(
        "[[suppress]]\nframe = \"app::WINDOW\"\nreason = \"bounded elsewhere\"\n",
        std::path::Path::new("leakcheck.toml"),
    )
    .unwrap();
    let found = judged_with(ALIKE, &config, &one_buffer(&[0, 1], 0x7f00_0000_1000));
    assert!(!found[0].fails);
}

#[test]
fn collections_alike_are_one_only_at_one_buffer() {
    let apart: HashMap<u32, BufferSite> = one_buffer(&[0], 0x7f00_0000_1000)
        .into_iter()
        .chain(one_buffer(&[1], 0x7f00_0000_2000))
        .collect();
    assert_eq!(judged_with(ALIKE, &Config::default(), &apart).len(), 2);
    assert_eq!(
        judged(ALIKE, &Config::default()).len(),
        2,
        "no buffer known"
    );
    // A zero-sized type's buffer is a dangling pointer every such collection shares.
    let dangling = one_buffer(&[0, 1], 8);
    assert_eq!(judged_with(ALIKE, &Config::default(), &dangling).len(), 2);
    // Lengths that differ are two collections, whatever the buffer says.
    let record = ALIKE.replace("len 2 1 3", "len 2 1 4");
    let same = one_buffer(&[0, 1], 0x7f00_0000_1000);
    assert_eq!(judged_with(&record, &Config::default(), &same).len(), 2);
}

#[test]
fn a_refilled_or_bounded_collection_is_not_listed() {
    let record = "first 0 0 0 1\nlen 0 0 10\nrun 1 start\nrun 1 ok 0 0 1 1\nrun 2 start\nrun 2 ok 0 0 1 1\nend done\n";
    assert!(judged(record, &Config::default()).is_empty());
}

#[test]
fn thresholds_and_suppressions_apply_to_what_a_run_adds() {
    let (config, _) = crate::config::parse(
        "[defaults]\nstack-threshold = \"8B\"\n[[suppress]]\nframe = \"app::WINDOW\"\nreason = \"bounded elsewhere\"\n",
        std::path::Path::new("leakcheck.toml"),
    )
    .unwrap();
    let found = judged(THREE_RUNS, &config);
    let seen = found
        .iter()
        .find(|c| c.collection.root == "app::SEEN")
        .unwrap();
    assert!(!seen.fails, "8 bytes a run is not over 8");
    assert_eq!(seen.allowed.as_ref().unwrap().by, AllowedBy::StackThreshold);
    let window = found
        .iter()
        .find(|c| c.collection.root == "app::WINDOW")
        .unwrap();
    assert!(!window.fails);
    assert_eq!(window.allowed.as_ref().unwrap().by, AllowedBy::Suppression);
}

#[test]
fn what_could_not_be_read_is_said() {
    let record = "first 0 0 0 1\nlen 0 0 1\nrun 1 start\nlen 1 0 -2\nrun 1 ok 0 0 1 1\nrun 2 start\nlen 2 0 3\nrun 2 ok 0 0 1 1\nend done\n";
    let found = judged(record, &Config::default());
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].kind,
        StackKind::ProcessLifetime,
        "no rise through a failed read"
    );
    assert!(found[0]
        .problem
        .as_deref()
        .unwrap()
        .starts_with("could not be read after extra run 1: a pointer"));
}

#[test]
fn growth_by_run_is_what_the_runtime_stops_its_runs_by() {
    let record = Record::parse(THREE_RUNS);
    assert_eq!(
        growth_by_run(&record.lengths, 3),
        (vec![true, true, true], false)
    );
    let quiet = Record::parse("len 0 0 5\nlen grace 0 5\n");
    assert_eq!(
        growth_by_run(&quiet.lengths, 2),
        (vec![false, false], false)
    );
    let late = Record::parse("len 0 0 5\nlen grace 0 6\n");
    assert_eq!(growth_by_run(&late.lengths, 1), (vec![false], true));
}

#[test]
fn a_sites_file_gives_each_collection_the_stack_of_its_buffer() {
    let text = "leakcheck-collections/1
site 0 7f0000001000
@ 0x55d0a0001010 0x55d0a0002020
site 2 7f0000002000

MAPPED_LIBRARIES:
55d0a0000000-55d0a0100000 r-xp 00001000 08:01 123 /work/prog
";
    let sites = parse_sites(text).expect("a whole file");
    assert_eq!(sites.len(), 2);
    assert_eq!(sites[&0].buffer, 0x7f0000001000);
    let frames = &sites[&0].frames;
    assert_eq!(frames.len(), 2);
    assert_eq!(&*frames[0].object, "/work/prog");
    assert_eq!(sites[&2].buffer, 0x7f0000002000);
    assert!(
        sites[&2].frames.is_empty(),
        "a buffer the tracker had no stack for has none"
    );
    assert!(
        parse_sites("leakcheck-collections/1\nsite 0 10\n").is_none(),
        "cut short"
    );
}
