//! Waiting for a run in flight: one broadcast cell per run that has duplicates.
//!
//! # Why a cell and not a reply per waiter
//!
//! A hot key is the case this library exists for: a client retries, a load balancer duplicates,
//! a thousand calls for one intent arrive while its first call runs. If every duplicate sent the
//! shard a message and got its own reply, the shard actor would do two steps of serial work per
//! duplicate. Instead, the first duplicate of a run asks the actor (which creates the run's
//! `JoinCell` and files it in the entry), and every later one finds the cell through the read path
//! (the same `try_read` that serves replays) and waits on it without a message. When the run ends
//! the actor stores the result and resolves the cell once; every waiter wakes and clones the
//! result.
//!
//! Duplicates that did ask the actor (they arrived before it had filed the cell, as a burst does
//! when its calls are all queued before the shard runs) do not get the cell back to wait on: the
//! actor files their reply slots in the cell, and resolving it answers them directly. Each such
//! duplicate is woken once, with its answer, instead of once for the cell and again for the end.
//!
//! The actor still decides everything: who leads, whether a call conflicts or is rejected, when a
//! run ends (completion, lease, forget, shutdown) and what its waiters get. A cell is only a
//! broadcast of that decision, created and resolved by the actor alone; waiters only count
//! themselves in (for look-ups and stats) and read it.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::actor::message::Reply;
use crate::{DedupError, Outcome, OutcomeKind};

/// What a run's waiters get: the value and its expiry, or the error.
pub(crate) type JoinResult<V> = Result<(V, Instant), DedupError>;

/// The broadcast of one run's end to the calls waiting for it.
pub(crate) struct JoinCell<V> {
    result: OnceLock<JoinResult<V>>,
    signal: Notify,
    /// Calls that joined the run (whether still waiting or not), for look-ups.
    joined: AtomicUsize,
    /// Reply slots of duplicates that asked the actor; answered on resolution. Only the actor
    /// touches it (files and drains), so the lock is never contended.
    replies: Mutex<Vec<oneshot::Sender<Reply<V>>>>,
}

impl<V> JoinCell<V> {
    pub(crate) fn new() -> Self {
        JoinCell {
            result: OnceLock::new(),
            signal: Notify::new(),
            joined: AtomicUsize::new(0),
            replies: Mutex::new(Vec::new()),
        }
    }

    /// Counts one more call in; returns nothing to wait on yet (see [`wait`](Self::wait)).
    pub(crate) fn count_in(&self) {
        self.joined.fetch_add(1, Relaxed);
    }

    /// Calls that joined so far.
    pub(crate) fn joined(&self) -> usize {
        self.joined.load(Relaxed)
    }
}

impl<V: Clone> JoinCell<V> {
    /// Files the reply slot of a duplicate that asked the actor (counted in by the caller of
    /// this): it is answered when the cell resolves.
    pub(crate) fn answer_later(&self, reply: oneshot::Sender<Reply<V>>) {
        self.replies.lock().push(reply);
    }

    /// Ends the run for its waiters; only the first resolution counts (the actor resolves each
    /// cell once, when it removes or completes the in-flight entry). Filed reply slots get their
    /// answer; a slot whose caller has gone is skipped.
    pub(crate) fn resolve(&self, result: JoinResult<V>) {
        if self.result.set(result).is_err() {
            return;
        }
        self.signal.notify_waiters();
        let replies = std::mem::take(&mut *self.replies.lock());
        if let Some(result) = self.result.get() {
            for reply in replies {
                let _ = reply.send(Reply::Done(answer(result)));
            }
        }
    }

    /// Waits for the run's end. Cancel-safe: dropping the future only stops this caller waiting.
    pub(crate) async fn wait(&self) -> Result<Outcome<V>, DedupError> {
        loop {
            let notified = self.signal.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a resolution between the two is not missed.
            notified.as_mut().enable();
            if let Some(result) = self.result.get() {
                return answer(result);
            }
            notified.await;
        }
    }
}

/// A joined caller's answer from the run's end.
fn answer<V: Clone>(result: &JoinResult<V>) -> Result<Outcome<V>, DedupError> {
    match result {
        Ok((v, expires_at)) => Ok(Outcome::new(v.clone(), OutcomeKind::Joined, *expires_at)),
        Err(e) => Err(e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// Every waiter, registered before or after the run ends, gets the same value as joined;
    /// a second resolution changes nothing.
    #[tokio::test]
    async fn e1_every_waiter_gets_the_one_resolution() {
        let cell = Arc::new(JoinCell::<u32>::new());
        let at = Instant::now() + Duration::from_secs(60);
        let early: Vec<_> = (0..100)
            .map(|_| {
                let cell = cell.clone();
                cell.count_in();
                tokio::spawn(async move { cell.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        cell.resolve(Ok((7, at)));
        cell.resolve(Ok((8, at)));
        for w in early {
            let out = w.await.unwrap().unwrap();
            assert_eq!((*out.value(), out.kind()), (7, OutcomeKind::Joined));
        }
        let late = cell.wait().await.unwrap();
        assert_eq!(*late.value(), 7);
        assert_eq!(cell.joined(), 100);
    }

    /// Duplicates that asked the actor are answered through their reply slots when the
    /// cell resolves, once, as joined; a slot whose caller left is skipped.
    #[tokio::test]
    async fn e1_filed_reply_slots_get_the_resolution() {
        let cell = JoinCell::<u32>::new();
        let at = Instant::now() + Duration::from_secs(60);
        let (tx, rx) = oneshot::channel();
        let (gone_tx, gone_rx) = oneshot::channel();
        cell.answer_later(tx);
        cell.answer_later(gone_tx);
        drop(gone_rx);
        cell.resolve(Ok((7, at)));
        match rx.await.unwrap() {
            Reply::Done(Ok(out)) => {
                assert_eq!((*out.value(), out.kind()), (7, OutcomeKind::Joined));
                assert_eq!(out.expires_at(), at);
            }
            _ => panic!("expected the joined value"),
        }
        assert!(cell.replies.lock().is_empty());
    }

    /// A waiter that stops waiting leaves the others unaffected.
    #[tokio::test]
    async fn e5_a_dropped_waiter_does_not_disturb_the_others() {
        let cell = Arc::new(JoinCell::<u32>::new());
        let gone = {
            let cell = cell.clone();
            tokio::spawn(async move { cell.wait().await })
        };
        let stays = {
            let cell = cell.clone();
            tokio::spawn(async move { cell.wait().await })
        };
        tokio::task::yield_now().await;
        gone.abort();
        cell.resolve(Err(DedupError::Abandoned));
        assert!(matches!(stays.await.unwrap(), Err(DedupError::Abandoned)));
    }
}
