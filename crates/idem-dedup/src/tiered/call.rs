//! One tiered call: the local engine first, whose leader goes to the tier (`run.rs`); the tier
//! directly when the local engine is full; and what the caller is told of the value.

use std::future::Future;
use std::sync::Arc;

use idem_core::{Deadline, Fingerprint, Scope, Status};
use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::Instrument;

use super::stats::Event;
use super::stored::{Stored, Via};
use super::{run, TieredEngine};
use crate::codec::Codec;
use crate::remote::{FencingToken, OwnerId, RemoteTier};
use crate::trace;
use crate::{DedupError, Deduplicator, Outcome, OutcomeKind, Source};

impl<V, R, C> TieredEngine<V, R, C>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    pub(crate) async fn call<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        // The call's span (E15): disabled, at the cost of a level check, without a
        // subscriber that wants it. Its local engine's span is inside it.
        let cfg = &self.inner.cfg;
        let span = trace::tiered_span(&cfg.name, cfg.scope_logging, scope);
        if span.is_disabled() {
            return self
                .call_untraced(scope, fingerprint, deadline, action)
                .await;
        }
        let answer = self
            .call_untraced(scope, fingerprint, deadline, action)
            .instrument(span.clone())
            .await;
        trace::record_end(&span, &answer);
        if let Ok(out) = &answer {
            span.record("source", source_label(out.source()));
        }
        answer
    }

    async fn call_untraced<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        // The action is kept where this call can take it back if the local engine refuses the
        // scope for lack of room (D6): the tier then arbitrates the call alone.
        let slot = Arc::new(Mutex::new(Some(action)));
        let inner = self.inner.clone();
        let owned = scope.clone();
        let taken = slot.clone();
        let owner = inner.cfg.owner;
        let run = move |()| {
            let action = taken.lock().take();
            run::remote_run(inner, owned, fingerprint, action, owner)
        };
        let local = &self.inner.local;
        let result = local.execute_until(scope, fingerprint, deadline, run).await;
        let out = match result {
            Ok(out) => out,
            Err(DedupError::Overloaded { .. }) if slot.lock().is_some() => {
                let action = slot.lock().take();
                return self.bypass(scope, fingerprint, deadline, action).await;
            }
            Err(e) => return Err(e),
        };
        let (kind, expires_at) = (out.kind(), out.expires_at());
        Ok(self.outcome(out.into_value(), kind, expires_at))
    }

    /// A call the full local engine could not take: straight to the tier, under an owner of its
    /// own (so it is never mistaken for an orphan of the local leaders), in a task of its own (so
    /// it runs to completion if this caller goes).
    async fn bypass<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: Option<F>,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.inner.counters.bump(Event::LocalFull);
        let run = run::remote_run(
            self.inner.clone(),
            scope.clone(),
            fingerprint,
            action,
            OwnerId::random(),
        );
        let task = tokio::spawn(run);
        let joined = match deadline {
            None => task.await,
            Some(d) => match tokio::time::timeout_at(d.instant(), task).await {
                Ok(joined) => joined,
                Err(_) => return Err(DedupError::DeadlineExceeded),
            },
        };
        let stored = match joined {
            Ok(Ok(stored)) => stored,
            Ok(Err(status)) => {
                return Err(DedupError::Action {
                    status,
                    outcome: OutcomeKind::Executed,
                })
            }
            Err(e) => {
                let message = match e.try_into_panic() {
                    Ok(p) => crate::actor::run::panic_message(&*p),
                    Err(_) => "the run's task was cancelled".to_owned(),
                };
                if trace::warn_enabled() {
                    let cfg = &self.inner.cfg;
                    let f = trace::ScopeFields::new(scope, cfg.scope_logging);
                    trace::warn_scope!(
                        "idem_dedup.panicked",
                        &*cfg.name,
                        &f,
                        panic = message.as_str(),
                        "the action panicked: its callers get INTERNAL and nothing is stored"
                    );
                }
                return Err(DedupError::Panicked { message });
            }
        };
        let expires_at = Instant::now() + self.inner.cfg.ttl;
        Ok(self.outcome(stored, OutcomeKind::Executed, expires_at))
    }

    /// The caller's view of a stored value: what kind of answer, and from where.
    ///
    /// `expires_at` is the local copy's expiry (its completion here + `local_ttl`). For a result
    /// this instance ran and recorded, the caller is told the shared record's instead: `ttl` from
    /// that completion (later than the tier's own clock by the completion's reply, a few
    /// milliseconds at most). Other instances' results keep the local copy's expiry: this
    /// instance cannot tell when they completed, and its copy is what it will serve.
    fn outcome(&self, stored: Stored<V>, kind: OutcomeKind, expires_at: Instant) -> Outcome<V> {
        let cfg = &self.inner.cfg;
        let expires_at = match stored.via {
            Via::Ran if stored.recorded => expires_at
                .checked_sub(cfg.local_ttl)
                .map_or(expires_at, |completed| completed + cfg.ttl),
            _ => expires_at,
        };
        let (kind, source, token) = match (kind, stored.via) {
            (kind, Via::Ran) => (kind, Source::ThisInstance, Some(stored.token)),
            (OutcomeKind::Executed, Via::Retained) => (
                OutcomeKind::Replayed,
                Source::ThisInstance,
                Some(stored.token),
            ),
            (kind, Via::Retained) => (kind, Source::ThisInstance, Some(stored.token)),
            (OutcomeKind::Executed, Via::RemoteReplay) => {
                (OutcomeKind::Replayed, Source::OtherInstance, None)
            }
            (OutcomeKind::Executed, Via::RemoteJoin) => {
                (OutcomeKind::Joined, Source::OtherInstance, None)
            }
            (kind, Via::RemoteReplay | Via::RemoteJoin) => (kind, Source::OtherInstance, None),
            (kind, Via::FailOpen) => (kind, Source::FailOpen, None),
        };
        let out = Outcome::new(stored.value, kind, expires_at).with_source(source);
        let out = match token {
            Some(token) => out.with_fencing_token(token),
            None => out,
        };
        if stored.recorded {
            out
        } else {
            out.unrecorded()
        }
    }
}

/// The `source` field of a tiered call's span.
fn source_label(source: Source) -> &'static str {
    match source {
        Source::Local => "local",
        Source::ThisInstance => "this_instance",
        Source::OtherInstance => "other_instance",
        Source::FailOpen => "fail_open",
    }
}
