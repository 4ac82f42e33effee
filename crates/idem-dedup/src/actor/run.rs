//! Driving an action: inline in the leader's call, handed to a task if that call is dropped.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{CatchUnwind, FutureExt};
use idem_core::Status;
use tokio::sync::{mpsc, oneshot};

use crate::actor::inbox::{Inbox, Report};
use crate::actor::message::{Msg, RunEnd};
use crate::actor::wheel::Nanos;
use std::sync::Arc;

/// What a driven action yields: its result or a panic payload; `None` when its lease ran out.
type DrivenOutput<V> = Option<Result<Result<V, Status>, Box<dyn Any + Send>>>;

/// An action under its in-flight lease, with panics caught.
///
/// The lease timer is armed lazily, on the first poll that finds the action pending: an action that
/// completes at once (a cache hit, an in-memory write) never touches tokio's timer, whose
/// registration is a measurable cost on the new-key path.
struct Leased<Fut> {
    fut: Pin<Box<CatchUnwind<AssertUnwindSafe<Fut>>>>,
    lease: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<V, Fut: Future<Output = Result<V, Status>>> Future for Leased<Fut> {
    type Output = DrivenOutput<V>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(out) = self.fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        let lease = self.lease;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(lease)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The leader's run of one action.
///
/// The leader polls the action inside its own call — no spawn, no extra task (a spawn per action
/// cost ~37% of new-key throughput in a prototype). If the call is dropped before the action ends
/// (client gone, caller deadline), `Drop` hands the half-run future to a new task, which finishes it
/// and reports to the shard. Either way the action runs to completion exactly once and its result
/// is stored, unless its lease runs out first.
///
/// It borrows the shard's inbox, sender and the runtime handle from the engine rather than cloning
/// them: they are shared by every caller, and a clone and drop per call are atomic updates on
/// cache lines that both worker threads write. Only a hand-off clones the sender and handle.
pub(crate) struct Run<
    'a,
    V: Send + Sync + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
> {
    fut: Option<Leased<Fut>>,
    inbox: &'a Arc<Inbox<V>>,
    tx: &'a mpsc::Sender<Msg<V>>,
    hash: u64,
    token: u64,
    handle: &'a tokio::runtime::Handle,
}

impl<'a, V, Fut> Run<'a, V, Fut>
where
    V: Send + Sync + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    pub(crate) fn new(
        action: Fut,
        lease: Duration,
        inbox: &'a Arc<Inbox<V>>,
        tx: &'a mpsc::Sender<Msg<V>>,
        hash: u64,
        token: u64,
        handle: &'a tokio::runtime::Handle,
    ) -> Self {
        Run {
            fut: Some(Leased {
                fut: Box::pin(AssertUnwindSafe(action).catch_unwind()),
                lease,
                sleep: None,
            }),
            inbox,
            tx,
            hash,
            token,
            handle,
        }
    }

    /// Polls the action to its end. Cancel-safe: dropping this future (or the `Run`) mid-way hands
    /// the action to a task.
    pub(crate) async fn drive(&mut self) -> RunEnd<V> {
        let end = match self.fut.as_mut() {
            Some(fut) => to_end(fut.await),
            None => RunEnd::Abandoned,
        };
        self.fut = None;
        end
    }

    /// The shard's mailbox sender (its `closed()` tells a waiting leader that the shard stopped).
    pub(crate) fn sender(&self) -> &'a mpsc::Sender<Msg<V>> {
        self.tx
    }

    /// Reports the end of the run to the shard (without waiting).
    pub(crate) fn report(&self, end: RunEnd<V>) {
        self.inbox.push(Report::new(self.hash, self.token, end));
    }

    /// Reports an end the shard is to store (a success or a cacheable failure). Returns a
    /// receiver to wait on when the shard may already have swept the run at its lease
    /// (`lease_deadline`, shard clock); see `inbox.rs`.
    pub(crate) fn report_stored(
        &self,
        end: RunEnd<V>,
        lease_deadline: Nanos,
    ) -> Option<oneshot::Receiver<bool>> {
        let report = Report::new(self.hash, self.token, end);
        self.inbox.push_stored(report, lease_deadline)
    }

    /// Reports an end that stores nothing (failure, panic, lease); the receiver resolves once the
    /// shard has removed the entry and counted it out.
    pub(crate) fn report_acked(&self, end: RunEnd<V>) -> oneshot::Receiver<bool> {
        self.inbox
            .push_acked(Report::new(self.hash, self.token, end))
    }
}

impl<V, Fut> Drop for Run<'_, V, Fut>
where
    V: Send + Sync + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    fn drop(&mut self) {
        if let Some(fut) = self.fut.take() {
            // Hand-off on drop: the caller left mid-run; finish the action in a task of its own.
            // The task reports through the inbox like a leader, and holds a sender until then so
            // the shard outlives it (it applies its inbox once more when its last sender goes).
            let (tx, inbox) = (self.tx.clone(), self.inbox.clone());
            let (hash, token) = (self.hash, self.token);
            self.handle.spawn(async move {
                let end = to_end(fut.await);
                inbox.push(Report::new(hash, token, end));
                drop(tx);
            });
        }
    }
}

/// Waits until the shard has applied an acknowledged report: `Some(true)` if it ended the run,
/// `Some(false)` if the run had already ended (lease, forget, shutdown), `None` if the shard
/// stopped without taking it (after its last drain; see `Shard::run`).
pub(crate) async fn applied<V>(
    tx: &mpsc::Sender<Msg<V>>,
    acked: oneshot::Receiver<bool>,
) -> Option<bool> {
    tokio::select! {
        biased;
        done = acked => done.ok(),
        () = tx.closed() => None,
    }
}

fn to_end<V>(out: DrivenOutput<V>) -> RunEnd<V> {
    match out {
        Some(Ok(result)) => RunEnd::Finished(result, tokio::time::Instant::now()),
        Some(Err(panic)) => RunEnd::Panicked(panic_message(&*panic)),
        None => RunEnd::LeaseExpired,
    }
}

/// The text of a panic payload, when it has one.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
