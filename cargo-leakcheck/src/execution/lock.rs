//! Advisory file locks, so that concurrent runs never work on each other's files.
//!
//! Two runs on one target directory would otherwise delete each other's dumps and
//! reports, and two first runs would build the runtime into one cache directory at once.
//! `flock` locks are released by the kernel when the process ends however it ends, so a
//! killed run never leaves a stale lock behind.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[error("failed to {action}: {source}")]
pub struct LockError {
    /// What was being done, reading after "failed to".
    pub action: String,
    /// The underlying error.
    pub source: std::io::Error,
}

fn failed(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> LockError {
    let action = action.into();
    move |source| LockError { action, source }
}

/// An exclusive lock, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

/// Takes the exclusive lock on `path` (created if needed). When another process holds it,
/// says so on stderr, naming `holder`, and waits.
pub fn exclusive(path: &Path, holder: &str) -> Result<FileLock, LockError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(failed(format!("create `{}`", parent.display())))?;
    }
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(failed(format!("open the lock file `{}`", path.display())))?;
    if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
        crate::info!(
            "    Blocking waiting for {holder} to finish (lock `{}`)",
            path.display()
        );
        flock(&file, libc::LOCK_EX)?;
    }
    Ok(FileLock { _file: file })
}

/// `flock` with retries on EINTR; `Ok(false)` when a non-blocking attempt found the lock
/// held.
fn flock(file: &File, op: libc::c_int) -> Result<bool, LockError> {
    loop {
        // SAFETY: flock on a descriptor this File owns.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if op & libc::LOCK_NB != 0 => return Ok(false),
            _ => return Err(failed("lock a file")(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_to_a_second_holder_until_dropped() {
        let dir = std::env::temp_dir().join(format!("leakcheck-lock-{}", std::process::id()));
        let path = dir.join("x.lock");
        let held = exclusive(&path, "a test").unwrap();
        // A second open file description conflicts even within one process.
        let other = File::options().write(true).open(&path).unwrap();
        assert!(!flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        drop(held);
        assert!(flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
