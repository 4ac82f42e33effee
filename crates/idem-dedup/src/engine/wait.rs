//! What a call waits for besides its run: room in a shard's mailbox, the shard's answer (which
//! a dropped caller gives back), a report applied, and its own deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use idem_core::{whole_millis, Deadline, Scope};
use tokio::sync::{mpsc, oneshot};

use crate::actor::counters::bump;
use crate::actor::inbox::{Inbox, Report};
use crate::actor::message::{Msg, Reply, RunEnd};
use crate::actor::run::applied;
use crate::config::Config;
use crate::trace::{self, ScopeFields};
use crate::DedupError;

use super::Engine;

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    /// Sends to a shard; when its mailbox is full, the returned [`Sending`] waits asynchronously
    /// for room.
    ///
    /// The waiting send is boxed: it is the rare path, and inline it would carry the message and
    /// the channel's permit future in every call's future (spawned requests pay for each byte).
    pub(super) fn send(&self, index: usize, msg: Msg<V>) -> Sending<'_> {
        let tx = &self.inner.shards[index];
        match tx.try_send(msg) {
            Ok(()) => Sending::Sent,
            Err(mpsc::error::TrySendError::Full(msg)) => {
                bump(&self.inner.shared.counters[index].mailbox_full);
                Sending::Waiting(Box::pin(async move {
                    tx.send(msg).await.map_err(|_| DedupError::ShuttingDown)
                }))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Sending::Closed,
        }
    }
}

/// A send to a shard: done, refused (the shard stopped), or waiting for mailbox room.
pub(super) enum Sending<'a> {
    Sent,
    Closed,
    Waiting(Pin<Box<dyn Future<Output = Result<(), DedupError>> + Send + 'a>>),
}

impl Sending<'_> {
    pub(super) async fn finish(self) -> Result<(), DedupError> {
        match self {
            Sending::Sent => Ok(()),
            Sending::Closed => Err(DedupError::ShuttingDown),
            Sending::Waiting(wait) => wait.await,
        }
    }
}

/// Runs `fut` until `deadline` (`Err(())` when the deadline came first). Like
/// `tokio::time::timeout_at`, but the timer is boxed: calls without a deadline then do not carry
/// its 112 bytes in their future, and a call with one allocates it only when it has to wait.
pub(super) async fn until<F: Future>(
    deadline: Deadline,
    mut fut: Pin<&mut F>,
) -> Result<F::Output, ()> {
    if let Poll::Ready(out) = futures::poll!(fut.as_mut()) {
        return Ok(out);
    }
    let mut sleep = Box::pin(tokio::time::sleep_until(deadline.instant()));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        sleep.as_mut().poll(cx).map(|()| Err(()))
    })
    .await
}

/// Waits until the shard has applied an acknowledged report (or has stopped), then gives
/// `answer`: the end of a run that stores nothing is answered once its room is free.
pub(super) async fn once_applied<V, T>(
    tx: &mpsc::Sender<Msg<V>>,
    acked: oneshot::Receiver<bool>,
    answer: T,
) -> T {
    applied(tx, acked).await;
    answer
}

/// Waits until the shard has applied the report of a run to be stored, then gives `answer` if
/// it stored it, and otherwise the lease error: the shard had swept the run at its lease
/// before the report came, so nothing is stored and the retry will run again.
pub(super) async fn unless_swept<V, T>(
    tx: &mpsc::Sender<Msg<V>>,
    acked: oneshot::Receiver<bool>,
    answer: Result<T, DedupError>,
    (cfg, scope): (&Config, &Scope),
) -> Result<T, DedupError> {
    let lease = cfg.in_flight_timeout;
    match applied(tx, acked).await {
        Some(true) => answer,
        Some(false) => {
            // The side effect happened and its result is gone: an operator must know (E15).
            warn_completed_after_lease(cfg, scope);
            Err(DedupError::LeaseExpired { after: lease })
        }
        // The shard stopped before it took the report: nothing is stored (E10).
        None => Err(DedupError::ShuttingDown),
    }
}

/// The warn event of a leader whose action finished after its run was ended at the lease.
/// Out of line: the event's code stays out of the call's future.
#[cold]
#[inline(never)]
fn warn_completed_after_lease(cfg: &Config, scope: &Scope) {
    if trace::warn_enabled() {
        let fields = ScopeFields::new(scope, cfg.scope_logging);
        trace::warn_scope!(
            "idem_dedup.completed_after_lease",
            &*cfg.name,
            &fields,
            lease_ms = whole_millis(cfg.in_flight_timeout),
            "the action finished after its run was ended at the in-flight lease: its result \
             was not stored, and a retry with the same key runs it again"
        );
    }
}

/// A caller waiting for a shard's answer to `Begin`. If the caller is dropped after the shard chose
/// it to lead but before it started the action, `Drop` releases the in-flight entry so the scope
/// does not sit until its lease runs out.
pub(super) struct Pending<'a, V: Send + 'static> {
    pub(super) rx: Option<oneshot::Receiver<Reply<V>>>,
    pub(super) inbox: &'a Inbox<V>,
    pub(super) hash: u64,
}

impl<V: Send + 'static> Pending<'_, V> {
    pub(super) async fn recv(&mut self) -> Reply<V> {
        let reply = match self.rx.as_mut() {
            Some(rx) => rx
                .await
                .unwrap_or(Reply::Done(Err(DedupError::ShuttingDown))),
            None => Reply::Done(Err(DedupError::ShuttingDown)),
        };
        self.rx = None;
        reply
    }
}

impl<V: Send + 'static> Drop for Pending<'_, V> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            // No send can land after close(); one that landed before is still readable.
            rx.close();
            if let Ok(Reply::Lead { token, .. }) = rx.try_recv() {
                let report = Report::new(self.hash, token, RunEnd::Abandoned);
                self.inbox.push(report);
            }
        }
    }
}
