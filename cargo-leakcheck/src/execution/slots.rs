//! How many test processes run at once: `jobs` that use a core, plus as many more as there
//! are processes that are only waiting; and a test that uses every core runs alone.
//!
//! A test that sleeps, waits for a timeout or for a deadlock to be noticed holds no core,
//! yet a plain `-j N` pool would keep one of its N places for it. Here a process that has
//! run for a while and used under a tenth of a core since it was last looked at is counted
//! as waiting (unless one of its threads is runnable then: that process is starved, not
//! waiting), and another test may start beside it, up to twice `jobs` processes in all (so
//! a suite of sleeping tests cannot start hundreds at once). A waiting process that wakes
//! up simply runs: for a moment more than `jobs` processes may compute at once, never more
//! than twice as many.
//!
//! A test that keeps every core busy when it can (two threads that spin while they wait for
//! each other, as crossbeam-queue's `drops` does) collapses when anything else runs beside
//! it: 0.1 s alone took 10 s beside one busy loop on a 2-core machine, under nextest as
//! under cargo-leakcheck, because one of its threads spins through whole time slices while
//! the other, which it waits for, is descheduled. So each reading also counts a process's
//! threads that are running or waiting for a core (state `R`): a process with at least three
//! quarters of `jobs` such threads (and two at least) at nine readings out of ten, over three
//! readings or more, wants every core, and counts as all `jobs` while it does (nothing else
//! starts beside it). A pool that computes in bursts and waits in between (rayon's
//! `join_counter_overflow`, 1.5 cores on average) is crowded at about half the readings and
//! keeps sharing the machine: running it alone would leave half a core idle for its whole
//! run. The run remembers which tests wanted every core and collapsed (took more than twice
//! what they took before; see [`crate::execution::history`]), and next time such a test gets
//! a place of its own from the start: once nothing else computes, and nothing else starts
//! while it does.

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
    state: Mutex<SlotsState>,
    freed: Condvar,
}

#[derive(Default)]
struct SlotsState {
    /// Places taken, by ticket number: the process in it, once started.
    taken: Vec<(u64, Option<Watched>)>,
    /// Ticket numbers whose process runs alone (counts as `jobs` while computing).
    alone: Vec<u64>,
    /// Workers waiting (or promised, see [`Slots::reserve_alone`]) to run a process alone:
    /// nobody else starts meanwhile.
    alone_waiting: usize,
    /// Of those, the promised ones no worker has asked for yet.
    alone_reserved: usize,
    next_ticket: u64,
    last_sample: Option<Instant>,
}

struct Watched {
    pid: i32,
    started: Instant,
    /// CPU ticks (user + system, all threads) and when they were read.
    last: Option<(u64, Instant)>,
    idle: bool,
    /// Readings taken, and how many found enough runnable threads to fill every core.
    readings: u32,
    crowded: u32,
    /// It wants every core (crowded at nine readings out of ten, over enough readings).
    hungry: bool,
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
            state: Mutex::new(SlotsState::default()),
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
        self.acquire_until(None, false).expect("no deadline")
    }

    /// Promises `n` places to processes that run alone, before any worker asks for a place:
    /// nothing else starts until each has had its place, so a worker that took a test to run
    /// alone and was descheduled before it asked cannot be overtaken by a long test that
    /// it would then wait for. The caller hands those tests out before any other.
    pub fn reserve_alone(&self, n: usize) {
        let mut state = self.state.lock().expect("slots lock");
        state.alone_waiting += n;
        state.alone_reserved += n;
    }

    /// A place for a process that runs alone: once nothing else computes, and nothing else
    /// starts until it ends or goes idle.
    pub fn acquire_alone(&self) -> Ticket<'_> {
        self.acquire_until(None, true).expect("no deadline")
    }

    /// As [`Slots::acquire`] (or [`Slots::acquire_alone`]), giving up at `deadline`.
    fn acquire_until(&self, deadline: Option<Instant>, alone: bool) -> Option<Ticket<'_>> {
        let mut state = self.state.lock().expect("slots lock");
        if alone {
            match state.alone_reserved {
                0 => state.alone_waiting += 1,
                _ => state.alone_reserved -= 1,
            }
        }
        loop {
            let now = Instant::now();
            if state.last_sample.is_none_or(|t| now - t >= SAMPLE_EVERY) {
                sample(&mut state, now, self.jobs);
            }
            let busy: usize = state
                .taken
                .iter()
                .filter(|(_, w)| w.as_ref().is_none_or(|w| !w.idle))
                .map(|(n, w)| {
                    let hungry = w.as_ref().is_some_and(|w| w.hungry);
                    match hungry || state.alone.contains(n) {
                        true => self.jobs,
                        false => 1,
                    }
                })
                .sum();
            let free = match alone {
                true => busy == 0,
                // One waiting to run alone goes first.
                false => busy < self.jobs && state.alone_waiting == 0,
            };
            if free && state.taken.len() < self.most {
                let number = state.next_ticket;
                state.next_ticket += 1;
                state.taken.push((number, None));
                if alone {
                    state.alone_waiting -= 1;
                    state.alone.push(number);
                }
                return Some(Ticket {
                    slots: self,
                    number,
                });
            }
            if deadline.is_some_and(|d| now >= d) {
                if alone {
                    state.alone_waiting -= 1;
                }
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
                readings: 0,
                crowded: 0,
                hungry: false,
            });
        }
    }

    /// Whether its process wanted every core; None when it was not read often enough to
    /// tell (a short process).
    pub fn wanted_every_core(&self) -> Option<bool> {
        let state = self.slots.state.lock().expect("slots lock");
        let (_, w) = state.taken.iter().find(|(n, _)| *n == self.number)?;
        let w = w.as_ref()?;
        (w.readings >= READINGS_TO_TELL).then_some(w.hungry)
    }
}

/// The fewest readings that tell whether a process wants every core.
const READINGS_TO_TELL: u32 = 3;

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock().expect("slots lock");
        state.taken.retain(|(n, _)| *n != self.number);
        state.alone.retain(|n| *n != self.number);
        drop(state);
        self.slots.freed.notify_all();
    }
}

/// Reads every started process's CPU time and marks those that used under a tenth of a
/// core since the previous reading.
fn sample(state: &mut SlotsState, now: Instant, jobs: usize) {
    state.last_sample = Some(now);
    // Enough runnable threads to fill three quarters of the cores, and two at least: a
    // single-threaded test gains nothing from running alone.
    let filling = (jobs * 3).div_ceil(4).max(2);
    for w in state.taken.iter_mut().filter_map(|(_, w)| w.as_mut()) {
        let runnable = runnable_threads(w.pid);
        if let Some(n) = runnable {
            w.readings += 1;
            w.crowded += u32::from(n >= filling);
            w.hungry = w.readings >= READINGS_TO_TELL && w.crowded * 10 >= w.readings * 9;
        }
        let Some(ticks) = cpu_ticks(w.pid) else {
            continue;
        };
        if let Some((before, at)) = w.last {
            let wall = (now - at).as_secs_f64();
            let cpu = ticks.saturating_sub(before) as f64 / ticks_per_second();
            w.idle = waiting(now - w.started, wall, cpu, runnable);
        }
        w.last = Some((ticks, now));
    }
}

/// Whether a process `age` old that used `cpu` seconds in the last `wall` seconds and has
/// `runnable` threads in state `R` now is waiting rather than computing. Little CPU is not
/// waiting when threads stand in the run queue: the process is starved (more threads than
/// cores, beside other processes: seize's stress tests showed 14 to 32 runnable threads at
/// readings of under a tenth of a core), and starting another beside it starves it more.
fn waiting(age: Duration, wall: f64, cpu: f64, runnable: Option<usize>) -> bool {
    age >= YOUNG && wall > 0.0 && cpu < IDLE_SHARE * wall && runnable == Some(0)
}

/// How many of a process's threads are running or waiting for a core (state `R` in
/// `/proc/PID/task/TID/stat`).
fn runnable_threads(pid: i32) -> Option<usize> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut n = 0;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if thread_state(&stat) == Some('R') {
            n += 1;
        }
    }
    Some(n)
}

/// The state letter of a `stat` line (the field after the parenthesised command name).
fn thread_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
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
        let refused = slots.acquire_until(Some(Instant::now() + YOUNG * 3), false);
        assert!(refused.is_none(), "a second place beside a busy process");
        drop(spinner);
        drop(first);
        assert!(slots.acquire_until(Some(Instant::now()), false).is_some());
    }

    #[test]
    fn the_state_of_a_thread_is_read_past_its_name() {
        let stat = "1234 (my (odd) test) R 1 1234 1234 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 3 0";
        assert_eq!(thread_state(stat), Some('R'));
        assert_eq!(thread_state("garbage"), None);
    }

    #[test]
    fn a_single_busy_thread_does_not_want_every_core() {
        let slots = Slots::new(2);
        let spinner = Child::start("sh", &["-c", "while :; do :; done"]);
        let place = slots.acquire();
        place.started(spinner.0.id() as i32);
        assert_eq!(place.wanted_every_core(), None, "not read yet");
        for _ in 0..READINGS_TO_TELL {
            let mut state = slots.state.lock().unwrap();
            sample(&mut state, Instant::now(), 2);
        }
        assert_eq!(place.wanted_every_core(), Some(false));
        // Nor on one core: one thread fills it, but a single thread never counts.
        for _ in 0..READINGS_TO_TELL {
            let mut state = slots.state.lock().unwrap();
            sample(&mut state, Instant::now(), 1);
        }
        assert_eq!(place.wanted_every_core(), Some(false));
    }

    #[test]
    fn a_process_with_two_busy_threads_wants_both_cores() {
        let _alone = crate::CORES.write().unwrap_or_else(|e| e.into_inner());
        // This test binary itself, with two threads spinning: two runnable threads at
        // every reading.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinners: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let slots = Slots::new(2);
        let place = slots.acquire();
        place.started(std::process::id() as i32);
        for _ in 0..READINGS_TO_TELL {
            let mut state = slots.state.lock().unwrap();
            sample(&mut state, Instant::now(), 2);
        }
        assert_eq!(place.wanted_every_core(), Some(true));
        // It counts as every place: nothing else starts beside it.
        let soon = Some(Instant::now() + SAMPLE_EVERY * 2);
        assert!(slots.acquire_until(soon, false).is_none());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinners.into_iter().for_each(|t| t.join().unwrap());
        // Once it stops filling the cores, at most one reading in ten may be crowded.
        for _ in 0..20 {
            let mut state = slots.state.lock().unwrap();
            sample(&mut state, Instant::now(), 2);
        }
        assert_eq!(place.wanted_every_core(), Some(false));
    }

    #[test]
    fn places_promised_to_processes_that_run_alone_come_first() {
        let slots = Slots::new(2);
        slots.reserve_alone(1);
        // Nothing else starts before the promised place was asked for and given.
        assert!(slots
            .acquire_until(Some(Instant::now() + SAMPLE_EVERY), false)
            .is_none());
        let alone = slots.acquire_alone();
        drop(alone);
        assert!(slots.acquire_until(Some(Instant::now()), false).is_some());
    }

    #[test]
    fn a_process_that_runs_alone_has_every_place_to_itself() {
        let slots = Slots::new(2);
        let spinner = Child::start("sh", &["-c", "while :; do :; done"]);
        let other = slots.acquire();
        other.started(spinner.0.id() as i32);
        // Not while another process computes.
        let soon = Some(Instant::now() + YOUNG * 3);
        assert!(slots.acquire_until(soon, true).is_none());
        drop(other);
        let alone = slots.acquire_alone();
        let spinner2 = Child::start("sh", &["-c", "while :; do :; done"]);
        alone.started(spinner2.0.id() as i32);
        // Nothing starts beside it, though `jobs` is 2.
        let soon = Some(Instant::now() + YOUNG * 3);
        assert!(slots.acquire_until(soon, false).is_none());
        drop(spinner2);
        drop(alone);
        assert!(slots.acquire_until(Some(Instant::now()), false).is_some());
    }

    #[test]
    fn a_starved_process_is_not_waiting() {
        let old = YOUNG * 2;
        assert!(waiting(old, 0.2, 0.0, Some(0)), "asleep");
        assert!(
            !waiting(old, 0.2, 0.01, Some(14)),
            "starved, threads runnable"
        );
        assert!(
            !waiting(old, 0.2, 0.01, None),
            "unreadable threads: not known to wait"
        );
        assert!(!waiting(old, 0.2, 0.1, Some(0)), "computing");
        assert!(!waiting(YOUNG / 2, 0.2, 0.0, Some(0)), "still loading");
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
