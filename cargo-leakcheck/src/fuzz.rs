//! Bounded fuzzing (unit tests) of every input the tool parses: heap dumps, configuration files, the
//! runtime's records, and executables (the symbolizer and the entry-point finder). Inputs
//! are mutations of the corpus in `tests/fuzz/corpus/`, drawn from a seeded generator, so
//! a run is reproducible: `LEAKCHECK_FUZZ_SEED` picks another seed and
//! `LEAKCHECK_FUZZ_SCALE` multiplies the number of cases (for a longer run by hand).
//! Every input must give a result or a clear error, never a panic; a failing input is
//! saved under the temporary directory for replay.

use crate::{
    config, evidence::profile, execution::entry, execution::preload, execution::symbolize,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// xorshift64*: small, fast, and the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seed() -> u64 {
    std::env::var("LEAKCHECK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1eac_c0de)
}

fn cases(base: usize) -> usize {
    let scale: usize = std::env::var("LEAKCHECK_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    base * scale
}

fn corpus(kind: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fuzz/corpus")
        .join(kind);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none_or(|e| e != "c"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {kind} is empty");
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Values that break naive number handling.
const NASTY_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999999999",
    "0x",
    "1e400",
    "NaN",
    "",
];

/// One mutation of `input`, chosen at random (several applied in a row, sometimes).
fn mutate(rng: &mut Rng, input: &[u8], donors: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(9) {
            // Flip a bit.
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            // Truncate.
            1 => out.truncate(rng.below(len + 1)),
            // Delete a range.
            2 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                out.drain(a..b);
            }
            // Insert random bytes.
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(at..at, bytes);
            }
            // Replace a run of digits with a nasty number.
            4 => {
                let digits: Vec<usize> = (0..len).filter(|&i| out[i].is_ascii_digit()).collect();
                if let Some(&start) = digits.get(rng.below(digits.len())) {
                    let end = (start..len)
                        .find(|&i| !out[i].is_ascii_digit())
                        .unwrap_or(len);
                    let nasty = NASTY_NUMBERS[rng.below(NASTY_NUMBERS.len())].as_bytes();
                    out.splice(start..end, nasty.iter().copied());
                }
            }
            // Duplicate a line.
            5 => {
                let lines: Vec<&[u8]> = out.split(|&b| b == b'\n').collect();
                if !lines.is_empty() {
                    let i = rng.below(lines.len());
                    let mut again = lines[..=i].join(&b'\n');
                    again.push(b'\n');
                    again.extend(lines[i..].join(&b'\n'));
                    out = again;
                }
            }
            // Splice in part of another corpus file.
            6 => {
                let (_, donor) = &donors[rng.below(donors.len())];
                if !donor.is_empty() {
                    let a = rng.below(donor.len());
                    let b = (a + rng.below(256)).min(donor.len());
                    let at = rng.below(len + 1);
                    out.splice(at..at, donor[a..b].iter().copied());
                }
            }
            // Overwrite 8 bytes with an extreme value (for binary formats).
            7 if len >= 8 => {
                let at = rng.below(len - 7);
                let v = [0u64, u64::MAX, 1 << 63, 0x7fff_ffff, rng.next()][rng.below(5)];
                out[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
    }
    out
}

/// What went wrong with an input, short of a panic.
#[derive(Debug, thiserror::Error)]
enum Problem {
    /// A parser refused it with an empty message.
    #[error("an error without a message")]
    Silent,
    /// The symbolizer gave no frame, not even an unknown one.
    #[error("no frame at all for offset {0:#x}")]
    NoFrame(u64),
    /// The input could not be written for a reader that takes a file.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs `check` on `cases` mutations of each corpus file of `kind`; a panic fails the test
/// after saving the input.
fn fuzz(kind: &str, base_cases: usize, mut check: impl FnMut(&[u8]) -> Result<(), Problem>) {
    let files = corpus(kind);
    let mut rng = Rng(seed() ^ kind.bytes().fold(0, |h, b| h * 31 + u64::from(b)));
    let mut failures = Vec::new();
    // The corpus itself first, as is.
    let mut inputs: Vec<(String, Vec<u8>)> = files.clone();
    for i in 0..cases(base_cases) {
        let (name, data) = &files[i % files.len()];
        inputs.push((format!("{name}#{i}"), mutate(&mut rng, data, &files)));
    }
    for (label, input) in &inputs {
        match catch_unwind(AssertUnwindSafe(|| check(input))) {
            Ok(Ok(())) => {}
            Ok(Err(problem)) => failures.push(format!("{label}: {problem}")),
            Err(_) => failures.push(format!("{label}: panicked")),
        }
        if failures.len() == 1 && failures[0].starts_with(label.as_str()) {
            let dir = std::env::temp_dir().join("leakcheck-fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(label.replace('#', "-")), input).unwrap();
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {kind} inputs went wrong (seed {}; first saved under $TMPDIR/leakcheck-fuzz-failures):\n{}",
        failures.len(),
        inputs.len(),
        seed(),
        failures.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// An error must say something.
fn clear(message: String) -> Result<(), Problem> {
    if message.trim().is_empty() {
        Err(Problem::Silent)
    } else {
        Ok(())
    }
}

/// Fuzzes a parser: `parse` gives `None` for an input it does not take at all, else
/// whether it parsed (and what follows parsing held up) or the error it gave. Both paths
/// must be exercised: the mutations are neither all harmless nor all fatal.
fn fuzz_parser<E: std::fmt::Display>(
    kind: &str,
    cases: usize,
    mut parse: impl FnMut(&[u8]) -> Option<Result<(), E>>,
) {
    let (mut ok, mut refused) = (0, 0);
    fuzz(kind, cases, |input| match parse(input) {
        None => Ok(()),
        Some(Ok(())) => {
            ok += 1;
            Ok(())
        }
        Some(Err(e)) => {
            refused += 1;
            clear(e.to_string())
        }
    });
    assert!(
        ok > 100 && refused > 100,
        "{kind}: {ok} parsed, {refused} refused"
    );
}

#[test]
fn heap_dump_parser_never_panics() {
    fuzz_parser("heap", 3000, |input| {
        // What analysis does next must hold up too.
        Some(profile::parse_heap_profile(input).map(|p| drop(p.unbiased())))
    });
}

#[test]
fn config_parser_never_panics() {
    fuzz_parser("config", 3000, |input| {
        let text = std::str::from_utf8(input).ok()?;
        Some(
            config::parse(text, Path::new("leakcheck.toml"))
                .map(|(c, _)| drop(c.effective("tests::x", &config::SettingsLayer::default()))),
        )
    });
}

#[test]
fn sizes_never_panic() {
    let mut rng = Rng(seed());
    let pieces = [
        "1",
        "0",
        ".",
        "5",
        "KiB",
        "MB",
        "g",
        " ",
        "e",
        "-",
        "18446744073709551615",
        "B",
    ];
    for _ in 0..cases(5000) {
        let text: String = (0..rng.below(6))
            .map(|_| pieces[rng.below(pieces.len())])
            .collect();
        if let Err(e) = config::parse_size(&text) {
            assert!(e.to_string().contains(&format!("`{text}`")), "{text}: {e}");
        }
    }
}

#[test]
fn runtime_record_parser_never_panics() {
    fuzz("record", 3000, |input| {
        let record = preload::Record::parse(&String::from_utf8_lossy(input));
        let _ = record.counts();
        Ok(())
    });
}

#[test]
fn symbolizer_and_entry_finder_survive_damaged_executables() {
    let dir = std::env::temp_dir().join("leakcheck-fuzz-elf");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("exe-{}", std::process::id()));
    let mut rng = Rng(seed() ^ 0xe1f);
    fuzz("elf", 300, |input| {
        // The entry finder reads the executable from memory...
        let found = entry::inspect(input, &["tests::a", "main"], "fuzzed");
        let _ = found.problem;
        let _ = crate::execution::inspect::BinarySymbols::of(input);
        // ...the symbolizer from a file.
        std::fs::write(&path, input)?;
        let mut s = symbolize::Symbolizer::new();
        let object = path.to_str().unwrap();
        for _ in 0..4 {
            let offset = rng.next() % (input.len() as u64 + 64);
            let frames = s.symbolize(object, offset);
            if frames.is_empty() {
                return Err(Problem::NoFrame(offset));
            }
        }
        let _ = s.warnings();
        Ok(())
    });
    let _ = std::fs::remove_file(&path);
}
