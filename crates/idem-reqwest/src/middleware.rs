//! The middleware: one logical call, sent as one or more attempts.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use http::Extensions;
use idem_core::run::{self, Run, StepName};
use idem_core::{Code, Deadline, IdempotencyKey};
use idem_retry::{Attempt, Call, Failure, Retrier, RetryError, Scheduler, TokioScheduler};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tracing::Instrument;

use crate::attempt::{self, AttemptError, Failed};
use crate::builder::{Config, MissingKey, RetryMiddlewareBuilder};
use crate::key::{caller_key, header_value, CallerKey};
use crate::report::{AttemptTimedOut, BoxError, CallFailed, CallReport};
use crate::stats::{ClientStats, Counters, KeySource};

/// A [`reqwest_middleware`] middleware that sends each logical call as one or more attempts:
/// one idempotency key per write, the same on every attempt, derived from the intent being served
/// when there is one; retries decided by idem-retry's [`Retrier`]; the server's `Retry-After`
/// obeyed.
///
/// # For each call
///
/// 1. **Deadline.** A [`Deadline`] in the request's extensions
///    (`.with_extension(Deadline::after(..))`), else the middleware's call timeout (10 s). Every
///    attempt and every wait fits inside it; each attempt waits for its response at most the time
///    left (or the attempt timeout, if shorter).
/// 2. **Key.** A write ([`Writes`](crate::Writes): `POST` and `PATCH` by default) gets its key
///    once, before the first attempt, by the table below, and every attempt sends it as an RFC 8941
///    sf-string in `Idempotency-Key` (`"6aa27a68-36cc-8c77-adcd-cca020495d81"`). Other requests
///    get no key and are retried as idempotent reads.
/// 3. **Attempts.** After a failure the [`Retrier`] decides, by the code the HTTP status stands
///    for ([`Code::from_http_status`]: 503 and 502 are retried, 429 waits for the server, 4xx are
///    not retried, ...) and the server's `idem-reason`; the attempts left, the deadline and the
///    shared [`RetryBudget`](idem_retry::RetryBudget) can each refuse. It waits through its
///    scheduler; no thread ever sleeps.
/// 4. **Answer.** A response whose status is below 400 is a success. Otherwise the last response
///    is returned all the same, so the caller reads its status and body (an RFC 9457 problem
///    document). Every response carries a [`CallReport`] extension: attempts, key, and why the
///    middleware gave up if it did. A call with no response at all is an error, [`CallFailed`].
///
/// | a write that | its key | retried |
/// |---|---|---|
/// | has a valid key (sf-string or bare token) | that key, unchanged (re-sent as an sf-string) | yes |
/// | has none, inside a deduplicated run ([`Run::current`]) | the run's: [`Run::key_for`] of `"METHOD /path"` and the [`StepName`] in the request's extensions, or [`Run::next_key`] of `"METHOD /path"` without one | yes |
/// | has none, outside a run | a fresh random key | yes |
/// | has none, under [`MissingKey::SendOnce`] | none | never: sent once |
/// | has a malformed key, or the header twice | left as it is; the server will refuse it | never: sent once |
///
/// The run's keys make a re-run safe: when the handler that sends this write runs again for the
/// same inbound intent (its first run died before recording its result, and a retry or another
/// instance took the intent over), its writes carry the same keys, in the same order, and the
/// downstream service replays what the first run caused instead of doing it twice.
///
/// # Failures
///
/// | the attempt | read as | retried for |
/// |---|---|---|
/// | answered 429 / 502, 503 / 408, 504 | `RESOURCE_EXHAUSTED` / `UNAVAILABLE` / `DEADLINE_EXCEEDED` | keyed writes and reads (`DEADLINE_EXCEEDED` only while the deadline leaves room) |
/// | answered 409 | `ABORTED`, not retried, unless `idem-reason: REQUEST_IN_FLIGHT` (the same key still running) | keyed writes and reads |
/// | answered 400, 401, 403, 404, 422, other 4xx; 500, 501 | permanent, or not known to be transient | never |
/// | a transport error (refused, reset, a lost answer) | `UNAVAILABLE`, reason `UNKNOWN_OUTCOME`: it may have run | keyed writes and reads |
/// | ran past its time | `DEADLINE_EXCEEDED` | keyed writes and reads, while the deadline leaves room |
/// | a request whose body is a stream (`try_clone` gives `None`) | | never: a stream cannot be sent twice |
/// | an error from a middleware after this one | `UNKNOWN` | never |
///
/// # Pushback
///
/// | the failed response carries | the next attempt |
/// |---|---|
/// | `Retry-After: N` (delay-seconds) | after exactly `N` s (no jitter, no cap); the backoff after it starts again at the base delay |
/// | `Retry-After` with an HTTP-date | at that date, as a pushback |
/// | a `Retry-After` that is neither ([`idem_retry::parse_retry_after`]), or zero, or none | the policy's backoff |
///
/// A pushback still counts against the deadline (a wait that would overrun it ends the call) and
/// the budget.
///
/// # Tracing and metrics
///
/// Each call is a span, `idem_reqwest.client` (target `idem_reqwest`, at `DEBUG`), with
/// `method`, `path`, `key_source` (`caller`, `run`, `random`; empty for an unkeyed call) and, when
/// the call ends, `attempts`, `outcome` (`ok`, or why the middleware gave up:
/// [`GiveUp::as_str`](idem_retry::GiveUp::as_str); `error` if no attempt could be made) and `code`
/// (the last answer's). The retrier's `idem_retry.call` span is inside it. The key is never
/// logged. Metrics: [`stats`](crate::stats).
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`policy`](RetryMiddlewareBuilder::policy) | [`RetryPolicy::default`](idem_retry::RetryPolicy::default): 3 attempts, 20 ms, ×2, 1 s cap, ±20%, 50 ms minimum attempt |
/// | [`budget`](RetryMiddlewareBuilder::budget) | [`RetryBudget::new`](idem_retry::RetryBudget::new): 10% of calls, a floor of 10 retries/s, 10 s window |
/// | [`writes`](RetryMiddlewareBuilder::writes) | `POST`, `PATCH` |
/// | [`call_timeout`](RetryMiddlewareBuilder::call_timeout) | a [`Deadline`] in the extensions, else 10 s |
/// | [`attempt_timeout`](RetryMiddlewareBuilder::attempt_timeout) | none: an attempt may use all the time left |
/// | [`missing_key`](RetryMiddlewareBuilder::missing_key) | [`MissingKey::Generate`]: derived from the run, or random outside one |
/// | [`key_header`](RetryMiddlewareBuilder::key_header) | `Idempotency-Key` |
/// | [`scheduler`](RetryMiddlewareBuilder::scheduler) | tokio's timer |
///
/// Clones share the retrier, its budget and the counters ([`stats`](Self::stats)).
///
/// # Examples
///
/// ```
/// use idem_reqwest::{RetryMiddleware, Writes};
/// use idem_retry::{RetryBudget, RetryPolicy};
/// use reqwest::Method;
/// use std::time::Duration;
///
/// let budget = RetryBudget::new(); // share clones of it with your other clients
/// let retries = RetryMiddleware::builder()
///     .policy(RetryPolicy::builder().max_attempts(4).build()?)
///     .budget(budget.clone())
///     .writes(Writes::methods([Method::POST, Method::PATCH, Method::PUT]))
///     .call_timeout(Duration::from_secs(2))
///     .attempt_timeout(Duration::from_millis(500))
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(retries.clone())
///     .build();
/// // client.post("http://payments.internal/v1/charges").body(r#"{"amount":1200}"#).send().await?
/// assert_eq!(retries.stats().retrier.calls, 0);
/// # drop(client);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Cancellation safety
///
/// Dropping the future abandons the call after the attempt in flight. A write may have run on the
/// server: call again with the same key (from [`CallReport::key`], [`CallFailed::key`], or one
/// you set yourself) and the server's deduplication replays it.
#[derive(Debug, Clone)]
#[must_use = "a middleware does nothing until a client is built with it"]
pub struct RetryMiddleware<S = TokioScheduler> {
    pub(crate) retrier: Retrier<S>,
    pub(crate) cfg: Arc<Config>,
    pub(crate) counters: Arc<Counters>,
}

impl RetryMiddleware<TokioScheduler> {
    /// A middleware with every default.
    pub fn new() -> Self {
        RetryMiddleware::builder().assemble()
    }

    /// A builder starting from the defaults.
    pub fn builder() -> RetryMiddlewareBuilder<TokioScheduler> {
        RetryMiddlewareBuilder::new()
    }
}

impl Default for RetryMiddleware<TokioScheduler> {
    fn default() -> Self {
        RetryMiddleware::new()
    }
}

impl<S> RetryMiddleware<S> {
    /// Counters shared by this middleware's clones.
    pub fn stats(&self) -> ClientStats {
        self.counters.snapshot(self.retrier.stats())
    }

    /// The retrier (its policy, budget, scheduler and counters).
    pub fn retrier(&self) -> &Retrier<S> {
        &self.retrier
    }
}

#[async_trait::async_trait]
impl<S> Middleware for RetryMiddleware<S>
where
    S: Scheduler + Send + Sync + 'static,
    S::Sleep: Send,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let span = tracing::debug_span!(
            target: "idem_reqwest",
            "idem_reqwest.client",
            method = %req.method(),
            path = req.url().path(),
            key_source = tracing::field::Empty,
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        if span.is_disabled() {
            return self.call(req, extensions, next, &span).await;
        }
        let result = self
            .call(req, extensions, next, &span)
            .instrument(span.clone())
            .await;
        record_end(&span, &result);
        result
    }
}

impl<S> RetryMiddleware<S>
where
    S: Scheduler + Send + Sync + 'static,
    S::Sleep: Send,
{
    async fn call(
        &self,
        mut req: Request,
        ext: &mut Extensions,
        next: Next<'_>,
        span: &tracing::Span,
    ) -> reqwest_middleware::Result<Response> {
        let cfg = &*self.cfg;
        let deadline = ext
            .get::<Deadline>()
            .copied()
            .unwrap_or_else(|| Deadline::after(cfg.call_timeout));
        let write = cfg.writes.is_write(req.method(), req.url());
        let (key, key_source) = if write {
            self.key_of(&req, ext)
        } else {
            (None, None)
        };
        let (key, key_source) = match key.as_ref().and_then(header_value) {
            Some(value) => {
                req.headers_mut().insert(&cfg.key_header, value);
                (key, key_source)
            }
            None => (None, None),
        };
        if let Some(source) = key_source {
            span.record("key_source", source.as_str());
        }
        // A stream cannot be sent twice: such a call gets one attempt, whatever it is.
        let spare = req.try_clone();
        let call = match (&key, write, spare.is_some()) {
            (_, _, false) | (None, true, _) => Call::non_idempotent(),
            (Some(k), _, true) => Call::keyed(k.clone()),
            (None, false, true) => Call::idempotent(),
        }
        .with_deadline(deadline);
        let call = match self.retrier.latencies() {
            Some(_) => call.with_target(format!("{} {}", req.method(), req.url().path())),
            None => call,
        };
        let hedging = cfg.hedging.as_ref();

        let mut first = Some(req);
        let last_ext: Mutex<Option<Extensions>> = Mutex::new(None);
        // What the attempt before this one failed of (the retry it causes is counted by it).
        let last_failure: Mutex<Option<Failure>> = Mutex::new(None);
        let attempts = AtomicU32::new(0);
        let caller_ext: &Extensions = ext;
        let op = |attempt: Attempt| {
            attempts.fetch_add(1, Relaxed);
            // A hedged copy is not a retry: the retrier counts it as a hedge.
            if attempt.is_retry() && hedging.is_none() {
                let why = last_failure
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .unwrap_or(Failure::Other);
                self.counters.retry(why);
            }
            let time = cfg
                .attempt_timeout
                .map_or(deadline.remaining(), |t| t.min(deadline.remaining()));
            let req = first
                .take()
                .or_else(|| spare.as_ref().and_then(Request::try_clone));
            // Each attempt runs the rest of the chain with its own copy of the caller's
            // extensions; the last attempt's go back to the caller.
            let mut attempt_ext = caller_ext.clone();
            let next = next.clone();
            let (last_ext, last_failure) = (&last_ext, &last_failure);
            async move {
                let result = match req {
                    None => Err(attempt::not_resendable()),
                    Some(req) => {
                        match tokio::time::timeout(time, next.run(req, &mut attempt_ext)).await {
                            Ok(Ok(response)) => attempt::response(response),
                            Ok(Err(e)) => Err(attempt::error(e)),
                            Err(_) => Err(attempt::timeout(time)),
                        }
                    }
                };
                *last_ext.lock().unwrap_or_else(PoisonError::into_inner) = Some(attempt_ext);
                if let Err(e) = &result {
                    *last_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.kind);
                }
                result
            }
        };
        let result = match hedging {
            Some(h) => self.retrier.call_hedged(&call, h, op).await,
            None => self.retrier.call_reporting(&call, op).await,
        };
        if let Some(e) = last_ext
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            *ext = e;
        }
        let mut report = CallReport {
            attempts: attempts.load(Relaxed),
            key,
            key_source,
            gave_up: None,
        };
        let gave_up = match result {
            Ok(mut response) => {
                response.extensions_mut().insert(report);
                return Ok(response);
            }
            Err(gave_up) => gave_up,
        };
        report.gave_up = Some(gave_up.reason());
        let (reason, attempts) = (gave_up.reason(), gave_up.attempts());
        let AttemptError {
            status, outcome, ..
        } = gave_up.into_error();
        let source: BoxError = match outcome {
            Failed::Response(mut response) => {
                response.extensions_mut().insert(report);
                return Ok(*response);
            }
            Failed::Error(e) => Box::new(e),
            Failed::Timeout(after) => Box::new(AttemptTimedOut { after }),
            Failed::NotResendable => Box::new(status.clone()),
        };
        Err(reqwest_middleware::Error::middleware(CallFailed {
            gave_up: RetryError::new(reason, attempts, status),
            report,
            source,
        }))
    }

    /// The key of a write, made once for the whole call, and where it came from (see the table
    /// on [`RetryMiddleware`]).
    fn key_of(
        &self,
        req: &Request,
        ext: &Extensions,
    ) -> (Option<IdempotencyKey>, Option<KeySource>) {
        match caller_key(req.headers(), &self.cfg.key_header) {
            CallerKey::Valid(key) => (Some(key), Some(KeySource::Caller)),
            CallerKey::Absent if self.cfg.missing_key == MissingKey::Generate => {
                let target = format!("{} {}", req.method(), req.url().path());
                let step = ext.get::<StepName>().map(StepName::as_str);
                let source = if Run::current().is_some() {
                    KeySource::Run
                } else {
                    KeySource::Random
                };
                let key = run::outbound_key(&target, step);
                self.counters.key_made(source);
                (Some(key), Some(source))
            }
            // No key under `SendOnce`, or one the server will refuse: at most once.
            CallerKey::Absent | CallerKey::Malformed => (None, None),
        }
    }
}

/// Records how a call ended on its span.
fn record_end(span: &tracing::Span, result: &reqwest_middleware::Result<Response>) {
    match result {
        Ok(response) => {
            if let Some(report) = CallReport::of(response) {
                span.record("attempts", report.attempts);
                match report.gave_up {
                    None => {
                        span.record("outcome", "ok");
                        span.record("code", Code::Ok.as_str());
                    }
                    Some(why) => {
                        span.record("outcome", why.as_str());
                        let code = Code::from_http_status(response.status().as_u16());
                        span.record("code", code.as_str());
                    }
                }
            }
        }
        Err(e) => match CallFailed::of(e) {
            Some(failed) => {
                span.record("attempts", failed.attempts());
                span.record("outcome", failed.reason().as_str());
                span.record("code", failed.code().as_str());
            }
            None => {
                span.record("outcome", "error");
            }
        },
    }
}
