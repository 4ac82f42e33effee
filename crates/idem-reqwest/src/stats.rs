//! What the middleware counts: retries by the failure that caused them, and the keys it made.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | [`RETRIES_TOTAL`] `idem_reqwest_retries_total` | counter | `reason` ([`REASON`](idem_retry::metrics::REASON)) = [`Failure::as_str`] | retries the middleware made, by the failure that caused them |
//! | [`KEYS_TOTAL`] `idem_reqwest_keys_total` | counter | `source` = `run` or `random` | keys the middleware made for writes that came without one: derived from the run being served, or drawn at random outside a run |
//!
//! The retrier the middleware drives reports its own series as well (attempts, retries,
//! give-ups by why): see [`idem_retry::metrics`]. The key itself is never a label.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use idem_retry::{Failure, FailureCounters, FailureCounts, RetryStats};

/// Counter: retries by the failure that caused them, labelled
/// [`REASON`](idem_retry::metrics::REASON) = [`Failure::as_str`].
pub const RETRIES_TOTAL: &str = "idem_reqwest_retries_total";
/// Counter: keys made for writes that had none (label [`LABEL_SOURCE`]).
pub const KEYS_TOTAL: &str = "idem_reqwest_keys_total";
/// The label on [`KEYS_TOTAL`]: [`KeySource::as_str`] (`run` or `random`).
pub const LABEL_SOURCE: &str = "source";

/// Registers the descriptions of the middleware's metrics (and the retrier's) with the installed
/// recorder (Prometheus `# HELP`); building a middleware calls it.
pub(crate) fn describe() {
    idem_retry::metrics::describe();
    metrics::describe_counter!(
        RETRIES_TOTAL,
        "Retries the reqwest middleware made, by the failure that caused them."
    );
    metrics::describe_counter!(
        KEYS_TOTAL,
        "Idempotency keys the reqwest middleware made for writes that came without one, by whether they were derived from the run being served or drawn at random."
    );
}

/// Where the key of a keyed call came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The caller set it on the request; it is kept.
    Caller,
    /// Derived from the run being served (the same on every run of the inbound intent).
    Run,
    /// Drawn at random: the write was made outside any run.
    Random,
}

impl KeySource {
    /// `caller`, `run` or `random`.
    pub const fn as_str(self) -> &'static str {
        match self {
            KeySource::Caller => "caller",
            KeySource::Run => "run",
            KeySource::Random => "random",
        }
    }
}

/// A snapshot of a [`RetryMiddleware`](crate::RetryMiddleware)'s counters, shared by its clones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// The retrier's own counters: calls, attempts, retries and give-ups by why.
    pub retrier: RetryStats,
    /// Keys derived from the run being served, for writes that came without one.
    pub keys_derived: u64,
    /// Keys drawn at random, for writes made without a key outside any run.
    pub keys_generated: u64,
    /// Retries by the failure that caused them.
    retries_by: FailureCounts,
}

impl ClientStats {
    /// Retries caused by `failure`.
    pub const fn retries(&self, failure: Failure) -> u64 {
        self.retries_by.get(failure)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    retries_by: FailureCounters,
    keys_derived: AtomicU64,
    keys_generated: AtomicU64,
}

impl Counters {
    pub(crate) fn retry(&self, why: Failure) {
        self.retries_by.add(why);
        metrics::counter!(RETRIES_TOTAL, idem_retry::metrics::REASON => why.as_str()).increment(1);
    }

    pub(crate) fn key_made(&self, source: KeySource) {
        match source {
            KeySource::Run => self.keys_derived.fetch_add(1, Relaxed),
            KeySource::Random => self.keys_generated.fetch_add(1, Relaxed),
            KeySource::Caller => return,
        };
        metrics::counter!(KEYS_TOTAL, LABEL_SOURCE => source.as_str()).increment(1);
    }

    pub(crate) fn snapshot(&self, retrier: RetryStats) -> ClientStats {
        ClientStats {
            retrier,
            keys_derived: self.keys_derived.load(Relaxed),
            keys_generated: self.keys_generated.load(Relaxed),
            retries_by: self.retries_by.snapshot(),
        }
    }
}
