//! The exit record: what the runtime writes, one entry per line, to the file named by
//! [`crate::env::RECORD`], as the test's own run ends and as each extra run goes. A line the
//! process did not live to finish is simply absent, so a record cut short by a crash still
//! says how far it got.
//!
//! ```text
//! arena <n>                                   counting mode: the main thread's arena (-1: none)
//! allocator malloc|own                        counting mode, a program with its own global
//!                                             allocator: whether it reaches this runtime's
//!                                             malloc (`own`: the counts see none of its
//!                                             allocations and prove nothing)
//! first <status> <objects> <bytes> <threads>  at exit of the test's own run (twice when a
//!                                             drain follows: before and after it; the
//!                                             last one counts)
//! cost <cpu-ms> <wall-ms>                     what the test's own run cost
//! run <k> start
//! run <k> ok <objects> <bytes> <threads> <settled>
//! run <k> failed <message>                    the entry returned an error
//! run <k> timeout
//! grace <waited-ms> <threads> <objects> <bytes>  once, after the last extra run
//! held <k> <objects> <bytes>                  counting mode: what the arenas of extra runs
//!                                             1..=k held together right after run k
//! left <k> <objects> <bytes>                  counting mode: what run k left behind
//! draining <k> <kind>                         after run k, as the drain of one kind of
//!                                             reclaimer starts (a deferred destructor that
//!                                             panics ends the process there)
//! drained <k> <objects> <bytes> <kept-objects> <kept-bytes> <kind>
//!                                             after run k (0: the test's own), before it
//!                                             was measured: what draining that kind freed,
//!                                             and what the drains themselves hold so far
//!                                             (counting mode)
//! len <k>|grace <index> <reading>            the length of collection `index` of the
//!                                             table (see [`crate::collections`]) after run
//!                                             k (0: the test's own), or after the grace;
//!                                             written when it differs from the reading
//!                                             before (the first time: from `ABSENT`)
//! end <why>                                   see [`End`]
//! ```
//!
//! `<kind>` is a [`Reclaimer`]'s name; a `draining` or `drained` line without one, as they
//! were written before there was more than one kind, is [`Reclaimer::UNNAMED`]'s.

use crate::drain::Reclaimer;
use crate::words::{nums, parse_num, put_num, put_text, words, Sink};

/// Live objects and their bytes (exact in counting mode, 0 otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counts {
    /// Objects still allocated.
    pub objects: i64,
    /// Their bytes (jemalloc size classes).
    pub bytes: i64,
}

/// Why the runtime stopped making extra runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// The test's own run failed; nothing to run again.
    TestFailed,
    /// The test called `exit` from its own thread: running it again would call `exit` inside
    /// `exit`.
    ExitedEarly,
    /// Counting mode: the own run left nothing allocated.
    NothingRetained,
    /// No entry point was passed.
    NoEntry,
    /// The executable image could not be found in the process.
    NoImage,
    /// The entry point is not code of the running executable.
    NotCode,
    /// The running executable is not the one the entry point was found in.
    BuildId,
    /// jemalloc refused an arena for an extra run.
    NoArena,
    /// No thread could be started for an extra run.
    SpawnFailed,
    /// An extra run returned an error (its `run <k> failed` line has the message).
    Failed,
    /// An extra run outlived its deadline.
    Timeout,
    /// Counting mode: the series settled (a run left nothing behind, or added nothing).
    Settled,
    /// Counting mode: the last extra run was made and the series did not settle.
    Kept,
    /// Counting mode: the series stopped early, unsettled: every run left threads of its
    /// own running and raised the live total (see `settling::Series::leaves_threads`).
    ThreadsLeft,
    /// Stacks mode: every extra run asked for was made.
    Done,
    /// Counting mode: the program's own global allocator does not reach this runtime's
    /// `malloc` (or could not be asked), so counts prove nothing and no run is made.
    OwnAllocator,
}

impl End {
    /// Every reason, for the tests that check both sides agree.
    pub const ALL: [End; 16] = [
        End::TestFailed,
        End::ExitedEarly,
        End::NothingRetained,
        End::NoEntry,
        End::NoImage,
        End::NotCode,
        End::BuildId,
        End::NoArena,
        End::SpawnFailed,
        End::Failed,
        End::Timeout,
        End::Settled,
        End::Kept,
        End::ThreadsLeft,
        End::Done,
        End::OwnAllocator,
    ];

    /// The word the record (and `metrics.json`) spells it with.
    pub const fn word(self) -> &'static str {
        match self {
            End::TestFailed => "test-failed",
            End::ExitedEarly => "exited-early",
            End::NothingRetained => "nothing-retained",
            End::NoEntry => "no-entry",
            End::NoImage => "no-image",
            End::NotCode => "not-code",
            End::BuildId => "build-id",
            End::NoArena => "no-arena",
            End::SpawnFailed => "spawn-failed",
            End::Failed => "failed",
            End::Timeout => "timeout",
            End::Settled => "settled",
            End::Kept => "kept",
            End::ThreadsLeft => "threads-left",
            End::Done => "done",
            End::OwnAllocator => "own-allocator",
        }
    }

    /// The reason a word names, if any.
    pub fn from_word(word: &str) -> Option<End> {
        End::ALL.into_iter().find(|e| e.word() == word)
    }
}

impl core::fmt::Display for End {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.word())
    }
}

/// One line of the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// Counting mode: the main thread's own arena, -1 when binding it failed (then the counts
    /// prove nothing).
    Arena(i64),
    /// Counting mode, a program with a global allocator of its own: whether allocations
    /// through it reach this runtime's `malloc` (false: the counts prove nothing).
    Allocator { reaches_malloc: bool },
    /// When the exit handler ran: the status the process was exiting with, what was live
    /// off the main thread's arena, and the process's threads.
    First {
        status: i64,
        live: Counts,
        threads: i64,
    },
    /// What the test's own run cost.
    Cost { cpu_ms: i64, wall_ms: i64 },
    /// Extra run `run` (from 1) started.
    RunStart { run: u32 },
    /// Extra run `run` returned normally; `settled`: its threads were gone in time.
    RunOk {
        run: u32,
        live: Counts,
        threads: i64,
        settled: bool,
    },
    /// Extra run `run` returned an error.
    RunFailed { run: u32, message: &'a str },
    /// Extra run `run` outlived its deadline.
    RunTimeout { run: u32 },
    /// Once after the last extra run: how long the runtime waited for the runs' threads, how
    /// many still ran (-1: unknown), and what was live then.
    Grace {
        waited_ms: i64,
        threads: i64,
        live: Counts,
    },
    /// During the grace, while the runtime waits on for threads of the runs asleep until a
    /// deadline of their own: at most how much longer, written every few seconds so that
    /// a process that waits is seen to be making progress.
    Waiting { for_ms: i64 },
    /// Counting mode, right after extra run `run`: what the arenas of extra runs 1 to `run`
    /// held together (see `settling::Series::run`).
    Held { run: u32, live: Counts },
    /// Counting mode, at the end: what extra run `run` left behind.
    Left { run: u32, live: Counts },
    /// After run `run` (0: the test's own), before its drain of `kind`: a drain runs the
    /// program's deferred destructors, and one that panics ends the process there, which
    /// this line tells from a panic of the run itself.
    Draining { run: u32, kind: Reclaimer },
    /// After run `run` (0: the test's own) and before it was measured: what draining the
    /// program's collectors of `kind` freed, and (counting mode) what the drains' own arena
    /// holds afterwards, all kinds' drains so far together (their threads' registrations,
    /// and anything a deferred function allocated while a drain ran it).
    Drained {
        run: u32,
        kind: Reclaimer,
        freed: Counts,
        kept: Counts,
    },
    /// The reading of collection `index` of the table after run `run` (0: the test's own;
    /// `None`: after the grace), when it differs from the one before.
    Length {
        run: Option<u32>,
        index: u32,
        reading: i64,
    },
    /// Why the series stopped; the record's last line.
    End(End),
}

const ARENA: &str = "arena";
const ALLOCATOR: &str = "allocator";
const MALLOC: &str = "malloc";
const OWN: &str = "own";
const FIRST: &str = "first";
const COST: &str = "cost";
const RUN: &str = "run";
const START: &str = "start";
const OK: &str = "ok";
const FAILED: &str = "failed";
const TIMEOUT: &str = "timeout";
const GRACE: &str = "grace";
const LEFT: &str = "left";
const HELD: &str = "held";
const DRAINING: &str = "draining";
const WAITING: &str = "waiting";
const DRAINED: &str = "drained";
const END: &str = "end";
const LEN: &str = "len";
const AFTER_GRACE: &str = "grace";

impl<'a> Entry<'a> {
    /// Writes the entry as one line, without the line break.
    pub fn encode(&self, out: &mut impl Sink) {
        match *self {
            Entry::Arena(n) => head_and_nums(out, ARENA, &[n]),
            Entry::Allocator { reaches_malloc } => {
                head_and_word(out, ALLOCATOR, if reaches_malloc { MALLOC } else { OWN });
            }
            Entry::First {
                status,
                live,
                threads,
            } => head_and_nums(out, FIRST, &[status, live.objects, live.bytes, threads]),
            Entry::Cost { cpu_ms, wall_ms } => head_and_nums(out, COST, &[cpu_ms, wall_ms]),
            Entry::RunStart { run } => run_head(out, run, START),
            Entry::RunOk {
                run,
                live,
                threads,
                settled,
            } => {
                run_head(out, run, OK);
                put_nums(
                    out,
                    &[live.objects, live.bytes, threads, i64::from(settled)],
                );
            }
            Entry::RunFailed { run, message } => {
                run_head(out, run, FAILED);
                put_text(out, message);
            }
            Entry::RunTimeout { run } => run_head(out, run, TIMEOUT),
            Entry::Grace {
                waited_ms,
                threads,
                live,
            } => head_and_nums(out, GRACE, &[waited_ms, threads, live.objects, live.bytes]),
            Entry::Held { run, live } => {
                head_and_nums(out, HELD, &[i64::from(run), live.objects, live.bytes]);
            }
            Entry::Left { run, live } => {
                head_and_nums(out, LEFT, &[i64::from(run), live.objects, live.bytes]);
            }
            Entry::Draining { run, kind } => {
                head_and_nums(out, DRAINING, &[i64::from(run)]);
                put_word(out, kind.name());
            }
            Entry::Waiting { for_ms } => head_and_nums(out, WAITING, &[for_ms]),
            Entry::Drained {
                run,
                kind,
                freed,
                kept,
            } => {
                let n = [
                    i64::from(run),
                    freed.objects,
                    freed.bytes,
                    kept.objects,
                    kept.bytes,
                ];
                head_and_nums(out, DRAINED, &n);
                put_word(out, kind.name());
            }
            Entry::Length {
                run,
                index,
                reading,
            } => encode_length(out, run, index, reading),
            Entry::End(why) => head_and_word(out, END, why.word()),
        }
    }

    /// Reads one line; `None` for a line that is not a complete entry (unknown, cut short or
    /// malformed), which the reader skips.
    pub fn decode(line: &'a str) -> Option<Entry<'a>> {
        let mut w = words(line.as_bytes());
        let entry = match next_word(&mut w)? {
            ARENA => Entry::Arena(nums::<1>(&mut w)?[0]),
            ALLOCATOR => Entry::Allocator {
                reaches_malloc: match next_word(&mut w)? {
                    MALLOC => true,
                    OWN => false,
                    _ => return None,
                },
            },
            FIRST => {
                let [status, objects, bytes, threads] = nums(&mut w)?;
                Entry::First {
                    status,
                    live: Counts { objects, bytes },
                    threads,
                }
            }
            COST => {
                let [cpu_ms, wall_ms] = nums(&mut w)?;
                Entry::Cost { cpu_ms, wall_ms }
            }
            RUN => decode_run(line, &mut w)?,
            GRACE => {
                let [waited_ms, threads, objects, bytes] = nums(&mut w)?;
                Entry::Grace {
                    waited_ms,
                    threads,
                    live: Counts { objects, bytes },
                }
            }
            HELD => {
                let [run, objects, bytes] = nums(&mut w)?;
                Entry::Held {
                    run: u32::try_from(run).ok()?,
                    live: Counts { objects, bytes },
                }
            }
            LEFT => {
                let [run, objects, bytes] = nums(&mut w)?;
                Entry::Left {
                    run: u32::try_from(run).ok()?,
                    live: Counts { objects, bytes },
                }
            }
            DRAINING => {
                let [run] = nums(&mut w)?;
                Entry::Draining {
                    run: u32::try_from(run).ok()?,
                    kind: decode_kind(&mut w)?,
                }
            }
            WAITING => {
                let [for_ms] = nums(&mut w)?;
                Entry::Waiting { for_ms }
            }
            DRAINED => decode_drained(&mut w)?,
            END => Entry::End(End::from_word(next_word(&mut w)?)?),
            LEN => decode_length(&mut w)?,
            _ => return None,
        };
        Some(entry)
    }
}

/// The `run <k> …` entries, from the words after `run`; `line` is the whole line, whose rest
/// after `failed` is the message.
fn decode_run<'a>(line: &'a str, w: &mut impl Iterator<Item = &'a [u8]>) -> Option<Entry<'a>> {
    let run = u32::try_from(parse_num(w.next()?)?).ok()?;
    Some(match next_word(w)? {
        START => Entry::RunStart { run },
        OK => {
            let [objects, bytes, threads, settled] = nums(w)?;
            Entry::RunOk {
                run,
                live: Counts { objects, bytes },
                threads,
                settled: settled == 1,
            }
        }
        FAILED => {
            // The message is the rest of the line, spaces and all.
            let at = line.find(FAILED)? + FAILED.len();
            Entry::RunFailed {
                run,
                message: line[at..].trim(),
            }
        }
        TIMEOUT => Entry::RunTimeout { run },
        _ => return None,
    })
}

/// The `drained` entry, from the words after `drained`.
fn decode_drained<'a>(w: &mut impl Iterator<Item = &'a [u8]>) -> Option<Entry<'a>> {
    let [run, objects, bytes, kept_objects, kept_bytes] = nums(w)?;
    Some(Entry::Drained {
        run: u32::try_from(run).ok()?,
        kind: decode_kind(w)?,
        freed: Counts { objects, bytes },
        kept: Counts {
            objects: kept_objects,
            bytes: kept_bytes,
        },
    })
}

/// The kind a drain line ends with: [`Reclaimer::UNNAMED`] when it names none (a line
/// written before there was more than one kind); `None` for one this build does not know.
fn decode_kind<'a>(w: &mut impl Iterator<Item = &'a [u8]>) -> Option<Reclaimer> {
    match w.next() {
        None => Some(Reclaimer::UNNAMED),
        Some(name) => Reclaimer::from_name(core::str::from_utf8(name).ok()?),
    }
}

/// The `len` entry, from the words after `len`.
fn decode_length<'a>(w: &mut impl Iterator<Item = &'a [u8]>) -> Option<Entry<'a>> {
    let run = match w.next()? {
        b"grace" => None,
        k => Some(u32::try_from(parse_num(k)?).ok()?),
    };
    let [index, reading] = nums(w)?;
    Some(Entry::Length {
        run,
        index: u32::try_from(index).ok()?,
        reading,
    })
}

/// `len <k>|grace <index> <reading>`.
fn encode_length(out: &mut impl Sink, run: Option<u32>, index: u32, reading: i64) {
    out.put(LEN);
    match run {
        Some(k) => put_num(out, i64::from(k)),
        None => {
            out.put(" ");
            out.put(AFTER_GRACE);
        }
    }
    put_nums(out, &[i64::from(index), reading]);
}

/// `<head> <n>…`.
fn head_and_nums(out: &mut impl Sink, head: &str, nums: &[i64]) {
    out.put(head);
    put_nums(out, nums);
}

/// `<head> <word>`.
fn head_and_word(out: &mut impl Sink, head: &str, word: &str) {
    out.put(head);
    out.put(" ");
    out.put(word);
}

/// ` <word>`.
fn put_word(out: &mut impl Sink, word: &str) {
    out.put(" ");
    out.put(word);
}

/// ` <n>` for each of `nums`.
fn put_nums(out: &mut impl Sink, nums: &[i64]) {
    for &n in nums {
        put_num(out, n);
    }
}

crate::words::display_by_encode!(Entry<'_>);

fn next_word<'a>(words: &mut impl Iterator<Item = &'a [u8]>) -> Option<&'a str> {
    core::str::from_utf8(words.next()?).ok()
}

fn run_head(out: &mut impl Sink, run: u32, what: &str) {
    out.put(RUN);
    put_num(out, i64::from(run));
    out.put(" ");
    out.put(what);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::{String, ToString};

    fn every_entry() -> [Entry<'static>; 18] {
        let live = Counts {
            objects: 3,
            bytes: -48,
        };
        [
            Entry::Arena(-1),
            Entry::Allocator {
                reaches_malloc: true,
            },
            Entry::Allocator {
                reaches_malloc: false,
            },
            Entry::First {
                status: 101,
                live,
                threads: 17,
            },
            Entry::Cost {
                cpu_ms: 1200,
                wall_ms: 0,
            },
            Entry::RunStart { run: 1 },
            Entry::RunOk {
                run: 2,
                live,
                threads: 4,
                settled: true,
            },
            Entry::RunFailed {
                run: 3,
                message: "Error: \"no\" at line 3",
            },
            Entry::RunTimeout { run: 256 },
            Entry::Grace {
                waited_ms: 250,
                threads: -1,
                live,
            },
            Entry::Held { run: 6, live },
            Entry::Left { run: 7, live },
            Entry::Draining {
                run: 0,
                kind: Reclaimer::CrossbeamEpoch,
            },
            Entry::Waiting { for_ms: 28_500 },
            Entry::Drained {
                run: 0,
                kind: Reclaimer::CrossbeamEpoch,
                freed: live,
                kept: Counts {
                    objects: 2,
                    bytes: 4096,
                },
            },
            Entry::Length {
                run: Some(3),
                index: 12,
                reading: 7,
            },
            Entry::Length {
                run: None,
                index: 0,
                reading: -2,
            },
            Entry::End(End::Kept),
        ]
    }

    #[test]
    fn every_entry_round_trips() {
        for e in every_entry() {
            let line = e.to_string();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(Entry::decode(&line), Some(e), "{line}");
        }
    }

    #[test]
    fn every_reason_round_trips_and_words_are_distinct() {
        for (i, e) in End::ALL.into_iter().enumerate() {
            assert_eq!(End::from_word(e.word()), Some(e));
            let line = Entry::End(e).to_string();
            assert_eq!(Entry::decode(&line), Some(Entry::End(e)));
            assert!(End::ALL[i + 1..].iter().all(|o| o.word() != e.word()));
        }
    }

    #[test]
    fn the_line_format_is_the_documented_one() {
        let texts: [&str; 18] = [
            "arena -1",
            "allocator malloc",
            "allocator own",
            "first 101 3 -48 17",
            "cost 1200 0",
            "run 1 start",
            "run 2 ok 3 -48 4 1",
            "run 3 failed Error: \"no\" at line 3",
            "run 256 timeout",
            "grace 250 -1 3 -48",
            "held 6 3 -48",
            "left 7 3 -48",
            "draining 0 crossbeam-epoch",
            "waiting 28500",
            "drained 0 3 -48 2 4096 crossbeam-epoch",
            "len 3 12 7",
            "len grace 0 -2",
            "end kept",
        ];
        for (e, text) in every_entry().into_iter().zip(texts) {
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn a_drain_line_without_a_kind_is_the_one_kind_there_was() {
        assert_eq!(
            Entry::decode("draining 2"),
            Some(Entry::Draining {
                run: 2,
                kind: Reclaimer::UNNAMED
            })
        );
        assert_eq!(
            Entry::decode("drained 0 3 -48 2 4096"),
            Some(Entry::Drained {
                run: 0,
                kind: Reclaimer::UNNAMED,
                freed: Counts {
                    objects: 3,
                    bytes: -48
                },
                kept: Counts {
                    objects: 2,
                    bytes: 4096
                },
            })
        );
    }

    #[test]
    fn a_message_with_line_breaks_stays_one_entry() {
        let mut s = String::new();
        Entry::RunFailed {
            run: 1,
            message: "left: 1\nright: 2",
        }
        .encode(&mut s);
        assert_eq!(
            Entry::decode(&s),
            Some(Entry::RunFailed {
                run: 1,
                message: "left: 1 right: 2"
            })
        );
    }

    #[test]
    fn incomplete_or_unknown_lines_are_skipped() {
        for line in [
            "",
            "first 0 1 2",
            "run x ok 1 2 3 1",
            "run 1 ok 1 2 3",
            "run -1 start",
            "run 1 later",
            "end",
            "end sideways",
            "allocator",
            "allocator maybe",
            "left 1 2",
            "drained 1 2 3 4",
            "drained -1 2 3 4 5",
            "drained 1 2 3 4 5 unknown-kind",
            "draining 1 unknown-kind",
            "cost 5 x",
            "shrug 1 2",
            "len 1 2",
            "len -1 2 3",
            "len later 2 3",
        ] {
            assert_eq!(Entry::decode(line), None, "{line:?}");
        }
    }
}
