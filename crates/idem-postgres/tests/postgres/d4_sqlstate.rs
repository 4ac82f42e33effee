//! D4 with R2: which server errors of an action's own statements are retryable. A server that
//! ended the session or the connection answers `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE` through
//! `sqlx_status`, as the same error on idem's own COMMIT does; a refused row does not.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use idem_core::{Code, Reason, Status};
use idem_dedup::{DedupError, OutcomeKind};
use idem_postgres::sqlx_status;
use sqlx::error::{DatabaseError, ErrorKind};

use crate::support::TestDb;
use crate::{fp, place_order, scope};

/// A server error with a given SQLSTATE, as sqlx hands it over.
#[derive(Debug)]
struct ServerError(&'static str);

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the server answered SQLSTATE {}", self.0)
    }
}

impl std::error::Error for ServerError {}

impl DatabaseError for ServerError {
    fn message(&self) -> &str {
        "the server answered with an error"
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.0))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        ErrorKind::Other
    }
}

fn status_of(sqlstate: &'static str) -> Status {
    sqlx_status(sqlx::Error::Database(Box::new(ServerError(sqlstate))))
}

fn assert_retryable(sqlstate: &'static str) {
    let s = status_of(sqlstate);
    assert_eq!(s.code(), Code::Unavailable, "SQLSTATE {sqlstate}: {s}");
    assert_eq!(
        s.reason(),
        Some(&Reason::UPSTREAM_UNAVAILABLE),
        "SQLSTATE {sqlstate}: {s}"
    );
}

/// One test per SQLSTATE that must be retryable.
macro_rules! retryable {
    ($($name:ident: $code:literal,)*) => {$(
        #[test]
        fn $name() {
            assert_retryable($code);
        }
    )*};
}

retryable! {
    d4_sqlstate_25p03_idle_in_transaction_timeout_is_unavailable: "25P03",
    d4_sqlstate_57p05_idle_session_timeout_is_unavailable: "57P05",
    d4_sqlstate_08000_connection_exception_is_unavailable: "08000",
    d4_sqlstate_08003_connection_does_not_exist_is_unavailable: "08003",
    d4_sqlstate_08006_connection_failure_is_unavailable: "08006",
    d4_sqlstate_08001_client_unable_to_connect_is_unavailable: "08001",
    d4_sqlstate_08004_server_rejected_the_connection_is_unavailable: "08004",
    d4_sqlstate_08007_transaction_resolution_unknown_is_unavailable: "08007",
    d4_sqlstate_08p01_protocol_violation_is_unavailable: "08P01",
    d4_sqlstate_57p01_admin_shutdown_is_unavailable: "57P01",
    d4_sqlstate_57p02_crash_shutdown_is_unavailable: "57P02",
    d4_sqlstate_57p03_cannot_connect_now_is_unavailable: "57P03",
    d4_sqlstate_40001_serialization_failure_is_unavailable: "40001",
    d4_sqlstate_40p01_deadlock_is_unavailable: "40P01",
}

#[test]
fn d4_sqlstate_refused_rows_and_bugs_are_not_retryable() {
    assert_eq!(status_of("23505").code(), Code::AlreadyExists);
    assert_eq!(status_of("23514").code(), Code::FailedPrecondition);
    assert_eq!(status_of("23503").code(), Code::FailedPrecondition);
    // syntax_error, division_by_zero, and a class-25 code other than the timeout
    // (read_only_sql_transaction): a retry changes nothing.
    for code in ["42601", "22012", "25006"] {
        let s = status_of(code);
        assert_eq!(s.code(), Code::Internal, "SQLSTATE {code}: {s}");
        assert_eq!(s.reason(), None, "SQLSTATE {code}: {s}");
    }
}

/// A real server ends a transaction left idle past `idle_in_transaction_session_timeout`; the
/// action's next statement, through `sqlx_status`, is retryable, and the retry with the same key
/// runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_sqlstate_25p03_from_a_real_server_is_retryable_and_the_retry_runs_once() {
    let db = TestDb::new("d4idle").await;
    let engine = db.engine(2).await;
    let insert = db.insert_order();
    let s = scope("d4-idle", 1);

    let e = engine
        .execute(&s, fp(1), move |tx| async move {
            {
                let mut conn = tx.lock().await?;
                sqlx::query("SET LOCAL idle_in_transaction_session_timeout = '100ms'")
                    .execute(&mut *conn)
                    .await
                    .map_err(sqlx_status)?;
            }
            // Idle inside the transaction, ten times past the server's limit.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut conn = tx.lock().await?;
            sqlx::query(&insert)
                .bind("intent-1")
                .bind("idle")
                .bind(0_i64)
                .execute(&mut *conn)
                .await
                .map_err(sqlx_status)?;
            Ok("ran after the timeout".to_owned())
        })
        .await
        .unwrap_err();
    let DedupError::Action { status, outcome } = &e else {
        panic!("expected the action's status, got {e:?}");
    };
    assert_eq!(*outcome, OutcomeKind::Executed);
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert_eq!(
        status.reason(),
        Some(&Reason::UPSTREAM_UNAVAILABLE),
        "{status}"
    );
    assert!(
        status.message().contains("25P03") || status.message().contains("idle"),
        "the message names the server's reason: {status}"
    );
    assert_eq!(
        db.orders().await.len(),
        0,
        "the ended transaction wrote nothing"
    );

    // The client's retry with the same key runs once.
    let out = engine
        .execute(&s, fp(1), place_order(db.insert_order(), 1, "retry".into()))
        .await
        .expect("the retry runs");
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert_eq!(db.orders().await, vec![("intent-1".into(), "retry".into())]);
    db.drop_schema().await;
}
