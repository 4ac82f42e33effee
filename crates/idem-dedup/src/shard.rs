//! The shard actor: the only code that touches a shard's map and timer wheel (SPEC E8).

use std::future::poll_fn;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{RwLock, RwLockWriteGuard};

use hashbrown::hash_table::{Entry as Slot, HashTable};
use idem_core::{Fingerprint, Scope};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::time::DelayQueue;

use crate::config::{Config, InFlightPolicy};
use crate::engine::Shared;
use crate::entry::{Entry, State};
use crate::message::{Msg, Reply, RunEnd};
use crate::metrics as names;
use crate::{DedupError, Outcome, OutcomeKind};

/// What the timer wheel holds: which run of which scope a deadline belongs to.
struct Timer {
    hash: u64,
    token: u64,
}

/// Local tallies, published to the shared atomics once per drain.
#[derive(Default)]
struct Tally {
    in_flight: u64,
    completed: u64,
    executed: u64,
    joined: u64,
    replayed: u64,
    conflicts: u64,
    failed: u64,
    panicked: u64,
    overloaded: u64,
    rejected_in_flight: u64,
    lease_expired: u64,
    abandoned: u64,
    expired: u64,
}

struct Gauges {
    in_flight: metrics::Gauge,
    completed: metrics::Gauge,
    expired: metrics::Counter,
    calls: [metrics::Counter; 10],
}

impl Gauges {
    fn new(index: usize) -> Self {
        let shard = index.to_string();
        let outcome =
            |o: &'static str| metrics::counter!(names::CALLS_TOTAL, names::LABEL_OUTCOME => o);
        Gauges {
            in_flight: metrics::gauge!(names::IN_FLIGHT, names::LABEL_SHARD => shard.clone()),
            completed: metrics::gauge!(names::COMPLETED, names::LABEL_SHARD => shard.clone()),
            expired: metrics::counter!(names::EXPIRED_TOTAL, names::LABEL_SHARD => shard),
            calls: [
                outcome("executed"),
                outcome("joined"),
                outcome("replayed"),
                outcome("conflict"),
                outcome("failed"),
                outcome("panicked"),
                outcome("overloaded"),
                outcome("rejected_in_flight"),
                outcome("lease_expired"),
                outcome("abandoned"),
            ],
        }
    }
}

/// A shard's table, shared for reading. Only the shard actor writes it; it takes the write lock for
/// one synchronous batch at a time (never across an `.await`), and callers take `try_read` to
/// replay a stored result without sending a message (see `Engine::call`).
pub(crate) type SharedTable<V> = Arc<RwLock<HashTable<Entry<V>>>>;

pub(crate) struct Shard<V> {
    index: usize,
    rx: mpsc::Receiver<Msg<V>>,
    /// The table while the actor holds the write lock; empty otherwise (swapped in and out).
    table: HashTable<Entry<V>>,
    published: SharedTable<V>,
    core: Core,
    /// Counter values last sent to the metrics facade (counters take increments).
    sent: Tally,
    /// Read-path replays last sent to the metrics facade (shard 0 only).
    fast_sent: u64,
    gauges: Gauges,
}

impl<V: Clone + Send + Sync + 'static> Shard<V> {
    pub(crate) fn new(
        index: usize,
        rx: mpsc::Receiver<Msg<V>>,
        published: SharedTable<V>,
        cfg: Arc<Config>,
        shared: Arc<Shared>,
    ) -> Self {
        Shard {
            index,
            rx,
            table: HashTable::new(),
            published,
            core: Core {
                wheel: DelayQueue::new(),
                cfg,
                shared,
                next_token: 0,
                tally: Tally::default(),
            },
            sent: Tally::default(),
            fast_sent: 0,
            gauges: Gauges::new(index),
        }
    }

    /// The actor loop: drain the mailbox in batches, fire timers, publish counters. Ends on `Stop`
    /// or when every sender (engine handles and runs) is gone.
    pub(crate) async fn run(mut self) {
        let batch = self.core.cfg.batch_size;
        let mut buf = Vec::with_capacity(batch);
        let published = self.published.clone();
        // Counters reach the metrics facade at least once a second even when only lock-free
        // replays happen (those never wake the actor).
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // Timers first, so expiry keeps up under load and memory stays bounded (SPEC Z3).
                Some(expired) = poll_fn(|cx| self.core.wheel.poll_expired(cx)), if !self.core.wheel.is_empty() => {
                    let t = expired.into_inner();
                    let mut guard = write_lock(&published).await;
                    std::mem::swap(&mut self.table, &mut *guard);
                    self.on_timer(t.hash, t.token);
                    std::mem::swap(&mut self.table, &mut *guard);
                }
                n = self.rx.recv_many(&mut buf, batch) => {
                    if n == 0 {
                        break;
                    }
                    let mut stop = false;
                    let mut guard = write_lock(&published).await;
                    std::mem::swap(&mut self.table, &mut *guard);
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
                    drop(guard);
                    if stop {
                        break;
                    }
                }
                _ = tick.tick() => {}
            }
            self.publish();
        }
        let mut guard = write_lock(&published).await;
        std::mem::swap(&mut self.table, &mut *guard);
        self.stop();
        std::mem::swap(&mut self.table, &mut *guard);
        drop(guard);
        self.publish();
    }

    /// Handles one message; returns true on `Stop`.
    fn on_msg(&mut self, msg: Msg<V>) -> bool {
        match msg {
            Msg::Begin {
                hash,
                scope,
                fingerprint,
                reply,
            } => self.on_begin(hash, scope, fingerprint, reply),
            Msg::Complete { hash, token, end } => self.on_complete(hash, token, end),
            Msg::Lookup { hash, scope, reply } => {
                let now = Instant::now();
                let info = self
                    .table
                    .find(hash, |e| e.scope == scope)
                    .filter(|e| !is_expired(e, now))
                    .map(|e| e.info(now));
                let _ = reply.send(info);
            }
            Msg::Forget { hash, scope, reply } => {
                let found = match self.table.find_entry(hash, |e| e.scope == scope) {
                    Ok(occ) => {
                        let (e, _) = occ.remove();
                        self.core.wheel.remove(&e.timer);
                        self.core.release(e, || DedupError::Abandoned);
                        true
                    }
                    Err(_) => false,
                };
                let _ = reply.send(found);
            }
            Msg::Stop => return true,
        }
        false
    }

    fn on_begin(
        &mut self,
        hash: u64,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    ) {
        let slot = self
            .table
            .entry(hash, |e| e.scope == scope, |e: &Entry<V>| e.hash);
        let vacant = match slot {
            Slot::Occupied(mut occ) => {
                let e = occ.get_mut();
                // An expired result is gone, even if its timer has not fired yet (SPEC E2).
                if let State::Done { expires_at, .. } = &e.state {
                    if Instant::now() >= *expires_at {
                        let (old, vacant) = occ.remove();
                        self.core.wheel.remove(&old.timer);
                        self.core.tally.completed -= 1;
                        self.core.tally.expired += 1;
                        self.core.shared.entries.fetch_sub(1, Relaxed);
                        self.core
                            .begin_vacant(vacant, hash, scope, fingerprint, reply);
                        return;
                    }
                }
                if e.fingerprint != fingerprint {
                    self.core.tally.conflicts += 1;
                    let _ = reply.send(Reply::Done(Err(DedupError::Conflict)));
                    return;
                }
                match &mut e.state {
                    State::InFlight { waiters, .. } => match self.core.cfg.in_flight_policy {
                        InFlightPolicy::Wait => {
                            self.core.tally.joined += 1;
                            waiters.push(reply);
                        }
                        InFlightPolicy::Reject => {
                            self.core.tally.rejected_in_flight += 1;
                            let _ = reply.send(Reply::Done(Err(DedupError::InFlight {
                                retry_after: self.core.cfg.retry_after,
                            })));
                        }
                    },
                    State::Done {
                        result, expires_at, ..
                    } => {
                        self.core.tally.replayed += 1;
                        let answer = match result {
                            Ok(v) => {
                                Ok(Outcome::new(v.clone(), OutcomeKind::Replayed, *expires_at))
                            }
                            Err(status) => Err(DedupError::Action {
                                status: (**status).clone(),
                                outcome: OutcomeKind::Replayed,
                            }),
                        };
                        let _ = reply.send(Reply::Done(answer));
                    }
                }
                return;
            }
            Slot::Vacant(v) => v,
        };
        self.core
            .begin_vacant(vacant, hash, scope, fingerprint, reply);
    }

    fn on_complete(&mut self, hash: u64, token: u64, end: RunEnd<V>) {
        let Ok(mut occ) = self.table.find_entry(hash, |e| e.token == token) else {
            // The run was already ended by its lease, a forget or shutdown.
            return;
        };
        if !matches!(occ.get().state, State::InFlight { .. }) {
            return;
        }
        let cached = match &end {
            RunEnd::Finished(Ok(_), at) => Some((*at, self.core.cfg.ttl)),
            RunEnd::Finished(Err(s), at) if self.core.cfg.cached_failures.contains(s.code()) => {
                Some((*at, self.core.cfg.failure_ttl))
            }
            _ => None,
        };
        match cached {
            Some((now, ttl)) => {
                let e = occ.get_mut();
                let expires_at = now + ttl;
                // TTL counts from the action's completion, not from when the shard heard of it.
                self.core.wheel.reset_at(&e.timer, expires_at);
                let result = match end {
                    RunEnd::Finished(Ok(v), _) => Ok(v),
                    RunEnd::Finished(Err(s), _) => Err(Arc::new(s)),
                    _ => unreachable!("only finished runs are cached"),
                };
                let waiters = match std::mem::replace(
                    &mut e.state,
                    State::Done {
                        result,
                        completed: now,
                        expires_at,
                    },
                ) {
                    State::InFlight { waiters, .. } => waiters,
                    State::Done { .. } => Vec::new(),
                };
                let State::Done { result, .. } = &e.state else {
                    return;
                };
                match result {
                    Ok(v) => {
                        for w in waiters {
                            let out = Outcome::new(v.clone(), OutcomeKind::Joined, expires_at);
                            let _ = w.send(Reply::Done(Ok(out)));
                        }
                    }
                    Err(s) => {
                        self.core.tally.failed += 1;
                        for w in waiters {
                            let _ = w.send(Reply::Done(Err(DedupError::Action {
                                status: (**s).clone(),
                                outcome: OutcomeKind::Joined,
                            })));
                        }
                    }
                }
                self.core.tally.in_flight -= 1;
                self.core.tally.completed += 1;
            }
            None => {
                let (e, _) = occ.remove();
                self.core.wheel.remove(&e.timer);
                match end {
                    RunEnd::Finished(Err(status), _) => {
                        self.core.tally.failed += 1;
                        self.core.release(e, || DedupError::Action {
                            status: status.clone(),
                            outcome: OutcomeKind::Joined,
                        });
                    }
                    RunEnd::Panicked(message) => {
                        self.core.tally.panicked += 1;
                        self.core.release(e, || DedupError::Panicked {
                            message: message.clone(),
                        });
                    }
                    RunEnd::LeaseExpired => {
                        self.core.tally.lease_expired += 1;
                        let after = self.core.cfg.in_flight_timeout;
                        self.core.release(e, || DedupError::LeaseExpired { after });
                    }
                    RunEnd::Abandoned => {
                        self.core.tally.abandoned += 1;
                        self.core.release(e, || DedupError::Abandoned);
                    }
                    RunEnd::Finished(Ok(_), _) => unreachable!("successes are always stored"),
                }
            }
        }
    }

    /// A timer fired: a lease ran out (in flight) or a result expired (completed).
    fn on_timer(&mut self, hash: u64, token: u64) {
        let Ok(occ) = self.table.find_entry(hash, |e| e.token == token) else {
            return;
        };
        let (e, _) = occ.remove();
        // The wheel already dropped this timer; do not remove it again.
        match e.state {
            State::InFlight { .. } => {
                self.core.tally.lease_expired += 1;
                let after = self.core.cfg.in_flight_timeout;
                self.core.release(e, || DedupError::LeaseExpired { after });
            }
            State::Done { .. } => {
                self.core.tally.expired += 1;
                self.core.tally.completed -= 1;
                self.core.shared.entries.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Shutdown: every waiter still waiting gets `ShuttingDown`; the map and wheel are emptied.
    fn stop(&mut self) {
        self.rx.close();
        for e in self.table.drain() {
            self.core.shared.entries.fetch_sub(1, Relaxed);
            if let State::InFlight { waiters, .. } = e.state {
                for w in waiters {
                    let _ = w.send(Reply::Done(Err(DedupError::ShuttingDown)));
                }
            }
        }
        self.core.wheel.clear();
        self.core.tally.in_flight = 0;
        self.core.tally.completed = 0;
    }

    /// Publishes tallies to the atomics read by `stats()` and to the metrics facade.
    fn publish(&mut self) {
        let c = &self.core.shared.counters[self.index];
        let t = &self.core.tally;
        c.in_flight.store(t.in_flight, Relaxed);
        c.completed.store(t.completed, Relaxed);
        c.executed.store(t.executed, Relaxed);
        c.joined.store(t.joined, Relaxed);
        c.replayed.store(t.replayed, Relaxed);
        c.conflicts.store(t.conflicts, Relaxed);
        c.failed.store(t.failed, Relaxed);
        c.panicked.store(t.panicked, Relaxed);
        c.overloaded.store(t.overloaded, Relaxed);
        c.rejected_in_flight.store(t.rejected_in_flight, Relaxed);
        c.lease_expired.store(t.lease_expired, Relaxed);
        c.abandoned.store(t.abandoned, Relaxed);
        c.expired.store(t.expired, Relaxed);

        let g = &self.gauges;
        g.in_flight.set(t.in_flight as f64);
        g.completed.set(t.completed as f64);
        let s = &mut self.sent;
        let pairs = [
            (t.executed, &mut s.executed),
            (t.joined, &mut s.joined),
            (t.replayed, &mut s.replayed),
            (t.conflicts, &mut s.conflicts),
            (t.failed, &mut s.failed),
            (t.panicked, &mut s.panicked),
            (t.overloaded, &mut s.overloaded),
            (t.rejected_in_flight, &mut s.rejected_in_flight),
            (t.lease_expired, &mut s.lease_expired),
            (t.abandoned, &mut s.abandoned),
        ];
        if self.index == 0 {
            // Replays taken on the read path are engine-wide; shard 0 reports them.
            let fast = self.core.shared.fast_replays.sum();
            if fast != self.fast_sent {
                g.calls[2].increment(fast - self.fast_sent);
                self.fast_sent = fast;
            }
        }
        for (i, (now, last)) in pairs.into_iter().enumerate() {
            if now != *last {
                g.calls[i].increment(now - *last);
                *last = now;
            }
        }
        if t.expired != s.expired {
            g.expired.increment(t.expired - s.expired);
            s.expired = t.expired;
        }

        if t.in_flight == 0 && self.core.shared.shutting_down.load(Acquire) {
            self.core.shared.idle.notify_waiters();
        }
    }
}

/// Everything a shard owns besides its map, so handlers can hold a map slot and still update
/// timers and tallies.
struct Core {
    wheel: DelayQueue<Timer>,
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    next_token: u64,
    tally: Tally,
}

impl Core {
    fn begin_vacant<V>(
        &mut self,
        vacant: hashbrown::hash_table::VacantEntry<'_, Entry<V>>,
        hash: u64,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    ) {
        // Bounded memory (SPEC E7): reserve a slot in the engine-wide count or refuse. Nothing is
        // evicted to make room: evicting an unexpired result would let a duplicate run.
        let prev = self.shared.entries.fetch_add(1, AcqRel);
        if prev >= self.cfg.max_entries {
            self.shared.entries.fetch_sub(1, Relaxed);
            self.tally.overloaded += 1;
            let _ = reply.send(Reply::Done(Err(DedupError::Overloaded {
                retry_after: self.cfg.retry_after,
            })));
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        if reply.send(Reply::Lead { token }).is_err() {
            // The caller is already gone: nobody will run the action, so store nothing.
            self.shared.entries.fetch_sub(1, Relaxed);
            return;
        }
        let timer = self
            .wheel
            .insert(Timer { hash, token }, self.cfg.in_flight_timeout);
        vacant.insert(Entry {
            hash,
            token,
            scope,
            fingerprint,
            timer,
            state: State::InFlight {
                started: Instant::now(),
                waiters: Vec::new(),
            },
        });
        self.tally.executed += 1;
        self.tally.in_flight += 1;
    }

    /// Accounts for a removed entry; an in-flight one's waiters get `err()`.
    fn release<V>(&mut self, e: Entry<V>, err: impl Fn() -> DedupError) {
        self.shared.entries.fetch_sub(1, Relaxed);
        match e.state {
            State::InFlight { waiters, .. } => {
                self.tally.in_flight -= 1;
                for w in waiters {
                    let _ = w.send(Reply::Done(Err(err())));
                }
            }
            State::Done { .. } => self.tally.completed -= 1,
        }
    }
}

/// Takes the table's write lock without ever blocking the thread: readers hold it for a few
/// nanoseconds (one lookup and a clone), so spin briefly, then yield to the scheduler and retry.
async fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    loop {
        for _ in 0..64 {
            if let Some(guard) = lock.try_write() {
                return guard;
            }
            std::hint::spin_loop();
        }
        tokio::task::yield_now().await;
    }
}

fn is_expired<V>(e: &Entry<V>, now: Instant) -> bool {
    matches!(&e.state, State::Done { expires_at, .. } if now >= *expires_at)
}
