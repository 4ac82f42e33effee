//! One call's way to its answer: the read path (a replay or a join without a message), else a
//! `Begin` to the scope's shard, then leading the run (handed to a task if the caller goes, E5)
//! or waiting for it, each answer timed and traced (E1, E5, E6, E15).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;
use std::task::Poll;

use futures::future::Either;
use idem_core::run::{Run as IntentRun, RunStart};
use idem_core::{whole_millis, Deadline, Fingerprint, Scope, Status};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::actor::counters::bump;
use crate::actor::entry::{InFlight, State};
use crate::actor::hash::ScopeId;
use crate::actor::inbox::{Inbox, Report};
use crate::actor::join::JoinCell;
use crate::actor::message::{Msg, Reply, RunEnd};
use crate::actor::run::{applied, panic_message, Run};
use crate::actor::wheel::Nanos;
use crate::config::{Config, InFlightPolicy};
use crate::trace::{self, ScopeFields};
use crate::{DedupError, Outcome, OutcomeKind};

use super::{shard_index, Engine};

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    pub(super) async fn call<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let inner = &*self.inner;
        if inner.shared.shutting_down.load(Acquire) {
            if trace::spans_on() {
                self.trace_now(scope, Err(DedupError::ShuttingDown));
            }
            return Err(DedupError::ShuttingDown);
        }
        let id = inner.hasher.id(scope.as_bytes());
        let index = shard_index(id.hash(), inner.shards.len());
        // Decided before any `.await`, so the read path's answer is not kept in this future.
        // A replay served here is not timed (see the `metrics` module), and its span (E15)
        // is made only if a subscriber may want it: without one, it costs a load and a
        // branch.
        let joined = match self.read_path(index, id, fingerprint) {
            Some(Fast::Replay(out)) => {
                if trace::spans_on() {
                    self.trace_now(scope, Ok(OutcomeKind::Replayed));
                }
                return Ok(out);
            }
            Some(Fast::Join(cell)) => Some(cell),
            None => None,
        };
        // Both waits are boxed: a replay, the commonest call, then carries only this function's
        // arguments in its future (128 -> 72 bytes here; 552 before anything was boxed), and
        // every spawned request allocates and moves its future. Both time themselves; with a
        // subscriber each runs in the call's span (the leader's action with it). They are made
        // out of line, so none of it is in the replay's code.
        match joined {
            Some(cell) if trace::spans_on() => {
                let join = async move { self.join(index, &cell, deadline).await };
                self.traced(scope, join).await
            }
            Some(cell) => Box::pin(async move { self.join(index, &cell, deadline).await }).await,
            None if trace::spans_on() => {
                let ask = self.ask(index, id, scope, fingerprint, deadline, action);
                self.traced(scope, ask).await
            }
            None => Box::pin(self.ask(index, id, scope, fingerprint, deadline, action)).await,
        }
    }

    /// `wait` boxed, in the call's span, which records how it ended (E15).
    fn traced<'a, W>(
        &self,
        scope: &Scope,
        wait: W,
    ) -> Pin<Box<impl Future<Output = Result<Outcome<V>, DedupError>> + 'a>>
    where
        W: Future<Output = Result<Outcome<V>, DedupError>> + 'a,
    {
        let span = self.span(scope);
        let end = span.clone();
        let recorded = async move {
            let answer = wait.await;
            trace::record_end(&end, &answer);
            answer
        };
        Box::pin(recorded.instrument(span))
    }

    /// The span of a call answered at once, without a wait (E15): a replay served by the
    /// read path (`Ok`), or a refusal. Out of line, out of the replay's way.
    #[cold]
    #[inline(never)]
    fn trace_now(&self, scope: &Scope, answer: Result<OutcomeKind, DedupError>) {
        let span = self.span(scope);
        if span.is_disabled() {
            return;
        }
        match answer {
            Ok(kind) => {
                span.record("outcome", kind.as_str());
            }
            Err(e) => trace::record_error(&span, &e),
        }
    }

    /// The span of a call for `scope` (E15).
    fn span(&self, scope: &Scope) -> tracing::Span {
        let cfg = &self.inner.cfg;
        trace::call_span(&cfg.name, cfg.scope_logging, scope)
    }

    /// Times a call that reached the shard (E15): from `start` until `end` (a clock read
    /// the call already made) or now.
    fn finish(
        &self,
        start: Instant,
        end: Option<Instant>,
        answer: &Result<Outcome<V>, DedupError>,
    ) {
        let took = end
            .unwrap_or_else(Instant::now)
            .saturating_duration_since(start);
        self.inner.latency.record(took, answer);
    }

    /// The message path: asks the shard, then leads (runs the action inline), waits for the run
    /// in flight, or returns the shard's answer.
    async fn ask<F, Fut>(
        &self,
        index: usize,
        id: ScopeId,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        // Timed from here to the answer (E15); a leader's action already reads the clock
        // when it ends, and that read ends the timing.
        let start = Instant::now();
        let mut finished = None;
        let hash = id.hash();
        let answer = 'call: {
            let inner = &*self.inner;
            let tx = &inner.shards[index];
            let inbox = &inner.inboxes[index];
            let (reply_tx, reply_rx) = oneshot::channel();
            let msg = Msg::Begin {
                id,
                scope: scope.clone(),
                fingerprint,
                reply: reply_tx,
            };
            if let Err(e) = self.send(index, msg).finish().await {
                break 'call Err(e);
            }

            let mut pending = Pending {
                rx: Some(reply_rx),
                inbox,
                hash,
            };
            // The reply lives in this block only, so the future does not keep its bytes while the
            // action runs.
            let (token, lease_deadline) = {
                let reply = match deadline {
                    None => pending.recv().await,
                    Some(d) => match until(d, std::pin::pin!(pending.recv())).await {
                        Ok(r) => r,
                        Err(()) => {
                            bump(&inner.shared.counters[index].deadline_exceeded);
                            break 'call Err(DedupError::DeadlineExceeded);
                        }
                    },
                };
                match reply {
                    Reply::Done(answer) => break 'call answer,
                    Reply::Lead {
                        token,
                        lease_deadline,
                    } => (token, lease_deadline),
                }
            };

            // This call leads: run the action inline. Every big local lives in this block, so the
            // rare wait for the shard below does not keep them in the future.
            let answer = 'lead: {
                let fut = match std::panic::catch_unwind(AssertUnwindSafe(action)) {
                    Ok(fut) => fut,
                    Err(p) => {
                        let message = panic_message(&*p);
                        let end = RunEnd::Panicked(message.clone());
                        let acked = inbox.push_acked(Report::new(hash, token, end));
                        let answer = Err(DedupError::Panicked { message });
                        break 'lead Answer::Later(Box::pin(once_applied(tx, acked, answer)));
                    }
                };
                // K7: the action runs as the current run, so the clients it calls derive the
                // keys they send downstream from this scope.
                let fut = if inner.cfg.sets_run {
                    Either::Left(IntentRun::new(scope, None, RunStart::Fresh).attach(fut))
                } else {
                    Either::Right(fut)
                };
                let (handle, lease) = (&inner.handle, inner.cfg.in_flight_timeout);
                let mut run = Run::new(fut, lease, inbox, tx, hash, token, handle);
                let end = match deadline {
                    None => run.drive().await,
                    Some(d) => {
                        let ended = until(d, std::pin::pin!(run.drive())).await;
                        match ended {
                            Ok(end) => end,
                            Err(()) => {
                                // Dropping `run` hands the action to a task (E5).
                                drop(run);
                                bump(&inner.shared.counters[index].deadline_exceeded);
                                break 'call Err(DedupError::DeadlineExceeded);
                            }
                        }
                    }
                };
                // The action's end was just read off the clock: the call's end, for its timing.
                if let RunEnd::Finished(_, at) = &end {
                    finished = Some(*at);
                }
                self.settle(&run, end, lease_deadline, scope)
            };
            match answer {
                Answer::Now(answer) => answer,
                Answer::Later(wait) => wait.await,
            }
        };
        self.finish(start, finished, &answer);
        answer
    }

    /// Reports how the leader's run ended and says how the leader answers (see `inbox.rs`).
    ///
    /// A result the shard stores is the answer at once, unless the shard may have swept the run
    /// at its lease before the report came (E6): then it is the answer only if the shard
    /// stored it, and the lease error otherwise. An end that stores nothing is answered once
    /// the shard has removed the entry and counted it out, so the room it held is there for the
    /// caller's next call, on any shard (E7). Both waits are rare, and boxed.
    fn settle<'a, Fut>(
        &'a self,
        run: &Run<'a, V, Fut>,
        end: RunEnd<V>,
        lease_deadline: Nanos,
        scope: &'a Scope,
    ) -> Answer<'a, V>
    where
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        let cfg = &self.inner.cfg;
        let tx = run.sender();
        let lease = cfg.in_flight_timeout;
        let stored = |end, answer| match run.report_stored(end, lease_deadline) {
            None => Answer::Now(answer),
            Some(acked) => Answer::Later(Box::pin(unless_swept(tx, acked, answer, (cfg, scope)))),
        };
        let removed = |end, answer| {
            let acked = run.report_acked(end);
            Answer::Later(Box::pin(once_applied(tx, acked, answer)))
        };
        match end {
            RunEnd::Finished(Ok(v), at) => {
                let out = Outcome::new(v.clone(), OutcomeKind::Executed, at + cfg.ttl);
                stored(RunEnd::Finished(Ok(v), at), Ok(out))
            }
            RunEnd::Finished(Err(status), at) => {
                let cached = cfg.cached_failures.contains(status.code());
                let answer = Err(DedupError::Action {
                    status: status.clone(),
                    outcome: OutcomeKind::Executed,
                });
                let end = RunEnd::Finished(Err(status), at);
                if cached {
                    stored(end, answer)
                } else {
                    removed(end, answer)
                }
            }
            RunEnd::Panicked(message) => {
                let answer = Err(DedupError::Panicked {
                    message: message.clone(),
                });
                removed(RunEnd::Panicked(message), answer)
            }
            RunEnd::LeaseExpired => removed(
                RunEnd::LeaseExpired,
                Err(DedupError::LeaseExpired { after: lease }),
            ),
            RunEnd::Abandoned => {
                run.report(RunEnd::Abandoned);
                Answer::Now(Err(DedupError::Abandoned))
            }
        }
    }

    /// Waits for a run in flight through its join cell, or until this caller's deadline
    /// (E1, E5): the run itself is not disturbed.
    async fn join(
        &self,
        index: usize,
        cell: &JoinCell<V>,
        deadline: Option<Deadline>,
    ) -> Result<Outcome<V>, DedupError> {
        let start = Instant::now();
        let answer = match deadline {
            None => cell.wait().await,
            Some(d) => until(d, std::pin::pin!(cell.wait()))
                .await
                .unwrap_or_else(|()| {
                    bump(&self.inner.shared.counters[index].deadline_exceeded);
                    Err(DedupError::DeadlineExceeded)
                }),
        };
        // Timed as a join (E15), whatever it got.
        self.inner.latency.record_join(start.elapsed(), &answer);
        answer
    }

    /// The read path, straight from the shard's table without a message: a stored success for
    /// this scope and fingerprint (replay), or the join cell of its run in flight (join, under
    /// the `Wait` policy, once the actor has made a cell for the run's first duplicate). Returns
    /// `None` (take the message path) when the table is being written, or the scope is absent,
    /// failed, expired, conflicting, rejected or in flight without a cell yet — every other
    /// decision stays with the actor.
    fn read_path(&self, index: usize, id: ScopeId, fingerprint: Fingerprint) -> Option<Fast<V>> {
        let table = match self.inner.tables[index].try_read() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let e = table.find(id.hash(), |e| e.id == id)?;
        let (v, expires) = match &e.state {
            State::Done { result: Ok(v), .. } => (v, &e.at),
            State::InFlight(InFlight {
                join: Some(cell), ..
            }) if e.fingerprint == fingerprint
                && self.inner.cfg.in_flight_policy == InFlightPolicy::Wait =>
            {
                cell.count_in();
                let cell = cell.clone();
                drop(table);
                self.inner.shared.fast_joins.add(1);
                return Some(Fast::Join(cell));
            }
            _ => return None,
        };
        // The expiry as an instant, compared with the clock's instant: the same test as
        // `clock.now() >= expires`, without converting the current time to nanoseconds.
        let expires_at = self.inner.shared.clock.instant(*expires);
        if e.fingerprint != fingerprint || tokio::time::Instant::now() >= expires_at {
            return None;
        }
        let out = Outcome::new(v.clone(), OutcomeKind::Replayed, expires_at);
        drop(table);
        self.inner.shared.fast_replays.add(1);
        Some(Fast::Replay(out))
    }

    /// Sends to a shard; when its mailbox is full, the returned [`Sending`] waits asynchronously
    /// for room (E8).
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

/// How a leader answers: now, or once the shard has applied its report (see `Engine::settle`).
enum Answer<'a, V> {
    Now(Result<Outcome<V>, DedupError>),
    Later(Pin<Box<dyn Future<Output = Result<Outcome<V>, DedupError>> + Send + 'a>>),
}

/// What the read path found.
enum Fast<V> {
    Replay(Outcome<V>),
    Join(Arc<JoinCell<V>>),
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
async fn until<F: Future>(deadline: Deadline, mut fut: Pin<&mut F>) -> Result<F::Output, ()> {
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
/// `answer`: the end of a run that stores nothing is answered once its room is free (E7).
async fn once_applied<V, T>(
    tx: &mpsc::Sender<Msg<V>>,
    acked: oneshot::Receiver<bool>,
    answer: T,
) -> T {
    applied(tx, acked).await;
    answer
}

/// Waits until the shard has applied the report of a run to be stored, then gives `answer` if
/// it stored it, and otherwise the lease error: the shard had swept the run at its lease
/// before the report came, so nothing is stored and the retry will run again (E6).
async fn unless_swept<V, T>(
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

/// The warn event of a leader whose action finished after its run was ended at the lease
/// (E6, E15). Out of line: the event's code stays out of the call's future.
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
struct Pending<'a, V: Send + 'static> {
    rx: Option<oneshot::Receiver<Reply<V>>>,
    inbox: &'a Inbox<V>,
    hash: u64,
}

impl<V: Send + 'static> Pending<'_, V> {
    async fn recv(&mut self) -> Reply<V> {
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
