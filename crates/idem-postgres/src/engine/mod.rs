//! [`PgEngine`]: the transactional mode. The action runs in a transaction, and the scope's
//! record is written in that same transaction.

mod builder;
mod call;
pub(crate) mod run;
mod warm;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Deadline, Fingerprint, Scope, Status};
use idem_dedup::remote::FencingToken;
use idem_dedup::{
    BytesCodec, Codec, DedupError, Engine, EntryInfo, EntryState, Outcome, OutcomeKind, Stats,
};
use sqlx::PgPool;

pub use builder::PgEngineBuilder;
use builder::TxConfig;

use crate::codes::state;
use crate::db::Db;
use crate::digest::ScopeDigest;
use crate::sweeper;
use crate::transaction::PgTransaction;

pub(crate) struct Inner<V, C> {
    pub(crate) local: Engine<V>,
    /// The local engine's TTL, to tell the table's expiry from the local copy's.
    pub(crate) local_ttl: Duration,
    pub(crate) db: Arc<Db>,
    pub(crate) codec: C,
    pub(crate) cfg: TxConfig,
    /// Open, empty transactions left by committed runs, for the next claims (see `warm.rs`).
    pub(crate) warm: Arc<warm::Warm>,
    sweeper: Option<tokio::task::JoinHandle<()>>,
}

impl<V, C> Drop for Inner<V, C> {
    fn drop(&mut self) {
        if let Some(s) = &self.sweeper {
            s.abort();
        }
    }
}

/// Effectively-once writes whose record commits with the side effect: the action runs inside a
/// PostgreSQL transaction, and idem writes the scope's record in that same transaction, then
/// commits once. Either the side effect and its record are both committed, or neither
/// is; a crash at any point leaves one or the other state, and the next call replays or runs
/// once.
///
/// A call goes to this instance's local [`Engine`] first: concurrent duplicates on this
/// instance join one run, and results it holds are replayed without a query (for
/// the [local copy's TTL](idem_dedup::LocalCache::ttl)). The local leader then:
///
/// 1. `BEGIN`s a transaction and calls the schema's `tx_claim`, which takes the scope's
///    transaction-scoped advisory lock — waiting, up to [`max_wait`](PgEngineBuilder::max_wait),
///    while another transaction of the scope runs on any instance — and reads the record with
///    a fresh snapshot;
/// 2. if a record is committed: rolls back and replays it (or answers a conflict);
/// 3. otherwise runs the action with the [`PgTransaction`], then writes the record
///    (fingerprint, token, encoded value, expiry) in it and `COMMIT`s, in one round trip. So a
///    unique intent costs idem three round trips (`BEGIN`, the claim, the record with the
///    `COMMIT`) besides the action's own statements. An action error or panic rolls the
///    whole transaction back (nothing is stored; the next call runs again).
///
/// A holder that dies mid-transaction (crash, `kill -9`, lost connection) is rolled back by
/// PostgreSQL: its side effects and its claim vanish together, the lock is released, and the
/// next waiter runs the action once. A holder that stalls with its transaction idle past the
/// [`lease`](PgEngineBuilder::lease) is ended by the server (its transaction rolls back); when
/// it wakes, its statements and its COMMIT fail.
///
/// Cheap to clone. It implements [`Deduplicator`](idem_dedup::Deduplicator) with
/// [`Context`](idem_dedup::Deduplicator::Context) =
/// [`PgTransaction`], so `idem-tower`'s `IdemLayer` runs over it: the inner service finds the
/// transaction in the request's extensions, and the stored response commits with its writes.
///
/// # Errors
///
/// [`DedupError`]; the database adds, as [`DedupError::Action`] statuses:
///
/// | code | reason | when |
/// |---|---|---|
/// | `UNAVAILABLE` | `UPSTREAM_UNAVAILABLE` | the database failed, refused the record or the COMMIT, or passed [`query_timeout`](PgEngineBuilder::query_timeout) before its last round trip; nothing committed |
/// | `UNAVAILABLE` | `UNKNOWN_OUTCOME` | the last round trip (the record and the COMMIT) got no answer: the retry replays if it committed, runs once if not |
/// | `UNAVAILABLE` | `REQUEST_IN_FLIGHT` | another transaction still held the scope after `max_wait` (retry-after hint) |
/// | `FAILED_PRECONDITION` | `IDEMPOTENCY_CONFLICT` | the record holds another fingerprint |
///
/// # Outcomes
///
/// `Executed` for the call that ran the action, `Joined` for this instance's callers that
/// waited for it, `Replayed` for a result that was already stored, here or in the table. Their
/// [`source`](Outcome::source) is [`Source::Local`](idem_dedup::Source::Local) and their
/// [`fencing_token`](Outcome::fencing_token) `None` (the action has the token,
/// [`PgTransaction::token`]).
///
/// # Cancellation safety
///
/// As [`Engine::execute`]: a dropped call's run continues in a task, and its transaction
/// commits or rolls back as a whole.
pub struct PgEngine<V, C = BytesCodec> {
    inner: Arc<Inner<V, C>>,
}

impl<V, C> PgEngine<V, C> {
    /// The engine's parts, for the other modes of the crate (multi-step operations).
    pub(crate) fn inner(&self) -> &Arc<Inner<V, C>> {
        &self.inner
    }
}

impl<V, C> Clone for PgEngine<V, C> {
    fn clone(&self) -> Self {
        PgEngine {
            inner: self.inner.clone(),
        }
    }
}

impl<V, C: fmt::Debug> fmt::Debug for PgEngine<V, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgEngine")
            .field("schema", &self.inner.db.schema)
            .field("local", &self.inner.local)
            .field("codec", &self.inner.codec)
            .field("config", &self.inner.cfg)
            .finish()
    }
}

impl<V> PgEngine<V, BytesCodec>
where
    V: Clone + Send + Sync + 'static,
{
    /// A builder over `pool`, with every default (see [`PgEngineBuilder`]).
    pub fn builder(pool: PgPool) -> PgEngineBuilder<V, BytesCodec> {
        PgEngineBuilder::new(pool)
    }
}

impl<V, C> PgEngine<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    /// Runs `action` once for `scope` across every instance on the database, inside a
    /// transaction that also receives the scope's record; or replays the committed
    /// result. The action gets the transaction and the claim's fencing token.
    ///
    /// # Errors
    ///
    /// See the type docs.
    ///
    /// ```no_run
    /// # async fn demo(engine: idem_postgres::PgEngine<String>, scope: idem_core::Scope) -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_core::Fingerprint;
    /// use idem_postgres::sqlx_status;
    ///
    /// let out = engine
    ///     .execute_in_transaction(&scope, Fingerprint::of(b"sku=42"), |tx, token| async move {
    ///         let mut conn = tx.lock().await?;
    ///         sqlx::query("INSERT INTO orders (sku, token) VALUES ($1, $2)")
    ///             .bind("book-42")
    ///             .bind(token.get() as i64)
    ///             .execute(&mut *conn)
    ///             .await
    ///             .map_err(sqlx_status)?;
    ///         Ok(format!("order for token {token}"))
    ///     })
    ///     .await?;
    /// # let _ = out; Ok(()) }
    /// ```
    pub async fn execute_in_transaction<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(PgTransaction, FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, None, move |tx: PgTransaction| {
            let token = tx.token();
            action(tx, token)
        })
        .await
    }

    /// As [`execute_in_transaction`](Self::execute_in_transaction), with the transaction alone
    /// (what [`Deduplicator::execute`](idem_dedup::Deduplicator::execute) gives).
    ///
    /// # Errors
    ///
    /// See the type docs.
    pub async fn execute<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(PgTransaction) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, None, action).await
    }

    /// As [`execute`](Self::execute), but this caller stops waiting at `deadline` with
    /// [`DedupError::DeadlineExceeded`]; the run goes on and commits or rolls back as a
    /// whole.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute), plus [`DedupError::DeadlineExceeded`].
    pub async fn execute_with_deadline<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Deadline,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(PgTransaction) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, Some(deadline), action).await
    }

    /// What is held for `scope`: this instance's copy or run, else the table's record.
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`], or the database's failure as [`DedupError::Action`].
    pub async fn lookup(&self, scope: &Scope) -> Result<Option<EntryInfo>, DedupError> {
        if let Some(info) = self.inner.local.lookup(scope).await? {
            return Ok(Some(info));
        }
        let db = &self.inner.db;
        let d = ScopeDigest::of(scope);
        let q = sqlx::query_as::<_, (i16, i64, i64, i64)>(&db.sql.lookup)
            .bind(d.0)
            .fetch_optional(&db.pool);
        let row = db
            .query("lookup", q)
            .await
            .map_err(|f| action_error(db.status(f)))?;
        Ok(row.map(|(state, _token, left, age)| {
            let age = Duration::from_millis(u64::try_from(age).unwrap_or(0));
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
            if state == state::IN_FLIGHT {
                EntryInfo {
                    state: EntryState::InFlight { waiters: 0 },
                    age,
                    expires_in: None,
                }
            } else {
                EntryInfo {
                    state: EntryState::Completed,
                    age,
                    expires_in: Some(left),
                }
            }
        }))
    }

    /// Removes this instance's copy and the table's record of `scope`; returns whether there
    /// was either. The next call, on any instance, runs the action again (other
    /// instances' copies live on until their local TTL). A transaction of the scope still
    /// running commits its record when it ends.
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`], or the database's failure as [`DedupError::Action`].
    pub async fn forget(&self, scope: &Scope) -> Result<bool, DedupError> {
        let here = self.inner.local.forget(scope).await?;
        let db = &self.inner.db;
        let d = ScopeDigest::of(scope);
        let q = sqlx::query_as::<_, (bool, i64)>(&db.sql.forget)
            .bind(d.0)
            .bind(d.hex())
            .fetch_one(&db.pool);
        let (there, _) = db
            .query("forget", q)
            .await
            .map_err(|f| action_error(db.status(f)))?;
        Ok(here || there)
    }

    /// Statements this engine has sent: `BEGIN`, the claim, the record with its `COMMIT` (one
    /// query string), the `ROLLBACK`s sqlx queues on a connection after a run (sent with its
    /// next message, not waited for), lookups and forgets; the sweeper's are not counted. A replay served by the local engine adds none.
    pub fn queries_sent(&self) -> u64 {
        self.inner.db.queries()
    }

    /// The local engine's counts.
    pub fn local_stats(&self) -> Stats {
        self.inner.local.stats()
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.inner.db.pool
    }

    /// The schema.
    pub fn schema(&self) -> &str {
        &self.inner.db.schema
    }

    /// Deletes expired rows now, as the sweeper does at each tick; returns how many.
    ///
    /// # Errors
    ///
    /// The database failed or passed the time limit (`UNAVAILABLE`).
    pub async fn sweep_now(&self) -> Result<u64, Status> {
        sweeper::sweep_once(&self.inner.db, Default::default()).await
    }

    /// Shuts the local engine down; transactions still running commit or roll back.
    pub async fn shutdown(&self, grace: Duration) -> idem_dedup::ShutdownReport {
        self.inner.local.shutdown(grace).await
    }
}

fn action_error(status: Status) -> DedupError {
    DedupError::Action {
        status,
        outcome: OutcomeKind::Executed,
    }
}
