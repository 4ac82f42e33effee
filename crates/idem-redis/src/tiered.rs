//! [`TieredEngine`]: the local engine in front, a [`RemoteTier`] behind it (SPEC D1–D3).

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use idem_core::{Code, Deadline, Fingerprint, Reason, Scope, Status};
use idem_dedup::remote::{ClaimOutcome, Commit, FencingToken, RemoteTier};
use idem_dedup::{DedupError, Engine, OutcomeKind, ShutdownReport, Stats};
use idem_retry::{Scheduler, TokioScheduler};
use tokio::time::Instant;

use crate::builder::{OnUnavailable, TierConfig, TieredBuilder};
use crate::codec::{BytesCodec, Codec};
use crate::outcome::{Source, TieredOutcome};
use crate::stats::{Counters, Event, TierStats};
use crate::RedisTier;

/// How the local engine's copy of a value came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Ran,
    RemoteReplay,
    RemoteJoin,
    FailOpen,
}

/// What the local engine stores for a scope: the value and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Stored<V> {
    value: V,
    via: Via,
    token: FencingToken,
}

pub(crate) struct Inner<V, R, C> {
    pub(crate) local: Engine<Stored<V>>,
    pub(crate) remote: R,
    pub(crate) codec: C,
    pub(crate) cfg: TierConfig,
    pub(crate) counters: Counters,
}

/// Deduplication across instances: each instance's [`Engine`] coalesces its own callers, and a
/// [`RemoteTier`] (by default [`RedisTier`]) arbitrates between instances (SPEC D1–D3).
///
/// A call goes to the local engine first. A local duplicate joins or replays there without any
/// Redis call; the local leader goes to the remote tier: it claims the scope (and runs the action
/// with the claim's [`FencingToken`]), or gets another instance's stored result, or waits for
/// another instance's run, or gets a conflict. So Redis sees at most one claim per scope per
/// instance at a time, and replays of results this instance already holds cost no round trip.
///
/// Cheap to clone: clones share the engine.
///
/// # Concurrent calls with the same scope
///
/// Of N concurrent calls spread over any number of instances, exactly one runs the action
/// ([`OutcomeKind::Executed`], [`Source::ThisInstance`]); the others get a clone of its value:
/// `Joined` if they waited for the run, `Replayed` if it was stored before they asked, with
/// [`Source::OtherInstance`] when the value came through Redis. Another fingerprint under the same
/// scope gets `FAILED_PRECONDITION` on every instance.
///
/// # Errors
///
/// [`DedupError`], whose [`code`](DedupError::code) maps to gRPC and HTTP. The tier adds, as
/// [`DedupError::Action`] statuses:
///
/// | code | reason | when |
/// |---|---|---|
/// | `UNAVAILABLE` | `UPSTREAM_UNAVAILABLE` | Redis failed or passed its time limit (fail-closed); nothing ran |
/// | `FAILED_PRECONDITION` | `IDEMPOTENCY_CONFLICT` | another instance holds or stored the scope with another fingerprint |
/// | `ABORTED` | `FENCED_OUT` | the action ran but its lease lapsed and another run took over; its result was not stored |
/// | `UNAVAILABLE` | `REQUEST_IN_FLIGHT` | another instance still held the scope after `max_wait` (retry-after hint) |
///
/// # Cancellation safety
///
/// As [`Engine::execute`]: a dropped call never leaves half a side effect; the run (claim, action,
/// completion) continues in a task and its result is stored for the retry.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Fingerprint, Scope, Status};
/// use idem_redis::{RedisTier, TieredEngine};
///
/// let tier = RedisTier::builder().connect("redis://127.0.0.1:6379/").await?;
/// let engine = TieredEngine::<String>::builder(tier).build()?;
/// let scope = Scope::parse("tenant-1", "/shop.v1.Shop/CreateOrder", "order-0001")?;
/// let out = engine
///     .execute(&scope, Fingerprint::of(b"qty=1"), |token| async move {
///         // Pass `token` to the store that takes the side effect.
///         Ok::<_, Status>(format!("order-1001 (fencing token {token})"))
///     })
///     .await?;
/// println!("{:?} from {:?}: {}", out.kind(), out.source(), out.value());
/// # Ok(()) }
/// ```
pub struct TieredEngine<V, R = RedisTier, C = BytesCodec> {
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

impl<V> TieredEngine<V, RedisTier, BytesCodec>
where
    V: Clone + Send + Sync + 'static,
{
    /// A builder over a [`RedisTier`] (or any [`RemoteTier`]), with every default (see
    /// [`TieredBuilder`]).
    pub fn builder<R: RemoteTier>(remote: R) -> TieredBuilder<V, R, BytesCodec> {
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

    /// Runs `action` once for `scope` across every instance that shares the remote tier, or
    /// shares the run or stored result of an earlier call (SPEC D1, E1). The action gets the
    /// claim's [`FencingToken`]; pass it to the store that takes the side effect.
    ///
    /// # Errors
    ///
    /// See the type docs.
    pub async fn execute<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<TieredOutcome<V>, DedupError>
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, None, action).await
    }

    /// As [`execute`](Self::execute), but this caller stops waiting at `deadline` with
    /// [`DedupError::DeadlineExceeded`] (SPEC D2, E5); the run or the wait for another instance
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
    ) -> Result<TieredOutcome<V>, DedupError>
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, Some(deadline), action).await
    }

    async fn call<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<TieredOutcome<V>, DedupError>
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let inner = self.inner.clone();
        let owned = scope.clone();
        let run = move || remote_run(inner, owned, fingerprint, action);
        let local = &self.inner.local;
        let out = match deadline {
            None => local.execute(scope, fingerprint, run).await?,
            Some(d) => {
                local
                    .execute_with_deadline(scope, fingerprint, d, run)
                    .await?
            }
        };
        let (kind, expires_at) = (out.kind(), out.expires_at());
        let stored = out.into_value();
        let (kind, source, token) = match (kind, stored.via) {
            (kind, Via::Ran) => (kind, Source::ThisInstance, Some(stored.token)),
            (OutcomeKind::Executed, Via::RemoteReplay) => {
                (OutcomeKind::Replayed, Source::OtherInstance, None)
            }
            (OutcomeKind::Executed, Via::RemoteJoin) => {
                (OutcomeKind::Joined, Source::OtherInstance, None)
            }
            (kind, Via::RemoteReplay | Via::RemoteJoin) => (kind, Source::OtherInstance, None),
            (kind, Via::FailOpen) => (kind, Source::FailOpen, None),
        };
        Ok(TieredOutcome {
            value: stored.value,
            kind,
            source,
            token,
            expires_at,
        })
    }

    /// What the tier's claim loop did (lock-free counters). Also reported to the `metrics` facade
    /// (see [`metrics`](crate::metrics)).
    pub fn stats(&self) -> TierStats {
        self.inner.counters.snapshot()
    }

    /// The local engine's counts (SPEC E9).
    pub fn local_stats(&self) -> Stats {
        self.inner.local.stats()
    }

    /// The remote tier.
    pub fn remote(&self) -> &R {
        &self.inner.remote
    }

    /// Shuts the local engine down (SPEC E10); records already in Redis are untouched, and
    /// claims of runs that do not finish lapse with their leases.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        self.inner.local.shutdown(grace).await
    }
}

/// The local leader's run: claim, then run / replay / wait / refuse.
async fn remote_run<V, R, C, F, Fut>(
    inner: Arc<Inner<V, R, C>>,
    scope: Scope,
    fp: Fingerprint,
    action: F,
) -> Result<Stored<V>, Status>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
    F: FnOnce(FencingToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let cfg = &inner.cfg;
    let give_up = Instant::now() + cfg.max_wait;
    let mut poll = cfg.poll_first;
    let mut waited = false;
    loop {
        let claim = match inner.remote.claim(&scope, fp, cfg.lease).await {
            Ok(claim) => claim,
            Err(status) => {
                return match cfg.on_unavailable {
                    OnUnavailable::FailClosed => {
                        inner.counters.bump(Event::Unavailable);
                        Err(status)
                    }
                    OnUnavailable::FailOpen => {
                        inner.counters.bump(Event::FailOpen);
                        let value = action(FencingToken::UNFENCED).await?;
                        Ok(Stored {
                            value,
                            via: Via::FailOpen,
                            token: FencingToken::UNFENCED,
                        })
                    }
                };
            }
        };
        match claim {
            ClaimOutcome::Claimed { token } => {
                return run_claimed(&inner, &scope, token, action).await
            }
            ClaimOutcome::Completed(bytes) => {
                let value = inner.codec.decode(&bytes)?;
                let (via, event) = if waited {
                    (Via::RemoteJoin, Event::RemoteJoined)
                } else {
                    (Via::RemoteReplay, Event::RemoteReplayed)
                };
                inner.counters.bump(event);
                return Ok(Stored {
                    value,
                    via,
                    token: FencingToken::UNFENCED,
                });
            }
            ClaimOutcome::Conflict => {
                inner.counters.bump(Event::Conflict);
                return Err(Status::new(
                    Code::FailedPrecondition,
                    "idempotency key reused with a different request (K4): another instance holds \
                     or stored this scope with another fingerprint",
                )
                .with_reason(Reason::IDEMPOTENCY_CONFLICT));
            }
            ClaimOutcome::InFlightElsewhere { holder, lease_left } => {
                let now = Instant::now();
                if now >= give_up {
                    inner.counters.bump(Event::WaitTimeout);
                    return Err(Status::new(
                        Code::Unavailable,
                        format!(
                            "another instance still runs this scope after {} ms of waiting",
                            cfg.max_wait.as_millis()
                        ),
                    )
                    .with_reason(Reason::REQUEST_IN_FLIGHT)
                    .with_retry_after(lease_left.max(cfg.poll_first)));
                }
                waited = true;
                let at_most = poll
                    .min(lease_left + Duration::from_millis(1))
                    .min(give_up - now);
                if inner.remote.wait(&scope, holder, at_most).await.is_err() {
                    // Redis trouble: pause, then the next claim reports it if it lasts.
                    TokioScheduler.sleep(at_most).await;
                }
                poll = (poll * 2).min(cfg.poll_max);
            }
        }
    }
}

/// Runs the action under a claim, then completes (or releases after a failure or panic).
async fn run_claimed<V, R, C, F, Fut>(
    inner: &Arc<Inner<V, R, C>>,
    scope: &Scope,
    token: FencingToken,
    action: F,
) -> Result<Stored<V>, Status>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
    F: FnOnce(FencingToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let result = match std::panic::catch_unwind(AssertUnwindSafe(|| action(token))) {
        Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await,
        Err(panic) => Err(panic),
    };
    let result = match result {
        Ok(result) => result,
        Err(panic) => {
            // Let the next call run again at once rather than after the lease; then report the
            // panic as the engine does (SPEC E4).
            let _ = inner.remote.release(scope, token).await;
            inner.counters.bump(Event::Failed);
            std::panic::resume_unwind(panic)
        }
    };
    let value = match result {
        Ok(value) => value,
        Err(status) => {
            let _ = inner.remote.release(scope, token).await;
            inner.counters.bump(Event::Failed);
            return Err(status);
        }
    };
    let bytes = match inner.codec.encode(&value) {
        Ok(bytes) => bytes,
        Err(status) => {
            let _ = inner.remote.release(scope, token).await;
            inner.counters.bump(Event::Failed);
            return Err(status);
        }
    };
    match inner
        .remote
        .complete(scope, token, bytes, inner.cfg.ttl)
        .await
    {
        Ok(Commit::Committed) => {
            inner.counters.bump(Event::Executed);
            Ok(Stored {
                value,
                via: Via::Ran,
                token,
            })
        }
        Ok(Commit::FencedOut) => {
            inner.counters.bump(Event::FencedOut);
            Err(Status::new(
                Code::Aborted,
                format!(
                    "the claim's lease ({} ms) lapsed before the action finished and another run \
                     took over (fencing token {token} is stale); this run's result was not stored",
                    inner.cfg.lease.as_millis()
                ),
            )
            .with_reason(Reason::new("FENCED_OUT")))
        }
        Err(_status) => {
            // The side effect happened: give the caller its result (kept locally) and keep
            // trying to store it while the claim's lease lasts, so other instances see it.
            inner.counters.bump(Event::CompleteFailed);
            spawn_complete_retry(inner.clone(), scope.clone(), token, value.clone());
            Ok(Stored {
                value,
                via: Via::Ran,
                token,
            })
        }
    }
}

fn spawn_complete_retry<V, R, C>(
    inner: Arc<Inner<V, R, C>>,
    scope: Scope,
    token: FencingToken,
    value: V,
) where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    tokio::spawn(async move {
        let until = Instant::now() + inner.cfg.lease;
        let mut delay = inner.cfg.poll_first;
        while Instant::now() + delay < until {
            TokioScheduler.sleep(delay).await;
            let Ok(bytes) = inner.codec.encode(&value) else {
                return;
            };
            if inner
                .remote
                .complete(&scope, token, bytes, inner.cfg.ttl)
                .await
                .is_ok()
            {
                return;
            }
            delay = (delay * 2).min(inner.cfg.poll_max);
        }
    });
}
