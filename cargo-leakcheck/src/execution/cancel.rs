//! A process started before it is known to be needed, and called off when it is not.
//!
//! A test whose previous run needed its stacks (a leak, most often) gets its stacks process
//! beside its counting process, not after it (see [`crate::execution::passes`]): a slow
//! test's two processes then take the time of the longer one, not of both. When the
//! counting process settles the test after all (the leak was fixed), or asks for other
//! extra runs than the stacks process was started with, the stacks process is called off:
//! never started if it has not been, killed with its whole process group if it runs, and
//! waited for until it has ended, so that whatever runs next in its place cannot meet it
//! (two processes of one test may want the same port or file). Nothing it produced is read;
//! a verdict is only ever drawn from the processes this run's own evidence asked for.

use std::sync::{Condvar, Mutex};

/// Whether a process is still wanted, and the process group to kill when it is not.
#[derive(Debug, Default)]
pub struct Cancel {
    state: Mutex<CancelState>,
    ended: Condvar,
}

#[derive(Debug, Default)]
struct CancelState {
    called_off: bool,
    /// Between [`Cancel::begin`] and [`Cancel::ending`]: the process is being started or
    /// runs.
    live: bool,
    /// The process group, from its start until its leader is about to be reaped (after
    /// that its id may be another process's).
    group: Option<libc::pid_t>,
}

impl Cancel {
    /// Calls the process off and returns once it is not running: killed with its group if
    /// it ran, never started if it had not.
    pub fn call_off(&self) {
        let mut state = self.lock();
        state.called_off = true;
        if let Some(pgid) = state.group.take() {
            // SAFETY: kill(2) on the process group of a child whose leader is not reaped
            // yet (`ending` clears it, under this lock, before the reap), so the id is
            // still that child's group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        while state.live {
            state = self.ended.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Whether it was called off.
    pub fn called_off(&self) -> bool {
        self.lock().called_off
    }

    /// The process is about to be started: false when it was called off (it must not be).
    /// Every `true` must be followed by [`Cancel::ending`].
    pub fn begin(&self) -> bool {
        let mut state = self.lock();
        state.live = !state.called_off;
        state.live
    }

    /// The process started as the leader of group `pgid`; killed at once if it was called
    /// off meanwhile.
    pub fn started(&self, pgid: libc::pid_t) {
        let mut state = self.lock();
        if state.called_off {
            // SAFETY: as in `call_off`: the child is not reaped yet.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        } else {
            state.group = Some(pgid);
        }
    }

    /// The leader has ended and is about to be reaped, or it never started: its group id
    /// is no longer ours, and a caller of [`Cancel::call_off`] may go on.
    pub fn ending(&self) {
        let mut state = self.lock();
        state.group = None;
        state.live = false;
        self.ended.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::sync::Arc;

    fn sleeper() -> std::process::Child {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30").process_group(0);
        cmd.spawn().expect("sleep starts")
    }

    /// Reaps `child` as the runner does: `ending` first, then the reap.
    fn reap(cancel: &Cancel, mut child: std::process::Child) -> Option<i32> {
        crate::execution::interrupt::wait_ended(child.id() as libc::pid_t);
        cancel.ending();
        child.wait().expect("reaped").signal()
    }

    #[test]
    fn a_running_process_called_off_is_killed_and_waited_for() {
        let cancel = Arc::new(Cancel::default());
        assert!(cancel.begin());
        let child = sleeper();
        cancel.started(child.id() as libc::pid_t);
        let waiter = {
            let cancel = Arc::clone(&cancel);
            std::thread::spawn(move || reap(&cancel, child))
        };
        cancel.call_off();
        // call_off returned: the process has ended (killed, not after its 30 s).
        assert!(!cancel.lock().live);
        assert_eq!(waiter.join().unwrap(), Some(libc::SIGKILL));
        assert!(cancel.called_off());
    }

    #[test]
    fn a_process_called_off_before_it_began_never_starts() {
        let cancel = Cancel::default();
        cancel.call_off();
        assert!(!cancel.begin());
    }

    #[test]
    fn a_process_called_off_while_it_starts_is_killed_as_it_starts() {
        let cancel = Arc::new(Cancel::default());
        assert!(cancel.begin());
        let caller = {
            let cancel = Arc::clone(&cancel);
            std::thread::spawn(move || cancel.call_off())
        };
        while !cancel.called_off() {
            std::thread::yield_now();
        }
        let child = sleeper();
        cancel.started(child.id() as libc::pid_t);
        assert_eq!(reap(&cancel, child), Some(libc::SIGKILL));
        caller.join().unwrap();
    }

    #[test]
    fn once_ended_nothing_is_signalled_and_nothing_waited_for() {
        let cancel = Cancel::default();
        assert!(cancel.begin());
        let child = std::process::Command::new("true")
            .process_group(0)
            .spawn()
            .expect("true starts");
        cancel.started(child.id() as libc::pid_t);
        assert_eq!(reap(&cancel, child), None);
        cancel.call_off();
        assert!(cancel.called_off());
    }
}
