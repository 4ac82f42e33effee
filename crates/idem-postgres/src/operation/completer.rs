//! [`Completer`]: finishes operations their callers left unfinished.
//!
//! A client that gives up after a crash of the run leaves an operation half done: stock
//! reserved, maybe charged, no order. Nobody retries it. A completer is a bounded background
//! task that finds operations with no progress for a grace period and no live claim, and drives
//! each again from its stored request with the handler registered for its method, resuming after
//! its last recovery point. Several completers (one per instance) may run at once: each run
//! claims the operation first, so an operation is finished exactly once, by whichever claims it;
//! the others skip it or replay its result.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use idem_core::{Fingerprint, Reason, Scope, Status};
use idem_dedup::{Codec, OutcomeKind};

use super::handle::Operation;
use super::run::IfHeld;
use crate::db::ms;
use crate::schema::SetupError;
use crate::PgEngine;

/// A registered operation handler: the same function a request handler passes to
/// [`PgEngine::operation`], boxed.
pub type Handler<V> = Arc<dyn Fn(Operation) -> BoxFuture<'static, Result<V, Status>> + Send + Sync>;

/// Builds a [`Completer`].
///
/// # Default
///
/// | setting | default | |
/// |---|---|---|
/// | [`grace`](Self::grace) | 60 s: an operation with no progress for this long, and no live claim, is driven again | |
/// | [`every`](Self::every) | 10 s between passes | |
/// | [`batch`](Self::batch) | 100 operations at most per pass, driven one at a time | |
/// | [`max_runs`](Self::max_runs) | 10: an operation begun this many times (by callers and completers) is left alone | |
#[must_use = "a builder does nothing until `build` is called"]
pub struct CompleterBuilder<V, C> {
    engine: PgEngine<V, C>,
    handlers: HashMap<String, Handler<V>>,
    duplicate: Option<String>,
    grace: Duration,
    every: Duration,
    batch: u32,
    max_runs: u32,
}

impl<V, C> fmt::Debug for CompleterBuilder<V, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompleterBuilder")
            .field("methods", &self.handlers.keys().collect::<Vec<_>>())
            .field("grace", &self.grace)
            .field("every", &self.every)
            .field("batch", &self.batch)
            .field("max_runs", &self.max_runs)
            .finish_non_exhaustive()
    }
}

impl<V, C> CompleterBuilder<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    /// Registers the handler of the operations whose scope's method is `method` (the method the
    /// request handler runs them under).
    pub fn handler<F, Fut>(mut self, method: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Operation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let method = method.into();
        let boxed: Handler<V> = Arc::new(move |op| Box::pin(handler(op)));
        if self.handlers.insert(method.clone(), boxed).is_some() {
            self.duplicate = Some(method);
        }
        self
    }

    /// How long an operation must have made no progress (no run began, no step committed)
    /// before it is driven again. Default: 60 s.
    pub const fn grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }

    /// The time between passes of a [`spawn`](Completer::spawn)ed completer. Default: 10 s.
    pub const fn every(mut self, d: Duration) -> Self {
        self.every = d;
        self
    }

    /// The most operations one pass drives. Default: 100.
    pub const fn batch(mut self, n: u32) -> Self {
        self.batch = n;
        self
    }

    /// The most runs an operation may have had (every call and every completer's attempt count
    /// one) for a completer to try it again. Default: 10.
    pub const fn max_runs(mut self, n: u32) -> Self {
        self.max_runs = n;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`SetupError::Invalid`] with no handler, a method registered twice or with an empty
    /// name, or a zero setting.
    pub fn build(self) -> Result<Completer<V, C>, SetupError> {
        if self.handlers.is_empty() {
            return Err(SetupError::Invalid(
                "a completer needs at least one handler",
            ));
        }
        if self.duplicate.is_some() {
            return Err(SetupError::Invalid(
                "a completer's method can have only one handler",
            ));
        }
        if self.handlers.contains_key("") {
            return Err(SetupError::Invalid("a completer's method needs a name"));
        }
        if self.grace.is_zero() || self.every.is_zero() || self.batch == 0 || self.max_runs == 0 {
            return Err(SetupError::Invalid(
                "a completer's grace, every, batch and max_runs must be greater than zero",
            ));
        }
        let methods = self.handlers.keys().cloned().collect();
        Ok(Completer {
            inner: Arc::new(Inner {
                engine: self.engine,
                handlers: self.handlers,
                methods,
                grace: self.grace,
                every: self.every,
                batch: self.batch,
                max_runs: self.max_runs,
            }),
        })
    }
}

struct Inner<V, C> {
    engine: PgEngine<V, C>,
    handlers: HashMap<String, Handler<V>>,
    methods: Vec<String>,
    grace: Duration,
    every: Duration,
    batch: u32,
    max_runs: u32,
}

/// Drives unfinished operations to their end. A client that gives up after its run crashed
/// leaves an operation half done (stock reserved, maybe charged, no order), and nobody retries
/// it. A completer's pass finds operations of its registered methods with no progress for the
/// [`grace`](CompleterBuilder::grace) period and no live claim, and drives each again from its
/// stored request, resuming after its last recovery point. Completers on several instances may
/// pass at once: each run claims the operation first, so it finishes once, by whichever claims
/// it; the others skip it or replay its result. Cheap to clone.
///
/// ```no_run
/// # async fn demo(engine: idem_postgres::PgEngine<String>) -> Result<(), Box<dyn std::error::Error>> {
/// use idem_postgres::{Completer, Operation};
/// use std::time::Duration;
///
/// async fn checkout(op: Operation) -> Result<String, idem_core::Status> {
///     let id: i64 = op.local("reserve", |_tx| async { Ok(42) }).await?;
///     Ok(format!("order {id}"))
/// }
///
/// let completer = Completer::builder(engine)
///     .handler("POST /checkout", checkout)
///     .grace(Duration::from_secs(30))
///     .build()?;
/// let _running = completer.spawn(); // stops when dropped
/// # Ok(()) }
/// ```
pub struct Completer<V, C> {
    inner: Arc<Inner<V, C>>,
}

impl<V, C> Clone for Completer<V, C> {
    fn clone(&self) -> Self {
        Completer {
            inner: self.inner.clone(),
        }
    }
}

impl<V, C> fmt::Debug for Completer<V, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completer")
            .field("methods", &self.inner.methods)
            .field("grace", &self.inner.grace)
            .finish_non_exhaustive()
    }
}

/// What one pass of a [`Completer`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompleterReport {
    /// Operations this pass ran to their end.
    pub finished: u32,
    /// Operations found finished meanwhile (their result replayed), or held by a live run.
    pub skipped: u32,
    /// Operations whose run failed this time (left for a later pass, up to `max_runs`).
    pub failed: u32,
}

/// A [`Completer`] running in the background; it stops when dropped.
#[must_use = "the completer stops when this is dropped"]
#[derive(Debug)]
pub struct CompleterTask(tokio::task::JoinHandle<()>);

impl Drop for CompleterTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<V, C> Completer<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    /// A builder for a completer driving `engine`'s operations, with every default (see
    /// [`CompleterBuilder`]).
    pub fn builder(engine: PgEngine<V, C>) -> CompleterBuilder<V, C> {
        CompleterBuilder {
            engine,
            handlers: HashMap::new(),
            duplicate: None,
            grace: Duration::from_secs(60),
            every: Duration::from_secs(10),
            batch: 100,
            max_runs: 10,
        }
    }

    /// Runs a pass every [`every`](CompleterBuilder::every) in a task, until the returned
    /// handle is dropped. Must be called inside a tokio runtime.
    pub fn spawn(&self) -> CompleterTask {
        let me = self.clone();
        CompleterTask(tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.inner.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = me.run_once().await {
                    tracing::debug!(error = %e, "an idem completer pass failed; retried at the next tick");
                }
            }
        }))
    }

    /// One pass: finds up to `batch` unfinished operations of the registered methods past the
    /// grace period with no live claim, and drives each in turn.
    ///
    /// # Errors
    ///
    /// The database failed to list them (`UNAVAILABLE`).
    pub async fn run_once(&self) -> Result<CompleterReport, Status> {
        let c = &self.inner;
        let db = &c.engine.inner().db;
        let q = sqlx::query_as::<_, (Vec<u8>, Vec<u8>, Vec<u8>)>(&db.sql.op.unfinished)
            .bind(&c.methods)
            .bind(ms(c.grace))
            .bind(i32::try_from(c.max_runs).unwrap_or(i32::MAX))
            .bind(i64::from(c.batch))
            .fetch_all(&db.pool);
        let rows = db
            .query("op_unfinished", q)
            .await
            .map_err(|f| db.status(f))?;
        let mut report = CompleterReport::default();
        for (scope, fp, request) in rows {
            self.drive(&scope, &fp, request, &mut report).await;
        }
        Ok(report)
    }

    async fn drive(&self, scope: &[u8], fp: &[u8], request: Vec<u8>, report: &mut CompleterReport) {
        let (Ok(scope), Ok(fp)) = (Scope::from_encoded(scope), <[u8; 16]>::try_from(fp)) else {
            report.failed += 1;
            tracing::warn!("an unfinished operation's stored scope or fingerprint is unreadable");
            return;
        };
        let Some(handler) = self.inner.handlers.get(scope.method()).cloned() else {
            report.skipped += 1;
            return;
        };
        let fp = Fingerprint::from_u128(u128::from_be_bytes(fp));
        let out = self
            .inner
            .engine
            .run_operation(&scope, fp, request.into(), IfHeld::Skip, move |op| {
                handler(op)
            })
            .await;
        match out {
            Ok(out) if out.kind() == OutcomeKind::Executed => report.finished += 1,
            Ok(_) => report.skipped += 1,
            Err(e) if e.reason() == Some(Reason::REQUEST_IN_FLIGHT) => report.skipped += 1,
            Err(e) => {
                report.failed += 1;
                tracing::warn!(error = %e, "a completer could not finish an operation; it tries again after the grace period");
            }
        }
    }
}
