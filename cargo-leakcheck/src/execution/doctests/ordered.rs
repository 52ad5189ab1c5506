//! Doc-tests whose executables neither name them nor can be told apart by where their code
//! is (a doc comment a macro writes for many items, blocks laid out alike, a line rustdoc
//! gives that holds no code block) are run once more, one at a time: rustdoc then runs their
//! executables in the order it prints their names, so the n-th executable it ran is the
//! n-th doc-test it printed. rustdoc splits its test arguments at whitespace, so a doc-test
//! is asked for by the part of its name without any (its item's path), which may bring
//! others along: they are paired as well, and only those asked for are kept. One that did
//! not build ran no executable and is left out of the order. The doc-tests
//! are split among as many rustdoc runs as there are cores, each in a directory of its own.

use super::keep::{self, Kept};
use super::naming::{self, Outcome, RunMode};
use super::{fitting, own_main_binary, run_rustdoc, Collected, DocSymbols, Package, Request};
use std::path::{Path, PathBuf};

/// Where, under a package's directory of kept executables, the runs in order keep theirs.
pub const DIR: &str = "ordered";

/// Fewest doc-tests worth a rustdoc run of their own.
const PER_RUN: usize = 8;

/// One package's doc-tests to run again in order, and where.
pub struct Run<'a> {
    pub req: &'a Request<'a>,
    pub pkg: &'a Package<'a>,
    pub host: &'a str,
    pub dir: &'a Path,
}

/// Runs `unplaced` again in order, makes a test binary of each executable paired with its
/// doc-test, and returns the doc-tests still unpaired.
/// `in_merged` are the package's doc-tests rustdoc merged into one executable: they run
/// in it, not one at a time.
pub fn place(
    run: &Run,
    unplaced: &[Outcome],
    in_merged: &[String],
    out: &mut Collected,
) -> Vec<Outcome> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let groups = split(unplaced, cores.min(unplaced.len().div_ceil(PER_RUN)).max(1));
    let results: Vec<Result<String, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (groups.iter().enumerate())
            .map(|(k, group)| scope.spawn(move || run_group(run, k, group)))
            .collect();
        (handles.into_iter())
            .map(|h| h.join().unwrap_or_else(|_| Err("its run panicked".into())))
            .collect()
    });
    let mut still = Vec::new();
    for ((k, group), result) in groups.iter().enumerate().zip(results) {
        let paired = result.ok().and_then(|stdout| {
            let not_built = naming::not_built(&stdout);
            let ran: Vec<Outcome> = (naming::outcomes(&stdout).into_iter())
                .filter(|o| o.mode != RunMode::CompileOnly && !o.ignored())
                .filter(|o| !in_merged.contains(&o.name) && !not_built.contains(&o.name))
                .collect();
            pair_group(run.pkg, &group_dir(run.dir, k), &ran)
        });
        match paired {
            Some(pairs) => {
                let done: Vec<&str> = pairs
                    .iter()
                    .map(|(_, _, _, o, _)| o.name.as_str())
                    .collect();
                still.extend(
                    (group.iter())
                        .filter(|g| !done.contains(&g.name.as_str()))
                        .map(|g| (*g).clone()),
                );
                for (exe, kept, symbols, o, before) in pairs {
                    if group.iter().any(|g| g.name == o.name) {
                        out.binaries
                            .push(own_main_binary(run.pkg, exe, kept, &symbols, &o, before));
                    }
                }
            }
            None => still.extend(group.iter().map(|g| (*g).clone())),
        }
    }
    still
}

/// The directory of the `k`-th run.
fn group_dir(dir: &Path, k: usize) -> PathBuf {
    dir.join(k.to_string())
}

/// `items` dealt into `n` groups, keeping their order within each.
fn split<T>(items: &[T], n: usize) -> Vec<Vec<&T>> {
    let mut groups: Vec<Vec<&T>> = (0..n).map(|_| Vec::new()).collect();
    for (i, item) in items.iter().enumerate() {
        groups[i % n].push(item);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Runs one group's doc-tests, and any others their filters bring along, one at a time.
fn run_group(run: &Run, k: usize, group: &[&Outcome]) -> Result<String, String> {
    let dir = group_dir(run.dir, k);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let mut filters: Vec<String> = vec!["--test-threads=1".into()];
    for o in group {
        let f = filter(&o.name);
        if !filters.contains(&f) {
            filters.push(f);
        }
    }
    let stdout = run_rustdoc(run.req, run.pkg.member, run.host, &dir, &filters)?;
    // Kept beside the executables, for whoever wonders why they were not paired.
    let _ = std::fs::write(dir.join(STDOUT), &stdout);
    Ok(stdout)
}

/// What rustdoc printed in a run in order, in its directory.
const STDOUT: &str = "rustdoc.stdout";

/// A filter without whitespace that the doc-test `name` matches: its item's path when that
/// has none, else the longest part of its name between whitespace.
fn filter(name: &str) -> String {
    let item = (name.split_once(" - "))
        .and_then(|(_, rest)| rest.rsplit_once(" (line "))
        .map(|(item, _)| item)
        .filter(|item| !item.is_empty() && !item.contains(char::is_whitespace));
    let longest = || {
        (name.split_whitespace())
            .max_by_key(|part| part.len())
            .unwrap_or(name)
    };
    item.unwrap_or_else(longest).to_string()
}

/// An executable paired with its doc-test, and how many lines rustdoc put before its code.
type Paired = (PathBuf, Kept, DocSymbols, Outcome, Option<u32>);

/// Pairs the executables kept in `dir`, by when they started, with the doc-tests that `ran`,
/// in the order rustdoc printed them; `None` when they are not as many, or when one that
/// names its doc-test is not the one the order gives it.
fn pair_group(pkg: &Package, dir: &Path, ran: &[Outcome]) -> Option<Vec<Paired>> {
    let mut exes: Vec<(PathBuf, Kept, DocSymbols)> = (std::fs::read_dir(dir).ok()?)
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let d = e.path();
            let kept = Kept::read(&d)?;
            let exe = d.join(keep::EXECUTABLE);
            let symbols = DocSymbols::of(&std::fs::read(&exe).ok()?)?;
            Some((exe, kept, symbols))
        })
        .collect();
    exes.sort_by_key(|(_, kept, _)| kept.started);
    let started: Vec<u64> = exes.iter().map(|(_, k, _)| k.started).collect();
    if !in_order(&started, ran.len()) {
        return None;
    }
    let mut pairs = Vec::new();
    for ((exe, kept, symbols), o) in exes.into_iter().zip(ran) {
        // An executable that names its doc-test (rustdoc's wrapper does) must be the one
        // the order gives it.
        let named = naming_wrapper(&symbols, ran);
        if named.is_some_and(|n| n != o.name) {
            return None;
        }
        let before = fitting(pkg, &exe, &symbols, &[o]).first().map(|(_, b)| *b);
        pairs.push((exe, kept, symbols, o.clone(), before));
    }
    Some(pairs)
}

/// The doc-test among `ran` whose name an executable's wrapper function gives.
fn naming_wrapper<'r>(symbols: &DocSymbols, ran: &'r [Outcome]) -> Option<&'r str> {
    let (wrapper, _) = symbols.wrapper.as_ref()?;
    let names: Vec<&str> = ran.iter().map(|o| o.name.as_str()).collect();
    naming::by_wrapper(wrapper, &names)
}

/// Whether executables that started at `started` (sorted) can be paired one by one with
/// `ran` doc-tests: as many, each started at a time of its own.
fn in_order(started: &[u64], ran: usize) -> bool {
    started.len() == ran && started.windows(2).all(|w| w[0] < w[1]) && !started.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doc_test_is_asked_for_by_its_item_path() {
        assert_eq!(
            filter("src/io/mod.rs - io::AsyncWriteExt::write_u8 (line 421)"),
            "io::AsyncWriteExt::write_u8"
        );
        // An item named with a space: the longest part without one.
        assert_eq!(
            filter("src/lib.rs - <impl Display for Thing>::fmt (line 9)"),
            "Thing>::fmt"
        );
        assert!(!filter("src/lib.rs -  (line 3)").contains(' '));
    }

    #[test]
    fn names_are_dealt_into_groups_in_their_order() {
        let names = ["a", "b", "c", "d", "e"];
        let groups = split(&names, 2);
        assert_eq!(groups, vec![vec![&"a", &"c", &"e"], vec![&"b", &"d"]]);
        assert_eq!(split(&names[..1], 3), vec![vec![&"a"]]);
    }

    #[test]
    fn executables_pair_with_doc_tests_only_one_to_one_and_timed() {
        assert!(in_order(&[5, 9, 12], 3));
        // One doc-test did not build: no executable for it, and none can be paired.
        assert!(!in_order(&[5, 9], 3));
        // Started together: not run one at a time.
        assert!(!in_order(&[5, 5, 12], 3));
        // Kept by a runner that did not say when it started.
        assert!(!in_order(&[0, 9, 12], 3));
        assert!(in_order(&[], 0));
    }
}
