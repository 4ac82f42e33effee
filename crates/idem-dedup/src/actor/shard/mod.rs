//! The shard actor: the only code that writes a shard's map and timer wheel. This file
//! holds the actor and its loop; `apply` how messages and run ends change the table, `expiry`
//! its timers, `seed` how a result obtained elsewhere is stored, `room` how removed entries give
//! back the room they held, and `warn` the events of runs that ended badly.

mod apply;
mod expiry;
mod room;
mod seed;
mod warn;

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::{Arc, TryLockError};
use std::time::Duration;

use crossbeam_utils::sync::{ShardedLock, ShardedLockWriteGuard};
use hashbrown::hash_table::HashTable;
use tokio::sync::mpsc;

use crate::actor::entry::{Entry, InFlight, Spares, State};
use crate::actor::inbox::{Inbox, Report};
use crate::actor::message::{Msg, Reply};
use crate::actor::quota::Quota;
use crate::actor::shared::{Shared, SharedTable};
use crate::actor::tally::{Publisher, Tally};
use crate::actor::wheel::{Clock, Nanos, Wheel};
use crate::config::{Config, Weigher};
use crate::DedupError;

use room::take;
use warn::{warn_run_end, BadEnd};

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
    /// Weighs stored values for the byte budget.
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
    /// The byte budget's and the tenants' shares of this shard.
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
            Msg::Seed(seed) => self.on_seed(*seed),
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

/// Entries a shard expires or drops per poll before it yields to the scheduler.
const BATCH: usize = 4096;

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
