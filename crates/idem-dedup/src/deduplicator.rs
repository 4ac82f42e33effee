//! [`Deduplicator`]: what the in-process [`Engine`] and the [`TieredEngine`] have in common, so
//! servers (the tower layer in `idem-tower`) run over either.

use std::future::Future;

use idem_core::{Deadline, Fingerprint, Scope, Status};

use crate::remote::{FencingToken, RemoteTier};
use crate::tiered::TieredEngine;
use crate::{Codec, DedupError, Engine, EntryInfo, Outcome, Stats};

/// Runs each scope's action once and gives its result to every duplicate: the interface of the
/// in-process [`Engine`] and of the [`TieredEngine`] (a local engine in front of a shared tier),
/// so code written against it — a server layer, a job runner — works over either.
///
/// The action gets a [`Context`](Self::Context): `()` from an [`Engine`], the claim's
/// [`FencingToken`] from a [`TieredEngine`]; a tier with a transactional mode hands its
/// transaction. A server puts it where the handler finds it (the tower layer adds it to the
/// request's extensions).
///
/// # Examples
///
/// One function, two deduplicators:
///
/// ```
/// use idem_core::{Fingerprint, Scope, Status};
/// use idem_dedup::{Deduplicator, Engine, OutcomeKind};
///
/// async fn create_order<D: Deduplicator<Value = u64>>(d: &D, scope: &Scope) -> Result<u64, Status> {
///     let out = d
///         .execute(scope, Fingerprint::of(b"sku=42"), |_ctx| async { Ok(1001) })
///         .await?;
///     Ok(*out.value())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::<u64>::builder().build()?;
/// let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
/// assert_eq!(create_order(&engine, &scope).await?, 1001);
/// assert_eq!(create_order(&engine, &scope).await?, 1001); // replayed
/// assert_eq!(engine.stats().outcomes.executed, 1);
/// # Ok(()) }
/// ```
pub trait Deduplicator: Clone + Send + Sync + 'static {
    /// The stored value.
    type Value: Clone + Send + Sync + 'static;
    /// What the action is given when it runs.
    type Context: Clone + Send + Sync + 'static;

    /// Runs `action` once for `scope`, or shares the run or stored result of an earlier call with
    /// the same `fingerprint`; with a `deadline`, this caller stops waiting then with
    /// [`DedupError::DeadlineExceeded`], while the run goes on and its result is stored.
    /// `None` waits for the run's end. The one method an implementation writes:
    /// [`execute`](Self::execute) and [`execute_with_deadline`](Self::execute_with_deadline)
    /// call it, and a server that may or may not have a deadline (a gRPC `grpc-timeout`) calls
    /// it directly.
    ///
    /// # Errors
    ///
    /// [`DedupError`]: conflict, the action's error, panic, full, in flight (Reject policy),
    /// lease expired, shutting down, the caller's deadline, and a shared tier's failures as
    /// [`DedupError::Action`].
    ///
    /// ```
    /// use idem_core::{Deadline, Fingerprint, Scope, Status};
    /// use idem_dedup::{DedupError, Deduplicator, Engine};
    /// use std::time::Duration;
    ///
    /// async fn serve<D: Deduplicator<Value = u64>>(
    ///     d: &D,
    ///     scope: &Scope,
    ///     timeout: Option<Duration>, // what the client asked for, if anything
    /// ) -> Result<u64, DedupError> {
    ///     let deadline = timeout.map(Deadline::after);
    ///     let out = d
    ///         .execute_until(scope, Fingerprint::of(b"sku=42"), deadline, |_| async { Ok(1001) })
    ///         .await?;
    ///     Ok(*out.value())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::<u64>::builder().build()?;
    /// let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
    /// assert_eq!(serve(&engine, &scope, Some(Duration::from_secs(5))).await?, 1001);
    /// assert_eq!(serve(&engine, &scope, None).await?, 1001); // replayed
    /// # Ok(()) }
    /// ```
    fn execute_until<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> impl Future<Output = Result<Outcome<Self::Value>, DedupError>> + Send
    where
        F: FnOnce(Self::Context) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Self::Value, Status>> + Send + 'static;

    /// Runs `action` once for `scope`, or shares the run or stored result of an earlier call with
    /// the same `fingerprint`: [`execute_until`](Self::execute_until) without a deadline.
    ///
    /// # Errors
    ///
    /// [`DedupError`]: conflict, the action's error, panic, full, in flight (Reject policy),
    /// lease expired, shutting down, and a shared tier's failures as [`DedupError::Action`].
    fn execute<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        action: F,
    ) -> impl Future<Output = Result<Outcome<Self::Value>, DedupError>> + Send
    where
        F: FnOnce(Self::Context) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Self::Value, Status>> + Send + 'static,
    {
        self.execute_until(scope, fingerprint, None, action)
    }

    /// As [`execute`](Self::execute), but this caller stops waiting at `deadline` with
    /// [`DedupError::DeadlineExceeded`]; the run goes on and its result is stored.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute), plus [`DedupError::DeadlineExceeded`].
    fn execute_with_deadline<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Deadline,
        action: F,
    ) -> impl Future<Output = Result<Outcome<Self::Value>, DedupError>> + Send
    where
        F: FnOnce(Self::Context) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Self::Value, Status>> + Send + 'static,
    {
        self.execute_until(scope, fingerprint, Some(deadline), action)
    }

    /// What is held for `scope`: in flight or completed, its age and time to expiry.
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`], or a shared tier's failure.
    fn lookup(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<EntryInfo>, DedupError>> + Send;

    /// Removes whatever is held for `scope`, here and in a shared tier; returns whether there was
    /// anything. The next call runs the action again.
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`], or a shared tier's failure.
    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// The (local) engine's counts, read without a message.
    fn stats(&self) -> Stats;
}

impl<V: Clone + Send + Sync + 'static> Deduplicator for Engine<V> {
    type Value = V;
    type Context = ();

    fn execute_until<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> impl Future<Output = Result<Outcome<V>, DedupError>> + Send
    where
        F: FnOnce(()) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, deadline, action)
    }

    fn lookup(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<EntryInfo>, DedupError>> + Send {
        Engine::lookup(self, scope)
    }

    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, DedupError>> + Send {
        Engine::forget(self, scope)
    }

    fn stats(&self) -> Stats {
        Engine::stats(self)
    }
}

impl<V, R, C> Deduplicator for TieredEngine<V, R, C>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    type Value = V;
    type Context = FencingToken;

    fn execute_until<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> impl Future<Output = Result<Outcome<V>, DedupError>> + Send
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, deadline, action)
    }

    fn lookup(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<EntryInfo>, DedupError>> + Send {
        TieredEngine::lookup(self, scope)
    }

    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, DedupError>> + Send {
        TieredEngine::forget(self, scope)
    }

    fn stats(&self) -> Stats {
        TieredEngine::local_stats(self)
    }
}
