//! What a run does about the tier's faults after its action ended: a release that failed is
//! retried until the claim's lease ends, a completion that failed is retried while the claim is
//! still this run's.

use std::sync::Arc;

use idem_core::{Fingerprint, Scope};
use tokio::time::Instant;

use super::stats::{Event, Op};
use super::Inner;
use crate::codec::Codec;
use crate::remote::{Claim, Commit, FencingToken, OwnerId, RemoteTier};
use crate::trace::{self, warn_scope, ScopeFields};

/// Releases a claim after a failure; if the tier fails, counts it, logs it and retries in the
/// background until the lease ends, one lease after `held_since` (the claim or its last
/// renewal; after that the claim lapses by itself, and this engine would take it back at its
/// next claim anyway).
pub(super) async fn release<V, R, C>(
    inner: &Arc<Inner<V, R, C>>,
    claim: Claim<'_>,
    held_since: Instant,
) where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    let release = inner.remote.release(claim);
    let Err(status) = inner.counters.timed(Op::Release, release).await else {
        return;
    };
    inner.counters.bump(Event::ReleaseFailed);
    if trace::warn_enabled() {
        let cfg = &inner.cfg;
        let f = ScopeFields::new(claim.scope, cfg.scope_logging);
        warn_scope!(
            "idem_dedup.tier.release_failed",
            &*cfg.name,
            &f,
            token = claim.token.get(),
            error = %status,
            "release failed: retrying in the background until the claim's lease ends"
        );
    }
    let inner = inner.clone();
    let (scope, fingerprint, token, owner) = (
        claim.scope.clone(),
        claim.fingerprint,
        claim.token,
        claim.owner,
    );
    let until = held_since + inner.cfg.lease;
    tokio::spawn(async move {
        let claim = Claim {
            scope: &scope,
            fingerprint,
            token,
            owner,
        };
        let mut delay = inner.cfg.poll_first;
        while Instant::now() + delay < until {
            tokio::time::sleep(delay).await;
            let release = inner.remote.release(claim);
            if inner.counters.timed(Op::Release, release).await.is_ok() {
                return;
            }
            delay = (delay * 2).min(inner.cfg.poll_max);
        }
    });
}

/// Keeps trying to write a completion that failed, while the claim is still this run's: until
/// the tier answers (written, or a later claim took over) or the retry window — the lease,
/// counted from the failure — has passed.
pub(super) fn spawn_complete_retry<V, R, C>(
    inner: Arc<Inner<V, R, C>>,
    scope: Scope,
    fingerprint: Fingerprint,
    token: FencingToken,
    owner: OwnerId,
    value: V,
) where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    tokio::spawn(async move {
        let until = Instant::now() + inner.cfg.lease;
        let claim = Claim {
            scope: &scope,
            fingerprint,
            token,
            owner,
        };
        let mut delay = inner.cfg.poll_first;
        let outcome = loop {
            if Instant::now() + delay >= until {
                break None;
            }
            tokio::time::sleep(delay).await;
            let Ok(bytes) = inner.codec.encode(&value) else {
                break None;
            };
            let complete = inner.remote.complete(claim, bytes, inner.cfg.ttl);
            match inner.counters.timed(Op::Complete, complete).await {
                Ok(commit) => break Some(commit),
                Err(_) => delay = (delay * 2).min(inner.cfg.poll_max),
            }
        };
        inner.unrecorded.remove(&scope);
        match outcome {
            Some(Commit::Committed) => inner.counters.bump(Event::RecordedLate),
            Some(Commit::FencedOut) | None => {
                inner.counters.bump(Event::RecordLost);
                if trace::warn_enabled() {
                    let cfg = &inner.cfg;
                    let f = ScopeFields::new(&scope, cfg.scope_logging);
                    warn_scope!(
                        "idem_dedup.tier.record_lost",
                        &*cfg.name,
                        &f,
                        token = token.get(),
                        fenced_out = outcome.is_some(),
                        "completion never written: other instances may run this request again"
                    );
                }
            }
        }
    });
}
