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
