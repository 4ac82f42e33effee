//! Stopping and resuming a worker process, as an operating system pause does (`SIGSTOP`,
//! `SIGCONT`): the process keeps its sockets and its state, and does nothing until resumed.

/// Sends `SIGSTOP` to `pid` (with `kill -STOP`): the process stops until [`resume`]d.
///
/// # Panics
///
/// When the signal cannot be sent (no `kill` on the PATH, no such process).
pub async fn stop(pid: u32) {
    send("-STOP", pid).await;
}

/// Sends `SIGCONT` to `pid`: a stopped process goes on where it stopped.
///
/// # Panics
///
/// When the signal cannot be sent.
pub async fn resume(pid: u32) {
    send("-CONT", pid).await;
}

async fn send(signal: &str, pid: u32) {
    let status = tokio::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .await
        .unwrap_or_else(|e| panic!("run `kill {signal} {pid}`: {e}"));
    assert!(status.success(), "`kill {signal} {pid}` failed: {status}");
}
