//! The run's scanned processes as a file: what golden cases keep, and what each nextest
//! runner writes of its test's processes, so that a loss of a program is compared with
//! every process of it that the run's tests started, whichever process judged them.

use crate::evidence::normalized::FrameKey;
use crate::evidence::test_run::SuiteProcesses;
use crate::evidence::unreached::Lost;

/// One scanned process of the run, as a case keeps it: the executable, the test that
/// started it, and what it lost, by stack.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SuiteProcessFile {
    pub exe: String,
    pub test: String,
    pub lost: Vec<LostStackFile>,
}

/// One stack a process lost objects at: its frames as `(object, file offset)`, and its
/// `(size, count)` pairs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LostStackFile {
    pub frames: Vec<(String, u64)>,
    pub sizes: Vec<(u64, u64)>,
}

/// One scanned process as a file: the executable, the test that started it, and what it
/// lost, stack by stack in frame order.
pub fn file_of(exe: &str, test: &str, lost: &Lost) -> SuiteProcessFile {
    let mut stacks: Vec<LostStackFile> = (lost.stacks.iter())
        .map(|(frames, sizes)| LostStackFile {
            frames: frames
                .iter()
                .map(|k| (k.object.to_string(), k.file_offset))
                .collect(),
            sizes: sizes.clone(),
        })
        .collect();
    stacks.sort_by(|a, b| a.frames.cmp(&b.frames));
    SuiteProcessFile {
        exe: exe.to_string(),
        test: test.to_string(),
        lost: stacks,
    }
}

/// Every process of `suite`, each named as started by `test`.
pub fn files_of(suite: &SuiteProcesses, test: &str) -> Vec<SuiteProcessFile> {
    (suite.executables())
        .flat_map(|exe| {
            suite
                .of(exe)
                .iter()
                .map(move |p| file_of(exe, test, &p.lost))
        })
        .collect()
}

/// Adds the processes of `files` to `suite`.
pub fn add_files(suite: &mut SuiteProcesses, files: &[SuiteProcessFile]) {
    for p in files {
        let mut lost = Lost::default();
        for stack in &p.lost {
            let frames = (stack.frames.iter())
                .map(|(object, offset)| FrameKey {
                    object: std::sync::Arc::from(object.as_str()),
                    file_offset: *offset,
                })
                .collect();
            lost.stacks.insert(frames, stack.sizes.clone());
        }
        suite.add_process(&p.exe, &p.test, lost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_come_back_from_their_files_as_they_were() {
        let mut lost = Lost::default();
        let frames = vec![
            FrameKey {
                object: "/t/debug/web".into(),
                file_offset: 0x40,
            },
            FrameKey {
                object: "/lib/libc.so.6".into(),
                file_offset: 0x900,
            },
        ];
        lost.stacks.insert(frames.clone(), vec![(32, 3)]);
        let mut suite = SuiteProcesses::default();
        suite.add_process("/t/debug/web", "0 serves", lost.clone());
        suite.add_process("/t/debug/web", "0 serves", Lost::default());
        let files = files_of(&suite, "pkg lib web tests::serves");
        assert_eq!(files.len(), 2);
        assert!(files.iter().all(|f| f.test == "pkg lib web tests::serves"));
        let mut back = SuiteProcesses::default();
        add_files(&mut back, &files);
        let of = back.of("/t/debug/web");
        assert_eq!(of.len(), 2);
        assert_eq!(of[0].lost.of(&frames), [(32, 3)]);
        assert!(of[1].lost.stacks.is_empty());
        assert!(back.of("/t/debug/other").is_empty());
    }
}
