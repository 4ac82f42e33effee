//! [`TieredEngine`]: the local engine in front, a [`RemoteTier`] behind it.
//!
//! One engine deduplicates the callers of one process. Behind a load balancer a client's retry
//! can land on another instance; a tiered engine puts a shared record (Redis in `idem-redis`,
//! PostgreSQL in `idem-postgres`, or any [`RemoteTier`]) behind each instance's engine:
//!
//! - **Local first.** The local [`Engine`] coalesces an instance's callers (one claim per scope
//!   per instance) and replays results it holds without a tier round trip.
//! - **Claim, lease, fencing.** The local leader claims the scope in the tier (a lease and a
//!   [`FencingToken`]), runs the action with the token, and completes (or releases after a
//!   failure). A holder that completes after another claimed is fenced out (`ABORTED` /
//!   `FENCED_OUT`) and never overwrites the new holder's result.
//! - **Leases renewed while the action runs.** The holder renews its lease every third of it
//!   ([`TieredBuilder::renew_every`]), in the action's own task, on the tier's clock. Why: a
//!   lease that must outlast the slowest action makes users choose between a slow takeover after
//!   a crash and a second run of a slow but live action. Renewed, a short lease gives both: a
//!   live action keeps its claim however long it runs (up to
//!   [`LocalCache::in_flight_timeout`](crate::LocalCache::in_flight_timeout)), and a holder that
//!   crashed or stalled loses it about one lease after its last renewal. A renewal is fenced like
//!   a completion: one that finds another run holding the scope marks the action's
//!   [`Run`](idem_core::run::Run) lost ([`is_lease_lost`](idem_core::run::Run::is_lease_lost),
//!   [`lease_lost`](idem_core::run::Run::lease_lost)), so it can stop its further side effects;
//!   the action is not cancelled, and its completion is fenced out. A renewal the tier fails is
//!   tried again at the next tick. It costs at most `lease / renew_every` + 1 round trips per
//!   lease, none for an action shorter than the interval.
//! - **Cross-instance joins.** An instance that meets another's claim waits for the tier's notice
//!   (bounded polling as a fallback, never a busy loop), then gets the result, or — if the holder
//!   died — the claim, after its lease.
//! - **Fail closed.** Tier down or slow: `UNAVAILABLE`, retryable, and no action runs without a
//!   claim ([`OnUnavailable::FailOpen`] is an opt-in, counted).
//! - **Faults of its own making are repaired.** A completion that fails is retried in the
//!   background while the claim is still this run's, and the caller's [`Outcome::is_recorded`]
//!   says whether it was written; failed releases are retried; a claim whose reply was lost is
//!   taken back by its owner at once (see the [`remote`](crate::remote) docs on owners).
//! - **The local engine is a cache.** It may drop results before the tier does (its own TTL
//!   and capacity); when it is full, calls go to the tier directly instead of being refused.
//!
//! # Examples
//!
//! Two instances (two engines) over one shared record; here the record is the in-memory tier of
//! the [`remote`](crate::remote) module's example, reduced to what this needs:
//!
//! ```
//! # use idem_core::{Fingerprint, Scope, Status};
//! # use idem_dedup::remote::*;
//! # use std::collections::HashMap;
//! # use std::future::{ready, Future};
//! # use std::sync::{Arc, Mutex};
//! # use std::time::Duration;
//! # #[derive(Default, Clone)]
//! # struct Shared(Arc<Mutex<HashMap<Scope, Option<Vec<u8>>>>>);
//! # impl RemoteTier for Shared {
//! #     fn claim(&self, s: &Scope, _: Fingerprint, _: Duration, _: OwnerId) -> impl Future<Output = Result<ClaimOutcome, Status>> + Send {
//! #         let mut m = self.0.lock().unwrap();
//! #         ready(Ok(match m.get(s) {
//! #             Some(Some(v)) => ClaimOutcome::Completed(v.clone()),
//! #             Some(None) => ClaimOutcome::InFlightElsewhere { holder: FencingToken::new(1), lease_left: Duration::from_millis(5) },
//! #             None => { m.insert(s.clone(), None); ClaimOutcome::Claimed { token: FencingToken::new(1), reclaimed: false } }
//! #         }))
//! #     }
//! #     fn complete(&self, c: Claim<'_>, v: Vec<u8>, _: Duration) -> impl Future<Output = Result<Commit, Status>> + Send {
//! #         self.0.lock().unwrap().insert(c.scope.clone(), Some(v));
//! #         ready(Ok(Commit::Committed))
//! #     }
//! #     fn renew(&self, c: Claim<'_>, _: Duration) -> impl Future<Output = Result<Commit, Status>> + Send {
//! #         let held = matches!(self.0.lock().unwrap().get(c.scope), Some(None));
//! #         ready(Ok(if held { Commit::Committed } else { Commit::FencedOut }))
//! #     }
//! #     fn release(&self, c: Claim<'_>) -> impl Future<Output = Result<Commit, Status>> + Send {
//! #         self.0.lock().unwrap().remove(c.scope);
//! #         ready(Ok(Commit::Committed))
//! #     }
//! #     fn wait(&self, _: &Scope, _: FencingToken, _: Duration) -> impl Future<Output = Result<(), Status>> + Send { ready(Ok(())) }
//! #     fn lookup(&self, _: &Scope) -> impl Future<Output = Result<Option<RemoteRecord>, Status>> + Send { ready(Ok(None)) }
//! #     fn forget(&self, s: &Scope) -> impl Future<Output = Result<bool, Status>> + Send { ready(Ok(self.0.lock().unwrap().remove(s).is_some())) }
//! # }
//! use idem_dedup::tiered::TieredEngine;
//! use idem_dedup::{OutcomeKind, Source};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let record = Shared::default(); // what both instances reach
//! let a = TieredEngine::<String, _>::builder(record.clone()).build()?;
//! let b = TieredEngine::<String, _>::builder(record).build()?;
//! let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
//! let fp = Fingerprint::of(b"qty=1");
//!
//! let on_a = a.execute(&scope, fp, |token| async move { Ok(format!("order-1001 ({token})")) }).await?;
//! let on_b = b.execute(&scope, fp, |_| async { Ok::<_, Status>("order-1002".into()) }).await?;
//! assert_eq!((on_a.kind(), on_a.source()), (OutcomeKind::Executed, Source::ThisInstance));
//! assert_eq!((on_b.kind(), on_b.source()), (OutcomeKind::Replayed, Source::OtherInstance));
//! assert_eq!(on_b.value(), "order-1001 (1)"); // one order, seen by both instances
//! # Ok(()) }
//! ```

mod builder;
mod call;
mod keep_alive;
mod repair;
mod run;
mod stats;
mod stored;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Deadline, Fingerprint, Scope, Status};

pub use builder::{OnUnavailable, TieredBuilder};
pub use stats::TierStats;

use crate::codec::{BytesCodec, Codec};
use crate::remote::{FencingToken, OwnerId, RecordState, RemoteTier};
use crate::{
    DedupError, Engine, EntryInfo, EntryState, Outcome, OutcomeKind, ShutdownReport, Stats,
};
use builder::TierConfig;
use stats::{Counters, Op};
use stored::{Stored, Unrecorded, Via};

pub(crate) struct Inner<V, R, C> {
    pub(crate) local: Engine<Stored<V>>,
    pub(crate) remote: R,
    pub(crate) codec: C,
    pub(crate) cfg: TierConfig,
    pub(crate) counters: Counters,
    pub(crate) unrecorded: Unrecorded<V>,
}

/// Deduplication across instances: each instance's [`Engine`] coalesces its own callers, and a
/// [`RemoteTier`] arbitrates between instances; see the [module docs](self).
///
/// A call goes to the local engine first. A local duplicate joins or replays there without any
/// tier call; the local leader goes to the tier: it claims the scope (and runs the action with
/// the claim's [`FencingToken`]), or gets another instance's stored result, or waits for another
/// instance's run, or gets a conflict. So the tier sees at most one claim per scope per instance
/// at a time, and replays of results this instance already holds cost no round trip.
///
/// Cheap to clone: clones share the engine. It implements [`Deduplicator`](crate::Deduplicator),
/// so the tower layer runs over it as over an [`Engine`].
///
/// # Concurrent calls with the same scope
///
/// Of N concurrent calls spread over any number of instances, exactly one runs the action
/// ([`OutcomeKind::Executed`], [`Source::ThisInstance`](crate::Source::ThisInstance)); the others get a clone of its value:
/// `Joined` if they waited for the run, `Replayed` if it was stored before they asked, with
/// [`Source::OtherInstance`](crate::Source::OtherInstance) when the value came through the tier. Another fingerprint under the
/// same scope gets `FAILED_PRECONDITION` on every instance.
///
/// # Errors
///
/// [`DedupError`], whose [`code`](DedupError::code) maps to gRPC and HTTP. The tier adds, as
/// [`DedupError::Action`] statuses:
///
/// | code | reason | when |
/// |---|---|---|
/// | `UNAVAILABLE` | `UPSTREAM_UNAVAILABLE` | the tier failed or passed its time limit (fail-closed); nothing ran |
/// | `FAILED_PRECONDITION` | `IDEMPOTENCY_CONFLICT` | another instance holds or stored the scope with another fingerprint |
/// | `ABORTED` | `FENCED_OUT` | the action ran, its lease lapsed unrenewed (a stall, the tier out of reach) and another run claimed the scope; this result was not stored |
/// | `UNAVAILABLE` | `REQUEST_IN_FLIGHT` | another instance still held the scope after `max_wait` (retry-after hint) |
///
/// # Cancellation safety
///
/// As [`Engine::execute`]: a dropped call never leaves half a side effect; the run (claim, action,
/// completion) continues in a task and its result is stored for the retry.
pub struct TieredEngine<V, R, C = BytesCodec> {
    inner: Arc<Inner<V, R, C>>,
}

impl<V, R, C> Clone for TieredEngine<V, R, C> {
    fn clone(&self) -> Self {
        TieredEngine {
            inner: self.inner.clone(),
        }
    }
}

impl<V, R: fmt::Debug, C: fmt::Debug> fmt::Debug for TieredEngine<V, R, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TieredEngine")
            .field("local", &self.inner.local)
            .field("remote", &self.inner.remote)
            .field("codec", &self.inner.codec)
            .field("config", &self.inner.cfg)
            .finish()
    }
}

impl<V, R> TieredEngine<V, R, BytesCodec>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
{
    /// A builder over `remote`, with every default (see [`TieredBuilder`]). Name the value type
    /// with `TieredEngine::<V, _>::builder(tier)`, or let it be inferred.
    pub fn builder(remote: R) -> TieredBuilder<V, R, BytesCodec> {
        TieredBuilder::new(remote)
    }
}

impl<V, R, C> TieredEngine<V, R, C>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    pub(crate) fn from_parts(inner: Inner<V, R, C>) -> Self {
        TieredEngine {
            inner: Arc::new(inner),
        }
    }

    /// Runs `action` once for `scope` across every instance that shares the tier, or shares the
    /// run or stored result of an earlier call. The action gets the claim's
    /// [`FencingToken`]; pass it to the store that takes the side effect.
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
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, None, action).await
    }

    /// As [`execute`](Self::execute), but this caller stops waiting at `deadline` with
    /// [`DedupError::DeadlineExceeded`]; the run or the wait for another instance
    /// goes on, and its result is kept here for the retry.
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
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, Some(deadline), action).await
    }

    /// Looks a scope up: the local engine's entry if it holds one, else the tier's record.
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`], or the tier's failure as [`DedupError::Action`].
    pub async fn lookup(&self, scope: &Scope) -> Result<Option<EntryInfo>, DedupError> {
        if let Some(info) = self.inner.local.lookup(scope).await? {
            return Ok(Some(info));
        }
        let inner = &self.inner;
        let lookup = inner.remote.lookup(scope);
        let record = inner
            .counters
            .timed(Op::Lookup, lookup)
            .await
            .map_err(action_error)?;
        let cfg = &self.inner.cfg;
        Ok(record.map(|r| {
            let (state, full) = match r.state {
                RecordState::InFlight { .. } => (EntryState::InFlight { waiters: 0 }, cfg.lease),
                RecordState::Completed => (EntryState::Completed, cfg.ttl),
            };
            EntryInfo {
                state,
                age: r
                    .expires_in
                    .map_or(Duration::ZERO, |left| full.saturating_sub(left)),
                expires_in: match r.state {
                    RecordState::InFlight { .. } => None,
                    RecordState::Completed => r.expires_in,
                },
            }
        }))
    }

    /// Removes whatever this instance and the tier hold for `scope`; returns whether there was
    /// anything. The next call, on any instance, runs the action again (other
    /// instances' local copies live on until their local TTL).
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`], or the tier's failure as [`DedupError::Action`].
    pub async fn forget(&self, scope: &Scope) -> Result<bool, DedupError> {
        let here = self.inner.local.forget(scope).await?;
        self.inner.unrecorded.remove(scope);
        let forget = self.inner.remote.forget(scope);
        let there = self
            .inner
            .counters
            .timed(Op::Forget, forget)
            .await
            .map_err(action_error)?;
        Ok(here || there)
    }

    /// What the tier's claim loop did (lock-free counters). Also reported to the `metrics` facade
    /// (see [`metrics`](crate::metrics)).
    pub fn stats(&self) -> TierStats {
        self.inner.counters.snapshot()
    }

    /// The local engine's counts.
    pub fn local_stats(&self) -> Stats {
        self.inner.local.stats()
    }

    /// The remote tier.
    pub fn remote(&self) -> &R {
        &self.inner.remote
    }

    /// The id that names this engine's claims in the tier.
    pub fn owner(&self) -> OwnerId {
        self.inner.cfg.owner
    }

    /// Shuts the local engine down; records already in the tier are untouched, and
    /// claims of runs that do not finish lapse with their leases.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        self.inner.local.shutdown(grace).await
    }
}

fn action_error(status: Status) -> DedupError {
    DedupError::Action {
        status,
        outcome: OutcomeKind::Executed,
    }
}
