//! The local leader's run against the tier: claim, then run / replay / wait / refuse; complete or
//! release, and repair what failed.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use idem_core::run::{Run as IntentRun, RunStart};
use idem_core::{whole_millis, Code, Fingerprint, Reason, Scope, Status};
use tokio::time::Instant;

use super::builder::OnUnavailable;
use super::keep_alive;
use super::repair::{release, spawn_complete_retry};
use super::stats::{Event, Op};
use super::{Inner, Stored, Via};
use crate::codec::Codec;
use crate::remote::{Claim, ClaimOutcome, Commit, FencingToken, OwnerId, RemoteTier};
use crate::trace::{self, warn_scope, ScopeFields};

/// The local leader's run: claim, then run / replay / wait / refuse.
pub(crate) async fn remote_run<V, R, C, F, Fut>(
    inner: Arc<Inner<V, R, C>>,
    scope: Scope,
    fp: Fingerprint,
    action: Option<F>,
    owner: OwnerId,
) -> Result<Stored<V>, Status>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
    F: FnOnce(FencingToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let Some(action) = action else {
        return Err(Status::new(
            Code::Internal,
            "the action of this call was already taken by another run",
        ));
    };
    let cfg = &inner.cfg;
    let give_up = Instant::now() + cfg.max_wait;
    let mut poll = cfg.poll_first;
    let mut waited = false;
    loop {
        // A result of this instance whose completion is still being written is the answer: the
        // side effect happened, and the record shows it as still held.
        if let Some(kept) = inner.unrecorded.get(&scope) {
            return Ok(Stored {
                via: Via::Retained,
                ..kept
            });
        }
        let claim = inner.remote.claim(&scope, fp, cfg.lease, owner);
        let claim = match inner.counters.timed(Op::Claim, claim).await {
            Ok(claim) => claim,
            Err(status) => {
                return match cfg.on_unavailable {
                    OnUnavailable::FailClosed => {
                        inner.counters.bump(Event::Unavailable);
                        // One per call in an outage: not a warning (alert on the metric).
                        tracing::debug!(
                            name: "idem_dedup.tier.unavailable",
                            target: "idem_dedup",
                            engine = &*cfg.name,
                            error = %status,
                            "shared tier unavailable: the call fails closed"
                        );
                        Err(status)
                    }
                    OnUnavailable::FailOpen => {
                        inner.counters.bump(Event::FailOpen);
                        if trace::warn_enabled() {
                            let f = ScopeFields::new(&scope, cfg.scope_logging);
                            warn_scope!(
                                "idem_dedup.tier.fail_open",
                                &*cfg.name,
                                &f,
                                error = %status,
                                "shared tier unavailable: running the action without a claim \
                                 (fail-open); another instance may run it too"
                            );
                        }
                        let run = IntentRun::new(&scope, None, RunStart::Fresh);
                        let value = run.attach(action(FencingToken::UNFENCED)).await?;
                        Ok(Stored {
                            value,
                            via: Via::FailOpen,
                            token: FencingToken::UNFENCED,
                            recorded: false,
                        })
                    }
                };
            }
        };
        match claim {
            ClaimOutcome::Claimed { token, reclaimed } => {
                if reclaimed {
                    inner.counters.bump(Event::Reclaimed);
                }
                let claim = Claim {
                    scope: &scope,
                    fingerprint: fp,
                    token,
                    owner,
                };
                // A claim taken back from this engine's own orphan, or taken after another
                // instance's claim lapsed, follows a run that may have begun its side effects.
                let start = if reclaimed || waited {
                    RunStart::TakeOver
                } else {
                    RunStart::Fresh
                };
                return run_claimed(&inner, claim, start, action).await;
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
                    recorded: true,
                });
            }
            ClaimOutcome::Conflict => {
                inner.counters.bump(Event::Conflict);
                return Err(Status::new(
                    Code::FailedPrecondition,
                    "idempotency key reused with a different request: another instance holds or \
                     stored this key with another request body",
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
                            "another instance still runs this request after {} ms of waiting",
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
                let wait = inner.remote.wait(&scope, holder, at_most);
                if inner.counters.timed(Op::Wait, wait).await.is_err() {
                    // Tier trouble: pause, then the next claim reports it if it lasts.
                    tokio::time::sleep(at_most).await;
                }
                poll = (poll * 2).min(cfg.poll_max);
            }
        }
    }
}

/// Runs the action under a claim, renewing its lease meanwhile, then completes (or releases
/// after a failure or panic).
async fn run_claimed<V, R, C, F, Fut>(
    inner: &Arc<Inner<V, R, C>>,
    claim: Claim<'_>,
    start: RunStart,
    action: F,
) -> Result<Stored<V>, Status>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
    F: FnOnce(FencingToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let token = claim.token;
    let claimed_at = Instant::now();
    let mut held_since = claimed_at;
    // K7: the action runs as the current run, with this claim's token.
    let run = IntentRun::new(claim.scope, Some(token.get()), start);
    let result = match std::panic::catch_unwind(AssertUnwindSafe(|| action(token))) {
        Ok(fut) => {
            // D8: the lease is renewed while the action runs, in this task.
            let work = AssertUnwindSafe(run.clone().attach(fut)).catch_unwind();
            let (result, since) = keep_alive::renewing(inner, claim, &run, claimed_at, work).await;
            held_since = since;
            result
        }
        Err(panic) => Err(panic),
    };
    let result = match result {
        Ok(result) => result,
        Err(panic) => {
            // Let the next call run again at once rather than after the lease; then report the
            // panic as the engine does (E4).
            release(inner, claim, held_since).await;
            inner.counters.bump(Event::Failed);
            std::panic::resume_unwind(panic)
        }
    };
    let value = match result {
        Ok(value) => value,
        Err(status) => {
            release(inner, claim, held_since).await;
            inner.counters.bump(Event::Failed);
            return Err(status);
        }
    };
    let bytes = match inner.codec.encode(&value) {
        Ok(bytes) => bytes,
        Err(status) => {
            release(inner, claim, held_since).await;
            inner.counters.bump(Event::Failed);
            return Err(status);
        }
    };
    let cfg = &inner.cfg;
    let complete = inner.remote.complete(claim, bytes, cfg.ttl);
    match inner.counters.timed(Op::Complete, complete).await {
        Ok(Commit::Committed) => {
            inner.counters.bump(Event::Executed);
            Ok(Stored {
                value,
                via: Via::Ran,
                token,
                recorded: true,
            })
        }
        Ok(Commit::FencedOut) => {
            inner.counters.bump(Event::FencedOut);
            if trace::warn_enabled() {
                let f = ScopeFields::new(claim.scope, cfg.scope_logging);
                warn_scope!(
                    "idem_dedup.tier.fenced_out",
                    &*cfg.name,
                    &f,
                    token = token.get(),
                    lease_ms = whole_millis(cfg.lease),
                    "fenced out: the claim's lease lapsed and another run claimed the scope; \
                     this run's result was not stored"
                );
            }
            Err(fenced_out(inner.cfg.lease, token))
        }
        Err(status) => {
            // The side effect happened: the caller gets its result (kept here), marked not
            // recorded, and writing it is retried while the claim is still this run's.
            inner.counters.bump(Event::Unrecorded);
            if trace::warn_enabled() {
                let f = ScopeFields::new(claim.scope, cfg.scope_logging);
                warn_scope!(
                    "idem_dedup.tier.unrecorded",
                    &*cfg.name,
                    &f,
                    token = token.get(),
                    error = %status,
                    "completion not written: the result is kept on this instance and writing it \
                     is retried in the background"
                );
            }
            let stored = Stored {
                value,
                via: Via::Ran,
                token,
                recorded: false,
            };
            inner.unrecorded.insert(claim.scope.clone(), stored.clone());
            spawn_complete_retry(
                inner.clone(),
                claim.scope.clone(),
                claim.fingerprint,
                token,
                claim.owner,
                stored.value.clone(),
            );
            Ok(stored)
        }
    }
}

/// `ABORTED` / `FENCED_OUT`: the run's result was not stored because a later claim took over.
pub(crate) fn fenced_out(lease: Duration, token: FencingToken) -> Status {
    Status::new(
        Code::Aborted,
        format!(
            "this run lost its claim: its lease ({} ms) lapsed before it was renewed and \
             another run took the request over (fencing token {token} is stale); this run's result was not stored",
            lease.as_millis()
        ),
    )
    .with_reason(Reason::FENCED_OUT)
}
