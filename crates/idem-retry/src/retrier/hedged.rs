//! One hedged call (R9): copies sent after the hedging delay, the first success taken, the rest
//! dropped.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

use super::refresh::NoRefresh;
use super::Retrier;
use crate::call::{Attempt, Call, CallKind};
use crate::classify::Classify;
use crate::deadline::leaves_room;
use crate::error::RetryError;
use crate::hedge::{HedgeDelay, HedgingPolicy};
use crate::metrics::GiveUp;
use crate::scheduler::Scheduler;

impl<S: Scheduler> Retrier<S> {
    /// Runs `op` for `call` hedged by `hedging` (R9): the first copy at once; while no copy has
    /// succeeded, the next after the hedging delay, each with the call's key and the next attempt
    /// number, up to the policy's copies. The first success is returned and the copies still in
    /// flight are dropped; a fatal failure of any copy ends the call at once (see
    /// [`HedgingPolicy`]).
    ///
    /// A call that may not run twice ([`CallKind::Neither`]) is made once, as
    /// [`call_reporting`](Self::call_reporting) would. With an adaptive delay the retrier needs a
    /// [`LatencyTracker`](crate::LatencyTracker) and the call a target: until the target's
    /// percentile is known the call is retried by the retry policy instead, unhedged.
    ///
    /// Each copy after the first is a withdrawal from the [`RetryBudget`](crate::RetryBudget)
    /// and needs the deadline to leave an attempt's time ([`min_attempt_time`](Self::min_attempt_time));
    /// a copy they refuse is not sent, and the call waits for those in flight.
    ///
    /// # Errors
    ///
    /// A [`RetryError`] with the failure that ended the call: a fatal one
    /// ([`GiveUp::NotRetryable`]), or the last of copies that all failed (why no further copy
    /// was sent: [`GiveUp::Attempts`], [`GiveUp::Budget`], [`GiveUp::Deadline`],
    /// [`GiveUp::Pushback`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_core::{Code, IdempotencyKey, Status};
    /// use idem_retry::{Call, HedgeDelay, HedgingPolicy, Retrier};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
    /// let hedging = HedgingPolicy::builder()
    ///     .delay(HedgeDelay::Fixed(Duration::from_millis(50)))
    ///     .build()?;
    /// let retrier = Retrier::default();
    /// let call = Call::keyed(IdempotencyKey::derive("order-1001", "CreateOrder"));
    /// let started = tokio::time::Instant::now();
    /// let answer = retrier
    ///     .call_hedged(&call, &hedging, |attempt| async move {
    ///         // The first copy is stuck for a second; the hedge answers in 10 ms.
    ///         let ms = if attempt.number() == 1 { 1_000 } else { 10 };
    ///         tokio::time::sleep(Duration::from_millis(ms)).await;
    ///         Ok::<_, Status>(attempt.number())
    ///     })
    ///     .await
    ///     .unwrap();
    /// assert_eq!(answer, 2);
    /// assert_eq!(started.elapsed(), Duration::from_millis(60));
    /// assert_eq!(retrier.stats().hedges, 1);
    /// # Ok(()) }
    /// ```
    pub async fn call_hedged<T, E, F, Fut>(
        &self,
        call: &Call,
        hedging: &HedgingPolicy,
        op: F,
    ) -> Result<T, RetryError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
    {
        let delay = match hedging.delay() {
            HedgeDelay::Fixed(d) => Some(d),
            HedgeDelay::Percentile(q) => match (&self.latencies, call.target()) {
                (Some(t), Some(target)) => t.percentile(target, q),
                _ => None,
            },
        };
        let delay = match (call.kind(), delay) {
            (CallKind::Neither, _) | (_, None) => return self.run(call, op, NoRefresh).await,
            (_, Some(d)) => d,
        };
        let span = tracing::debug_span!(
            target: "idem_retry",
            "idem_retry.call",
            kind = call.kind().as_str(),
            hedged = true,
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let result = self
            .hedged(call, hedging, delay, op)
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

    /// The copies of one hedged call; a success comes with the number of copies sent.
    async fn hedged<T, E, F, Fut>(
        &self,
        call: &Call,
        hedging: &HedgingPolicy,
        delay: Duration,
        mut op: F,
    ) -> Result<(T, u32), RetryError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
    {
        self.counters.call();
        self.budget.deposit();
        let mut in_flight = FuturesUnordered::new();
        let mut sent: u32 = 0;
        let mut last: Option<E> = None;
        // Why no further copy will be sent, once that is decided.
        let mut stopped: Option<GiveUp> = None;
        let mut send_now = true;
        let mut timer: Option<Pin<Box<S::Sleep>>> = None;
        loop {
            if send_now && stopped.is_none() {
                send_now = false;
                timer = None;
                if sent >= hedging.max_attempts() {
                    stopped = Some(GiveUp::Attempts);
                } else if sent > 0
                    && !leaves_room(call.deadline(), Duration::ZERO, self.min_attempt_time(call))
                {
                    stopped = Some(GiveUp::Deadline);
                } else if sent > 0 && !self.budget.try_withdraw() {
                    stopped = Some(GiveUp::Budget);
                } else {
                    sent += 1;
                    self.counters.attempt();
                    if sent > 1 {
                        self.counters.hedge();
                        tracing::debug!(
                            name: "idem_retry.hedge",
                            target: "idem_retry",
                            attempt = sent,
                            "sending a hedged copy"
                        );
                    }
                    let attempt = Attempt::new(call.key().cloned(), sent, call.deadline().copied());
                    let copy = op(attempt);
                    in_flight.push(async move {
                        let began = Instant::now();
                        let r = copy.await;
                        (r, began.elapsed())
                    });
                    if sent < hedging.max_attempts() {
                        timer = Some(Box::pin(self.scheduler.sleep(delay)));
                    }
                }
            }
            if in_flight.is_empty() && (stopped.is_some() || timer.is_none()) {
                let why = stopped.unwrap_or(GiveUp::Attempts);
                if let Some(err) = last {
                    return self.give_up(why, sent, err);
                }
                // Not reached: the first copy is always sent, and a copy ends in a success
                // (returned) or a failure (kept in `last`), so an empty set has a failure.
                return std::future::pending().await;
            }
            // The next copy to end, or the hedging delay running out first.
            let next = poll_fn(|cx| {
                if !in_flight.is_empty() {
                    if let Poll::Ready(Some(done)) = in_flight.poll_next_unpin(cx) {
                        return Poll::Ready(Some(done));
                    }
                }
                if let Some(t) = timer.as_mut() {
                    if t.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(None);
                    }
                }
                Poll::Pending
            })
            .await;
            let (result, took) = match next {
                None => {
                    send_now = true;
                    continue;
                }
                Some(done) => done,
            };
            let err = match result {
                Ok(v) => {
                    self.record(call, took);
                    return Ok((v, sent));
                }
                Err(e) => e,
            };
            if !hedging.is_non_fatal(&err) {
                return self.give_up(GiveUp::NotRetryable, sent, err);
            }
            if err.forbids_retry() {
                // A6: a pushback that forbids retries stops further copies.
                stopped.get_or_insert(GiveUp::Pushback);
                timer = None;
            } else if let Some(d) = err.retry_after().filter(|d| !d.is_zero()) {
                // A6: a pushback with a delay sends the next copy after it.
                if stopped.is_none() && sent < hedging.max_attempts() {
                    timer = Some(Box::pin(self.scheduler.sleep(d)));
                }
            } else {
                // A6: a non-fatal failure sends the next copy at once.
                send_now = true;
            }
            last = Some(err);
        }
    }
}
