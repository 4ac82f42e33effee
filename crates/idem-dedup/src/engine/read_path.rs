//! The read path: a replay or a join found in the shard's published table, without a message.

use std::sync::Arc;

use idem_core::Fingerprint;

use crate::actor::entry::{InFlight, State};
use crate::actor::hash::ScopeId;
use crate::actor::join::JoinCell;
use crate::config::InFlightPolicy;
use crate::{Outcome, OutcomeKind};

use super::Engine;

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    /// The read path, straight from the shard's table without a message: a stored success for
    /// this scope and fingerprint (replay), or the join cell of its run in flight (join, under
    /// the `Wait` policy, once the actor has made a cell for the run's first duplicate). Returns
    /// `None` (take the message path) when the table is being written, or the scope is absent,
    /// failed, expired, conflicting, rejected or in flight without a cell yet — every other
    /// decision stays with the actor.
    pub(super) fn read_path(
        &self,
        index: usize,
        id: ScopeId,
        fingerprint: Fingerprint,
    ) -> Option<Fast<V>> {
        let table = match self.inner.tables[index].try_read() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let e = table.find(id.hash(), |e| e.id == id)?;
        let (v, expires) = match &e.state {
            State::Done { result: Ok(v), .. } => (v, &e.at),
            State::InFlight(InFlight {
                join: Some(cell), ..
            }) if e.fingerprint == fingerprint
                && self.inner.cfg.in_flight_policy == InFlightPolicy::Wait =>
            {
                cell.count_in();
                let cell = cell.clone();
                drop(table);
                self.inner.shared.fast_joins.add(1);
                return Some(Fast::Join(cell));
            }
            _ => return None,
        };
        // The expiry as an instant, compared with the clock's instant: the same test as
        // `clock.now() >= expires`, without converting the current time to nanoseconds.
        let expires_at = self.inner.shared.clock.instant(*expires);
        if e.fingerprint != fingerprint || tokio::time::Instant::now() >= expires_at {
            return None;
        }
        let out = Outcome::new(v.clone(), OutcomeKind::Replayed, expires_at);
        drop(table);
        self.inner.shared.fast_replays.add(1);
        Some(Fast::Replay(out))
    }
}

/// What the read path found.
pub(super) enum Fast<V> {
    Replay(Outcome<V>),
    Join(Arc<JoinCell<V>>),
}
