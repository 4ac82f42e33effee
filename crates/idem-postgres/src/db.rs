//! The database handle shared by the tier, the transactional engine and the sweeper: the pool,
//! the statements of one schema, a time limit on every call, and the count of queries sent.

mod reach;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use idem_core::{Code, Reason, Status};
use sqlx::PgPool;

use crate::metrics;
use reach::Reach;
pub(crate) use reach::{probe, Unreachable};

/// What an error from sqlx means for whoever sent the statement. The crate's one reading of
/// SQLSTATEs: [`Db::status`] (idem's own statements) and [`sqlx_status`](crate::sqlx_status)
/// (the action's) both go through [`SqlKind::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqlKind {
    /// The connection or the server failed or ended the session, or the transaction was rolled
    /// back under a conflict: the same request may succeed when it is sent again.
    Transient,
    /// idem's table or functions are missing or outdated.
    MissingSchema,
    /// A lock wait passed `lock_timeout` (another transaction holds the scope).
    LockTimeout,
    /// A unique constraint refused the row.
    UniqueViolation,
    /// A check or foreign-key constraint refused the row.
    ConstraintViolation,
    /// Anything else: a bug or a rule of the database that a retry does not change.
    Other,
}

impl SqlKind {
    /// The kind of `e`.
    pub(crate) fn of(e: &sqlx::Error) -> SqlKind {
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => SqlKind::Transient,
            sqlx::Error::Database(db) => SqlKind::of_sqlstate(db.code().as_deref().unwrap_or("")),
            _ => SqlKind::Other,
        }
    }

    /// The kind of a SQLSTATE.
    pub(crate) fn of_sqlstate(code: &str) -> SqlKind {
        match code {
            // serialization_failure, deadlock_detected: the transaction was rolled back.
            "40001" | "40P01"
            // admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout:
            // the server ended the session or is starting or stopping.
            | "57P01" | "57P02" | "57P03" | "57P05"
            // idle_in_transaction_session_timeout: the server ended a session whose
            // transaction stayed idle too long; the transaction rolled back.
            | "25P03" => SqlKind::Transient,
            // Class 08, connection exceptions: the connection failed or was never made.
            c if c.starts_with("08") => SqlKind::Transient,
            // undefined_table, undefined_function, invalid_schema_name
            "42P01" | "42883" | "3F000" => SqlKind::MissingSchema,
            "55P03" => SqlKind::LockTimeout,
            "23505" => SqlKind::UniqueViolation,
            "23514" | "23503" => SqlKind::ConstraintViolation,
            _ => SqlKind::Other,
        }
    }
}

/// The statements of one schema, formatted once.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) claim: String,
    pub(crate) complete: String,
    pub(crate) release: String,
    pub(crate) renew: String,
    pub(crate) forget: String,
    pub(crate) lookup: String,
    pub(crate) held_by: String,
    pub(crate) tx_claim: String,
    /// The quoted schema, for the record-and-COMMIT string (see `tx_finish_sql`).
    pub(crate) tx_finish: String,
    pub(crate) sweep: String,
    /// The sweeper's second statement: expired operations (their steps go with them).
    pub(crate) sweep_operations: String,
    pub(crate) op: OpSql,
}

/// The statements of multi-step operations (`sql/operations.sql`).
#[derive(Debug)]
pub(crate) struct OpSql {
    pub(crate) begin: String,
    pub(crate) steps: String,
    pub(crate) step: String,
    pub(crate) finish: String,
    pub(crate) unfinished: String,
}

impl OpSql {
    fn new(s: &str) -> Self {
        OpSql {
            begin: format!("SELECT {s}.op_begin($1, $2, $3, $4, $5, $6)"),
            steps: format!("SELECT step, output FROM {s}.steps WHERE digest = $1"),
            step: format!("SELECT {s}.op_step($1, $2, $3, $4, $5, $6, $7)"),
            finish: format!("SELECT {s}.op_finish($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
            unfinished: format!(
                "SELECT o.scope, o.fingerprint, o.request FROM {s}.operations o \
                 WHERE o.state = 1 AND o.method = ANY($1) \
                 AND o.updated_at < statement_timestamp() - $2 * interval '1 millisecond' \
                 AND o.expires_at > statement_timestamp() AND o.runs < $3 \
                 AND NOT EXISTS (SELECT 1 FROM {s}.records r WHERE r.digest = o.digest \
                   AND r.state = 1 AND r.expires_at > statement_timestamp()) \
                 ORDER BY o.updated_at LIMIT $4"
            ),
        }
    }
}

impl Sql {
    fn new(schema: &str, channel: &str) -> Self {
        let s = format!("\"{schema}\"");
        // `statement_timestamp()` (not `clock_timestamp()`) where an index may serve the
        // comparison: it is stable within the statement.
        let live = "expires_at > statement_timestamp()";
        let left = "GREATEST(0, ceil(extract(epoch FROM expires_at - statement_timestamp()) * 1000))::bigint";
        Sql {
            claim: format!("SELECT outcome, token, lease_left_ms, result FROM {s}.claim($1, $2, $3, $4, $5, $6)"),
            complete: format!("SELECT {s}.complete($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
            release: format!("SELECT {s}.release($1, $2, $3, $4, $5)"),
            renew: format!("SELECT {s}.renew($1, $2, $3, $4, $5)"),
            forget: format!(
                "WITH gone AS (DELETE FROM {s}.records WHERE digest = $1 \
                 RETURNING awaited, {live} AS live), \
                 op AS (DELETE FROM {s}.operations WHERE digest = $1), \
                 woken AS (SELECT pg_notify('{channel}', $2) FROM gone WHERE awaited) \
                 SELECT COALESCE(bool_or(live), false), (SELECT count(*) FROM woken) FROM gone"
            ),
            lookup: format!(
                "SELECT state, token, {left}, \
                 GREATEST(0, floor(extract(epoch FROM statement_timestamp() - created_at) * 1000))::bigint \
                 FROM {s}.records WHERE digest = $1 AND {live}"
            ),
            held_by: format!(
                "SELECT state, token FROM {s}.records WHERE digest = $1 AND {live}"
            ),
            tx_claim: format!(
                "SELECT outcome, token, lease_left_ms, result FROM {s}.tx_claim($1, $2, $3, $4, $5)"
            ),
            tx_finish: s.clone(),
            sweep: format!(
                "DELETE FROM {s}.records WHERE ctid = ANY(ARRAY(\
                 SELECT ctid FROM {s}.records WHERE expires_at <= statement_timestamp() \
                 LIMIT $1 FOR UPDATE SKIP LOCKED))"
            ),
            sweep_operations: format!(
                "DELETE FROM {s}.operations WHERE ctid = ANY(ARRAY(\
                 SELECT ctid FROM {s}.operations WHERE expires_at <= statement_timestamp() \
                 LIMIT $1 FOR UPDATE SKIP LOCKED))"
            ),
            op: OpSql::new(&s),
        }
    }
}

impl Sql {
    /// The last round trip of a transactional run, one simple-query string: the record
    /// (`tx_finish`), `COMMIT`, and a `BEGIN` of an empty transaction, which keeps sqlx's view
    /// of the connection (one open transaction, rolled back when the handle is dropped, with the
    /// connection's next message) true without a round trip of its own. If the record fails,
    /// PostgreSQL skips the rest of the string and the transaction rolls back. The arguments
    /// are literals made only of hex digits and numbers.
    pub(crate) fn tx_finish_sql(
        &self,
        digest: &[u8],
        fp: &[u8],
        token: i64,
        owner: &[u8],
        value: &[u8],
        ttl_ms: i64,
    ) -> String {
        use crate::digest::hex;
        let mut sql = String::with_capacity(200 + 2 * value.len());
        sql.push_str("SELECT ");
        sql.push_str(&self.tx_finish);
        sql.push_str(".tx_finish(");
        for b in [digest, fp] {
            sql.push_str("decode('");
            sql.push_str(&hex(b));
            sql.push_str("', 'hex'), ");
        }
        sql.push_str(&format!(
            "{token}, decode('{}', 'hex'), decode('",
            hex(owner)
        ));
        sql.push_str(&hex(value));
        sql.push_str(&format!("', 'hex'), {ttl_ms}); COMMIT; BEGIN"));
        sql
    }
}

/// Why a call to the database gave no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No answer within the time limit.
    Timeout(Duration),
    /// The client or the server failed.
    Sql(sqlx::Error),
    /// The pool could not open a connection (found by a direct attempt after its timeout).
    Unreachable(Unreachable),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout(d) => write!(f, "no answer within {} ms", d.as_millis()),
            Failure::Sql(e) => e.fmt(f),
            Failure::Unreachable(u) => u.fmt(f),
        }
    }
}

impl Failure {
    /// Whether the server answered with an error (as opposed to no answer: a lost connection
    /// or the time limit). After an error reply to a COMMIT, the transaction did not commit.
    pub(crate) fn is_error_reply(&self) -> bool {
        matches!(self, Failure::Sql(sqlx::Error::Database(_)))
    }

    /// Whether a lock wait passed its limit (another transaction holds the scope).
    pub(crate) fn is_lock_timeout(&self) -> bool {
        matches!(self, Failure::Sql(e) if SqlKind::of(e) == SqlKind::LockTimeout)
    }
}

/// The pool, the statements and the limits of one schema.
#[derive(Debug)]
pub(crate) struct Db {
    pub(crate) pool: PgPool,
    pub(crate) schema: String,
    /// The notification channel of completions: `<schema>.done`.
    pub(crate) channel: String,
    pub(crate) query_timeout: Duration,
    pub(crate) sql: Sql,
    queries: AtomicU64,
    reach: Reach,
}

impl Db {
    pub(crate) fn new(pool: PgPool, schema: &str, query_timeout: Duration) -> Self {
        let channel = format!("{schema}.done");
        Db {
            sql: Sql::new(schema, &channel),
            pool,
            schema: schema.to_owned(),
            channel,
            query_timeout,
            queries: AtomicU64::new(0),
            reach: Reach::default(),
        }
    }

    /// Statements sent so far (each counts once: a query, a function call, BEGIN, COMMIT or
    /// ROLLBACK).
    pub(crate) fn queries(&self) -> u64 {
        self.queries.load(Relaxed)
    }

    /// Counts one statement sent.
    pub(crate) fn count(&self, op: &'static str) {
        self.queries.fetch_add(1, Relaxed);
        ::metrics::counter!(metrics::QUERIES, "op" => op).increment(1);
    }

    /// Runs one statement (`op` names it in metrics) on a connection already held (a
    /// transaction's), giving up after `limit`.
    pub(crate) async fn timed<T>(
        &self,
        op: &'static str,
        limit: Duration,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        self.count(op);
        self.run(op, limit, false, fut).await
    }

    /// Runs one statement on a connection of the pool, giving up after the query time limit.
    /// If no answer came because no connection opened, the failure says why
    /// ([`Failure::Unreachable`]).
    pub(crate) async fn query<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        self.count(op);
        self.run(op, self.query_timeout, true, fut).await
    }

    /// As [`query`](Self::query), without counting the statement in
    /// [`queries`](Self::queries) (the sweeper's; the metric still counts it).
    pub(crate) async fn uncounted<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        ::metrics::counter!(metrics::QUERIES, "op" => op).increment(1);
        self.run(op, self.query_timeout, true, fut).await
    }

    async fn run<T>(
        &self,
        op: &'static str,
        limit: Duration,
        pooled: bool,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        let out = match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => Failure::Sql(e),
            Err(_) => Failure::Timeout(limit),
        };
        ::metrics::counter!(metrics::FAILURES, "op" => op).increment(1);
        // A call to the pool that timed out may have waited for a connection that cannot open.
        let waited = matches!(
            out,
            Failure::Timeout(_) | Failure::Sql(sqlx::Error::PoolTimedOut)
        );
        if pooled && waited {
            if let Some(u) = self.reach.check(&self.pool, self.query_timeout).await {
                return Err(Failure::Unreachable(u));
            }
        }
        Err(out)
    }

    /// The status a caller gets for a failure: `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE`
    /// (retryable), or `INTERNAL` when the schema is missing. The message says the cause
    /// once, labelled as the store's; the sqlx error is not attached as well.
    pub(crate) fn status(&self, f: Failure) -> Status {
        match f {
            Failure::Timeout(d) => unavailable(format!(
                "the idempotency store (PostgreSQL) did not answer within {} ms",
                d.as_millis()
            )),
            Failure::Unreachable(u) => {
                unavailable(format!("the idempotency store (PostgreSQL) failed: {u}"))
            }
            Failure::Sql(e) if SqlKind::of(&e) == SqlKind::MissingSchema => Status::new(
                Code::Internal,
                format!(
                    "the idem schema \"{}\" is missing or outdated: apply it with \
                     idem_postgres::migrate ({e})",
                    self.schema
                ),
            ),
            // Everything else is retryable: idem's own statements fail only when the
            // database does.
            Failure::Sql(e) => {
                unavailable(format!("the idempotency store (PostgreSQL) failed: {e}"))
            }
        }
    }
}

/// `UNAVAILABLE` with [`Reason::UPSTREAM_UNAVAILABLE`]: retryable.
pub(crate) fn unavailable(message: String) -> Status {
    Status::new(Code::Unavailable, message).with_reason(Reason::UPSTREAM_UNAVAILABLE)
}

/// Milliseconds for the schema's functions: at least 1, at most `i64::MAX`.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// Milliseconds as an `integer` setting (lock_timeout and the like): 1 to `i32::MAX`.
pub(crate) fn ms_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX).max(1)
}
