//! A second OS process for a test: the test binary itself, run again with only one test and an
//! environment that tells it which part to play. A test that kills a server with `kill -9`
//! starts that server this way, so the kill takes a whole process with it, as a crash does.
//!
//! The parent reads the worker's stdout line by line and waits for the markers it prints
//! ([`Worker::next`]). libtest prints `test name ... ` before a test's own output, so markers are
//! found anywhere in a line.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The environment variable that names a worker's role.
pub const ROLE: &str = "IDEM_TEST_WORKER";

/// This process's role, when it was started as a worker.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// A worker process: killed when dropped.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Runs this test binary again with only the test `test` (its full path, as libtest names
    /// it), the role `role` in [`ROLE`], and `env`. Its stderr goes to the parent's.
    ///
    /// # Panics
    ///
    /// When the process cannot be started.
    pub fn spawn(test: &str, role: &str, env: &[(&str, String)]) -> Worker {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut cmd = Command::new(exe);
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the worker process");
        let out = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Worker { child, out }
    }

    /// What follows `marker` on the worker's next line that holds it, trimmed.
    ///
    /// # Panics
    ///
    /// When no such line comes within 60 s, or the worker ends first.
    pub async fn next(&mut self, marker: &str) -> String {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.out.next_line())
                .await
                .unwrap_or_else(|_| panic!("no `{marker}` from the worker within 60 s"))
                .expect("read the worker's output")
                .unwrap_or_else(|| panic!("the worker ended before `{marker}`"));
            if let Some(at) = line.find(marker) {
                return line[at + marker.len()..].trim().to_owned();
            }
        }
    }

    /// The worker's process id.
    ///
    /// # Panics
    ///
    /// When the worker was already reaped.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("a running worker")
    }

    /// `kill -9`: the worker dies at once, with whatever it was doing, and is reaped.
    ///
    /// # Panics
    ///
    /// When the signal cannot be sent, or the worker had exited by itself.
    pub async fn kill_9(&mut self) {
        self.child.start_kill().expect("kill -9 the worker");
        let status = self.child.wait().await.expect("reap the worker");
        assert!(
            !status.success(),
            "the worker had ended by itself: {status}"
        );
    }
}
