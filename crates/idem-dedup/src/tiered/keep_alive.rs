//! The holder's keep-alive: its claim's lease renewed while the action runs.
//!
//! Why renew at all: without it a lease has to be longer than the slowest action, so a crashed
//! holder blocks its intent for that long, and a slow but live action is run a second time when
//! it outlasts the lease. With it the lease only has to cover a stall, and a crash is taken over
//! about one lease later.
//!
//! The renewals run in the action's own task, beside its future (never a task of their own): a
//! run that stalls, is cancelled or dies stops renewing with it, which is exactly when its claim
//! must lapse. At most one renewal is in flight; the next starts `renew_every` after the last
//! one started. When the action finishes while a renewal is in flight, that renewal is awaited
//! first, so none reaches the tier after the completion or release that follows.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use idem_core::run::Run as IntentRun;
use idem_core::{whole_millis, Code, Status};
use tokio::time::Instant;

use super::stats::{Event, Op};
use super::Inner;
use crate::codec::Codec;
use crate::remote::{Claim, Commit, RemoteTier};
use crate::trace::{self, warn_scope, ScopeFields};

/// Runs `work` (the claimed action) while renewing `claim`'s lease, from `claimed_at`, until the
/// work ends, a renewal finds the claim lost (then `run` is marked so), or the run has lasted the
/// run limit. Returns the work's output and when the claim's lease last started: the claim, or
/// the start of the last renewal that held (a lower bound on the tier's own moment).
pub(crate) async fn renewing<V, R, C, T>(
    inner: &Arc<Inner<V, R, C>>,
    claim: Claim<'_>,
    run: &IntentRun,
    claimed_at: Instant,
    work: impl Future<Output = T>,
) -> (T, Instant)
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    let cfg = &inner.cfg;
    let mut held = claimed_at;
    let Some(every) = cfg.renew_every else {
        return (work.await, held);
    };
    let stop_at = claimed_at + cfg.run_limit;
    let mut work = pin!(work);
    let mut next = claimed_at + every;
    loop {
        if next >= stop_at {
            // The run limit: no more renewals; the claim lapses one lease after the last.
            return (work.await, held);
        }
        tokio::select! {
            biased;
            out = &mut work => return (out, held),
            () = tokio::time::sleep_until(next) => {}
        }
        let sent = Instant::now();
        let renew = inner
            .counters
            .timed(Op::Renew, inner.remote.renew(claim, cfg.lease));
        let mut renew = pin!(renew);
        // The action keeps running while the renewal is out.
        let (answer, finished) = tokio::select! {
            biased;
            answer = &mut renew => (answer, None),
            out = &mut work => (renew.await, Some(out)),
        };
        let renewed = note(inner, claim, run, answer);
        if renewed == Renewed::Held {
            held = sent;
        }
        if let Some(out) = finished {
            return (out, held);
        }
        if renewed == Renewed::Lost {
            // Nothing left to keep: the action goes on, its completion will be fenced out.
            return (work.await, held);
        }
        next = sent + every;
    }
}

/// What one renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewed {
    /// The claim is still this run's; its lease starts again.
    Held,
    /// The tier failed: try again at the next tick.
    Failed,
    /// Another run holds the scope (or it is gone): the claim is lost.
    Lost,
}

/// Counts and reports one renewal's answer; marks the run lost when it is.
fn note<V, R, C>(
    inner: &Arc<Inner<V, R, C>>,
    claim: Claim<'_>,
    run: &IntentRun,
    answer: Result<Commit, Status>,
) -> Renewed
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    let cfg = &inner.cfg;
    match answer {
        Ok(Commit::Committed) => {
            inner.counters.bump(Event::Renewed);
            Renewed::Held
        }
        Ok(Commit::FencedOut) => {
            inner.counters.bump(Event::LeaseLost);
            run.mark_lease_lost();
            if trace::warn_enabled() {
                let f = ScopeFields::new(claim.scope, cfg.scope_logging);
                warn_scope!(
                    "idem_dedup.tier.lease_lost",
                    &*cfg.name,
                    &f,
                    token = claim.token.get(),
                    lease_ms = whole_millis(cfg.lease),
                    "lease lost: a renewal found that another run took the request over; this                      run goes on, but its result will not be stored"
                );
            }
            Renewed::Lost
        }
        Err(status) => {
            inner.counters.bump(Event::RenewFailed);
            // In an outage every running action fails its renewals: a debug event (alert on
            // the metric). A store that answers but refuses (a schema without the renewal
            // function, say) needs an operator: a warning.
            if status.code() != Code::Unavailable && trace::warn_enabled() {
                let f = ScopeFields::new(claim.scope, cfg.scope_logging);
                warn_scope!(
                    "idem_dedup.tier.renew_failed",
                    &*cfg.name,
                    &f,
                    token = claim.token.get(),
                    error = %status,
                    "lease renewal refused by the shared tier: the claim lapses with its lease                      while this run goes on"
                );
            } else {
                tracing::debug!(
                    name: "idem_dedup.tier.renew_failed",
                    target: "idem_dedup",
                    engine = &*cfg.name,
                    token = claim.token.get(),
                    error = %status,
                    "lease renewal failed: tried again at the next tick"
                );
            }
            Renewed::Failed
        }
    }
}
