//! What the runtime's own tests share.

/// Runs `body` in a process of its own: this test binary again, running only the test
/// `name` (its full path, `module::tests::function`). For tests of what is process-wide
/// (where every allocation goes, the thread registry, the clock), which other tests running
/// beside them in the same process would disturb. Returns in the parent once the child
/// passed, and fails with what the child said otherwise.
pub fn in_own_process(name: &str, body: impl FnOnce()) {
    const CHILD: &str = "LEAKCHECK_RUNTIME_TEST_IN_OWN_PROCESS";
    if std::env::var_os(CHILD).is_some_and(|v| v == name) {
        body();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(CHILD, name)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} in a process of its own:\n{said}"
    );
    assert!(said.contains("1 passed"), "{name} did not run:\n{said}");
}

/// Waits until the process's main thread (libtest's, in a test binary) is blocked in a
/// futex wait: in a process running one test, that is its wait for the test's result, and
/// it allocates nothing until the test is over. For tests that route every allocation of
/// the process, as an extra run does once libtest's `main` has returned.
pub fn wait_until_main_thread_waits() {
    let main = u64::from(std::process::id());
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let mut buf = [0u8; 256];
        let in_futex = matches!(
            crate::sys::task_syscall(main, &mut buf),
            crate::sys::TaskSyscall::Text(line) if line.split(' ').next() == Some("202")
        );
        if in_futex && crate::sys::task_state(main) == Some(b'S') {
            return;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the main thread never waits"
        );
        std::thread::yield_now();
    }
}
