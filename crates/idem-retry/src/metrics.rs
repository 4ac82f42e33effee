//! Metric names and labels, documented in one place (R5, T3).
//!
//! The retrier reports to the [`metrics`](https://docs.rs/metrics) facade; install any recorder
//! (the Prometheus exporter, for one) to collect them. Without a recorder they cost nothing.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | [`ATTEMPTS`] `idem_retry_attempts_total` | counter | — | attempts made, first ones included |
//! | [`RETRIES`] `idem_retry_retries_total` | counter | — | retries started (attempts after the first) |
//! | [`HEDGES`] `idem_retry_hedges_total` | counter | — | hedged copies started (attempts after the first of a hedged call) |
//! | [`GIVE_UPS`] `idem_retry_give_ups_total` | counter | `reason` = `not_retryable`, `attempts`, `deadline`, `budget`, `pushback` | calls that ended on a failure, by why no further retry was made |
//!
//! The same figures are kept in-process by each [`Retrier`](crate::Retrier)
//! ([`Retrier::stats`](crate::Retrier::stats)). Every metric is [described](describe).
//!
//! # Tracing (E15)
//!
//! Each call of a [`Retrier`](crate::Retrier) is a span, target `idem_retry`, at `DEBUG`:
//!
//! | span | fields |
//! |---|---|
//! | `idem_retry.call` | `kind` ([`CallKind::as_str`](crate::CallKind::as_str)); when it ends, `attempts` and `outcome`: `ok`, or [`GiveUp::as_str`] |
//!
//! and two `DEBUG` events in it: `idem_retry.retry` before each retry (`attempt`, the number of
//! the attempt about to start; `delay_ms`; `pushback`, whether the server set the delay; `code`,
//! the failure's) and `idem_retry.give_up` when a call ends on a failure (`reason`, `attempts`,
//! `code`). None of them is a warning, not even a spent budget: in an outage that is one per
//! call, and the budget doing its job; alert on `idem_retry_give_ups_total{reason="budget"}`.
//! The key is never logged.

use std::fmt;

/// Counter: attempts made, first ones included.
pub const ATTEMPTS: &str = "idem_retry_attempts_total";
/// Counter: retries started.
pub const RETRIES: &str = "idem_retry_retries_total";
/// Counter: hedged copies started (attempts after the first of a hedged call).
pub const HEDGES: &str = "idem_retry_hedges_total";
/// Counter: calls that ended on a failure, labelled [`REASON`] = [`GiveUp::as_str`].
pub const GIVE_UPS: &str = "idem_retry_give_ups_total";
/// The label on [`GIVE_UPS`] ([`GiveUp::as_str`]), and on the retry counters of idem's client
/// layers ([`Failure::as_str`](crate::Failure::as_str)).
pub const REASON: &str = "reason";

/// Why a failed call was not retried again; the `reason` label of [`GIVE_UPS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GiveUp {
    /// The classifier said no (R2, S2), or the refresh step of an `ABORTED` call was missing
    /// or failed.
    NotRetryable,
    /// Every attempt of the policy was used (R1).
    Attempts,
    /// The remaining deadline does not cover the wait plus a minimum attempt (R3).
    Deadline,
    /// The retry budget refused (R5).
    Budget,
    /// The server's pushback said not to retry (R8): under gRPC A6 a
    /// `grpc-retry-pushback-ms` that is negative, malformed or repeated
    /// ([`Classify::forbids_retry`](crate::Classify::forbids_retry)).
    Pushback,
}

impl GiveUp {
    /// All five reasons.
    pub const ALL: &'static [GiveUp] = &[
        GiveUp::NotRetryable,
        GiveUp::Attempts,
        GiveUp::Deadline,
        GiveUp::Budget,
        GiveUp::Pushback,
    ];

    /// The label value: `not_retryable`, `attempts`, `deadline`, `budget` or `pushback`.
    pub const fn as_str(self) -> &'static str {
        match self {
            GiveUp::NotRetryable => "not_retryable",
            GiveUp::Attempts => "attempts",
            GiveUp::Deadline => "deadline",
            GiveUp::Budget => "budget",
            GiveUp::Pushback => "pushback",
        }
    }

    /// Why no further attempt was made, in words, for error messages: "the failure is not
    /// retryable", "no attempts were left", ...
    ///
    /// ```
    /// use idem_retry::GiveUp;
    /// assert_eq!(GiveUp::Pushback.explain(), "the server asked not to retry");
    /// ```
    pub const fn explain(self) -> &'static str {
        match self {
            GiveUp::NotRetryable => "the failure is not retryable",
            GiveUp::Attempts => "no attempts were left",
            GiveUp::Deadline => "the deadline left no time for another attempt",
            GiveUp::Budget => "the retry budget was spent",
            GiveUp::Pushback => "the server asked not to retry",
        }
    }
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Registers the descriptions of every metric above (the Prometheus `# HELP` lines) with the
/// installed recorder. [`Retrier::new`](crate::Retrier::new) calls it, so a recorder installed
/// before the retrier is built gets them; call it yourself for a recorder installed later.
pub fn describe() {
    metrics::describe_counter!(ATTEMPTS, "Attempts made, first ones included.");
    metrics::describe_counter!(RETRIES, "Retries started (attempts after the first).");
    metrics::describe_counter!(
        HEDGES,
        "Hedged copies started (attempts after the first of a hedged call)."
    );
    metrics::describe_counter!(
        GIVE_UPS,
        "Calls that ended on a failure, by why no further retry was made."
    );
}

pub(crate) fn attempt() {
    metrics::counter!(ATTEMPTS).increment(1);
}

pub(crate) fn retry() {
    metrics::counter!(RETRIES).increment(1);
}

pub(crate) fn hedge() {
    metrics::counter!(HEDGES).increment(1);
}

pub(crate) fn give_up(why: GiveUp) {
    metrics::counter!(GIVE_UPS, REASON => why.as_str()).increment(1);
}
