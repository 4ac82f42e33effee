//! One call's way to its answer: the read path (`read_path.rs`), else a `Begin` to the scope's
//! shard, then leading the run (handed to a task if the caller goes) or waiting for it, each
//! answer timed and traced (`observe.rs`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering::Acquire;

use futures::future::Either;
use idem_core::run::{Run as IntentRun, RunStart};
use idem_core::{Deadline, Fingerprint, Scope, Status};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::actor::counters::bump;
use crate::actor::hash::ScopeId;
use crate::actor::inbox::Report;
use crate::actor::join::JoinCell;
use crate::actor::message::{Msg, Reply, RunEnd};
use crate::actor::run::{panic_message, Run};
use crate::actor::wheel::Nanos;
use crate::trace;
use crate::{DedupError, Outcome, OutcomeKind};

use super::read_path::Fast;
use super::wait::{once_applied, unless_swept, until, Pending};
use super::{shard_index, Engine};

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    /// One call, with or without a deadline: what `execute`, `execute_with_deadline` and
    /// [`Deduplicator::execute_until`](crate::Deduplicator::execute_until) run.
    pub(crate) async fn call<F, Fut>(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        action: F,
    ) -> Result<Outcome<V>, DedupError>
    where
        F: FnOnce(()) -> Fut,
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
        // arguments in its future, and every spawned request allocates and moves a small one. Both time themselves; with a
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
        F: FnOnce(()) -> Fut,
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
                let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| action(()))) {
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
    /// at its lease before the report came: then it is the answer only if the shard
    /// stored it, and the lease error otherwise. An end that stores nothing is answered once
    /// the shard has removed the entry and counted it out, so the room it held is there for the
    /// caller's next call, on any shard. Both waits are rare, and boxed.
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

    /// Waits for a run in flight through its join cell, or until this caller's deadline:
    /// the run itself is not disturbed.
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
}

/// How a leader answers: now, or once the shard has applied its report (see `Engine::settle`).
enum Answer<'a, V> {
    Now(Result<Outcome<V>, DedupError>),
    Later(Pin<Box<dyn Future<Output = Result<Outcome<V>, DedupError>> + Send + 'a>>),
}
