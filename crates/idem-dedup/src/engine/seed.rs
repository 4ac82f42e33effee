//! [`Engine::seed`]: a result obtained elsewhere, stored as a scope's completed result.

use std::sync::atomic::Ordering::Acquire;

use idem_core::{Fingerprint, Scope};
use tokio::sync::oneshot;

use crate::actor::inbox::Report;
use crate::actor::message::{Msg, Reply, RunEnd, Seed};
use crate::{DedupError, Outcome};

use super::{shard_index, Engine};

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    /// Stores `value`, a result obtained elsewhere, as the completed result of `scope` for the
    /// engine's TTL, counted from now, and answers it as a replay
    /// ([`OutcomeKind::Replayed`](crate::OutcomeKind::Replayed), expiring when the stored copy
    /// does): no action runs. An engine in front of a shared record uses it to keep a record that
    /// another run committed, so that the next calls for the scope replay it here.
    ///
    /// Nothing the engine holds for the scope is replaced: a stored result with the same
    /// `fingerprint` is replayed instead of `value`, a run in flight is joined (or refused under
    /// [`InFlightPolicy::Reject`](crate::InFlightPolicy::Reject)), and another fingerprint is a
    /// [`DedupError::Conflict`]. A new scope takes room as a new run does.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute): conflict, full or the tenant at its share, in flight under
    /// `Reject`, the error of a run in flight that it joined, shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_core::{Fingerprint, Scope, Status};
    /// use idem_dedup::{Engine, OutcomeKind};
    ///
    /// let engine = Engine::<String>::builder().build()?;
    /// let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
    /// let fp = Fingerprint::of(b"qty=1");
    ///
    /// // A record another instance committed, read from the shared store.
    /// let seeded = engine.seed(&scope, fp, "order-1001".to_owned()).await?;
    /// assert_eq!(seeded.kind(), OutcomeKind::Replayed);
    ///
    /// let call = engine.execute(&scope, fp, |_| async { Ok::<_, Status>("order-1002".into()) });
    /// let replay = call.await?;
    /// assert_eq!((replay.kind(), replay.value().as_str()), (OutcomeKind::Replayed, "order-1001"));
    /// assert_eq!(replay.expires_at(), seeded.expires_at());
    /// assert_eq!(engine.stats().outcomes.executed, 0);
    /// # Ok(()) }
    /// ```
    pub async fn seed(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        value: V,
    ) -> Result<Outcome<V>, DedupError> {
        let inner = &*self.inner;
        if inner.shared.shutting_down.load(Acquire) {
            return Err(DedupError::ShuttingDown);
        }
        let id = inner.hasher.id(scope.as_bytes());
        let index = shard_index(id.hash(), inner.shards.len());
        let (reply, rx) = oneshot::channel();
        let seed = Seed {
            id,
            scope: scope.clone(),
            fingerprint,
            value,
            reply,
        };
        self.send(index, Msg::Seed(Box::new(seed))).finish().await?;
        match rx.await {
            Ok(Reply::Done(answer)) => answer,
            // The shard stores a seed itself and never asks it to lead; were it to, the run is
            // ended at once rather than left to its lease.
            Ok(Reply::Lead { token, .. }) => {
                let report = Report::new(id.hash(), token, RunEnd::Abandoned);
                inner.inboxes[index].push(report);
                Err(DedupError::Abandoned)
            }
            Err(_) => Err(DedupError::ShuttingDown),
        }
    }
}
