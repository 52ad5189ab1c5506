//! The tests whose verdicts wait for the run's end: each leaked only in processes of
//! programs it started, and whether such a loss is the program's once per process or grows
//! with its work is told by every process of those programs that the run's tests started
//! (see [`crate::analysis::children`]). No runner sees them all; the command that started
//! nextest does, once nextest is done. It runs each such test again, as `test` runs a test,
//! and judges it with the run's processes: the rule and the evidence are `test`'s.

use super::handoff::{processes_dir, TestId};
use crate::commands::session;
use crate::commands::test::{self as test_command, CheckSetup};
use crate::execution::runner::TestFilter;
use crate::judging::suite::SuiteProcessFile;
use crate::model::{count_of, TestReport};
use std::path::{Path, PathBuf};

/// What judging the waiting tests needs from the run.
pub(super) struct Judging<'a> {
    pub session: &'a session::Session,
    pub cli: &'a crate::config::SettingsLayer,
    /// The user's own target runner, program first (empty: none).
    pub wrapper: &'a [String],
    /// The session's directory (the runners' files).
    pub dir: &'a Path,
    pub stacks_for_all: bool,
}

impl Judging<'_> {
    /// Judges each waiting test again and puts its verdict in place of its runner's. A test
    /// that cannot be judged again keeps its runner's verdict, and a note says why.
    pub fn judge(
        &self,
        waiting: Vec<(TestId, PathBuf)>,
        tests: &mut [TestReport],
        notes: &mut Vec<String>,
    ) {
        if waiting.is_empty() {
            return;
        }
        crate::info!(
            "     Judging {} whose processes lost memory, against every process of those programs the run's tests started",
            count_of(waiting.len() as u64, "test", "tests")
        );
        let processes = self.processes();
        for (id, exe) in waiting {
            let label = id.label();
            let others: Vec<SuiteProcessFile> = (processes.iter())
                .filter(|p| p.test != label)
                .cloned()
                .collect();
            match self.again(&id, &exe, &others, notes) {
                Ok(report) => {
                    let same = |t: &&mut TestReport| {
                        (t.package == id.package)
                            && t.kind == id.kind
                            && t.binary == id.binary
                            && t.name == id.name
                    };
                    if let Some(t) = tests.iter_mut().find(same) {
                        *t = report;
                    }
                }
                Err(why) => notes.push(format!(
                    "`{}` could not be judged again with the run's other processes ({why}): its verdict is the one it had alone",
                    id.name
                )),
            }
        }
    }

    /// Every process the runners wrote (each test's last attempt only).
    fn processes(&self) -> Vec<SuiteProcessFile> {
        let Ok(entries) = std::fs::read_dir(processes_dir(self.dir)) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = (entries.flatten())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        // `<stem>~<attempt>.json`: the last attempt of each test.
        let mut last: std::collections::BTreeMap<String, (u32, PathBuf)> = Default::default();
        for path in files {
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            let Some((stem, attempt)) = name.as_deref().and_then(|n| n.rsplit_once('~')) else {
                continue;
            };
            let attempt: u32 = attempt.parse().unwrap_or(0);
            if last.get(stem).is_none_or(|(a, _)| *a <= attempt) {
                last.insert(stem.to_string(), (attempt, path));
            }
        }
        (last.into_values())
            .filter_map(|(_, path)| std::fs::read_to_string(path).ok())
            .filter_map(|text| serde_json::from_str::<Vec<SuiteProcessFile>>(&text).ok())
            .flatten()
            .collect()
    }

    /// Runs test `id` of executable `exe` again and judges it with `others` too.
    fn again(
        &self,
        id: &TestId,
        exe: &Path,
        others: &[SuiteProcessFile],
        notes: &mut Vec<String>,
    ) -> Result<TestReport, String> {
        let filter = TestFilter {
            list_args: vec!["--exact".into(), id.name.clone()],
            include_ignored: true,
            ..TestFilter::default()
        };
        let mut binaries = vec![super::runner::binary(
            &super::runner::memo_dir(self.dir),
            id,
            exe,
        )];
        let setup = CheckSetup {
            ws: &self.session.ws,
            runtime: &self.session.runtime,
            work_dir: &self.session.work_dir,
            config: &self.session.config,
            cli: self.cli,
            jobs: 1,
            filter: &filter,
            wrapper: self.wrapper,
            stacks_for_all: self.stacks_for_all,
            verbose: false,
            progress: false,
            known_layout: None,
            memo: None,
            others,
            history: &self.session.history,
            recorder: &self.session.recorder,
        };
        let checked =
            test_command::check(&mut binaries, &setup, notes).map_err(|e| e.to_string())?;
        (checked.tests.into_iter())
            .find(|t| t.name == id.name)
            .ok_or_else(|| format!("`{}` did not list it", exe.display()))
    }
}
