//! The room a shard's entries hold: removed entries counted out of the engine-wide entry and
//! byte counts and their tenant's share, once per turn rather than once per entry.

use std::sync::atomic::Ordering::Relaxed;

use crate::actor::entry::{Entry, Spares, State};
use crate::actor::quota::TenantId;
use crate::config::Weigher;

use super::Core;

impl Core {
    /// Takes this shard's removals since the last call out of the engine-wide entry count, in
    /// one atomic update: a sweep that expires thousands of entries writes the shared line
    /// once, not once per entry. Called before every reservation, before anyone is told that
    /// an entry is gone (a leader's or waiter's answer for a run that stored nothing, a
    /// forget's, a look-up's), and at the end of every turn. So the count is never too low, and
    /// whoever hears that an entry is gone finds its room free on every shard; only an
    /// expiry nobody has asked about reaches other shards at the end of the sweeping turn.
    pub(super) fn flush_released(&mut self) {
        if self.released > 0 {
            self.shared.entries.fetch_sub(self.released, Relaxed);
            self.released = 0;
        }
        // Stored and removed weights, netted into one update (E16).
        if self.added_bytes != self.released_bytes {
            let bytes = &self.shared.bytes;
            if self.added_bytes > self.released_bytes {
                bytes.fetch_add(self.added_bytes - self.released_bytes, Relaxed);
            } else {
                bytes.fetch_sub(self.released_bytes - self.added_bytes, Relaxed);
            }
        }
        self.added_bytes = 0;
        self.released_bytes = 0;
    }
}

/// Takes a removed entry: counts it out of its tenant's use and its value's weight out of the
/// byte budget, and returns its state, keeping the box for reuse (see [`Spares`]).
pub(super) fn take<V>(
    spares: &mut Spares<V>,
    core: &mut Core,
    weigher: &Option<Weigher<V>>,
    e: Box<Entry<V>>,
) -> State<V> {
    let weight = match (weigher, &e.state) {
        (Some(weigh), State::Done { result: Ok(v), .. }) => weigh(v),
        _ => 0,
    };
    let tenant: TenantId = match &e.state {
        State::InFlight(f) => core.quota.id(f.scope.as_bytes()),
        State::Done { tenant, .. } => *tenant,
    };
    core.quota.remove(tenant, weight);
    core.released_bytes += weight;
    spares.keep(e)
}
