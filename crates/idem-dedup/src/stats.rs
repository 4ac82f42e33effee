//! What [`Engine::stats`](crate::Engine::stats) reads: counters summed over the shards, without
//! touching a mailbox.

use std::sync::atomic::Ordering::Relaxed;

use crate::actor::counters::ShardCounters;

/// In-flight and completed counts of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ShardStats {
    /// Runs in flight.
    pub in_flight: u64,
    /// Completed results stored (successes and cached failures).
    pub completed: u64,
    /// What the stored values weigh, with a [`weigher`](crate::EngineBuilder::weigher);
    /// 0 without one.
    pub bytes: u64,
}

/// Outcome counters since the engine started, summed over shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct OutcomeCounts {
    /// Calls that ran the action.
    pub executed: u64,
    /// Calls that waited for another call's run.
    pub joined: u64,
    /// Calls answered from a stored result.
    pub replayed: u64,
    /// Calls refused for a fingerprint conflict.
    pub conflicts: u64,
    /// Runs that ended with the action's error.
    pub failed: u64,
    /// Runs whose action panicked.
    pub panicked: u64,
    /// Calls refused because the engine was full, or because their tenant held its
    /// whole share (counted in [`tenant_refused`](Self::tenant_refused) as well).
    pub overloaded: u64,
    /// Calls refused because their tenant held its whole share of the engine.
    pub tenant_refused: u64,
    /// Calls refused because the scope was in flight under `Reject`.
    pub rejected_in_flight: u64,
    /// Runs cancelled by the in-flight lease. A run forgotten before its lease ran out was
    /// already counted as abandoned and is not counted again.
    pub lease_expired: u64,
    /// Runs that ended without a result (leader dropped before starting, or forgotten).
    pub abandoned: u64,
    /// Stored results removed by TTL expiry.
    pub expired: u64,
    /// Callers that stopped waiting at their own deadline.
    pub deadline_exceeded: u64,
    /// Sends that found a shard's mailbox full and waited for room.
    pub mailbox_full: u64,
}

/// A snapshot of the engine's counters, from [`Engine::stats`](crate::Engine::stats).
///
/// Reading it costs one relaxed load per counter per shard and sends no message, so scraping it
/// every second — or every millisecond — under full load is cheap. Counts of different shards are
/// read at slightly different moments.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Per shard, in shard order.
    pub shards: Vec<ShardStats>,
    /// Runs in flight, all shards.
    pub in_flight: u64,
    /// Completed results stored, all shards.
    pub completed: u64,
    /// What the stored values weigh, all shards (with a weigher).
    pub bytes: u64,
    /// Outcome counters, all shards.
    pub outcomes: OutcomeCounts,
}

impl Stats {
    /// In-flight + completed entries: what `max_entries` caps.
    pub fn entries(&self) -> u64 {
        self.in_flight + self.completed
    }

    pub(crate) fn collect(shards: &[ShardCounters], fast_replays: u64, fast_joins: u64) -> Stats {
        let mut s = Stats {
            shards: Vec::with_capacity(shards.len()),
            ..Stats::default()
        };
        for c in shards {
            let sh = ShardStats {
                in_flight: c.in_flight.load(Relaxed),
                completed: c.completed.load(Relaxed),
                bytes: c.bytes.load(Relaxed),
            };
            s.in_flight += sh.in_flight;
            s.completed += sh.completed;
            s.bytes += sh.bytes;
            s.shards.push(sh);
            let o = &mut s.outcomes;
            o.executed += c.executed.load(Relaxed);
            o.joined += c.joined.load(Relaxed);
            o.replayed += c.replayed.load(Relaxed);
            o.conflicts += c.conflicts.load(Relaxed);
            o.failed += c.failed.load(Relaxed);
            o.panicked += c.panicked.load(Relaxed);
            o.overloaded += c.overloaded.load(Relaxed);
            o.tenant_refused += c.tenant_refused.load(Relaxed);
            o.rejected_in_flight += c.rejected_in_flight.load(Relaxed);
            o.lease_expired += c.lease_expired.load(Relaxed);
            o.abandoned += c.abandoned.load(Relaxed);
            o.expired += c.expired.load(Relaxed);
            o.deadline_exceeded += c.deadline_exceeded.load(Relaxed);
            o.mailbox_full += c.mailbox_full.load(Relaxed);
        }
        s.outcomes.replayed += fast_replays;
        s.outcomes.joined += fast_joins;
        s
    }
}
