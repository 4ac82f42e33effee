//! Where leaders report the end of their runs: a per-shard completion queue beside the mailbox.
//!
//! # Why not the mailbox
//!
//! Every new key costs two messages: `Begin` (the caller asks whether it leads) and the report of
//! how the run ended. The report needs no back-pressure (each run reports exactly
//! once, so the queue is bounded by the runs in flight, which `max_entries` bounds), so it skips
//! the bounded channel's semaphore, block list and per-send wake: a leader takes a short
//! `parking_lot` lock, pushes, and wakes the actor only when the queue was empty. The actor swaps
//! the whole queue out under the same lock and applies it. Most reports need no answer either
//! (see below for the ones that do).
//!
//! # Ordering
//!
//! The actor drains this queue before every mailbox batch. A report is pushed before the
//! leader's call returns, so any message a caller sends after seeing that result (a `Lookup`, a
//! `Begin` for the same scope) finds the report already applied (a look-up, a replay).
//! The actor also applies it before each sweep, so a run whose report and lease timer are ready at
//! the same poll is stored, not expired. A run handed off to a task reports here too;
//! the task holds a mailbox sender until it has, which keeps the actor alive to apply it.
//!
//! # Acknowledged reports
//!
//! Most reports need no answer: a success is stored and the leader already has its value. Two
//! kinds wait for the actor to apply them, through a one-shot `ack` the report carries:
//!
//! - a run that ends without a stored result (a failure that is not cached, a panic, a lease
//!   expiry): its caller is answered only once the actor has removed the entry and counted it
//!   out of the engine-wide entry count, so the room is there for the caller's next call on any
//!   shard;
//! - a stored result whose lease the actor may already have swept. Before a sweep the
//!   actor drains this queue and records, under the queue's lock, the time it sweeps leases up
//!   to. A report pushed before that drain is applied before the
//!   sweep, so its run is stored. A report pushed after it, for a run whose lease deadline is at
//!   or before that time, may find its run swept: such a push takes an `ack`, and the leader
//!   answers with its value only if the actor stored it, and with the lease error otherwise.
//!   Every other push reads one number it already holds the lock for.

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::actor::message::RunEnd;
use crate::actor::wheel::Nanos;

/// One run's end: which run (`hash`, `token`) and how it ended.
pub(crate) struct Report<V> {
    pub(crate) hash: u64,
    pub(crate) token: u64,
    pub(crate) end: RunEnd<V>,
    /// Where the actor answers, once it has applied the report and counted any removal out of
    /// the engine-wide entry count, whether the report ended its run (`false`: the run had
    /// already ended by its lease, a forget or shutdown). `None` for reports nobody waits on.
    pub(crate) ack: Option<oneshot::Sender<bool>>,
}

impl<V> Report<V> {
    /// A report nobody waits on.
    pub(crate) fn new(hash: u64, token: u64, end: RunEnd<V>) -> Self {
        Report {
            hash,
            token,
            end,
            ack: None,
        }
    }
}

/// What the lock guards: the queued reports and the sweep mark.
struct Queue<V> {
    reports: Vec<Report<V>>,
    /// The time (shard clock) up to which the actor may have swept leases: set at the drain that
    /// precedes each sweep. Only grows.
    swept_until: Nanos,
}

/// A shard's completion queue and the signal that wakes its actor.
pub(crate) struct Inbox<V> {
    queue: Mutex<Queue<V>>,
    signal: Notify,
}

impl<V> Default for Inbox<V> {
    fn default() -> Self {
        Inbox {
            queue: Mutex::new(Queue {
                reports: Vec::new(),
                swept_until: 0,
            }),
            signal: Notify::new(),
        }
    }
}

impl<V> Inbox<V> {
    /// Queues a report; wakes the actor if the queue was empty (otherwise the push that made it
    /// non-empty already did, and the actor has not drained since). Never waits: the lock is held
    /// for one push.
    pub(crate) fn push(&self, report: Report<V>) {
        self.push_with(report, |_, _| {});
    }

    /// Queues a report and returns the receiver of its acknowledgement (see the module docs).
    pub(crate) fn push_acked(&self, mut report: Report<V>) -> oneshot::Receiver<bool> {
        let (ack, acked) = oneshot::channel();
        report.ack = Some(ack);
        self.push(report);
        acked
    }

    /// Queues the report of a run that is to be stored, whose lease runs out at `deadline`
    /// (shard clock). Returns a receiver to wait on when the actor may have swept that lease
    /// already (it has drained for a sweep up to `deadline` or later); `None` when the report is
    /// sure to be applied before any sweep of the run, which is nearly always.
    pub(crate) fn push_stored(
        &self,
        report: Report<V>,
        deadline: Nanos,
    ) -> Option<oneshot::Receiver<bool>> {
        let mut acked = None;
        self.push_with(report, |q, report| {
            if q.swept_until >= deadline {
                let (ack, rx) = oneshot::channel();
                report.ack = Some(ack);
                acked = Some(rx);
            }
        });
        acked
    }

    /// Queues `report` after `check` looked at the queue (under its lock).
    fn push_with(&self, mut report: Report<V>, check: impl FnOnce(&Queue<V>, &mut Report<V>)) {
        let was_empty = {
            let mut q = self.queue.lock();
            check(&q, &mut report);
            q.reports.push(report);
            q.reports.len() == 1
        };
        if was_empty {
            self.signal.notify_one();
        }
    }

    /// Moves every queued report into `into`, which must be empty (the actor keeps it and
    /// empties it after each drain, so neither side reallocates in steady state).
    pub(crate) fn drain_into(&self, into: &mut Vec<Report<V>>) {
        debug_assert!(
            into.is_empty(),
            "undrained reports would go back into the queue"
        );
        std::mem::swap(&mut self.queue.lock().reports, into);
    }

    /// As [`drain_into`](Self::drain_into), before a sweep of leases due at `now` (shard clock):
    /// a report queued after this drain learns that its lease may be swept (see the module docs).
    pub(crate) fn drain_for_sweep(&self, into: &mut Vec<Report<V>>, now: Nanos) {
        debug_assert!(
            into.is_empty(),
            "undrained reports would go back into the queue"
        );
        let mut q = self.queue.lock();
        q.swept_until = q.swept_until.max(now);
        std::mem::swap(&mut q.reports, into);
    }

    /// Resolves when a report may be waiting (a permit is stored if nobody is waiting yet). The
    /// actor keeps one of these pinned across its loop and makes a new one only after it fired:
    /// a fresh one per loop turn would join and leave the `Notify`'s waiter list (its lock,
    /// twice) on every batch.
    pub(crate) fn signalled(&self) -> tokio::sync::futures::Notified<'_> {
        self.signal.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(token: u64) -> Report<u32> {
        Report::new(7, token, RunEnd::Abandoned)
    }

    /// Reports come out in the order they were pushed, all of them, and a push into an
    /// empty queue leaves a wake-up even when nobody was waiting yet.
    #[tokio::test]
    async fn e8_reports_drain_in_push_order_and_wake_the_actor() {
        let inbox = Inbox::<u32>::default();
        for t in 0..5 {
            inbox.push(report(t));
        }
        // The permit stored by the first push: resolves at once.
        inbox.signalled().await;
        let mut got = Vec::new();
        inbox.drain_into(&mut got);
        assert_eq!(
            got.iter().map(|r| r.token).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        let mut again = Vec::new();
        inbox.drain_into(&mut again);
        assert!(again.is_empty());
        inbox.push(report(9));
        inbox.signalled().await;
        inbox.drain_into(&mut again);
        assert_eq!(again.len(), 1);
    }

    /// A stored run's report asks for an acknowledgement only once the actor has drained for
    /// a sweep that reached the run's lease deadline; before that drain, and for later
    /// deadlines, it does not.
    #[test]
    fn e6_a_report_asks_for_an_ack_only_after_a_sweep_drain_reached_its_deadline() {
        let inbox = Inbox::<u32>::default();
        let mut got = Vec::new();
        assert!(inbox.push_stored(report(1), 100).is_none());
        inbox.drain_for_sweep(&mut got, 100);
        assert!(
            got[0].ack.is_none(),
            "pushed before the drain: applied first"
        );
        got.clear();
        assert!(inbox.push_stored(report(2), 100).is_some(), "may be swept");
        assert!(inbox.push_stored(report(3), 101).is_none(), "not yet due");
        // An ordinary drain moves no mark; a sweep drain never moves it back.
        inbox.drain_into(&mut got);
        got.clear();
        inbox.drain_for_sweep(&mut got, 50);
        assert!(inbox.push_stored(report(4), 100).is_some());
        assert!(
            inbox.push_acked(report(5)).try_recv().is_err(),
            "not yet acknowledged"
        );
    }
}
