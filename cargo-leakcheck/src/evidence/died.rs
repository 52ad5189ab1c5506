//! Where an extra run died: the signal, the run and the frames of the thread it stopped, as
//! the runtime wrote them beside the record (see `leakcheck_protocol::died`), the frames as
//! the files and offsets of their code.

use crate::evidence::normalized::{self, FrameKey};
use crate::evidence::profile;
use leakcheck_protocol::died::{Death, HEADER, SUFFIX};
use leakcheck_protocol::heap_v2::parse_stack;
use std::path::{Path, PathBuf};

/// What the runtime saw of an extra run's death.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Died {
    /// The signal and the run.
    pub death: Death,
    /// The stopped thread's frames, innermost first: the runtime's handler first.
    pub frames: Vec<FrameKey>,
}

/// The file beside a record.
pub fn died_file(record: &Path) -> PathBuf {
    let mut name = record.as_os_str().to_owned();
    name.push(SUFFIX);
    PathBuf::from(name)
}

/// Reads the file beside `record`; None when there is none or it does not read whole.
pub fn read(record: &Path) -> Option<Died> {
    parse(&std::fs::read_to_string(died_file(record)).ok()?)
}

/// Parses the file's text; None when it is not whole.
pub fn parse(text: &str) -> Option<Died> {
    let (body, mappings) = profile::with_mappings(text)?;
    let mut lines = body.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let death = Death::decode(lines.next()?)?;
    let addresses: Vec<u64> = parse_stack(lines.next()?)?.collect::<Result<_, _>>().ok()?;
    let frames = normalized::frame_keys(&mappings, &[addresses])
        .pop()
        .unwrap_or_default();
    Some(Died { death, frames })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_file_gives_the_signal_the_run_and_each_frame_in_its_file() {
        let text = "leakcheck-died/1\nsignal 6 run 1\n@ 0x7f0000001010 0x555500002020 0x1234\n\nMAPPED_LIBRARIES:\n555500000000-555500010000 r-xp 00001000 08:01 42 /t/deps/app-1\n7f0000000000-7f0000100000 r-xp 00000000 08:01 43 /usr/lib/libc.so.6\n";
        let died = parse(text).unwrap();
        assert_eq!(died.death, Death { signal: 6, run: 1 });
        let at: Vec<(&str, u64)> = died
            .frames
            .iter()
            .map(|k| (&*k.object, k.file_offset))
            .collect();
        assert_eq!(
            at,
            [
                ("/usr/lib/libc.so.6", 0x1010),
                ("/t/deps/app-1", 0x3020),
                ("", 0x1234)
            ]
        );
    }

    #[test]
    fn a_file_cut_short_or_of_another_kind_reads_as_nothing() {
        let whole = "leakcheck-died/1\nsignal 11 run 2\n@ 0x1\n\nMAPPED_LIBRARIES:\n";
        assert!(parse(whole).is_some());
        assert_eq!(parse("leakcheck-died/1\nsignal 11 run 2\n@ 0x1\n"), None);
        assert_eq!(
            parse("leakcheck-paths/3\nsignal 11 run 2\n@ 0x1\n\nMAPPED_LIBRARIES:\n"),
            None
        );
        assert_eq!(
            parse("leakcheck-died/1\nsignal 11 run 2\n@ 0xzz\n\nMAPPED_LIBRARIES:\n"),
            None
        );
    }
}
