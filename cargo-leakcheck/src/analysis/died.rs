//! The frame an extra run died in: the first frame of the program's own code on the stack
//! of the thread a crash or an abort stopped, past the runtime's handler, the C library's
//! `abort` and std's panic and abort machinery, and where the program's own sources called
//! it when that frame is in a dependency's code.

use crate::analysis::classify;
use crate::evidence::died::Died;
use crate::evidence::symbols::{is_runtime_object, CodeSymbols, Frame};
use crate::evidence::test_run::TestEvidence;
use crate::model::{ExtraRuns, ExtraRunsStatus};

/// Adds to a crashed series' reason the frame its run died in, when the runtime saw it.
pub fn name_the_frame<S: CodeSymbols + ?Sized>(
    runs: &mut ExtraRuns,
    evidence: &TestEvidence,
    exe: &str,
    symbols: &mut S,
) {
    let ExtraRunsStatus::Crashed(how) = &runs.status else {
        return;
    };
    let Some(at) = evidence
        .died
        .as_ref()
        .and_then(|d| where_it_died(d, exe, symbols))
    else {
        return;
    };
    runs.status = ExtraRunsStatus::Crashed(format!("{how} {at}"));
    runs.detail = crate::analysis::settling::detail(&runs.status, runs.made);
}

/// `in `f` (src/lib.rs:12)`, and `, called from `g` (tests/t.rs:3)` when `f` is not in the
/// program's own sources and a frame further out is; None when no frame is the program's.
pub fn where_it_died<S: CodeSymbols + ?Sized>(
    died: &Died,
    exe: &str,
    symbols: &mut S,
) -> Option<String> {
    let frames: Vec<Frame> = died
        .frames
        .iter()
        .filter(|k| !is_runtime_object(&k.object))
        .flat_map(|k| symbols.code(&k.object, k.file_offset).to_vec())
        .collect();
    let first = frames
        .iter()
        .position(|f| classify::is_user_frame(f, exe))?;
    let mut words = format!("in {}", place(&frames[first]));
    let own = |f: &Frame| f.file.as_deref().is_some_and(classify::is_own_source);
    if !own(&frames[first]) {
        if let Some(caller) = frames[first + 1..]
            .iter()
            .find(|f| classify::is_user_frame(f, exe) && own(f))
        {
            words.push_str(&format!(", called from {}", place(caller)));
        }
    }
    Some(words)
}

/// `` `f` (src/lib.rs:12) ``: the file by its last two parts, which name it in a report
/// without the checkout's or the registry's directories.
fn place(f: &Frame) -> String {
    let name = format!("`{}`", f.display_name());
    match (&f.file, f.line) {
        (Some(file), Some(line)) => {
            let parts: Vec<&str> = file.rsplit('/').take(2).collect();
            let short: Vec<&str> = parts.into_iter().rev().collect();
            format!("{name} ({}:{line})", short.join("/"))
        }
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::normalized::FrameKey;
    use leakcheck_protocol::died::Death;
    use std::collections::HashMap;
    use std::sync::Arc;

    const EXE: &str = "/t/deps/app-1";

    struct Table(HashMap<u64, Frame>);

    impl CodeSymbols for Table {
        fn code(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
            let f = self.0.get(&file_offset).cloned().unwrap_or(Frame {
                function: None,
                file: None,
                line: None,
                column: None,
                object: object.to_owned(),
                offset: file_offset,
                inlined: false,
            });
            Arc::from(vec![f])
        }
    }

    fn frame(offset: u64, object: &str, function: &str, file: &str, line: u32) -> (u64, Frame) {
        (
            offset,
            Frame {
                function: Some(function.to_owned()),
                file: Some(file.to_owned()),
                line: Some(line),
                column: None,
                object: object.to_owned(),
                offset,
                inlined: false,
            },
        )
    }

    fn died(frames: &[(u64, &str)]) -> Died {
        Died {
            death: Death { signal: 6, run: 1 },
            frames: frames
                .iter()
                .map(|&(offset, object)| FrameKey {
                    object: Arc::from(object),
                    file_offset: offset,
                })
                .collect(),
        }
    }

    const LIBC: &str = "/usr/lib/libc.so.6";
    const RUNTIME: &str = "/t/leakcheck/libleakcheck_runtime.so";

    fn table() -> Table {
        Table(HashMap::from([
            frame(1, RUNTIME, "leakcheck_runtime::died::on_fatal", "src/died.rs", 1),
            frame(2, LIBC, "raise", "raise.c", 1),
            frame(3, LIBC, "abort", "abort.c", 1),
            frame(4, EXE, "std::process::abort", "/rustc/x/library/std/src/process.rs", 1),
            frame(
                5,
                EXE,
                "tree_jitter_drbg_derive_seed",
                "/h/.cargo/registry/src/index.crates.io-1/aws-lc-sys-0.30.0/aws-lc/crypto/rand/jitter.c",
                40,
            ),
            frame(6, EXE, "app::tests::opens_tls", "/w/app/src/lib.rs", 12),
            frame(7, EXE, "app::open_device", "/w/app/src/device.rs", 9),
        ]))
    }

    #[test]
    fn the_frame_is_the_first_of_the_program_past_the_handler_abort_and_std() {
        let d = died(&[
            (1, RUNTIME),
            (2, LIBC),
            (3, LIBC),
            (4, EXE),
            (7, EXE),
            (6, EXE),
        ]);
        assert_eq!(
            where_it_died(&d, EXE, &mut table()).as_deref(),
            Some("in `app::open_device` (src/device.rs:9)")
        );
    }

    #[test]
    fn a_frame_in_a_dependency_s_code_says_where_the_program_called_it_from() {
        let d = died(&[(1, RUNTIME), (3, LIBC), (5, EXE), (6, EXE)]);
        assert_eq!(
            where_it_died(&d, EXE, &mut table()).as_deref(),
            Some("in `tree_jitter_drbg_derive_seed` (rand/jitter.c:40), called from `app::tests::opens_tls` (src/lib.rs:12)")
        );
    }

    #[test]
    fn a_stack_with_none_of_the_program_s_frames_names_none() {
        let d = died(&[(1, RUNTIME), (2, LIBC), (3, LIBC), (4, EXE)]);
        assert_eq!(where_it_died(&d, EXE, &mut table()), None);
    }
}
