//! D4 with D3: a pool pointed at a port nothing listens on. sqlx's pool retries the refused
//! connection silently and then says only that it timed out; the tier and the engine say the
//! connection was refused and where, label it as the store's failure, and say it once.

use std::time::Duration;

use idem_core::{Code, Fingerprint, Reason, Status};
use idem_dedup::DedupError;
use idem_postgres::{PgEngine, PgTier, SetupError, TieredEngine};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::scope;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().unwrap().port()
}

/// A lazy pool to `port` that gives up waiting for a connection after `acquire`.
fn pool_to(port: u16, acquire: Duration) -> PgPool {
    let opts: PgConnectOptions = format!("postgres://postgres@127.0.0.1:{port}/test")
        .parse()
        .unwrap();
    PgPoolOptions::new()
        .acquire_timeout(acquire)
        .connect_lazy_with(opts)
}

/// An error and its sources, as a report prints them.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

fn assert_refused_at_build(err: &SetupError, port: u16) {
    match err {
        SetupError::Unreachable { address, reason } => {
            assert_eq!(*address, format!("127.0.0.1:{port}"));
            assert_eq!(reason, "connection refused");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert_eq!(
        chain(err),
        format!("cannot connect to PostgreSQL at 127.0.0.1:{port}: connection refused")
    );
}

/// The status of a call that found no connection: the store's, retryable, said once.
fn assert_refused_status(status: &Status, port: u16) {
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert_eq!(
        status.reason(),
        Some(&Reason::UPSTREAM_UNAVAILABLE),
        "{status}"
    );
    assert_eq!(
        status.message(),
        format!(
            "the idempotency store (PostgreSQL) failed: cannot connect to PostgreSQL at \
             127.0.0.1:{port}: connection refused"
        )
    );
    let text = chain(status);
    assert_eq!(text.matches("refused").count(), 1, "{text}");
}

fn action_status(e: &DedupError) -> &Status {
    match e {
        DedupError::Action { status, .. } => status,
        other => panic!("expected the store's status, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_a_closed_port_at_build_says_refused_and_where_once() {
    let port = closed_port();
    // The pool gives up first (its acquire timeout) ...
    let pool = pool_to(port, Duration::from_millis(300));
    let err = PgEngine::<String>::builder(pool.clone())
        .build()
        .await
        .unwrap_err();
    assert_refused_at_build(&err, port);
    let err = PgTier::builder(pool).build().await.unwrap_err();
    assert_refused_at_build(&err, port);
    // ... and migrate, called alone, says the same.
    let err = idem_postgres::migrate(&pool_to(port, Duration::from_millis(300)), "idem")
        .await
        .unwrap_err();
    assert_refused_at_build(&err, port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_a_closed_port_at_the_first_call_says_refused_and_where_once() {
    let port = closed_port();
    let s = scope("d4-closed", 1);
    let fp = Fingerprint::of(b"order 1");
    for acquire in [Duration::from_millis(200), Duration::from_secs(30)] {
        // Either the pool gives up first (PoolTimedOut), or the statement's limit passes
        // first (the pool's default acquire timeout is 30 s).
        let engine = PgEngine::<String>::builder(pool_to(port, acquire))
            .apply_schema(false)
            .query_timeout(Duration::from_millis(500))
            .build()
            .await
            .expect("no statement at build without the schema");
        let e = engine
            .execute(&s, fp, |_tx| async { Ok("ran".to_owned()) })
            .await
            .unwrap_err();
        assert_refused_status(action_status(&e), port);

        let tier = PgTier::builder(pool_to(port, acquire))
            .apply_schema(false)
            .query_timeout(Duration::from_millis(500))
            .build()
            .await
            .expect("no statement at build without the schema");
        let engine = TieredEngine::<String>::builder(tier)
            .build()
            .expect("tiered engine");
        let e = engine
            .execute(&s, fp, |_token| async { Ok::<_, Status>("ran".to_owned()) })
            .await
            .unwrap_err();
        assert_refused_status(action_status(&e), port);
    }
}
