//! What cargo's target runner does for each doc-test executable rustdoc runs while the tool
//! collects them (`cargo-leakcheck __doctest-runner DIR BINARY ARGS…`): keeps a copy of the
//! executable (rustdoc deletes it as soon as it has run), with the directory and environment
//! rustdoc ran it in, then runs it as rustdoc asked and ends as it did, so that rustdoc's own
//! verdict on every doc-test stays what `cargo test --doc` says.

use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The file beside a kept executable that says how rustdoc ran it.
pub const META: &str = "run.json";
/// The kept executable's name in its directory.
pub const EXECUTABLE: &str = "doctest";

/// How rustdoc ran one doc-test executable, and how that run ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The directory it ran in (its package's).
    pub cwd: PathBuf,
    /// Its arguments (none for one doc-test; a merged executable's are built in).
    pub args: Vec<Vec<u8>>,
    /// Its environment, as rustdoc gave it.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Its exit code, or `None` when a signal ended it.
    pub status: Option<i32>,
    /// When it started, on the monotonic clock (ns): the order of the executables of one
    /// rustdoc running its doc-tests one at a time.
    #[serde(default)]
    pub started: u64,
}

impl Kept {
    /// The environment as the process API takes it.
    pub fn env_os(&self) -> impl Iterator<Item = (OsString, OsString)> + '_ {
        self.env
            .iter()
            .map(|(k, v)| (OsString::from_vec(k.clone()), OsString::from_vec(v.clone())))
    }

    /// Reads the description of the executable kept in `dir`.
    pub fn read(dir: &Path) -> Option<Kept> {
        let text = std::fs::read_to_string(dir.join(META)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Keeps `binary` in a new directory under `dir`, runs it with `args`, writes how it ran and
/// returns the exit code to end with. Whatever fails in the keeping, the doc-test still runs.
pub fn keep_and_run(dir: &Path, binary: &Path, args: &[OsString]) -> i32 {
    let started = monotonic_ns();
    let kept_dir = new_dir(dir);
    let copied = kept_dir.as_deref().and_then(|d| {
        let to = d.join(EXECUTABLE);
        // A link to the file itself (a link to a symbolic link would dangle), or a copy
        // across file systems.
        let from = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
        (std::fs::hard_link(&from, &to).is_ok() || std::fs::copy(&from, &to).is_ok()).then_some(d)
    });
    let status = std::process::Command::new(binary).args(args).status();
    let code = match &status {
        Ok(s) => s
            .code()
            .or_else(|| std::os::unix::process::ExitStatusExt::signal(s).map(|sig| 128 + sig)),
        Err(e) => {
            crate::say!("error: could not run `{}`: {e}", binary.display());
            Some(127)
        }
    };
    if let Some(d) = copied {
        let kept = Kept {
            cwd: std::env::current_dir().unwrap_or_default(),
            args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: std::env::vars_os()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            status: status.ok().and_then(|s| s.code()),
            started,
        };
        let tmp = d.join(format!("{META}.tmp"));
        let written = serde_json::to_string(&kept)
            .map_err(std::io::Error::other)
            .and_then(|text| std::fs::write(&tmp, text))
            .and_then(|()| std::fs::rename(&tmp, d.join(META)));
        if let Err(e) = written {
            crate::say!("warning: cargo-leakcheck could not keep a doc-test: {e}");
        }
    }
    code.unwrap_or(1)
}

/// The monotonic clock, in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// A new directory under `dir`, of its own: named by this process's id, and a number after
/// it when an earlier process of the same id took that name.
fn new_dir(dir: &Path) -> Option<PathBuf> {
    let pid = std::process::id();
    let mut last = None;
    for n in 0..1000 {
        let d = dir.join(format!("p{pid}.{n}"));
        match std::fs::create_dir(&d) {
            Ok(()) => return Some(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    crate::say!(
        "warning: cargo-leakcheck could not keep a doc-test in `{}`: {}",
        dir.display(),
        last.map_or("every name is taken".to_string(), |e| e.to_string())
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_executable_runs_as_asked_and_says_how_it_ended() {
        let dir = std::env::temp_dir().join(format!("leakcheck-keep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let code = keep_and_run(&dir, Path::new("/bin/sh"), &["-c".into(), "exit 3".into()]);
        assert_eq!(code, 3);
        let kept_dir = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let kept = Kept::read(&kept_dir).unwrap();
        assert_eq!(kept.status, Some(3));
        assert!(kept.started > 0 && kept.started <= monotonic_ns());
        assert_eq!(kept.args, vec![b"-c".to_vec(), b"exit 3".to_vec()]);
        assert_eq!(kept.cwd, std::env::current_dir().unwrap());
        assert!(kept.env_os().any(|(k, _)| k == "PATH"));
        assert_eq!(
            std::fs::read(kept_dir.join(EXECUTABLE)).unwrap(),
            std::fs::read("/bin/sh").unwrap()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
