//! How the shard applies what reaches it: a `Begin` (a new scope starts a run, a duplicate joins
//! or replays), and a run's end (stored, failed, panicked or abandoned), with the room and the
//! tenant's share each takes and gives back.

use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::Arc;

use hashbrown::hash_table::{Entry as Slot, VacantEntry};
use idem_core::{Fingerprint, Scope};
use tokio::sync::oneshot;

use crate::actor::entry::{Entry, InFlight, Spares, State};
use crate::actor::hash::ScopeId;
use crate::actor::inbox::Report;
use crate::actor::join::JoinCell;
use crate::actor::message::{Reply, RunEnd};
use crate::actor::quota::Refusal;
use crate::actor::wheel::{Kind, Nanos};
use crate::config::InFlightPolicy;
use crate::{DedupError, Outcome, OutcomeKind};

use super::{nanos, take, warn_run_end, BadEnd, Core, Shard};

impl<V: Clone + Send + Sync + 'static> Shard<V> {
    pub(super) fn on_begin(
        &mut self,
        id: ScopeId,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    ) {
        let Some((scope, reply, why)) = self.begin(id, scope, fingerprint, reply) else {
            return;
        };
        // Full, or the tenant at its share (E7, E16). Results of this shard's own that are
        // past their expiry but not swept yet (the timer fires a moment after the deadline)
        // take no room: expire them and ask again. Nothing unexpired is ever evicted.
        if self.expire_due(self.core.clock.now()) > 0 {
            if let Some((_, reply, why)) = self.begin(id, scope, fingerprint, reply) {
                self.core.refuse(reply, why);
            }
        } else {
            self.core.refuse(reply, why);
        }
    }

    /// Answers a `Begin`, or hands its scope and reply back when the scope is new and may not
    /// be admitted, with why.
    pub(super) fn begin(
        &mut self,
        id: ScopeId,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    ) -> Option<(Scope, oneshot::Sender<Reply<V>>, Refusal)> {
        let slot = self.table.entry(id.hash(), |e| e.id == id, |e| e.hash());
        let mut occ = match slot {
            Slot::Vacant(vacant) => {
                let spares = &mut self.spares;
                return self
                    .core
                    .begin_vacant(vacant, spares, id, scope, fingerprint, reply);
            }
            Slot::Occupied(occ) => occ,
        };
        // An expired result is gone, even if the wheel has not swept it yet (E2).
        let now = self.core.clock.now();
        if occ.get().is_expired(now) {
            let (old, vacant) = occ.remove();
            drop(take(&mut self.spares, &mut self.core, &self.weigher, old));
            self.core.expire_one();
            let spares = &mut self.spares;
            return self
                .core
                .begin_vacant(vacant, spares, id, scope, fingerprint, reply);
        }
        let e = occ.get_mut();
        if e.fingerprint != fingerprint {
            self.core.tally.conflicts += 1;
            let _ = reply.send(Reply::Done(Err(DedupError::Conflict)));
            return None;
        }
        let core = &mut self.core;
        let expires = e.at;
        match &mut e.state {
            State::InFlight(f) => match core.cfg.in_flight_policy {
                InFlightPolicy::Wait => {
                    core.tally.joined += 1;
                    // The run's first duplicate creates the cell that later ones find on the
                    // read path; this one is answered through its reply slot when the run ends.
                    let cell = f.join.get_or_insert_with(|| Arc::new(JoinCell::new()));
                    cell.count_in();
                    cell.answer_later(reply);
                }
                InFlightPolicy::Reject => {
                    core.tally.rejected_in_flight += 1;
                    let _ = reply.send(Reply::Done(Err(DedupError::InFlight {
                        retry_after: core.cfg.retry_after,
                    })));
                }
            },
            State::Done { result, .. } => {
                core.tally.replayed += 1;
                let answer = match result {
                    Ok(v) => Ok(Outcome::new(
                        v.clone(),
                        OutcomeKind::Replayed,
                        core.clock.instant(expires),
                    )),
                    Err(status) => Err(DedupError::Action {
                        status: (**status).clone(),
                        outcome: OutcomeKind::Replayed,
                    }),
                };
                let _ = reply.send(Reply::Done(answer));
            }
        }
        None
    }

    /// Applies a run's end; returns false when the run had already ended (by its lease, a
    /// forget or shutdown) and the report changed nothing.
    pub(super) fn on_complete(&mut self, hash: u64, token: u64, end: RunEnd<V>) -> bool {
        let Ok(mut occ) = self.table.find_entry(hash, |e| e.runs(token)) else {
            // The run was already ended by its lease, a forget or shutdown.
            return false;
        };
        let core = &mut self.core;
        let cached = match &end {
            RunEnd::Finished(Ok(_), at) => Some((*at, core.cfg.ttl)),
            RunEnd::Finished(Err(s), at) if core.cfg.cached_failures.contains(s.code()) => {
                Some((*at, core.cfg.failure_ttl))
            }
            _ => None,
        };
        let Some((at, ttl)) = cached else {
            let (e, _) = occ.remove();
            if let State::InFlight(f) = &e.state {
                match &end {
                    RunEnd::Panicked(message) => {
                        warn_run_end(&core.cfg, &f.scope, BadEnd::Panic(message))
                    }
                    RunEnd::LeaseExpired => warn_run_end(&core.cfg, &f.scope, BadEnd::Lease),
                    _ => {}
                }
            }
            let e = take(&mut self.spares, core, &self.weigher, e);
            match end {
                RunEnd::Finished(Err(status), _) => {
                    core.tally.failed += 1;
                    core.release(e, || DedupError::Action {
                        status: status.clone(),
                        outcome: OutcomeKind::Joined,
                    });
                }
                RunEnd::Panicked(message) => {
                    core.tally.panicked += 1;
                    core.release(e, || DedupError::Panicked {
                        message: message.clone(),
                    });
                }
                RunEnd::LeaseExpired => {
                    core.tally.lease_expired += 1;
                    let after = core.cfg.in_flight_timeout;
                    core.release(e, || DedupError::LeaseExpired { after });
                }
                RunEnd::Abandoned => {
                    core.tally.abandoned += 1;
                    core.release(e, || DedupError::Abandoned);
                }
                // `cached` is Some for every success.
                RunEnd::Finished(Ok(_), _) => {}
            }
            return true;
        };
        // The TTL counts from the action's completion, not from when the shard heard of it.
        let expires = core.clock.nanos(at).saturating_add(nanos(ttl));
        let expires_at = core.clock.instant(expires);
        let (result, failed) = match end {
            RunEnd::Finished(Ok(v), _) => (Ok(v), false),
            RunEnd::Finished(Err(s), _) => (Err(Arc::new(s)), true),
            // `cached` is None for every other end.
            _ => return true,
        };
        let kind = if failed { Kind::FailureTtl } else { Kind::Ttl };
        // A stored result's timer names it by its exact expiry (see `wheel.rs`).
        core.wheel.insert(kind, expires, hash, expires);
        let e = occ.get_mut();
        let tenant = match &e.state {
            State::InFlight(f) => core.quota.id(f.scope.as_bytes()),
            State::Done { tenant, .. } => *tenant,
        };
        if let (Some(weigh), Ok(v)) = (&self.weigher, &result) {
            let weight = weigh(v);
            core.quota.add_bytes(tenant, weight);
            core.added_bytes += weight;
        }
        e.at = expires;
        // The run's scope goes with its in-flight state: a stored result keeps its digest only.
        let State::InFlight(f) = std::mem::replace(&mut e.state, State::Done { result, tenant })
        else {
            return true;
        };
        let State::Done { result, .. } = &e.state else {
            return true;
        };
        if let Some(cell) = f.join {
            cell.resolve(match result {
                Ok(v) => Ok((v.clone(), expires_at)),
                Err(s) => Err(DedupError::Action {
                    status: (**s).clone(),
                    outcome: OutcomeKind::Joined,
                }),
            });
        }
        if failed {
            core.tally.failed += 1;
        }
        core.tally.in_flight -= 1;
        core.tally.completed += 1;
        true
    }

    /// Applies every report waiting in the inbox, in the order the runs ended. `sweep_at`: a
    /// sweep of the leases due at that time follows (see `inbox.rs`).
    pub(super) fn apply_reports(&mut self, sweep_at: Option<Nanos>) {
        match sweep_at {
            Some(now) => self.inbox.drain_for_sweep(&mut self.reports, now),
            None => self.inbox.drain_into(&mut self.reports),
        }
        if self.reports.is_empty() {
            return;
        }
        let mut reports = std::mem::take(&mut self.reports);
        for Report {
            hash,
            token,
            end,
            ack,
        } in reports.drain(..)
        {
            let applied = self.on_complete(hash, token, end);
            if let Some(ack) = ack {
                // Its caller is answered after any room it freed is back in the count.
                self.core.flush_released();
                let _ = ack.send(applied);
            }
            // Whatever the report said, this run is no longer in flight now. It is usually the
            // oldest lease (runs mostly end in the order they started): drop its queue item
            // without looking the run up again.
            if self.core.wheel.front(Kind::Lease) == Some((hash, token)) {
                self.core.wheel.pop(Kind::Lease);
            }
        }
        self.trim_leases();
        self.reports = reports;
    }
}

impl Core {
    /// Starts a run for a new scope, or hands the scope and reply back when the engine is full.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin_vacant<V>(
        &mut self,
        vacant: VacantEntry<'_, Box<Entry<V>>>,
        spares: &mut Spares<V>,
        id: ScopeId,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    ) -> Option<(Scope, oneshot::Sender<Reply<V>>, Refusal)> {
        if let Err(why) = self.reserve(scope.as_bytes()) {
            return Some((scope, reply, why));
        }
        let token = self.next_token;
        self.next_token += 1;
        // The turn's start: a lease counts from when the shard took up the batch (at most a
        // batch's work earlier than now), which spares a clock read per new key.
        let started = self.turn_now;
        let lease_deadline = started.saturating_add(nanos(self.cfg.in_flight_timeout));
        if reply
            .send(Reply::Lead {
                token,
                lease_deadline,
            })
            .is_err()
        {
            // The caller is already gone: nobody will run the action, so store nothing.
            self.shared.entries.fetch_sub(1, Relaxed);
            return None;
        }
        self.wheel
            .insert(Kind::Lease, lease_deadline, id.hash(), token);
        self.quota.add_entry(scope.as_bytes());
        vacant.insert(spares.boxed(Entry {
            id,
            fingerprint,
            at: started,
            state: State::InFlight(InFlight {
                token,
                join: None,
                scope,
            }),
        }));
        self.tally.executed += 1;
        self.tally.in_flight += 1;
        None
    }

    /// Takes room for a new entry of the scope encoded as `scope`, or says why there is none.
    ///
    /// Bounded memory: the tenant's share, the byte budget, then a slot in the
    /// engine-wide count, or refuse. Nothing is evicted to make room: evicting an unexpired
    /// result would let a duplicate run. This shard's own removals are counted out first, so
    /// it never refuses for want of room it has just freed.
    pub(super) fn reserve(&mut self, scope: &[u8]) -> Result<(), Refusal> {
        if !self.quota.admits(scope) {
            return Err(Refusal::Tenant);
        }
        self.flush_released();
        if self.cfg.max_bytes != usize::MAX && self.shared.bytes.load(Relaxed) >= self.cfg.max_bytes
        {
            return Err(Refusal::Full);
        }
        let prev = self.shared.entries.fetch_add(1, AcqRel);
        if prev >= self.cfg.max_entries {
            self.shared.entries.fetch_sub(1, Relaxed);
            return Err(Refusal::Full);
        }
        Ok(())
    }

    /// Refuses a new scope: the engine is full or its tenant at its share.
    pub(super) fn refuse<V>(&mut self, reply: oneshot::Sender<Reply<V>>, why: Refusal) {
        let retry_after = self.cfg.retry_after;
        self.tally.overloaded += 1;
        let err = match why {
            Refusal::Full => DedupError::Overloaded { retry_after },
            Refusal::Tenant => {
                self.tally.tenant_refused += 1;
                DedupError::TenantQuotaExceeded { retry_after }
            }
        };
        let _ = reply.send(Reply::Done(Err(err)));
    }

    /// Accounts for a removed entry (its state); an in-flight one's waiters get `err()`. The
    /// engine-wide count is updated by [`flush_released`](Self::flush_released): at once when
    /// waiters are answered, so that each of them finds the room free for its next call, on any
    /// shard; otherwise at the end of the turn.
    pub(super) fn release<V: Clone>(&mut self, state: State<V>, err: impl Fn() -> DedupError) {
        self.released += 1;
        match state {
            State::InFlight(f) => {
                self.tally.in_flight -= 1;
                if let Some(cell) = f.join {
                    self.flush_released();
                    cell.resolve(Err(err()));
                }
            }
            State::Done { .. } => self.tally.completed -= 1,
        }
    }
}
