//! A shard's timers: leases and expiries in three FIFO queues.
//!
//! Every deadline of one kind is "start + a fixed duration" — the lease for runs, the TTL for
//! stored successes, the failure TTL for cached failures — and starts come in time order, so each
//! kind's deadlines come in order too. A FIFO queue per kind is then a complete timer wheel: 16
//! bytes per item, no per-item allocation, one tokio `Sleep` per shard armed for the earliest
//! front. An item is the scope's hash and a tag: for a lease the run's token, for a stored
//! result its exact expiry (a completed entry keeps no token). Either names one entry:
//! tokens are unique per shard, and two stored results with the same 64-bit keyed hash and the
//! same expiry to the nanosecond, if there ever were two, are both due when the item is. `tokio_util::time::DelayQueue` spent ~60–90 bytes per entry on its slab
//! and wheel links; a `BTreeMap` of deadlines ~36.
//!
//! Items are never removed by hand: the shard checks a fired front against its table (the entry
//! may be gone, a newer run of the scope, or not due) and drops stale ones. Deadlines are exact:
//! a due entry is removed at its expiry. (A completion reported out of order — a handed-off run
//! whose report waited for mailbox room — may sit behind a later one and be swept that much later;
//! reads never depend on the sweep, they compare the entry's exact expiry with the clock.)

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// Nanoseconds since an engine's epoch: 8 bytes instead of a 16-byte `Instant` in every entry.
pub(crate) type Nanos = u64;

/// Converts between `Instant`s and [`Nanos`] since one epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            epoch: Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> Nanos {
        self.nanos(Instant::now())
    }

    pub(crate) fn nanos(&self, at: Instant) -> Nanos {
        let d = at.saturating_duration_since(self.epoch);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    #[inline]
    pub(crate) fn instant(&self, n: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(n)
    }
}

/// Which queue a deadline belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A run's in-flight lease.
    Lease = 0,
    /// A stored success's TTL.
    Ttl = 1,
    /// A cached failure's TTL.
    FailureTtl = 2,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Lease, Kind::Ttl, Kind::FailureTtl];
}

/// One shard's timers.
pub(crate) struct Wheel {
    clock: Clock,
    queues: [VecDeque<(u64, u64)>; 3],
    sleep: Pin<Box<Sleep>>,
    /// The deadline the sleep is set for, if any.
    armed: Option<Nanos>,
}

impl Wheel {
    pub(crate) fn new(clock: Clock) -> Self {
        Wheel {
            clock,
            queues: Default::default(),
            sleep: Box::pin(tokio::time::sleep_until(clock.instant(0))),
            armed: None,
        }
    }

    /// Queues a check at `deadline` of the entry of the scope hashed to `hash` that `tag` names:
    /// the run's token for a lease, the result's expiry for a TTL.
    pub(crate) fn insert(&mut self, kind: Kind, deadline: Nanos, hash: u64, tag: u64) {
        self.queues[kind as usize].push_back((hash, tag));
        if self.armed.is_none_or(|a| deadline < a) {
            self.arm(Some(deadline));
        }
    }

    /// The oldest item of a queue.
    pub(crate) fn front(&self, kind: Kind) -> Option<(u64, u64)> {
        self.queues[kind as usize].front().copied()
    }

    /// The oldest `n` items of a queue (fewer if it holds fewer), oldest first.
    pub(crate) fn upcoming(&self, kind: Kind, n: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.queues[kind as usize].iter().take(n).copied()
    }

    /// Drops the oldest item of a queue.
    pub(crate) fn pop(&mut self, kind: Kind) {
        self.queues[kind as usize].pop_front();
        if self.queues.iter().all(VecDeque::is_empty) {
            self.armed = None;
        }
    }

    /// Sets the sleep for `deadline`, or disarms it.
    pub(crate) fn arm(&mut self, deadline: Option<Nanos>) {
        if let Some(d) = deadline {
            self.sleep.as_mut().reset(self.clock.instant(d));
        }
        self.armed = deadline;
    }

    /// Whether a sleep is set (the actor polls [`fired`](Self::fired) only then).
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Waits for the armed deadline. Cancel-safe.
    pub(crate) async fn fired(&mut self) {
        self.sleep.as_mut().await;
    }

    /// Drops every timer (shutdown).
    pub(crate) fn clear(&mut self) {
        self.queues.iter_mut().for_each(VecDeque::clear);
        self.armed = None;
    }
}
