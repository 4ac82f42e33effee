//! The shard's timers: runs past their in-flight lease and stored results past their TTL leave
//! the table in bounded sweeps, reading ahead the entries they are about to remove.

use crate::actor::entry::{Entry, State};
use crate::actor::wheel::{Kind, Nanos};
use crate::DedupError;

use super::{nanos, take, warn_run_end, BadEnd, Core, Shard, BATCH};

impl<V: Clone + Send + Sync + 'static> Shard<V> {
    /// Drops the lease items of runs that already ended from the front of the lease queue, so a
    /// finished run does not keep its 16 bytes until its lease would have run out. Runs mostly end
    /// in the order they started, so the front is usually the run that just completed.
    pub(super) fn trim_leases(&mut self) {
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
    pub(super) fn sweep(&mut self, now: Nanos) -> bool {
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
    /// within a turn (a full engine asks for room). Leaves leases to [`sweep`](Self::sweep),
    /// and the wheel armed as it was (at worst early: the timer's sweep then finds less to do).
    /// Returns how many it removed.
    pub(super) fn expire_due(&mut self, now: Nanos) -> usize {
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
    pub(super) fn sweep_kind(
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
    pub(super) fn warm(&self, kind: Kind) -> usize {
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
}

impl Core {
    /// Accounts for a stored result removed at its expiry outside a sweep.
    pub(super) fn expire_one(&mut self) {
        self.tally.completed -= 1;
        self.tally.expired += 1;
        self.released += 1;
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

/// Timer items whose entries a sweep reads ahead (see [`Shard::warm`]).
const WARM: usize = 8;
