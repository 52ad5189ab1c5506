//! `cargo leakcheck diff [BASE.heap] NEW.heap`: what grew in a running program between two
//! of its jemalloc heap dumps (or, with one, what is live), by allocation stack, without
//! perl's jeprof, flamegraph.pl or graphviz. Steps: read the dumps, check the program they
//! name against its binary, compute the growth, write the flame graph, pprof profile and
//! JSON, print the largest stacks, and exit 3 when the growth is over `--threshold`.

use crate::analysis::classify;
use crate::analysis::heap_growth::{self, Growth};
use crate::cli::DiffArgs;
use crate::errors::{Error, ExitCode};
use crate::evidence::profile::{HeapProfile, Mapping};
use crate::execution::symbolize::{code_offsets, NoCodeOffsets, Symbolizer};
use crate::model::{human_bytes, FrameReport};
use crate::report::{flamegraph, pprof};
use std::path::{Path, PathBuf};

/// Runs `cargo leakcheck diff`.
pub fn run(args: &DiffArgs) -> Result<ExitCode, Error> {
    let threshold = match &args.threshold {
        Some(t) => Some(
            crate::config::parse_size(t)
                .map_err(|e| Error::Usage(format!("--threshold `{t}`: {e}")))?,
        ),
        None => None,
    };
    let dumps = read_dumps(&args.dumps)?;
    let (base, new) = match dumps.as_slice() {
        [new] => (None, new),
        [base, new] => (Some(base), new),
        _ => unreachable!("clap takes one or two dumps"),
    };
    if let Some(base) = base {
        same_program(base, new)?;
    }
    let rename = check_program(new, args.binary.as_deref())?;
    let mut symbolizer = Symbolizer::new();
    let growth = heap_growth::growth(
        base.map(|b| &b.profile),
        &new.profile,
        rename.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
        &mut symbolizer,
    );
    for w in symbolizer.warnings() {
        crate::info!("    Note {w}");
    }
    let mut written = write_outputs(&args.output_dir, base, new, &growth)?;
    let text = summary(base, new, &growth, args.top);
    let root = std::env::current_dir().unwrap_or_default();
    let page = crate::report::html::Page {
        command: &crate::commands::session::command_line(),
        date: crate::report::html::utc_text(std::time::SystemTime::now()),
        durations: &Default::default(),
    };
    let headline = text.lines().next().unwrap_or_default().trim();
    let html = crate::report::html::render_diff(&growth, headline, &page, &root);
    match std::fs::write(args.output_dir.join(crate::model::PAGE_FILE), html) {
        Ok(()) => written.push(crate::model::PAGE_FILE.to_string()),
        Err(e) => crate::say!("warning: could not write the page: {e}"),
    }
    crate::say!("{text}");
    crate::say!(
        "       Wrote {} to `{}`",
        written.join(", "),
        args.output_dir.display()
    );
    let code = crate::model::growth_exit_code(growth.total.bytes, threshold);
    if let (ExitCode::LeaksFound, Some(limit)) = (code, threshold) {
        crate::say!(
            "error: growth of {} is over the threshold of {}",
            human_bytes(growth.total.bytes),
            human_bytes(limit)
        );
    }
    Ok(code)
}

/// A dump and where it came from.
struct Dump {
    path: PathBuf,
    profile: HeapProfile,
}

/// Reads and unbiases each dump; a file that is not a heap dump is an error naming it.
fn read_dumps(paths: &[PathBuf]) -> Result<Vec<Dump>, Error> {
    paths
        .iter()
        .map(|path| {
            let parsed = crate::evidence::load::heap_profile(path).map_err(|e| Error::Dump {
                path: path.clone(),
                message: e.to_string(),
            })?;
            if parsed.mappings.is_empty() {
                return Err(Error::Dump {
                    path: path.clone(),
                    message: "no MAPPED_LIBRARIES section: the dump is cut short, or not from jemalloc's prof.dump".into(),
                });
            }
            Ok(Dump {
                path: path.clone(),
                profile: parsed.unbiased(),
            })
        })
        .collect()
}

/// Two dumps compare only when one program took both.
fn same_program(base: &Dump, new: &Dump) -> Result<(), Error> {
    let (a, b) = (
        heap_growth::program(&base.profile.mappings),
        heap_growth::program(&new.profile.mappings),
    );
    let strip = |p: Option<&str>| p.map(|p| p.trim_end_matches(" (deleted)").to_string());
    if strip(a) == strip(b) {
        return Ok(());
    }
    Err(Error::Dump {
        path: base.path.clone(),
        message: format!(
            "taken from `{}`, and `{}` from `{}`: the dumps of two programs do not compare",
            a.unwrap_or("an unknown program"),
            new.path.display(),
            b.unwrap_or("an unknown program")
        ),
    })
}

/// The program the dump names, and the binary its frames are to be looked up in when that
/// is another file (`--binary`). The binary must exist and hold the code the dump mapped:
/// each executable mapping of the program must start at the file offset of one of its
/// executable segments, or frames would be named after the wrong functions.
fn check_program(dump: &Dump, binary: Option<&Path>) -> Result<Option<(String, String)>, Error> {
    let Some(program) = heap_growth::program(&dump.profile.mappings) else {
        return Ok(None);
    };
    let program = program.trim_end_matches(" (deleted)").to_string();
    let file = binary.map_or_else(|| PathBuf::from(&program), Path::to_path_buf);
    // The program headers are at the start of the file: its first 64 KiB hold them.
    let data = read_start(&file, 64 << 10).map_err(|e| Error::Dump {
        path: dump.path.clone(),
        message: match binary {
            Some(_) => format!("cannot read the binary `{}`: {e}", file.display()),
            None => format!(
                "the program it was taken from, `{program}`, cannot be read ({e}); pass --binary PATH with a copy of it"
            ),
        },
    })?;
    let mapped: Vec<&Mapping> = (dump.profile.mappings.iter())
        .filter(|m| m.path.trim_end_matches(" (deleted)") == program && m.perms.contains('x'))
        .collect();
    if let Err(why) = matches_mappings(&data, &mapped) {
        return Err(Error::Dump {
            path: dump.path.clone(),
            message: format!(
                "`{}` is not the binary this dump was taken from: {why}",
                file.display()
            ),
        });
    }
    Ok(binary.map(|b| (program.clone(), b.display().to_string())))
}

/// The first `limit` bytes of a file (all of a shorter one).
fn read_start(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut data)?;
    Ok(data)
}

/// Why a binary is not the one a dump was taken from.
#[derive(Debug, thiserror::Error)]
enum NotTheProgram {
    #[error(transparent)]
    Unreadable(#[from] NoCodeOffsets),
    #[error(
        "the dump maps its code from file offset {offset:#x}, and its code segments start at {}",
        starts.iter().map(|o| format!("{o:#x}")).collect::<Vec<_>>().join(", ")
    )]
    CodeElsewhere { offset: u64, starts: Vec<u64> },
}

/// Whether the executable segments of the ELF file `data` are where the dump mapped code.
fn matches_mappings(data: &[u8], mapped: &[&Mapping]) -> Result<(), NotTheProgram> {
    let starts = code_offsets(data)?;
    match mapped.iter().find(|m| !starts.contains(&m.offset)) {
        Some(m) => Err(NotTheProgram::CodeElsewhere {
            offset: m.offset,
            starts,
        }),
        None => Ok(()),
    }
}

/// Writes growth.folded, .svg, .pb.gz and .json; returns their names.
fn write_outputs(
    dir: &Path,
    base: Option<&Dump>,
    new: &Dump,
    growth: &Growth,
) -> Result<Vec<String>, Error> {
    let io = |what: &str, e| Error::io(format!("write `{}`", dir.join(what).display()), e);
    std::fs::create_dir_all(dir).map_err(|e| io("", e))?;
    let lines: Vec<String> = (growth.stacks.iter())
        .map(|s| flamegraph::folded_line(&s.frames, s.bytes))
        .collect();
    let mut folded = lines.join("\n");
    folded.push('\n');
    std::fs::write(dir.join("growth.folded"), folded).map_err(|e| io("growth.folded", e))?;
    let title = match base {
        Some(b) => format!("{} → {}", name(&b.path), name(&new.path)),
        None => name(&new.path),
    };
    let svg = std::fs::File::create(dir.join("growth.svg")).map_err(|e| io("growth.svg", e))?;
    let subtitle = match base {
        Some(_) => "memory the later dump holds beyond the earlier one, by allocation stack",
        None => "memory live at the dump, by allocation stack",
    };
    flamegraph::svg_titled(&title, subtitle, &lines, std::io::BufWriter::new(svg))
        .map_err(|e| io("growth.svg", e))?;
    let samples: Vec<pprof::Sample> = (growth.stacks.iter())
        .map(|s| pprof::Sample {
            frames: &s.frames,
            objects: s.objects,
            bytes: s.bytes,
        })
        .collect();
    let program = heap_growth::program(&new.profile.mappings).unwrap_or("program");
    let profile = pprof::encode(
        &samples,
        program.rsplit('/').next().unwrap_or(program),
        &format!("growth {title} (cargo-leakcheck diff)"),
    );
    pprof::write_gz(&dir.join("growth.pb.gz"), &profile).map_err(|e| io("growth.pb.gz", e))?;
    let json = serde_json::json!({
        "base": base.map(|b| b.path.display().to_string()),
        "new": new.path.display().to_string(),
        "sample_period": growth.sample_period,
        "total": growth.total,
        "net": growth.net,
        "stacks": growth.stacks,
    });
    std::fs::write(
        dir.join("growth.json"),
        serde_json::to_string_pretty(&json).expect("serializes"),
    )
    .map_err(|e| io("growth.json", e))?;
    Ok(
        ["growth.svg", "growth.folded", "growth.pb.gz", "growth.json"]
            .map(String::from)
            .to_vec(),
    )
}

fn name(path: &Path) -> String {
    path.display().to_string()
}

/// The terminal summary: the total and the largest stacks, each from the program's own
/// code (the first frame whose file is neither std's nor a dependency's).
fn summary(base: Option<&Dump>, new: &Dump, growth: &Growth, top: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let estimate = match growth.sample_period {
        1 => String::new(),
        p => format!(" (sampled, 1 in {} on average: estimates)", human_bytes(p)),
    };
    let _ = match base {
        Some(b) => writeln!(
            s,
            "      Growth `{}` → `{}`: +{} in {} objects grew (net {}{}){estimate}",
            b.path.display(),
            new.path.display(),
            human_bytes(growth.total.bytes),
            growth.total.objects,
            if growth.net.bytes < 0 { "-" } else { "+" },
            human_bytes(growth.net.bytes.unsigned_abs())
        ),
        None => writeln!(
            s,
            "        Live `{}`: {} in {} objects{estimate}",
            new.path.display(),
            human_bytes(growth.total.bytes),
            growth.total.objects
        ),
    };
    for st in growth.stacks.iter().take(top) {
        let _ = writeln!(
            s,
            "      {:>10} in {} objects",
            format!("+{}", human_bytes(st.bytes)),
            st.objects
        );
        for (i, f) in own_code(&st.frames).iter().take(4).enumerate() {
            let lead = if i == 0 { "at" } else { "  " };
            let _ = writeln!(s, "             {lead} {}", frame_text(f));
        }
    }
    if growth.stacks.len() > top {
        let _ = writeln!(
            s,
            "      … and {} more stacks (growth.json)",
            growth.stacks.len() - top
        );
    }
    s.trim_end().to_string()
}

/// The frames from the first one in the program's own code on (all when none is).
fn own_code(frames: &[FrameReport]) -> &[FrameReport] {
    let own = |f: &FrameReport| f.file.as_deref().is_some_and(classify::is_own_source);
    match frames.iter().position(own) {
        Some(i) => &frames[i..],
        None => frames,
    }
}

fn frame_text(f: &FrameReport) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{} ({file}:{line})", f.function),
        (Some(file), None) => format!("{} ({file})", f.function),
        _ => f.function.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(offset: u64) -> Mapping {
        Mapping {
            start: 0x5555_0000,
            end: 0x5556_0000,
            perms: "r-xp".into(),
            offset,
            path: "/p".into(),
        }
    }

    #[test]
    fn a_binary_matches_a_dump_when_its_code_is_where_the_dump_mapped_code() {
        // This very test binary.
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let at = code_offsets(&data).unwrap()[0];
        assert!(matches_mappings(&data, &[&mapping(at)]).is_ok());
        let wrong = matches_mappings(&data, &[&mapping(at + 0x1000_0000)]).unwrap_err();
        let text = wrong.to_string();
        assert!(text.contains("code segments start at"), "{text}");
        let not_elf = matches_mappings(b"not elf", &[]).unwrap_err().to_string();
        assert!(not_elf.contains("not an ELF"), "{not_elf}");
    }

    #[test]
    fn the_summary_starts_each_stack_at_the_programs_own_code() {
        let frame = FrameReport::at;
        let frames = vec![
            frame(
                "alloc::vec::from_elem",
                "/rustc/abc/library/alloc/src/vec/mod.rs",
                9,
            ),
            frame("service::remember_session", "/srv/src/main.rs", 50),
            frame("service::main", "/srv/src/main.rs", 70),
        ];
        assert_eq!(own_code(&frames)[0].function, "service::remember_session");
        assert_eq!(
            frame_text(&frames[1]),
            "service::remember_session (/srv/src/main.rs:50)"
        );
    }
}
