//! The local leader's transactional run: BEGIN (or a warm transaction), claim under the scope's
//! lock, the action, the record, COMMIT — or the stored result, a conflict, or a wait.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use idem_core::{Code, Fingerprint, Reason, Scope, Status};
use idem_dedup::Codec;
use sqlx::{Postgres, Transaction};
use tokio::time::Instant;

use super::Inner;
use crate::codes::claim;
use crate::db::{ms, ms_i32, Failure};
use crate::digest::ScopeDigest;
use crate::transaction::PgTransaction;

/// The value of a record another run committed, carried out of the local engine's run as the
/// source of a status, so that every local caller of that run turns it into a replay (see
/// `PgEngine::settle`).
pub(crate) struct FromRecord<V>(pub(crate) V);

impl<V> fmt::Debug for FromRecord<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FromRecord")
    }
}

impl<V> fmt::Display for FromRecord<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the result was committed by another run")
    }
}

impl<V> std::error::Error for FromRecord<V> {}

/// The status that carries a committed record's value out of the local engine.
pub(crate) fn from_record<V: Send + Sync + 'static>(value: V) -> Status {
    Status::new(Code::Aborted, "replayed from the database").with_source(FromRecord(value))
}

/// The value carried by a [`from_record`] status, if it is one.
pub(crate) fn record_value<V: Clone + Send + Sync + 'static>(status: &Status) -> Option<V> {
    let source = std::error::Error::source(status)?;
    source.downcast_ref::<FromRecord<V>>().map(|r| r.0.clone())
}

/// The local leader's run.
pub(crate) async fn leader<V, C, F, Fut>(
    inner: Arc<Inner<V, C>>,
    scope: Scope,
    fp: Fingerprint,
    action: Option<F>,
) -> Result<V, Status>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
    F: FnOnce(PgTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let Some(action) = action else {
        return Err(Status::new(
            Code::Internal,
            "the action of this call was already taken by another run",
        ));
    };
    let db = &inner.db;
    let cfg = &inner.cfg;
    let d = ScopeDigest::of(&scope);
    let give_up = Instant::now() + cfg.max_wait;
    let mut poll = cfg.poll_first;
    // A warm transaction (see `warm.rs`) saves the BEGIN round trip; after one failed its
    // claim (its connection may have died with a server restart) the run uses fresh ones.
    let mut try_warm = true;
    loop {
        let warm = if try_warm { inner.warm.take() } else { None };
        let from_warm = warm.is_some();
        let tx = match warm {
            Some(tx) => tx,
            None => db
                .query("begin", db.pool.begin())
                .await
                .map_err(|f| db.status(f))?,
        };
        let mut tx = Rollback::new(inner.clone(), tx);
        // Waits for the scope's lock (another transaction of the scope, on any instance) for
        // what is left of max_wait; the lock is then held until this transaction ends.
        let wait = give_up
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let q = sqlx::query_as::<_, (i16, i64, i64, Option<Vec<u8>>)>(&db.sql.tx_claim)
            .bind(d.0)
            .bind(d.lock_key())
            .bind(fp.to_bytes())
            .bind(ms_i32(wait))
            .bind(ms_i32(cfg.lease))
            .fetch_one(tx.conn());
        let (outcome, token, left, result) =
            match db.timed("tx_claim", wait + db.query_timeout, q).await {
                Ok(row) => row,
                Err(f) if f.is_lock_timeout() => return Err(in_flight(cfg.max_wait, cfg.lease)),
                // Nothing ran in a warm transaction but this claim: start again on a fresh one.
                Err(_) if from_warm => {
                    try_warm = false;
                    continue;
                }
                Err(f) => return Err(db.status(f)),
            };
        match outcome {
            claim::CLAIMED => {
                let token =
                    idem_dedup::remote::FencingToken::new(u64::try_from(token).unwrap_or(0));
                return run_claimed(&inner, tx, &d, fp, token, scope, action).await;
            }
            claim::COMPLETED => {
                let value = inner.codec.decode(&result.unwrap_or_default())?;
                return Err(from_record(value));
            }
            claim::CONFLICT => return Err(conflict()),
            claim::HELD => {
                // A remote-tier claim (a PgTier on the same schema) holds the scope: poll.
                drop(tx);
                let now = Instant::now();
                let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
                if now >= give_up {
                    return Err(in_flight(cfg.max_wait, left.max(cfg.poll_first)));
                }
                tokio::time::sleep(poll.min(left + Duration::from_millis(1)).min(give_up - now))
                    .await;
                poll = (poll * 2).min(cfg.poll_max);
            }
            _ => {
                return Err(Status::new(
                    Code::Internal,
                    "unexpected reply from the idem schema's tx_claim function",
                ))
            }
        }
    }
}

/// `FAILED_PRECONDITION` / `IDEMPOTENCY_CONFLICT`: the key was stored with another request.
pub(crate) fn conflict() -> Status {
    Status::new(
        Code::FailedPrecondition,
        "idempotency key reused with a different request: this key was stored with another \
         request body",
    )
    .with_reason(Reason::IDEMPOTENCY_CONFLICT)
}

/// `UNAVAILABLE` / `REQUEST_IN_FLIGHT`: another run still held the scope after `waited`.
pub(crate) fn in_flight(waited: Duration, retry_after: Duration) -> Status {
    Status::new(
        Code::Unavailable,
        format!(
            "another transaction still runs this request after {} ms of waiting",
            waited.as_millis()
        ),
    )
    .with_reason(Reason::REQUEST_IN_FLIGHT)
    .with_retry_after(retry_after)
}

/// Runs the action in the claimed transaction, then writes the record and commits; rolls back
/// after a failure or a panic.
async fn run_claimed<V, C, F, Fut>(
    inner: &Arc<Inner<V, C>>,
    tx: Rollback<V, C>,
    d: &ScopeDigest,
    fp: Fingerprint,
    token: idem_dedup::remote::FencingToken,
    scope: Scope,
    action: F,
) -> Result<V, Status>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
    F: FnOnce(PgTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let db = &inner.db;
    // K7: the action runs as the current run, with this claim's token. (An earlier run that
    // crashed rolled back and left no trace here, so none is seen as a takeover.)
    let run = idem_core::run::Run::new(&scope, Some(token.get()), idem_core::run::RunStart::Fresh);
    let handle = PgTransaction::new(tx.into_inner(), token, scope);
    let result = match std::panic::catch_unwind(AssertUnwindSafe(|| action(handle.clone()))) {
        Ok(fut) => AssertUnwindSafe(run.attach(fut)).catch_unwind().await,
        Err(panic) => Err(panic),
    };
    // The action is over: take the transaction back (after any guard it still holds).
    let taken = tokio::time::timeout(db.query_timeout, handle.take()).await;
    let Ok(Some(tx)) = taken else {
        return Err(Status::new(
            Code::Internal,
            "the action kept its transaction past its end (a TxGuard still held): nothing was \
             committed",
        ));
    };
    let mut tx = Rollback::new(inner.clone(), tx);
    let value = match result {
        Err(panic) => {
            drop(tx);
            std::panic::resume_unwind(panic)
        }
        Ok(Err(status)) => return Err(status),
        Ok(Ok(value)) => value,
    };
    let bytes = inner.codec.encode(&value)?;
    // The record, COMMIT (and an empty BEGIN) in one round trip; see `Sql::tx_finish_sql`.
    let sql = db.sql.tx_finish_sql(
        &d.0,
        &fp.to_bytes(),
        i64::try_from(token.get()).unwrap_or(i64::MAX),
        &inner.cfg.owner.get().to_be_bytes(),
        &bytes,
        ms(inner.cfg.ttl),
    );
    let finish = simple_query(tx.conn(), &sql);
    match db.timed("tx_finish", db.query_timeout, finish).await {
        // Committed: the empty transaction the string began stays open for the next run's
        // claim (or goes back to the pool, rolled back; see `warm.rs`).
        Ok(_) => {
            super::warm::Warm::keep(&inner.warm, tx.into_inner());
            Ok(value)
        }
        // The server refused the record or the COMMIT: the transaction rolled back.
        Err(f) if f.is_error_reply() => Err(not_committed(db.status(f))),
        // No answer: it may or may not have committed.
        Err(f) => Err(unknown_outcome(f)),
    }
}

/// Runs a string of statements as one simple query (a `&str` without arguments goes through
/// the simple-query protocol).
fn simple_query<'c>(
    conn: &'c mut sqlx::PgConnection,
    sql: &'c str,
) -> futures::future::BoxFuture<'c, Result<sqlx::postgres::PgQueryResult, sqlx::Error>> {
    sqlx::Executor::execute(conn, sql)
}

/// The record could not be written: the transaction rolls back, nothing happened.
fn not_committed(status: Status) -> Status {
    Status::new(
        status.code(),
        format!(
            "{}; the transaction was rolled back, nothing was committed: retry with the same key",
            status.message()
        ),
    )
    .with_reason(Reason::UPSTREAM_UNAVAILABLE)
}

/// COMMIT failed or did not answer: the transaction may or may not have committed. Nothing is
/// kept locally, so the retry asks the database, which knows.
fn unknown_outcome(f: Failure) -> Status {
    tracing::warn!(
        error = %f,
        "the outcome of an idempotent transaction's COMMIT is unknown; its retry replays the \
         result if it committed and runs once if it did not"
    );
    Status::new(
        Code::Unavailable,
        format!(
            "the transaction's COMMIT failed or did not answer ({f}): it may or may not have \
             committed; retry with the same key: the retry replays the result if it did, and \
             runs once if it did not"
        ),
    )
    .with_reason(Reason::UNKNOWN_OUTCOME)
}

/// A transaction that counts the ROLLBACK sqlx queues when it is dropped unfinished.
struct Rollback<V, C> {
    inner: Arc<Inner<V, C>>,
    tx: Option<Transaction<'static, Postgres>>,
}

impl<V, C> Rollback<V, C> {
    fn new(inner: Arc<Inner<V, C>>, tx: Transaction<'static, Postgres>) -> Self {
        Rollback {
            inner,
            tx: Some(tx),
        }
    }

    fn conn(&mut self) -> &mut sqlx::PgConnection {
        match self.tx.as_mut() {
            Some(tx) => tx,
            None => unreachable!("the transaction is only taken by into_inner"),
        }
    }

    fn into_inner(mut self) -> Transaction<'static, Postgres> {
        match self.tx.take() {
            Some(tx) => tx,
            None => unreachable!("the transaction is only taken once"),
        }
    }
}

impl<V, C> Drop for Rollback<V, C> {
    fn drop(&mut self) {
        if self.tx.take().is_some() {
            // sqlx queues the ROLLBACK; it goes out with the connection's next use.
            self.inner.db.count("rollback");
        }
    }
}
