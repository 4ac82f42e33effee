//! A shard's counters: tallied locally by the actor, published once per drain to the atomics that
//! `stats()` reads and to the metrics facade.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::actor::counters::{ShardCounters, Striped};
use crate::metrics as names;

/// Local tallies, published to the shared atomics once per drain.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) in_flight: u64,
    pub(crate) completed: u64,
    /// Weight of the stored values (with a weigher).
    pub(crate) bytes: u64,
    pub(crate) executed: u64,
    pub(crate) joined: u64,
    pub(crate) replayed: u64,
    pub(crate) conflicts: u64,
    pub(crate) failed: u64,
    pub(crate) panicked: u64,
    pub(crate) overloaded: u64,
    pub(crate) tenant_refused: u64,
    pub(crate) rejected_in_flight: u64,
    pub(crate) lease_expired: u64,
    pub(crate) abandoned: u64,
    pub(crate) expired: u64,
}

/// The metric handles of one shard, resolved once, and what was last sent to them.
pub(crate) struct Publisher {
    index: usize,
    in_flight: metrics::Gauge,
    completed: metrics::Gauge,
    expired: metrics::Counter,
    calls: [metrics::Counter; 10],
    sent: Tally,
    /// Read-path replays and joins last sent (shard 0 reports the engine-wide striped counts).
    fast_sent: u64,
    fast_joins_sent: u64,
}

impl Publisher {
    /// The handles of shard `index` of the engine named `engine`.
    pub(crate) fn new(index: usize, engine: &Arc<str>) -> Self {
        let engine = metrics::SharedString::from(engine.clone());
        let shard = index.to_string();
        let outcome = |o: &'static str| {
            metrics::counter!(
                names::CALLS_TOTAL,
                names::LABEL_ENGINE => engine.clone(),
                names::LABEL_OUTCOME => o
            )
        };
        let per_shard = || {
            [
                (names::LABEL_ENGINE, engine.clone()),
                (
                    names::LABEL_SHARD,
                    metrics::SharedString::from(shard.clone()),
                ),
            ]
        };
        Publisher {
            index,
            in_flight: metrics::gauge!(names::IN_FLIGHT, &per_shard()),
            completed: metrics::gauge!(names::COMPLETED, &per_shard()),
            expired: metrics::counter!(names::EXPIRED_TOTAL, &per_shard()),
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
            sent: Tally::default(),
            fast_sent: 0,
            fast_joins_sent: 0,
        }
    }

    /// Stores `t` into the shard's atomics and sends the changes to the metrics facade.
    pub(crate) fn publish(
        &mut self,
        t: &Tally,
        c: &ShardCounters,
        fast_replays: &Striped,
        fast_joins: &Striped,
    ) {
        c.in_flight.store(t.in_flight, Relaxed);
        c.completed.store(t.completed, Relaxed);
        c.bytes.store(t.bytes, Relaxed);
        c.executed.store(t.executed, Relaxed);
        c.joined.store(t.joined, Relaxed);
        c.replayed.store(t.replayed, Relaxed);
        c.conflicts.store(t.conflicts, Relaxed);
        c.failed.store(t.failed, Relaxed);
        c.panicked.store(t.panicked, Relaxed);
        c.overloaded.store(t.overloaded, Relaxed);
        c.tenant_refused.store(t.tenant_refused, Relaxed);
        c.rejected_in_flight.store(t.rejected_in_flight, Relaxed);
        c.lease_expired.store(t.lease_expired, Relaxed);
        c.abandoned.store(t.abandoned, Relaxed);
        c.expired.store(t.expired, Relaxed);

        self.in_flight.set(t.in_flight as f64);
        self.completed.set(t.completed as f64);
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
        for (i, (now, last)) in pairs.into_iter().enumerate() {
            if now != *last {
                self.calls[i].increment(now - *last);
                *last = now;
            }
        }
        if t.expired != s.expired {
            self.expired.increment(t.expired - s.expired);
            s.expired = t.expired;
        }
        if self.index == 0 {
            let fast = fast_replays.sum();
            if fast != self.fast_sent {
                self.calls[2].increment(fast - self.fast_sent);
                self.fast_sent = fast;
            }
            let joins = fast_joins.sum();
            if joins != self.fast_joins_sent {
                self.calls[1].increment(joins - self.fast_joins_sent);
                self.fast_joins_sent = joins;
            }
        }
    }
}
