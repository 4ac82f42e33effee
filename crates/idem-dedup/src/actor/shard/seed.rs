//! A result obtained elsewhere, stored as a scope's completed result (`Engine::seed`): an
//! engine in front of a shared record seeds its local engine with a record another run
//! committed, so the local engine replays it.

use crate::actor::entry::{Entry, State};
use crate::actor::message::{Reply, Seed};
use crate::actor::wheel::Kind;
use crate::{Outcome, OutcomeKind};

use super::{nanos, take, Shard};

impl<V: Clone + Send + Sync + 'static> Shard<V> {
    /// Stores the seed's value as the scope's completed result, for the engine's TTL from now,
    /// and answers it as a replay: the seeding call ran nothing. A scope the shard holds is
    /// answered as a `Begin` is (a replay of what it stores, a join of the run in flight, a
    /// conflict, a refusal under `Reject`), and nothing held is replaced; a new scope takes room
    /// as a new run does, and is refused the same way when there is none.
    pub(super) fn on_seed(&mut self, seed: Seed<V>) {
        let Seed {
            id,
            scope,
            fingerprint,
            value,
            reply,
        } = seed;
        let hash = id.hash();
        let now = self.core.clock.now();
        let held = match self.table.find_entry(hash, |e| e.id == id) {
            Ok(occ) if occ.get().is_expired(now) => {
                // Gone, as for a `Begin` (E2): its room is free for the seed.
                let (e, _) = occ.remove();
                drop(take(&mut self.spares, &mut self.core, &self.weigher, e));
                self.core.expire_one();
                false
            }
            Ok(_) => true,
            Err(_) => false,
        };
        if held {
            // Occupied and not expired: `begin` answers it and never hands the scope back.
            let _ = self.begin(id, scope, fingerprint, reply);
            return;
        }
        if let Err(why) = self.core.reserve(scope.as_bytes()) {
            // As for a new run: results past their expiry take no room (see `on_begin`).
            if self.expire_due(self.core.clock.now()) == 0 {
                self.core.refuse(reply, why);
                return;
            }
            if let Err(why) = self.core.reserve(scope.as_bytes()) {
                self.core.refuse(reply, why);
                return;
            }
        }
        let core = &mut self.core;
        let expires = now.saturating_add(nanos(core.cfg.ttl));
        core.wheel.insert(Kind::Ttl, expires, hash, expires);
        core.quota.add_entry(scope.as_bytes());
        let tenant = core.quota.id(scope.as_bytes());
        if let Some(weigh) = &self.weigher {
            let weight = weigh(&value);
            core.quota.add_bytes(tenant, weight);
            core.added_bytes += weight;
        }
        let answer = Outcome::new(
            value.clone(),
            OutcomeKind::Replayed,
            core.clock.instant(expires),
        );
        let entry = Entry {
            id,
            fingerprint,
            at: expires,
            state: State::Done {
                result: Ok(value),
                tenant,
            },
        };
        let boxed = self.spares.boxed(entry);
        self.table.insert_unique(hash, boxed, |e| e.hash());
        core.tally.completed += 1;
        core.tally.replayed += 1;
        let _ = reply.send(Reply::Done(Ok(answer)));
    }
}
