//! One call's attempts: the loop that classifies each failure, checks the attempts, the deadline
//! and the budget, waits, and tries again; its span and its give-up.

use std::future::Future;

use tokio::time::Instant;
use tracing::Instrument;

use super::refresh::RefreshStep;
use super::Retrier;
use crate::call::{Attempt, Call};
use crate::classify::{classify, Classify, Decision, NotRetryable, Wait};
use crate::deadline::leaves_room;
use crate::error::RetryError;
use crate::metrics::GiveUp;
use crate::scheduler::Scheduler;

impl<S: Scheduler> Retrier<S> {
    /// A retried call in its span (E15): `idem_retry.call`, at `DEBUG`, with the call's
    /// kind, and, once it ends, its attempts and its outcome (`ok`, or why it gave up).
    pub(super) async fn run<T, E, F, Fut, R>(
        &self,
        call: &Call,
        op: F,
        refresh: R,
    ) -> Result<T, RetryError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
        R: RefreshStep<E>,
    {
        let span = tracing::debug_span!(
            target: "idem_retry",
            "idem_retry.call",
            kind = call.kind().as_str(),
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        if span.is_disabled() {
            return self.attempts(call, op, refresh).await.map(|(v, _)| v);
        }
        let result = self
            .attempts(call, op, refresh)
            .instrument(span.clone())
            .await;
        let (attempts, outcome) = match &result {
            Ok((_, n)) => (*n, "ok"),
            Err(e) => (e.attempts(), e.reason().as_str()),
        };
        span.record("attempts", attempts);
        span.record("outcome", outcome);
        result.map(|(v, _)| v)
    }

    /// The attempts of one call; a success comes with the number of attempts it took.
    async fn attempts<T, E, F, Fut, R>(
        &self,
        call: &Call,
        mut op: F,
        mut refresh: R,
    ) -> Result<(T, u32), RetryError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
        R: RefreshStep<E>,
    {
        self.counters.call();
        self.budget.deposit();
        let mut number: u32 = 1;
        // The `n` of `delay_after(n)`: failures since the call began or since the last pushback,
        // so a backoff after a pushback starts again at the base delay (gRPC A6, R8).
        let mut backoff_step: u32 = 1;
        loop {
            self.counters.attempt();
            let attempt = Attempt::new(call.key().cloned(), number, call.deadline().copied());
            let began = Instant::now();
            let err = match op(attempt).await {
                Ok(v) => {
                    self.record(call, began.elapsed());
                    return Ok((v, number));
                }
                Err(e) => e,
            };
            let (wait, refreshing) = match classify(&err, call) {
                Decision::Never(NotRetryable::Pushback) => {
                    return self.give_up(GiveUp::Pushback, number, err)
                }
                Decision::Never(_) => return self.give_up(GiveUp::NotRetryable, number, err),
                Decision::Retry(w) => (w, false),
                Decision::RetryWithinDeadline(w) => {
                    if call.deadline().is_none() {
                        return self.give_up(GiveUp::Deadline, number, err);
                    }
                    (w, false)
                }
                Decision::RefreshThenRetry(w) => {
                    if !R::AVAILABLE {
                        return self.give_up(GiveUp::NotRetryable, number, err);
                    }
                    (w, true)
                }
            };
            if number >= self.policy.max_attempts() {
                return self.give_up(GiveUp::Attempts, number, err);
            }
            let (delay, next_step) = match wait {
                Wait::Backoff => (
                    self.policy.delay_after(backoff_step),
                    backoff_step.saturating_add(1),
                ),
                Wait::Pushback(d) => (d, 1),
            };
            // R3: the time left covers the wait and an attempt's minimum, which R10 replaces
            // by an observed percentile of the target's attempts when it is set and known.
            if !leaves_room(call.deadline(), delay, self.min_attempt_time(call)) {
                return self.give_up(GiveUp::Deadline, number, err);
            }
            if !self.budget.try_withdraw() {
                return self.give_up(GiveUp::Budget, number, err);
            }
            self.counters.retry();
            tracing::debug!(
                name: "idem_retry.retry",
                target: "idem_retry",
                attempt = number.saturating_add(1),
                delay_ms = idem_core::whole_millis(delay),
                pushback = matches!(wait, Wait::Pushback(_)),
                code = err.code().as_str(),
                "retrying after a retryable failure"
            );
            self.scheduler.sleep(delay).await;
            if refreshing {
                if let Err(e) = refresh.refresh(&err).await {
                    return self.give_up(GiveUp::NotRetryable, number, e);
                }
            }
            backoff_step = next_step;
            number = number.saturating_add(1);
        }
    }

    /// Ends a call on `err`. A `DEBUG` event, whatever the reason (E15): a spent budget is
    /// the budget doing its job in an outage, one event per call, so not a warning; alert on
    /// `idem_retry_give_ups_total{reason="budget"}` instead.
    pub(super) fn give_up<T, E: Classify>(
        &self,
        why: GiveUp,
        attempts: u32,
        err: E,
    ) -> Result<T, RetryError<E>> {
        self.counters.give_up(why);
        tracing::debug!(
            name: "idem_retry.give_up",
            target: "idem_retry",
            reason = why.as_str(),
            attempts,
            code = err.code().as_str(),
            "giving up: {}",
            why.explain()
        );
        Err(RetryError::new(why, attempts, err))
    }
}
