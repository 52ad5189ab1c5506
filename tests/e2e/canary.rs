//! The canary matrix: the smallest leak there is, under every mechanism of the runtime.
//!
//! The runtime lives inside the process it measures, and the counting pass settles a test
//! on exact counts of what it left: anything a mechanism of the runtime (or what it makes
//! std and glibc do) allocates or frees in the program's arenas while the test runs can
//! cancel out a leak of one object. So each cell of the matrix forgets one object, of every
//! small size class jemalloc has (8 B to 4 KiB) and as a `String`, a `Vec` and a `Box`, with
//! and without `black_box`, in tests whose names run from 4 to 40 characters (libtest names
//! the test's thread after it), plus one object forgotten by a helper thread; each cell has
//! a clean twin that drops the same object. The cells run in one binary per mechanism
//! (`tests/fixtures/canary/tests/mechanisms/`), and every leaking cell must be `leak` at its
//! line, every twin `clean`, under `cargo leakcheck test` and `cargo leakcheck nextest`.
//!
//! The fixture's test files are generated from this matrix (so the matrix is the one table
//! of their verdicts); `LEAKCHECK_BLESS=1` rewrites them, and a test fails when they differ.

use crate::expected::Expected;
use crate::harness::{repo_root, run_fixture, run_nextest, Run};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;

mod doc;
mod own_main;

pub const FIXTURE: &str = "tests/fixtures/canary";
const PACKAGE: &str = "canary";

/// A runtime mechanism and the binary that switches it on (`tests/<binary>.rs`, its
/// `around` in `tests/mechanisms/<binary>.rs`).
struct Mechanism {
    binary: &'static str,
    /// Starts the names of its cells, so that names are unique in the fixture.
    letter: char,
    what: &'static str,
}

const MECHANISMS: &[Mechanism] = &[
    Mechanism {
        binary: "plain",
        letter: 'p',
        what: "no mechanism",
    },
    Mechanism {
        binary: "thread_locals",
        letter: 't',
        what: "a thread-local collection (the thread registry in the counting pass)",
    },
    Mechanism {
        binary: "statics",
        letter: 's',
        what: "a static collection",
    },
    Mechanism {
        binary: "early_thread",
        letter: 'e',
        what: "a thread started before the test",
    },
    Mechanism {
        binary: "mapping",
        letter: 'm',
        what: "a mapping of the program's own",
    },
    Mechanism {
        binary: "epoch",
        letter: 'g',
        what: "crossbeam-epoch garbage",
    },
    Mechanism {
        binary: "tokio_runtime",
        letter: 'r',
        what: "a tokio runtime",
    },
    Mechanism {
        binary: "child_thread",
        letter: 'c',
        what: "a child thread that ends inside the test",
    },
    Mechanism {
        binary: "child_process",
        letter: 'k',
        what: "a process started and waited for (the runtime handed down to it)",
    },
    Mechanism {
        binary: "panic_hook",
        letter: 'h',
        what: "a panic hook installed once (read by the runtime as the test's thread is joined)",
    },
];

/// The shapes the doc-test cells take (as [`shapes_of`] shapes a mechanism's, by index), and
/// those of doc-tests whose `main` returns a value one further: fixed, so that a mechanism
/// added to the matrix leaves the doc-test fixtures as they are.
const DOC_SHAPES: usize = 9;

/// jemalloc's small size classes, 8 B to 4 KiB.
const CLASSES: [usize; 29] = [
    8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
    1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
];

/// How the forgotten object is made.
#[derive(Clone, Copy)]
enum Kind {
    String,
    Vec,
    Box,
    /// A `String`, made and forgotten by a helper thread the cell starts and joins.
    Helper,
}

/// When the mechanism does its work in a cell: before the cell's object is made, or after
/// (then the object is the test's first allocation, made straight after what the harness
/// and the runtime did as the test's thread started).
#[derive(Clone, Copy)]
enum Order {
    Before,
    After,
}

/// The shortest and longest test names.
const NAMES: std::ops::RangeInclusive<usize> = 4..=40;

/// The size classes a test's name, and what the harness makes of it, fall into (a name of 4
/// to 40 bytes): the sweep of every name length tries these.
const NAME_CLASSES: [usize; 4] = [8, 16, 32, 48];

/// What one cell does, apart from whether it keeps its object.
struct Shape {
    kind: Kind,
    size: usize,
    black_box: bool,
    order: Order,
    length: usize,
}

/// One cell: a leaking test or its clean twin.
struct Cell {
    binary: &'static str,
    name: String,
    leak: bool,
    /// The test's body: one statement, on the line the report must name.
    statement: String,
    class: usize,
}

/// A request in `class`: its top, or just above the class below.
fn request(class: usize, top: bool) -> usize {
    let below = CLASSES
        .iter()
        .rev()
        .find(|&&c| c < class)
        .copied()
        .unwrap_or(0);
    if top {
        class
    } else {
        below + 1
    }
}

fn length_at(i: usize, m: usize) -> usize {
    NAMES.start() + (i * 17 + m * 5) % (NAMES.end() - NAMES.start() + 1)
}

/// The shapes of one mechanism's cells: every class as each kind, both orders, with and
/// without `black_box`; every name length with an object of the classes names fall into,
/// made first; a helper thread's object.
fn shapes_of(m: usize) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for &class in &CLASSES {
        for kind in [Kind::String, Kind::Vec, Kind::Box] {
            let i = shapes.len();
            shapes.push(Shape {
                kind,
                size: request(class, (i + m).is_multiple_of(2)),
                black_box: (i + m) % 2 == 1,
                order: match ((i + m) / 2).is_multiple_of(2) {
                    true => Order::After,
                    false => Order::Before,
                },
                length: length_at(i, m),
            });
        }
    }
    for length in NAMES {
        let class = NAME_CLASSES[(length + m) % NAME_CLASSES.len()];
        shapes.push(Shape {
            kind: [Kind::String, Kind::Vec, Kind::Box][(length + m) % 3],
            size: request(class, length.is_multiple_of(2)),
            black_box: (length / 2 + m) % 2 == 1,
            order: Order::After,
            length,
        });
    }
    shapes.push(Shape {
        kind: Kind::Helper,
        size: CLASSES[(m * 11 + 2) % CLASSES.len()] - 3,
        black_box: false,
        order: Order::Before,
        length: length_at(shapes.len(), m),
    });
    shapes
}

/// The cells of one mechanism's binary, in source order: each shape leaking, then its clean
/// twin.
fn cells_of(m: usize) -> Vec<Cell> {
    cells_with(&MECHANISMS[m], m)
}

/// The cells of `mechanism`, shaped as those of the `m`th mechanism.
fn cells_with(mechanism: &Mechanism, m: usize) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (i, shape) in shapes_of(m).iter().enumerate() {
        for leak in [true, false] {
            cells.push(Cell {
                binary: mechanism.binary,
                name: cell_name(mechanism.letter, i, leak, shape.length),
                statement: statement(shape, leak),
                leak,
                class: class_of(shape.size),
            });
        }
    }
    cells
}

fn class_of(size: usize) -> usize {
    *CLASSES.iter().find(|&&c| c >= size).unwrap()
}

/// `<mechanism><cell, two base-36 digits><l|c>`, padded with `x` to `length`.
fn cell_name(letter: char, i: usize, leak: bool, length: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    assert!(i < 36 * 36, "two digits name the cell");
    let mut name = format!(
        "{letter}{}{}{}",
        DIGITS[i / 36] as char,
        DIGITS[i % 36] as char,
        if leak { 'l' } else { 'c' }
    );
    while name.len() < length {
        name.push('x');
    }
    name
}

fn statement(shape: &Shape, leak: bool) -> String {
    let size = shape.size;
    let object = match shape.kind {
        Kind::String | Kind::Helper => format!("\"x\".repeat({size})"),
        Kind::Vec => format!("vec![7u8; {size}]"),
        Kind::Box => format!("Box::new([7u8; {size}])"),
    };
    let object = if shape.black_box {
        format!("black_box({object})")
    } else {
        object
    };
    let end = if leak { "forget" } else { "drop" };
    let order = match shape.order {
        Order::Before => "before",
        Order::After => "after",
    };
    match shape.kind {
        Kind::Helper => {
            format!("{order}(|| thread::spawn(|| {end}({object})).join().unwrap());")
        }
        _ => format!("{order}(|| {end}({object}));"),
    }
}

fn all_cells() -> Vec<Cell> {
    (0..MECHANISMS.len())
        .flat_map(cells_of)
        .chain(doc::cells())
        .collect()
}

/// The test file of mechanism `m`, as generated.
fn source(m: usize) -> String {
    let mechanism = &MECHANISMS[m];
    let mut out = format!(
        "//! Canary cells under {}.\n\
         //!\n\
         //! Generated from the matrix in tests/e2e/canary.rs (`LEAKCHECK_BLESS=1 cargo test\n\
         //! -p cargo-leakcheck --test e2e canary` rewrites it): edit the matrix, not this file.\n\n\
         #[path = \"mechanisms/{}.rs\"]\n\
         mod mechanism;\n\n\
         use mechanism::{{after, before}};\n\
         use std::hint::black_box;\n\
         use std::mem::forget;\n\
         use std::thread;\n",
        mechanism.what, mechanism.binary
    );
    for cell in cells_of(m) {
        let marker = if cell.leak {
            format!(" // leak-site: {}", cell.name)
        } else {
            String::new()
        };
        write!(
            out,
            "\n#[test]\nfn {}() {{\n    {}{marker}\n}}\n",
            cell.name, cell.statement
        )
        .unwrap();
    }
    out
}

fn source_path(m: usize) -> std::path::PathBuf {
    repo_root()
        .join(FIXTURE)
        .join("tests")
        .join(format!("{}.rs", MECHANISMS[m].binary))
}

/// The matrix's rows of the e2e table: every leaking cell `leak` at its line, every twin
/// `clean`.
pub fn rows() -> Vec<Expected> {
    (0..MECHANISMS.len())
        .flat_map(cells_of)
        .map(|cell| {
            let name: &'static str = Box::leak(cell.name.into_boxed_str());
            Expected::generated(FIXTURE, PACKAGE, cell.binary, name, cell.leak)
        })
        .chain(doc::MERGED.rows())
        .chain(own_main::OWN_MAIN.rows())
        .collect()
}

/// `path` holds `want` (written there under `bless`).
fn is_generated(path: &std::path::Path, want: &str, bless: bool) {
    if bless {
        std::fs::write(path, want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what the matrix in tests/e2e/canary.rs generates; \
         rewrite it with LEAKCHECK_BLESS=1",
        path.display()
    );
}

/// The fixture's test files are the matrix's (rewritten under `LEAKCHECK_BLESS=1`), and the
/// matrix has every dimension it promises.
#[test]
fn canary_sources_are_the_matrix() {
    let bless = std::env::var_os("LEAKCHECK_BLESS").is_some_and(|v| v == "1");
    for m in 0..MECHANISMS.len() {
        is_generated(&source_path(m), &source(m), bless);
    }
    for d in [&doc::MERGED, &own_main::OWN_MAIN] {
        is_generated(&d.source_path(), &d.source(), bless);
    }
    let classes: BTreeSet<usize> = (own_main::cells().iter())
        .filter(|c| c.leak)
        .map(|c| c.class)
        .collect();
    assert_eq!(
        classes.len(),
        CLASSES.len(),
        "a doc-test whose `main` returns a value: every class"
    );
    let cells = all_cells();
    let leaks: Vec<&Cell> = cells.iter().filter(|c| c.leak).collect();
    assert_eq!(
        leaks.len(),
        (MECHANISMS.len() + 1) * (CLASSES.len() * 3 + NAMES.count() + 1),
        "in every binary and in the doc-tests, a leaking cell per class and kind, per name length and a helper \
         thread's"
    );
    assert_eq!(cells.len(), 2 * leaks.len(), "a clean twin for every cell");
    let names: BTreeSet<&str> = cells.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cells.len(), "names are unique in the fixture");
    for m in MECHANISMS.iter().chain([&doc::MECHANISM]) {
        let of_binary: Vec<&&Cell> = leaks.iter().filter(|c| c.binary == m.binary).collect();
        let classes: BTreeSet<usize> = of_binary.iter().map(|c| c.class).collect();
        assert_eq!(classes.len(), CLASSES.len(), "{}: every class", m.binary);
        let lengths: BTreeSet<usize> = of_binary.iter().map(|c| c.name.len()).collect();
        assert_eq!(
            lengths,
            NAMES.collect::<BTreeSet<_>>(),
            "{}: every name length",
            m.binary
        );
        for (what, shown) in [
            ("before(", "the mechanism's work before the object"),
            ("after(", "the mechanism's work after the object"),
            ("black_box(", "black_box"),
            ("thread::spawn", "a helper thread"),
        ] {
            assert!(
                of_binary.iter().any(|c| c.statement.contains(what)),
                "{}: {shown}",
                m.binary
            );
        }
    }
}

/// Every cell against the table; says how many cells there were, so that a shrinking
/// matrix shows in the output.
fn check_cells(run: &Run, command: &str, fixture: &str) {
    let rows: Vec<Expected> = rows()
        .into_iter()
        .filter(|r| r.fixture == fixture)
        .collect();
    let mut wrong = Vec::new();
    for row in &rows {
        wrong.extend(crate::verdicts::check_row(run, row));
    }
    assert!(
        wrong.is_empty(),
        "canary under `{command}`: {} of {} cells wrong:\n{}\n\nstderr:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n"),
        run.stderr
    );
    let leaks = rows.iter().filter(|r| r.verdict == "leak").count();
    let binaries: BTreeSet<&str> = rows.iter().map(|r| r.binary).collect();
    // Straight to the descriptor, past libtest's capture: the count shows in every run's
    // output, passing or not.
    let _ = writeln!(
        std::io::stderr(),
        "canary under `{command}`: {} cells in {} binaries of {fixture}, {leaks} leak and {} clean, all as the matrix says",
        rows.len(),
        binaries.len(),
        rows.len() - leaks
    );
    assert_eq!(run.code, 3, "leaks found; stderr:\n{}", run.stderr);
}

#[test]
fn every_canary_cell_is_judged_right_under_test() {
    let run = run_fixture(FIXTURE, &[]);
    check_cells(&run, "cargo leakcheck test", FIXTURE);
}

/// The doc-tests' cells (nextest does not run doc-tests).
#[test]
fn every_canary_doc_test_cell_is_judged_right() {
    let run = run_fixture(doc::FIXTURE, &[]);
    check_cells(&run, "cargo leakcheck test", doc::FIXTURE);
}

/// The cells of doc-tests whose own `main` returns a value, each an executable of its own.
#[test]
fn every_canary_own_main_cell_is_judged_right() {
    let run = run_fixture(own_main::FIXTURE, &[]);
    check_cells(&run, "cargo leakcheck test", own_main::FIXTURE);
}

#[test]
fn every_canary_cell_is_judged_right_under_nextest() {
    let run = run_nextest(FIXTURE, &[], "canary--nextest");
    check_cells(&run, "cargo leakcheck nextest", FIXTURE);
}
