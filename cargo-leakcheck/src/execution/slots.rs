//! How many test processes run at once: `jobs` that use a core, plus as many more as there
//! are processes that are only waiting.
//!
//! A test that sleeps, waits for a timeout or for a deadlock to be noticed holds no core,
//! yet a plain `-j N` pool would keep one of its N places for it. Here a process that has
//! run for a while and used under a tenth of a core since it was last looked at is counted
//! as waiting, and another test may start beside it, up to twice `jobs` processes in all (so
//! a suite of sleeping tests cannot start hundreds at once). A waiting process that wakes
//! up simply runs: for a moment more than `jobs` processes may compute at once, never more
//! than twice as many.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often the processes' CPU time is read while something waits for a place.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// A process younger than this always counts as using a core (it may still be loading).
const YOUNG: Duration = Duration::from_millis(400);

/// Under this share of one core since the last look, a process is waiting, not computing.
const IDLE_SHARE: f64 = 0.1;

/// The places, shared by the worker threads of one pass.
pub struct Slots {
    jobs: usize,
    most: usize,
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Default)]
struct State {
    /// Places taken, by ticket number: the process in it, once started.
    taken: Vec<(u64, Option<Watched>)>,
    next_ticket: u64,
    last_sample: Option<Instant>,
}

struct Watched {
    pid: i32,
    started: Instant,
    /// CPU ticks (user + system, all threads) and when they were read.
    last: Option<(u64, Instant)>,
    idle: bool,
}

/// A place held by one worker: dropped when its process has ended.
pub struct Ticket<'a> {
    slots: &'a Slots,
    number: u64,
}

impl Slots {
    /// Places for `jobs` computing processes (at least one).
    pub fn new(jobs: usize) -> Slots {
        let jobs = jobs.max(1);
        Slots {
            jobs,
            most: jobs * 2,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        }
    }

    /// How many worker threads can hold a place at once.
    pub fn most(&self) -> usize {
        self.most
    }

    /// Waits for a place: fewer than `jobs` processes computing, and fewer than twice
    /// `jobs` in all.
    pub fn acquire(&self) -> Ticket<'_> {
        self.acquire_until(None).expect("no deadline")
    }

    /// As [`Slots::acquire`], giving up at `deadline`.
    fn acquire_until(&self, deadline: Option<Instant>) -> Option<Ticket<'_>> {
        let mut state = self.state.lock().expect("slots lock");
        loop {
            let now = Instant::now();
            if state.last_sample.is_none_or(|t| now - t >= SAMPLE_EVERY) {
                sample(&mut state, now);
            }
            let busy = state
                .taken
                .iter()
                .filter(|(_, w)| w.as_ref().is_none_or(|w| !w.idle))
                .count();
            if busy < self.jobs && state.taken.len() < self.most {
                let number = state.next_ticket;
                state.next_ticket += 1;
                state.taken.push((number, None));
                return Some(Ticket {
                    slots: self,
                    number,
                });
            }
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            // Only a process going idle or ending frees a place; idleness is found by
            // looking again.
            state = self
                .freed
                .wait_timeout(state, SAMPLE_EVERY)
                .expect("slots lock")
                .0;
        }
    }
}

impl Ticket<'_> {
    /// The process this place is used for.
    pub fn started(&self, pid: i32) {
        let mut state = self.slots.state.lock().expect("slots lock");
        if let Some((_, w)) = state.taken.iter_mut().find(|(n, _)| *n == self.number) {
            *w = Some(Watched {
                pid,
                started: Instant::now(),
                last: None,
                idle: false,
            });
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock().expect("slots lock");
        state.taken.retain(|(n, _)| *n != self.number);
        drop(state);
        self.slots.freed.notify_all();
    }
}

/// Reads every started process's CPU time and marks those that used under a tenth of a
/// core since the previous reading.
fn sample(state: &mut State, now: Instant) {
    state.last_sample = Some(now);
    for w in state.taken.iter_mut().filter_map(|(_, w)| w.as_mut()) {
        let Some(ticks) = cpu_ticks(w.pid) else {
            continue;
        };
        if let Some((before, at)) = w.last {
            let wall = (now - at).as_secs_f64();
            let cpu = ticks.saturating_sub(before) as f64 / ticks_per_second();
            w.idle = now - w.started >= YOUNG && wall > 0.0 && cpu < IDLE_SHARE * wall;
        }
        w.last = Some((ticks, now));
    }
}

/// User and system CPU time of a process, all its threads, in clock ticks
/// (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat)
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "1234 (my (odd) test) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 3 0";
        assert_eq!(parse_cpu_ticks(stat), Some(267));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_has_cpu_time() {
        let pid = std::process::id() as i32;
        assert!(cpu_ticks(pid).is_some());
    }

    /// A child process killed and reaped however the test ends.
    struct Child(std::process::Child);

    impl Child {
        fn start(program: &str, args: &[&str]) -> Child {
            Child(
                std::process::Command::new(program)
                    .args(args)
                    .spawn()
                    .expect("the program runs"),
            )
        }
    }

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_computing_process_keeps_its_place() {
        let slots = Slots::new(1);
        let spinner = Child::start("sh", &["-c", "while :; do :; done"]);
        let first = slots.acquire();
        first.started(spinner.0.id() as i32);
        let refused = slots.acquire_until(Some(Instant::now() + YOUNG * 3));
        assert!(refused.is_none(), "a second place beside a busy process");
        drop(spinner);
        drop(first);
        assert!(slots.acquire_until(Some(Instant::now())).is_some());
    }

    #[test]
    fn a_sleeping_process_frees_its_place() {
        let slots = Slots::new(1);
        let sleeper = Child::start("sleep", &["5"]);
        let first = slots.acquire();
        first.started(sleeper.0.id() as i32);
        // The second place is given once the sleeper is seen to wait (after YOUNG and two
        // readings), not before: acquire blocks until then.
        let asked = Instant::now();
        let second = slots.acquire();
        assert!(
            asked.elapsed() >= YOUNG,
            "given before the sleeper was old enough"
        );
        // Two places are all `jobs = 1` can give, whatever the processes do.
        assert_eq!(slots.state.lock().unwrap().taken.len(), slots.most());
        drop(second);
        drop(first);
    }
}
