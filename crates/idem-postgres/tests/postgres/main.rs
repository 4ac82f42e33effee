//! The PostgreSQL tier and the transactional mode against real servers (D1–D5, T5, Z3, Z4).
//!
//! Most tests use the machine's running server with a schema of their own; those that stop or
//! restart the server start a cluster of their own (idem-test-support's `postgres` module). Tests that need a second
//! OS process re-run this test binary as a worker (`IDEM_PG_WORKER`).

mod support;

mod d4_conflict;
mod d4_expiry;
mod d4_fencing;
mod d4_kill;
mod d4_queries;
mod d4_restart;
mod d4_sqlstate;
mod d4_transactional;
mod d4_two_processes;
mod d4_unreachable;
mod d4_warm;
mod d6_local;
mod d7_completer;
mod d7_kill;
mod d7_shop;
mod d7_steps;
mod d7_takeover;
mod d8_renewal;
mod e15_help;
mod k7_run;
mod t5_layer;

use std::time::Duration;

use idem_core::{Code, Status};
use idem_dedup::DedupError;
use idem_postgres::{sqlx_status, PgEngine, PgTransaction};
pub use idem_test_support::intents::{fp, scope};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The transactional action of intent `i`: one order row inserted in the run's transaction;
/// the value names who ran it and the token.
pub fn place_order(
    insert: String,
    i: usize,
    by: String,
) -> impl FnOnce(PgTransaction) -> futures::future::BoxFuture<'static, Result<String, Status>>
       + Send
       + 'static {
    move |tx: PgTransaction| {
        Box::pin(async move {
            let token = tx.token().get() as i64;
            let mut conn = tx.lock().await?;
            sqlx::query(&insert)
                .bind(format!("intent-{i}"))
                .bind(&by)
                .bind(token)
                .execute(&mut *conn)
                .await
                .map_err(sqlx_status)?;
            Ok(format!("intent-{i}-by-{by}-token-{token}"))
        })
    }
}

/// Runs intent `i` on `engine`, retrying with the same key while the answer is UNAVAILABLE (a
/// client's retry, R2), at most `tries` times. Returns the value and the retries it took.
pub async fn place_with_retries(
    engine: &PgEngine<String>,
    insert: &str,
    run: &str,
    i: usize,
    by: &str,
    tries: usize,
) -> (String, usize) {
    let mut last = None;
    for attempt in 0..tries {
        match engine
            .execute(
                &scope(run, i),
                fp(i),
                place_order(insert.to_owned(), i, by.to_owned()),
            )
            .await
        {
            Ok(out) => return (out.into_value(), attempt),
            Err(e) if e.code() == Code::Unavailable => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(20 * (attempt as u64 + 1))).await;
            }
            Err(e) => panic!("intent {i}: {e}"),
        }
    }
    panic!("intent {i}: still unavailable after {tries} tries: {last:?}");
}

/// Whether `e` is the error of a conflict (K4): FAILED_PRECONDITION.
pub fn is_conflict(e: &DedupError) -> bool {
    e.code() == Code::FailedPrecondition
}

/// A worker process: this test binary, re-run with only `test` and `IDEM_PG_WORKER=role`.
pub fn worker(test: &str, role: &str, env: &[(&str, String)]) -> tokio::process::Command {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("IDEM_PG_WORKER", role)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// This process's worker role, if it is one.
pub fn worker_role() -> Option<String> {
    std::env::var("IDEM_PG_WORKER").ok()
}

/// Reads a worker's stdout until `n` lines contain `marker`.
pub async fn wait_for_lines(
    out: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    marker: &str,
    n: usize,
) {
    let mut seen = 0;
    while seen < n {
        let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
            .await
            .unwrap_or_else(|_| panic!("no `{marker}` from the worker within 60 s"))
            .expect("read the worker's output")
            .unwrap_or_else(|| panic!("the worker ended after {seen} of {n} `{marker}` lines"));
        if line.contains(marker) {
            seen += 1;
        }
    }
}

/// The lines of a worker's stdout.
pub fn lines(
    child: &mut tokio::process::Child,
) -> tokio::io::Lines<BufReader<tokio::process::ChildStdout>> {
    BufReader::new(child.stdout.take().expect("piped stdout")).lines()
}

/// libtest prints "test name ... " before a test's own output: the part from `marker` on.
pub fn from_marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|at| &line[at..])
}
