//! One call of the transactional engine: the local engine first, whose leader runs the
//! transaction (`run.rs`); a record another run committed becomes a local replay; and the
//! engine as a [`Deduplicator`].

use std::future::Future;
use std::sync::Arc;

use idem_core::{Deadline, Fingerprint, Scope, Status};
use idem_dedup::{Codec, DedupError, Deduplicator, EntryInfo, Outcome, OutcomeKind, Stats};
use parking_lot::Mutex;

use super::{run, PgEngine};
use crate::transaction::PgTransaction;

impl<V, C> PgEngine<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    pub(super) async fn call<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(PgTransaction) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Some(action)));
        let inner = self.inner.clone();
        let owned = scope.clone();
        let run = move |()| {
            let action = slot.lock().take();
            run::leader(inner, owned, fingerprint, action)
        };
        self.through_local(scope, fingerprint, deadline, run).await
    }

    /// A call through the local engine, whose leader runs `run`; a record another run
    /// committed becomes a replay.
    pub(crate) async fn through_local<R, RFut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        run: R,
    ) -> Result<Outcome<V>, DedupError>
    where
        R: FnOnce(()) -> RFut + Send + 'static,
        RFut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let local = &self.inner.local;
        let result = local.execute_until(scope, fingerprint, deadline, run).await;
        // Only the local run's own answers: a value `settle` seeds from the table is another
        // run's record, whose commit this instance cannot date.
        let result = result.map(|out| self.record_expiry(out));
        self.settle(scope, fingerprint, result).await
    }

    /// A result this instance ran (and its local joiners) expires from the table `ttl` after
    /// it committed, not when the local copy does. Called on the local run's answers only
    /// (never on what `settle` seeds from the table); a replay keeps the local copy's expiry:
    /// a record read from the table does not say here when it committed.
    fn record_expiry(&self, out: Outcome<V>) -> Outcome<V> {
        if !matches!(out.kind(), OutcomeKind::Executed | OutcomeKind::Joined) {
            return out;
        }
        match out.expires_at().checked_sub(self.inner.local_ttl) {
            Some(committed) => {
                let expires_at = committed + self.inner.cfg.ttl;
                out.with_expires_at(expires_at)
            }
            None => out,
        }
    }

    /// Turns a run that found the record committed by another run into a replay: the value is
    /// seeded in the local engine, which answers it as a replay with the local copy's expiry
    /// (or replays what it already holds, or joins a newer run of the scope).
    async fn settle(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        mut result: Result<Outcome<V>, DedupError>,
    ) -> Result<Outcome<V>, DedupError> {
        // Bounded: a seed that joins a newer run of the scope (after an operator's forget) may
        // find that run ended on the record too; its value is seeded in turn.
        for _ in 0..4 {
            let value = match &result {
                Err(DedupError::Action { status, .. }) => match run::record_value::<V>(status) {
                    Some(value) => value,
                    None => return result,
                },
                _ => return result,
            };
            result = self.inner.local.seed(scope, fingerprint, value).await;
        }
        result
    }
}

impl<V, C> Deduplicator for PgEngine<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    type Value = V;
    type Context = PgTransaction;

    fn execute_until<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> impl Future<Output = Result<Outcome<V>, DedupError>> + Send
    where
        F: FnOnce(PgTransaction) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, deadline, action)
    }

    fn lookup(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<EntryInfo>, DedupError>> + Send {
        PgEngine::lookup(self, scope)
    }

    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, DedupError>> + Send {
        PgEngine::forget(self, scope)
    }

    fn stats(&self) -> Stats {
        self.local_stats()
    }
}
