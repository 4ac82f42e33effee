//! Multi-step operations with recovery points: a handler that mixes writes to this database
//! with calls to other services, run effectively once as a whole.
//!
//! # Why
//!
//! The transactional mode commits one transaction with its record. A checkout that reserves
//! stock here, charges a payment provider over HTTP, then writes its order cannot be one
//! transaction: the charge is not in the database. Run it as one action and a crash after the
//! charge rolls back the reservation while the charge stays; run it again and it charges again
//! unless the provider is given the same key. An operation splits the handler into named
//! **steps**:
//!
//! - a **local** step runs its writes in a transaction of its own, which also commits the
//!   step's **recovery point** (its name and its output, for the steps after it), fenced on the
//!   operation's claim;
//! - a **foreign** step calls another service with a key derived from the intent and the step's
//!   name, the same in every run, and records its output once it returns.
//!
//! A later run of the operation — the client's retry, another instance after a crash or a lapsed
//! lease, a [`Completer`] — resumes after the last recovery point: a committed local step is never
//! run again (its output comes back from the table), a foreign step is called again only when
//! the run that called it died before recording it, and then with the same key, which the other
//! service replays. The final result is stored and replayed like any other.
//!
//! # How
//!
//! [`PgEngine::operation`] claims the scope like the remote tier does (a row with a lease and a
//! fencing token, renewed every third of the [`lease`](crate::PgEngineBuilder::lease) while the
//! handler runs), so two runs never execute one operation at once; it stores the request, so a
//! completer can drive the operation again; it loads the committed steps, then runs the handler
//! with an [`Operation`]. Each step's recovery point goes through the schema's `op_step`, which
//! succeeds only while the claim is this run's; a run whose lease was taken over learns it there
//! (`UNAVAILABLE` / `FENCED_OUT`), and its step's writes roll back. A handler that fails releases
//! the claim and keeps its recovery points: the retry resumes. Recovery points live as long as
//! the operation's record (the sweeper deletes both).
//!
//! The handler must run its steps in an order that depends only on the request and on the
//! outputs of earlier steps, and compute its result from them: a resumed run gets the same
//! outputs back, so it takes the same path.

mod completer;
mod handle;
mod output;
mod run;

use std::future::Future;
use std::sync::Arc;

use idem_core::{Fingerprint, Scope, Status};
use idem_dedup::{Codec, DedupError, Outcome};
use parking_lot::Mutex;

pub use completer::{Completer, CompleterBuilder, CompleterReport, CompleterTask, Handler};
pub use handle::{Operation, STEP_TARGET};
#[cfg(feature = "serde")]
pub use output::Json;
pub use output::StepOutput;
use run::IfHeld;

use crate::PgEngine;

impl<V, C> PgEngine<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    /// Runs the multi-step operation `handler` once for `scope` across every instance, resuming
    /// after the steps an earlier run committed, or replays its stored result (see the
    /// [module docs](crate::operation)). `request` is kept with the operation for a
    /// [`Completer`] (and given back by [`Operation::request`]); `fingerprint` is the request's,
    /// as for every call.
    ///
    /// Concurrent calls of the scope on this instance join one run; on other instances they
    /// wait for it (up to [`max_wait`](crate::PgEngineBuilder::max_wait)), then replay its
    /// result or, if it failed or died, run the operation themselves from its last recovery
    /// point.
    ///
    /// # Errors
    ///
    /// The handler's error (the claim is released, the recovery points stay); `UNAVAILABLE` /
    /// `REQUEST_IN_FLIGHT` when another run still held it after `max_wait`; `UNAVAILABLE` /
    /// `FENCED_OUT` when this run's lease was taken over; `FAILED_PRECONDITION` /
    /// `IDEMPOTENCY_CONFLICT` for another request under the same key; the database's failures
    /// as `UNAVAILABLE`.
    ///
    /// # Examples
    ///
    /// An axum handler (the same function can be registered with a [`Completer`]):
    ///
    /// ```no_run
    /// use idem_core::{Fingerprint, Scope, Status};
    /// use idem_postgres::{sqlx_status, Operation, PgEngine};
    ///
    /// async fn checkout(op: Operation) -> Result<String, Status> {
    ///     let sku = String::from_utf8_lossy(op.request()).into_owned();
    ///     // 1. Reserve the stock here: the row and the recovery point commit together.
    ///     let reservation: i64 = op
    ///         .local("reserve", |tx| async move {
    ///             let mut conn = tx.lock().await?;
    ///             sqlx::query_scalar("INSERT INTO reservations (sku) VALUES ($1) RETURNING id")
    ///                 .bind(&sku)
    ///                 .fetch_one(&mut *conn)
    ///                 .await
    ///                 .map_err(sqlx_status)
    ///         })
    ///         .await?;
    ///     // 2. Charge elsewhere, with the key derived for this step: a re-run sends it again.
    ///     let charge: String = op
    ///         .foreign("charge", |key| async move {
    ///             // e.g. reqwest with the `Idempotency-Key: {key}` header
    ///             Ok(format!("ch_{}", &key.as_str()[..8]))
    ///         })
    ///         .await?;
    ///     // 3. Confirm the order here.
    ///     let order: i64 = op
    ///         .local("confirm", |tx| async move {
    ///             let mut conn = tx.lock().await?;
    ///             sqlx::query_scalar("INSERT INTO orders (reservation, charge) VALUES ($1, $2) RETURNING id")
    ///                 .bind(reservation)
    ///                 .bind(&charge)
    ///                 .fetch_one(&mut *conn)
    ///                 .await
    ///                 .map_err(sqlx_status)
    ///         })
    ///         .await?;
    ///     Ok(format!("order {order}"))
    /// }
    ///
    /// # async fn handler(engine: PgEngine<String>, scope: Scope, body: Vec<u8>) -> Result<String, Box<dyn std::error::Error>> {
    /// let out = engine
    ///     .operation(&scope, Fingerprint::of(&body), body, checkout)
    ///     .await?;
    /// # Ok(out.into_value()) }
    /// ```
    pub async fn operation<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        request: impl Into<Vec<u8>>,
        handler: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(Operation) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let request: Arc<[u8]> = request.into().into();
        self.run_operation(scope, fingerprint, request, IfHeld::Wait, handler)
            .await
    }

    /// [`operation`](Self::operation), with the choice of waiting for another run.
    pub(crate) async fn run_operation<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        request: Arc<[u8]>,
        if_held: IfHeld,
        handler: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(Operation) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Some(handler)));
        let inner = self.inner().clone();
        let owned = scope.clone();
        let run = move |()| {
            let handler = slot.lock().take();
            run::leader(inner, owned, fingerprint, request, if_held, handler)
        };
        self.through_local(scope, fingerprint, None, run).await
    }
}
