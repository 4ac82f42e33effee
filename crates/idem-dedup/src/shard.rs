//! The shard actor: the only code that writes a shard's map and timer wheel (E8).

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::{Arc, TryLockError};
use std::time::Duration;

use crossbeam_utils::sync::{ShardedLock, ShardedLockWriteGuard};
use hashbrown::hash_table::{Entry as Slot, HashTable, VacantEntry};
use idem_core::{Fingerprint, Scope};
use tokio::sync::{mpsc, oneshot};

use crate::config::{Config, InFlightPolicy, Weigher};
use crate::engine::{millis, Shared};
use crate::entry::{Entry, InFlight, Spares, State};
use crate::hash::ScopeId;
use crate::inbox::{Inbox, Report};
use crate::join::JoinCell;
use crate::message::{Msg, Reply, RunEnd};
use crate::quota::{Quota, Refusal, TenantId};
use crate::tally::{Publisher, Tally};
use crate::trace::{self, warn_scope, ScopeFields};
use crate::wheel::{Clock, Kind, Nanos, Wheel};
use crate::{DedupError, Outcome, OutcomeKind};

/// A shard's table, shared for reading. Only the shard actor writes it; it takes the write lock for
/// one synchronous batch at a time (never across an `.await`), and callers take `try_read` to
/// replay a stored result without sending a message (see `Engine::replay_fast`).
///
/// The lock is sharded by reader thread (`crossbeam_utils::sync::ShardedLock`: one cache-padded
/// lock per thread slot): a replay's read lock is an atomic update on a line its own worker
/// thread owns, where a single `RwLock` word bounced between the workers on every replay. The
/// actor pays for it once per batch, taking every slot's write lock.
pub(crate) type SharedTable<V> = Arc<ShardedLock<HashTable<Box<Entry<V>>>>>;

pub(crate) struct Shard<V> {
    index: usize,
    rx: mpsc::Receiver<Msg<V>>,
    /// Leaders' reports of their runs' ends (see `inbox.rs`).
    inbox: Arc<Inbox<V>>,
    /// The drained reports being applied; kept so its capacity is reused.
    reports: Vec<Report<V>>,
    /// The table while the actor holds the write lock; empty otherwise (swapped in and out, which
    /// moves a few words, not the entries).
    table: HashTable<Box<Entry<V>>>,
    published: SharedTable<V>,
    /// Removed entries' boxes, reused for new keys.
    spares: Spares<V>,
    /// Weighs stored values for the byte budget (E16).
    weigher: Option<Weigher<V>>,
    core: Core,
    publisher: Publisher,
}

/// Everything a shard owns besides its map, so handlers can hold a map slot and still update
/// timers and tallies.
struct Core {
    wheel: Wheel,
    clock: Clock,
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    next_token: u64,
    tally: Tally,
    /// Entries removed since the engine-wide count was last updated (see `flush_released`).
    released: usize,
    /// Bytes stored and removed since the engine-wide byte count was last updated.
    added_bytes: usize,
    released_bytes: usize,
    /// The byte budget's and the tenants' shares of this shard (E16).
    quota: Quota,
    /// The clock when the current turn began.
    turn_now: Nanos,
}

impl<V: Clone + Send + Sync + 'static> Shard<V> {
    pub(crate) fn new(
        index: usize,
        rx: mpsc::Receiver<Msg<V>>,
        inbox: Arc<Inbox<V>>,
        published: SharedTable<V>,
        cfg: Arc<Config>,
        shared: Arc<Shared>,
        weigher: Option<Weigher<V>>,
    ) -> Self {
        let clock = shared.clock;
        let quota = Quota::new(&cfg);
        let publisher = Publisher::new(index, &cfg.name);
        Shard {
            index,
            rx,
            inbox,
            reports: Vec::new(),
            table: HashTable::new(),
            published,
            spares: Spares::new(),
            weigher,
            core: Core {
                wheel: Wheel::new(clock),
                clock,
                cfg,
                shared,
                next_token: 0,
                tally: Tally::default(),
                released: 0,
                added_bytes: 0,
                released_bytes: 0,
                quota,
                turn_now: 0,
            },
            publisher,
        }
    }

    /// The actor loop: drain the mailbox in batches, fire timers, publish counters. Ends on `Stop`
    /// or when every sender (engine handles and runs) is gone.
    pub(crate) async fn run(mut self) {
        let batch = self.core.cfg.batch_size;
        let mut buf = Vec::with_capacity(batch);
        let published = self.published.clone();
        let inbox = self.inbox.clone();
        // Counters reach the metrics facade at least once a second even when only read-path
        // replays happen (those never wake the actor).
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut signalled = std::pin::pin!(inbox.signalled());
        loop {
            tokio::select! {
                // Timers first, so expiry keeps up under load and memory stays bounded (Z3).
                biased;
                () = self.core.wheel.fired(), if self.core.wheel.is_armed() => {
                    let more = {
                        let mut guard = write_lock(&published).await;
                        std::mem::swap(&mut self.table, &mut *guard);
                        // A run that already reported its end is not swept as past its lease;
                        // one that reports after this drain learns that it may have been
                        // (see `inbox.rs`).
                        let now = self.core.clock.now();
                        self.apply_reports(Some(now));
                        let more = self.sweep(now);
                        std::mem::swap(&mut self.table, &mut *guard);
                        more
                    };
                    if more {
                        // Many expiries at once: a batch per poll, so no worker is held long.
                        // The batch's removals leave the shared count before the pause.
                        self.core.flush_released();
                        tokio::task::yield_now().await;
                    }
                }
                n = self.rx.recv_many(&mut buf, batch) => {
                    if n == 0 {
                        break;
                    }
                    if self.turn(&published, &mut buf).await {
                        break;
                    }
                }
                // After the mailbox: while messages keep coming, their batches apply the reports
                // too (one write-lock turn for both). A report that wakes an idle actor takes
                // whatever mail came meanwhile into the same turn, rather than leaving it for a
                // second one: a leader's report and the next caller's `Begin` often arrive
                // together.
                () = signalled.as_mut() => {
                    signalled.set(inbox.signalled());
                    while buf.len() < batch {
                        match self.rx.try_recv() {
                            Ok(msg) => buf.push(msg),
                            // Empty, or closed: `recv_many` reports the close on the next turn.
                            Err(_) => break,
                        }
                    }
                    if self.turn(&published, &mut buf).await {
                        break;
                    }
                }
                _ = tick.tick() => {}
            }
            self.publish();
        }
        // Take the entries out and publish an empty table, then drop them outside the lock, a
        // batch per poll: a shard of a million entries must not hold a worker for one long poll.
        let table = {
            let mut guard = write_lock(&published).await;
            std::mem::swap(&mut self.table, &mut *guard);
            self.apply_reports(None);
            let table = std::mem::take(&mut self.table);
            std::mem::swap(&mut self.table, &mut *guard);
            table
        };
        self.stop(table).await;
        self.publish();
    }

    /// One write-lock turn: applies the waiting reports, then the messages in `buf` (which it
    /// empties). Returns true on `Stop`.
    async fn turn(&mut self, published: &SharedTable<V>, buf: &mut Vec<Msg<V>>) -> bool {
        let mut stop = false;
        let mut guard = write_lock(published).await;
        self.core.turn_now = self.core.clock.now();
        std::mem::swap(&mut self.table, &mut *guard);
        // Reports first: a message sent after a leader's call returned must see that run's end
        // (see `inbox.rs`).
        self.apply_reports(None);
        for msg in buf.drain(..) {
            if stop {
                // Messages behind Stop: answer what needs an answer.
                if let Msg::Begin { reply, .. } = msg {
                    let _ = reply.send(Reply::Done(Err(DedupError::ShuttingDown)));
                }
                continue;
            }
            stop = self.on_msg(msg);
        }
        std::mem::swap(&mut self.table, &mut *guard);
        stop
    }

    /// Handles one message; returns true on `Stop`.
    fn on_msg(&mut self, msg: Msg<V>) -> bool {
        match msg {
            Msg::Begin {
                id,
                scope,
                fingerprint,
                reply,
            } => self.on_begin(id, scope, fingerprint, reply),
            Msg::Lookup { id, reply } => {
                let now = self.core.clock.now();
                let info = match self.table.find_entry(id.hash(), |e| e.id == id) {
                    Ok(occ) if occ.get().is_expired(now) => {
                        // Gone, as the look-up says: its room is free before the answer
                        // (E2, E7), rather than when the timer comes round to it.
                        let (e, _) = occ.remove();
                        drop(take(&mut self.spares, &mut self.core, &self.weigher, e));
                        self.core.expire_one();
                        self.core.flush_released();
                        None
                    }
                    Ok(occ) => {
                        let cfg = &self.core.cfg;
                        Some(occ.get().info(now, cfg.ttl, cfg.failure_ttl))
                    }
                    Err(_) => None,
                };
                let _ = reply.send(info);
            }
            Msg::Forget { id, reply } => {
                let found = match self.table.find_entry(id.hash(), |e| e.id == id) {
                    Ok(occ) => {
                        let (e, _) = occ.remove();
                        if matches!(e.state, State::InFlight(_)) {
                            self.core.tally.abandoned += 1;
                        }
                        // Its timers stay queued and are dropped as stale when they come up.
                        let state = take(&mut self.spares, &mut self.core, &self.weigher, e);
                        self.core.release(state, || DedupError::Abandoned);
                        true
                    }
                    Err(_) => false,
                };
                // The room is free before the operator hears it is gone (E7).
                self.core.flush_released();
                let _ = reply.send(found);
            }
            Msg::Stop => return true,
        }
        false
    }

    fn on_begin(
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
    fn begin(
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
    fn on_complete(&mut self, hash: u64, token: u64, end: RunEnd<V>) -> bool {
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
    fn apply_reports(&mut self, sweep_at: Option<Nanos>) {
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

    /// Drops the lease items of runs that already ended from the front of the lease queue, so a
    /// finished run does not keep its 16 bytes until its lease would have run out. Runs mostly end
    /// in the order they started, so the front is usually the run that just completed.
    fn trim_leases(&mut self) {
        while let Some((hash, token)) = self.core.wheel.front(Kind::Lease) {
            let live = self.table.find(hash, |e| e.runs(token)).is_some();
            if live {
                break;
            }
            self.core.wheel.pop(Kind::Lease);
        }
    }

    /// Timers are due: removes every entry whose lease or expiry has passed at `now`, drops
    /// stale queue items, and re-arms the sleep for the earliest deadline still pending.
    /// At most [`BATCH`] queue items per call; returns whether due items remain (the wheel is
    /// then armed for now, and the caller yields before the next call). Leases are swept only
    /// here, right after the inbox was drained for `now` (see `inbox.rs`).
    fn sweep(&mut self, now: Nanos) -> bool {
        let mut next: Option<Nanos> = None;
        let mut budget = BATCH;
        for kind in Kind::ALL {
            if self.sweep_kind(kind, now, &mut budget, &mut next) {
                // More may be due: come back after the other branches had a turn.
                self.core.wheel.arm(Some(now));
                return true;
            }
        }
        self.core.wheel.arm(next);
        false
    }

    /// Removes the stored results (successes and cached failures) past their expiry at `now`,
    /// within a turn (a full engine asks for room; E7). Leaves leases to [`sweep`](Self::sweep),
    /// and the wheel armed as it was (at worst early: the timer's sweep then finds less to do).
    /// Returns how many it removed.
    fn expire_due(&mut self, now: Nanos) -> usize {
        let before = self.core.tally.expired;
        let mut next = None;
        let mut budget = BATCH;
        for kind in [Kind::Ttl, Kind::FailureTtl] {
            if self.sweep_kind(kind, now, &mut budget, &mut next) {
                self.core.wheel.arm(Some(now));
                break;
            }
        }
        usize::try_from(self.core.tally.expired - before).unwrap_or(usize::MAX)
    }

    /// Sweeps one timer queue up to `now`, spending `budget`; the earliest deadline still
    /// pending goes into `next`. Returns true when the budget ran out with items still due.
    fn sweep_kind(
        &mut self,
        kind: Kind,
        now: Nanos,
        budget: &mut usize,
        next: &mut Option<Nanos>,
    ) -> bool {
        let lease = nanos(self.core.cfg.in_flight_timeout);
        let mut warmed = 0;
        while let Some((hash, tag)) = self.core.wheel.front(kind) {
            if warmed == 0 {
                warmed = self.warm(kind);
            }
            warmed -= 1;
            if *budget == 0 {
                return true;
            }
            *budget -= 1;
            let Ok(occ) = self.table.find_entry(hash, |e| names(e, kind, hash, tag)) else {
                // The run or result is gone (a lease of a run that completed, a result
                // forgotten or replaced).
                self.core.wheel.pop(kind);
                continue;
            };
            let at = occ.get().at;
            let deadline = match kind {
                Kind::Lease => at.saturating_add(lease),
                Kind::Ttl | Kind::FailureTtl => at,
            };
            if deadline > now {
                *next = Some(next.map_or(deadline, |n| n.min(deadline)));
                return false;
            }
            self.core.wheel.pop(kind);
            let (e, _) = occ.remove();
            if let State::InFlight(f) = &e.state {
                warn_run_end(&self.core.cfg, &f.scope, BadEnd::Lease);
            }
            let e = take(&mut self.spares, &mut self.core, &self.weigher, e);
            let core = &mut self.core;
            if matches!(e, State::InFlight(_)) {
                core.tally.lease_expired += 1;
                let after = core.cfg.in_flight_timeout;
                core.release(e, || DedupError::LeaseExpired { after });
            } else {
                core.tally.expired += 1;
                core.release(e, || DedupError::Abandoned);
            }
        }
        false
    }

    /// Reads the entries of the next [`WARM`] items of a timer queue and returns how many items
    /// it looked at (at least 1).
    ///
    /// An expiry's cost is its cache misses: the table group, the slot, the entry's box, all
    /// cold since the entry was stored. One at a time they come one after another; these
    /// look-ups are independent of each other, so the processor overlaps their misses, and the
    /// sweep that follows finds the lines in cache. It reads, it changes nothing.
    fn warm(&self, kind: Kind) -> usize {
        let mut seen = 0;
        let mut sum: u64 = 0;
        for (hash, tag) in self.core.wheel.upcoming(kind, WARM) {
            seen += 1;
            if let Some(e) = self.table.find(hash, |e| names(e, kind, hash, tag)) {
                sum = sum.wrapping_add(e.at);
            }
        }
        std::hint::black_box(sum);
        seen.max(1)
    }

    /// Shutdown: every waiter still waiting gets `ShuttingDown`; the entries (taken out of the
    /// published table) and the wheel are emptied, [`BATCH`] entries per poll.
    async fn stop(&mut self, mut table: HashTable<Box<Entry<V>>>) {
        self.rx.close();
        // Reports that came after the last drain are not applied: drop them (and their values);
        // a leader waiting on one learns from the closed mailbox that the shard stopped.
        self.inbox.drain_into(&mut self.reports);
        self.reports.clear();
        for (i, e) in table.drain().enumerate() {
            self.core.shared.entries.fetch_sub(1, Relaxed);
            if let State::InFlight(InFlight {
                join: Some(cell), ..
            }) = e.state
            {
                cell.resolve(Err(DedupError::ShuttingDown));
            }
            if (i + 1) % BATCH == 0 {
                tokio::task::yield_now().await;
            }
        }
        self.core.wheel.clear();
        self.core.tally.in_flight = 0;
        self.core.tally.completed = 0;
        // The values are gone: out of the engine-wide bytes, all at once.
        self.core.flush_released();
        self.core
            .shared
            .bytes
            .fetch_sub(self.core.quota.bytes, Relaxed);
        self.core.quota.clear();
    }

    /// Publishes tallies to the atomics read by `stats()` and to the metrics facade.
    fn publish(&mut self) {
        self.core.flush_released();
        self.core.tally.bytes = self.core.quota.bytes as u64;
        let shared = &self.core.shared;
        let t = &self.core.tally;
        self.publisher.publish(
            t,
            &shared.counters[self.index],
            &shared.fast_replays,
            &shared.fast_joins,
        );
        if t.in_flight == 0 && shared.shutting_down.load(Acquire) {
            shared.idle.notify_waiters();
        }
    }
}

impl Core {
    /// Starts a run for a new scope, or hands the scope and reply back when the engine is full.
    #[allow(clippy::too_many_arguments)]
    fn begin_vacant<V>(
        &mut self,
        vacant: VacantEntry<'_, Box<Entry<V>>>,
        spares: &mut Spares<V>,
        id: ScopeId,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    ) -> Option<(Scope, oneshot::Sender<Reply<V>>, Refusal)> {
        // Bounded memory (E7, E16): the tenant's share, the byte budget, then a slot in the
        // engine-wide count, or refuse. Nothing is evicted to make room: evicting an unexpired
        // result would let a duplicate run. This shard's own removals are counted out first, so
        // it never refuses for want of room it has just freed.
        if !self.quota.admits(scope.as_bytes()) {
            return Some((scope, reply, Refusal::Tenant));
        }
        self.flush_released();
        if self.cfg.max_bytes != usize::MAX && self.shared.bytes.load(Relaxed) >= self.cfg.max_bytes
        {
            return Some((scope, reply, Refusal::Full));
        }
        let prev = self.shared.entries.fetch_add(1, AcqRel);
        if prev >= self.cfg.max_entries {
            self.shared.entries.fetch_sub(1, Relaxed);
            return Some((scope, reply, Refusal::Full));
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

    /// Refuses a new scope: the engine is full (E7, E16) or its tenant at its share (E16).
    fn refuse<V>(&mut self, reply: oneshot::Sender<Reply<V>>, why: Refusal) {
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

    /// Accounts for a stored result removed at its expiry outside a sweep.
    fn expire_one(&mut self) {
        self.tally.completed -= 1;
        self.tally.expired += 1;
        self.released += 1;
    }

    /// Takes this shard's removals since the last call out of the engine-wide entry count, in
    /// one atomic update: a sweep that expires thousands of entries writes the shared line
    /// once, not once per entry. Called before every reservation, before anyone is told that
    /// an entry is gone (a leader's or waiter's answer for a run that stored nothing, a
    /// forget's, a look-up's), and at the end of every turn. So the count is never too low, and
    /// whoever hears that an entry is gone finds its room free on every shard (E7); only an
    /// expiry nobody has asked about reaches other shards at the end of the sweeping turn.
    fn flush_released(&mut self) {
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

    /// Accounts for a removed entry (its state); an in-flight one's waiters get `err()`. The
    /// engine-wide count is updated by [`flush_released`](Self::flush_released): at once when
    /// waiters are answered, so that each of them finds the room free for its next call, on any
    /// shard (E7); otherwise at the end of the turn.
    fn release<V: Clone>(&mut self, state: State<V>, err: impl Fn() -> DedupError) {
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

/// Takes a removed entry: counts it out of its tenant's use and its value's weight out of the
/// byte budget (E16), and returns its state, keeping the box for reuse (see [`Spares`]).
fn take<V>(
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

/// How a run ended that an operator must hear of (E15).
enum BadEnd<'a> {
    /// It passed its in-flight lease (E6).
    Lease,
    /// Its action panicked, with this message (E4).
    Panic(&'a str),
}

/// Warns of a run that ended badly, naming its scope as the engine's [`ScopeLogging`] allows.
/// The scope is decoded only when the event is enabled.
///
/// [`ScopeLogging`]: crate::trace::ScopeLogging
fn warn_run_end(cfg: &Config, scope: &Scope, why: BadEnd<'_>) {
    if !trace::warn_enabled() {
        return;
    }
    let fields = ScopeFields::new(scope, cfg.scope_logging);
    match why {
        BadEnd::Lease => warn_scope!(
            "idem_dedup.lease_expired",
            &*cfg.name,
            &fields,
            lease_ms = millis(cfg.in_flight_timeout),
            "a run passed its in-flight lease and was ended: its callers get UNAVAILABLE and \
             nothing is stored"
        ),
        BadEnd::Panic(message) => warn_scope!(
            "idem_dedup.panicked",
            &*cfg.name,
            &fields,
            panic = message,
            "the action panicked: its callers get INTERNAL and nothing is stored"
        ),
    }
}

/// Whether `e` is what a timer item of `kind` names: the run `tag` for a lease, the stored result
/// of the scope hashed to `hash` that expires at `tag` for a TTL (see `wheel.rs`).
#[inline]
fn names<V>(e: &Entry<V>, kind: Kind, hash: u64, tag: u64) -> bool {
    match kind {
        Kind::Lease => e.runs(tag),
        Kind::Ttl | Kind::FailureTtl => e.expires_exactly(hash, tag),
    }
}

/// Entries a shard expires or drops per poll before it yields to the scheduler.
const BATCH: usize = 4096;

/// Timer items whose entries a sweep reads ahead (see [`Shard::warm`]).
const WARM: usize = 8;

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Takes the table's write lock without ever blocking the thread: readers hold it for a few
/// nanoseconds (one lookup and a clone), so spin briefly, then yield to the scheduler and retry.
async fn write_lock<T>(lock: &ShardedLock<T>) -> ShardedLockWriteGuard<'_, T> {
    loop {
        for _ in 0..64 {
            match lock.try_write() {
                Ok(guard) => return guard,
                // Nothing panics while holding it, and a table is valid between batches anyway.
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
            std::hint::spin_loop();
        }
        tokio::task::yield_now().await;
    }
}
