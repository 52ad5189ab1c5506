//! `--partition`: which share of a suite split across several machines this run checks, with
//! cargo-nextest's kinds of split. Shards are numbered from 1; every listed test (after the
//! filters, ignored tests left out) belongs to exactly one shard, so running every shard
//! and merging the reports (`cargo leakcheck merge`) checks the whole suite once.
//!
//! - `slice:M/N`: the tests of all binaries in order, dealt round-robin: the i-th (from 0)
//!   goes to shard i mod N + 1. Shards differ by one test at most.
//! - `hash:M/N`: a test's shard is decided by a hash of its binary and name alone, so
//!   adding or removing other tests never moves it. The hash is FNV-1a (the same in every
//!   build), not nextest's, so a test's shard number may differ from the one nextest gives.
//! - `count:M/N`: like `slice`, counted within each binary (nextest's older kind).

use crate::fnv::Fnv;
use std::fmt;
use std::str::FromStr;

/// How tests are dealt to shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionKind {
    /// Round-robin over the whole run.
    Slice,
    /// By a hash of binary and name.
    Hash,
    /// Round-robin within each binary.
    Count,
}

/// One shard of a split run: `shard` of `total`, from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// How tests are dealt.
    pub kind: PartitionKind,
    /// This run's shard, 1 ≤ shard ≤ total.
    pub shard: u64,
    /// How many shards there are.
    pub total: u64,
}

/// A `--partition` value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// Not `<kind>:M/N`, or an unknown kind.
    #[error("invalid partition `{0}`: expected `slice:M/N`, `hash:M/N` or `count:M/N` (for example `slice:1/3`)")]
    Syntax(String),
    /// M or N out of range.
    #[error("invalid partition `{0}`: the shard must be between 1 and the number of shards, which must be at least 1")]
    Range(String),
}

impl FromStr for Partition {
    type Err = PartitionError;

    fn from_str(text: &str) -> Result<Partition, PartitionError> {
        let syntax = || PartitionError::Syntax(text.to_string());
        let (kind, shards) = text.split_once(':').ok_or_else(syntax)?;
        let kind = match kind {
            "slice" => PartitionKind::Slice,
            "hash" => PartitionKind::Hash,
            "count" => PartitionKind::Count,
            _ => return Err(syntax()),
        };
        let (m, n) = shards.split_once('/').ok_or_else(syntax)?;
        let number = |s: &str| -> Result<u64, PartitionError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            s.parse()
                .map_err(|_| PartitionError::Range(text.to_string()))
        };
        let (shard, total) = (number(m)?, number(n)?);
        if total == 0 || shard == 0 || shard > total {
            return Err(PartitionError::Range(text.to_string()));
        }
        Ok(Partition { kind, shard, total })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            PartitionKind::Slice => "slice",
            PartitionKind::Hash => "hash",
            PartitionKind::Count => "count",
        };
        write!(f, "{kind}:{}/{}", self.shard, self.total)
    }
}

impl Partition {
    /// Which of `tests` (binary id and test name, in run order) belong to this shard.
    #[cfg(test)]
    pub fn keeps<'a>(&self, tests: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<bool> {
        let mut dealer = Dealer::new(*self);
        tests
            .into_iter()
            .map(|(binary, name)| dealer.keeps(binary, name))
            .collect()
    }
}

/// Deals the tests of a run to shards, one at a time in run order.
#[derive(Clone, Debug)]
pub struct Dealer {
    partition: Partition,
    dealt: u64,
    in_binary: std::collections::HashMap<String, u64>,
}

impl Dealer {
    /// A dealer for `partition` that has dealt nothing yet.
    pub fn new(partition: Partition) -> Dealer {
        Dealer {
            partition,
            dealt: 0,
            in_binary: Default::default(),
        }
    }

    /// Whether the next test, `name` of the binary `binary`, belongs to this shard.
    pub fn keeps(&mut self, binary: &str, name: &str) -> bool {
        let index = match self.partition.kind {
            PartitionKind::Slice => self.dealt,
            PartitionKind::Count => {
                let n = self.in_binary.entry(binary.to_string()).or_default();
                *n += 1;
                *n - 1
            }
            PartitionKind::Hash => Fnv::new()
                .bytes(binary.as_bytes())
                .bytes(&[0])
                .bytes(name.as_bytes())
                .finish(),
        };
        self.dealt += 1;
        index % self.partition.total == self.partition.shard - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite() -> Vec<(&'static str, &'static str)> {
        let mut tests = Vec::new();
        for binary in ["a", "b", "c"] {
            for name in ["t1", "t2", "t3", "t4", "t5"] {
                tests.push((binary, name));
            }
        }
        tests
    }

    fn shard_of(kind: PartitionKind, total: u64) -> Vec<u64> {
        let tests = suite();
        let mut owner = vec![0; tests.len()];
        for shard in 1..=total {
            let p = Partition { kind, shard, total };
            for (i, keep) in p.keeps(tests.iter().copied()).into_iter().enumerate() {
                if keep {
                    assert_eq!(owner[i], 0, "{p}: test {i} is in two shards");
                    owner[i] = shard;
                }
            }
        }
        owner
    }

    #[test]
    fn every_test_is_in_exactly_one_shard() {
        for kind in [
            PartitionKind::Slice,
            PartitionKind::Hash,
            PartitionKind::Count,
        ] {
            for total in 1..=4 {
                let owner = shard_of(kind, total);
                assert!(owner.iter().all(|&s| s >= 1), "{kind:?} {total}: {owner:?}");
            }
        }
    }

    #[test]
    fn slices_deal_across_binaries_and_counts_within_each() {
        // 15 tests over 2 shards: slice deals 8 and 7; count restarts in every binary
        // (5 tests each: 3 + 2), so shard 1 gets 9.
        let slice = shard_of(PartitionKind::Slice, 2);
        assert_eq!(slice.iter().filter(|&&s| s == 1).count(), 8);
        assert_eq!(&slice[4..7], &[1, 2, 1]);
        let count = shard_of(PartitionKind::Count, 2);
        assert_eq!(count.iter().filter(|&&s| s == 1).count(), 9);
        assert_eq!(&count[4..7], &[1, 1, 2]);
    }

    #[test]
    fn a_hashed_test_keeps_its_shard_whatever_else_is_listed() {
        let p = Partition {
            kind: PartitionKind::Hash,
            shard: 1,
            total: 3,
        };
        let all = p.keeps(suite());
        let alone: Vec<bool> = suite().into_iter().map(|t| p.keeps([t])[0]).collect();
        assert_eq!(all, alone);
        // The binary is part of the key: the same name in two binaries is two tests.
        let owners = shard_of(PartitionKind::Hash, 3);
        assert!(owners.chunks(5).any(|c| c != &owners[..5]), "{owners:?}");
    }

    #[test]
    fn partitions_parse_as_nextest_writes_them_and_bad_ones_say_why() {
        for text in ["slice:1/3", "hash:2/2", "count:1/1"] {
            assert_eq!(text.parse::<Partition>().unwrap().to_string(), text);
        }
        for bad in [
            "slice",
            "slice:1",
            "slice:a/2",
            "modulo:1/2",
            "slice:-1/2",
            "slice:1/2/3",
        ] {
            let e = bad.parse::<Partition>().unwrap_err();
            assert!(matches!(e, PartitionError::Syntax(_)), "{bad}: {e}");
            assert!(e.to_string().contains(&format!("`{bad}`")), "{e}");
        }
        for bad in [
            "slice:0/2",
            "hash:3/2",
            "slice:1/0",
            "slice:1/99999999999999999999999",
        ] {
            let e = bad.parse::<Partition>().unwrap_err();
            assert!(matches!(e, PartitionError::Range(_)), "{bad}: {e}");
        }
    }
}
