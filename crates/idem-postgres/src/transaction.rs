//! [`PgTransaction`]: the transaction a transactional action runs in.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use idem_core::{Code, Reason, Scope, Status};
use idem_dedup::remote::FencingToken;
use sqlx::{PgConnection, Postgres, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::db::SqlKind;

type Slot = Option<Transaction<'static, Postgres>>;

/// The open transaction of one transactional run: the action's side effects go through it, and
/// idem writes the scope's record in it and commits it once the action returns `Ok`.
///
/// Cheap to clone (clones share the transaction), so it can travel as a request extension (the
/// tower layer puts it there). Run statements through [`lock`](Self::lock), whose guard is
/// a `&mut PgConnection` inside the transaction:
///
/// ```no_run
/// # async fn handler(tx: idem_postgres::PgTransaction) -> Result<i64, idem_core::Status> {
/// use idem_postgres::sqlx_status;
///
/// let mut conn = tx.lock().await?;
/// let id: i64 = sqlx::query_scalar("INSERT INTO orders (sku, qty) VALUES ($1, $2) RETURNING id")
///     .bind("book-42")
///     .bind(1)
///     .fetch_one(&mut *conn)
///     .await
///     .map_err(sqlx_status)?;
/// # Ok(id) }
/// ```
///
/// Do not commit or roll it back yourself (`conn.begin()` inside makes a savepoint, which is
/// fine), and do not keep it past the action: once the action has returned, idem takes the
/// transaction to write the record and commit, and later [`lock`](Self::lock)s answer
/// [`TransactionClosed`]. A guard held across the action's end delays that commit until it is
/// dropped.
#[derive(Clone)]
pub struct PgTransaction {
    shared: Arc<Shared>,
}

struct Shared {
    tx: Arc<Mutex<Slot>>,
    token: FencingToken,
    scope: Scope,
}

impl fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransaction")
            .field("token", &self.shared.token)
            .finish_non_exhaustive()
    }
}

impl PgTransaction {
    pub(crate) fn new(
        tx: Transaction<'static, Postgres>,
        token: FencingToken,
        scope: Scope,
    ) -> Self {
        PgTransaction {
            shared: Arc::new(Shared {
                tx: Arc::new(Mutex::new(Some(tx))),
                token,
                scope,
            }),
        }
    }

    /// The claim's fencing token: greater than every token handed out before it, for any
    /// scope. Inside the transaction it fences nothing more (the transaction itself excludes
    /// every other run of the scope); pass it on to stores outside the database.
    pub fn token(&self) -> FencingToken {
        self.shared.token
    }

    /// The scope this transaction runs.
    pub fn scope(&self) -> &Scope {
        &self.shared.scope
    }

    /// Waits for the transaction and gives it as a `&mut PgConnection` (through the guard's
    /// `DerefMut`) until the guard is dropped.
    ///
    /// # Errors
    ///
    /// [`TransactionClosed`] once the run has ended (committed or rolled back).
    pub async fn lock(&self) -> Result<TxGuard, TransactionClosed> {
        let guard = self.shared.tx.clone().lock_owned().await;
        if guard.is_none() {
            return Err(TransactionClosed);
        }
        Ok(TxGuard(guard))
    }

    /// Takes the transaction out (the run ends), waiting for a guard still held.
    pub(crate) async fn take(&self) -> Option<Transaction<'static, Postgres>> {
        self.shared.tx.lock().await.take()
    }
}

/// The transaction of a [`PgTransaction`], held until dropped: derefs to the `PgConnection` that
/// runs inside it (`.execute(&mut *guard)`).
#[must_use = "the transaction is free for the next statement as soon as the guard is dropped"]
pub struct TxGuard(OwnedMutexGuard<Slot>);

impl fmt::Debug for TxGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TxGuard")
    }
}

impl Deref for TxGuard {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        // `lock` hands out a guard only over a present transaction, and only the run itself
        // takes it out, under this same mutex.
        match self.0.as_ref() {
            Some(tx) => tx,
            None => unreachable!("a TxGuard always holds an open transaction"),
        }
    }
}

impl DerefMut for TxGuard {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self.0.as_mut() {
            Some(tx) => tx,
            None => unreachable!("a TxGuard always holds an open transaction"),
        }
    }
}

/// The run of a [`PgTransaction`] has ended: its transaction was committed or rolled back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionClosed;

impl fmt::Display for TransactionClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the idempotent run's transaction has ended: statements must run inside the action, \
             before it returns",
        )
    }
}

impl std::error::Error for TransactionClosed {}

impl From<TransactionClosed> for Status {
    fn from(e: TransactionClosed) -> Status {
        Status::new(Code::Internal, e.to_string())
    }
}

/// A status for an error of your own statements (inside an action):
///
/// | error | code |
/// |---|---|
/// | connection, I/O, pool timeout or closed; connection exceptions (SQLSTATE class `08`) | `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE` |
/// | the server ended the session: shutting down or starting (`57P01`, `57P02`, `57P03`), idle too long (`57P05`), idle too long inside a transaction (`25P03`) | `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE`: the transaction rolled back, retry with the same key |
/// | serialization failure, deadlock (`40001`, `40P01`) | `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE`: the transaction rolled back, retry with the same key |
/// | unique violation (`23505`) | `ALREADY_EXISTS` |
/// | check or foreign-key violation (`23514`, `23503`) | `FAILED_PRECONDITION` |
/// | anything else | `INTERNAL` |
///
/// The same reading of SQLSTATEs decides what idem's own statements answer, so a server error
/// is retryable whether it ends your statement or idem's `COMMIT`.
///
/// ```
/// let s = idem_postgres::sqlx_status(sqlx::Error::PoolTimedOut);
/// assert_eq!(s.code(), idem_core::Code::Unavailable);
/// ```
pub fn sqlx_status(e: sqlx::Error) -> Status {
    let code = match SqlKind::of(&e) {
        SqlKind::Transient => Code::Unavailable,
        SqlKind::UniqueViolation => Code::AlreadyExists,
        SqlKind::ConstraintViolation => Code::FailedPrecondition,
        SqlKind::MissingSchema | SqlKind::LockTimeout | SqlKind::Other => Code::Internal,
    };
    let status = Status::new(code, format!("database statement failed: {e}"));
    let status = if code == Code::Unavailable {
        status.with_reason(Reason::UPSTREAM_UNAVAILABLE)
    } else {
        status
    };
    status.with_source(e)
}
