//! Progress on stderr while the test processes run.

use crate::evidence::{ProcessEnd, ProcessResult};
use crate::execution::cargo::TestBinary;
use crate::execution::listing::TestCase;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a test's own run ended, as a progress line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Pass,
    Fail,
    Crash,
    Timeout,
    Error,
    Stopped,
}

impl Status {
    fn of(end: &ProcessEnd) -> Status {
        match end {
            ProcessEnd::Exited(0) => Status::Pass,
            ProcessEnd::Exited(_) => Status::Fail,
            ProcessEnd::Signaled(_) => Status::Crash,
            ProcessEnd::TimedOut => Status::Timeout,
            ProcessEnd::SpawnFailed(_) => Status::Error,
            ProcessEnd::Interrupted => Status::Stopped,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Crash => "CRASH",
            Status::Timeout => "TIMEOUT",
            Status::Error => "ERROR",
            Status::Stopped => "STOPPED",
        }
    }
}

/// Progress on stderr, at a size that scales: a terminal gets one updating status line; a
/// log (CI) gets a progress line at most every few seconds. Either gets a line, as nextest
/// prints it, for each test whose process failed, crashed or timed out (every test with
/// `-v`); `--quiet` gets none of it.
pub struct Progress {
    enabled: bool,
    total: usize,
    label: String,
    terminal: bool,
    last_line: Mutex<Option<Instant>>,
}

/// A log gets a progress line at most this often.
const LOG_PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    pub fn new(total: usize, label: &str, enabled: bool) -> Self {
        Progress {
            enabled: enabled && crate::console::level() > crate::console::Level::Quiet,
            total,
            label: label.to_string(),
            terminal: std::io::stderr().is_terminal(),
            last_line: Mutex::new(None),
        }
    }

    pub fn finished(
        &self,
        n: usize,
        binary: &TestBinary,
        test: &TestCase,
        result: &ProcessResult,
        first: bool,
    ) {
        if !self.enabled {
            return;
        }
        let name = &test.name;
        let verbose = crate::console::level() == crate::console::Level::Verbose;
        // An extra run that panics or crashes after the test passed is the extra run's
        // business (the report says so), not the test's.
        let end = result.first_run_end();
        let status = match (Status::of(&end), test.passes_by_panicking) {
            // A doc-test that should panic passes by failing (see `passes`).
            (Status::Fail, true) => Status::Pass,
            (Status::Pass, true) => Status::Fail,
            (status, _) => status,
        };
        if (first && status != Status::Pass) || verbose {
            let line = format!(
                "{:>12} [{:>8.3}s] {} {name}",
                status.label(),
                result.duration.as_secs_f64(),
                binary.id()
            );
            let detail = match status {
                Status::Pass => String::new(),
                _ => format!(": {}", end.describe()),
            };
            if self.terminal {
                crate::say_raw!("\r\x1b[2K");
            }
            crate::say!("{line}{detail}");
        }
        if self.terminal {
            let line = format!(
                "{:>12} [{n}/{}] {} {name}",
                self.label,
                self.total,
                binary.id()
            );
            crate::say_raw!("\r\x1b[2K{}", cut_to_width(&line, 100));
        } else {
            let mut last = self.last_line.lock().expect("progress lock");
            let due = last.is_none_or(|t| t.elapsed() >= LOG_PROGRESS_EVERY);
            if due || n == self.total {
                *last = Some(Instant::now());
                crate::say!("{:>12} {n}/{} tests done", self.label, self.total);
            }
        }
    }

    pub fn clear(&self) {
        if self.enabled && self.terminal {
            crate::say_raw!("\r\x1b[2K");
        }
    }
}

/// At most `max` bytes of `line`, cut at a character boundary (a test name may hold
/// multi-byte characters).
fn cut_to_width(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_are_cut_between_characters() {
        let name = format!("{}größe", "x".repeat(97));
        // Byte 100 falls inside `ö`.
        assert_eq!(cut_to_width(&name, 100), format!("{}gr", "x".repeat(97)));
        assert_eq!(cut_to_width("short", 100), "short");
    }
}
