//! Where leaders report the end of their runs: a per-shard completion queue beside the mailbox.
//!
//! # Why not the mailbox
//!
//! Every new key costs two messages: `Begin` (the caller asks whether it leads) and the report of
//! how the run ended. The report needs no answer and no back-pressure (each run reports exactly
//! once, so the queue is bounded by the runs in flight, which `max_entries` bounds), so it skips
//! the bounded channel's semaphore, block list and per-send wake: a leader takes a short
//! `parking_lot` lock, pushes, and wakes the actor only when the queue was empty. The actor swaps
//! the whole queue out under the same lock and applies it.
//!
//! # Ordering
//!
//! The actor drains this queue before every mailbox batch. A report is pushed before the
//! leader's call returns, so any message a caller sends after seeing that result (a `Lookup`, a
//! `Begin` for the same scope) finds the report already applied (SPEC E13's look-up, E1's replay).
//! The actor also applies it before each sweep, so a run whose report and lease timer are ready at
//! the same poll is stored, not expired. A run handed off to a task (SPEC E5) reports here too;
//! the task holds a mailbox sender until it has, which keeps the actor alive to apply it.

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::message::RunEnd;

/// One run's end: which run (`hash`, `token`) and how it ended.
pub(crate) struct Report<V> {
    pub(crate) hash: u64,
    pub(crate) token: u64,
    pub(crate) end: RunEnd<V>,
}

/// A shard's completion queue and the signal that wakes its actor.
pub(crate) struct Inbox<V> {
    reports: Mutex<Vec<Report<V>>>,
    signal: Notify,
}

impl<V> Default for Inbox<V> {
    fn default() -> Self {
        Inbox {
            reports: Mutex::new(Vec::new()),
            signal: Notify::new(),
        }
    }
}

impl<V> Inbox<V> {
    /// Queues a report; wakes the actor if the queue was empty (otherwise the push that made it
    /// non-empty already did, and the actor has not drained since). Never waits: the lock is held
    /// for one push.
    pub(crate) fn push(&self, report: Report<V>) {
        let was_empty = {
            let mut q = self.reports.lock();
            q.push(report);
            q.len() == 1
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
        std::mem::swap(&mut *self.reports.lock(), into);
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
        Report {
            hash: 7,
            token,
            end: RunEnd::Abandoned,
        }
    }

    /// E8: reports come out in the order they were pushed, all of them, and a push into an
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
}
