//! What the client layer counted: retries by the failure that caused them, and the keys it made.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use idem_retry::{Failure, FailureCounters, FailureCounts, RetryStats};

use crate::metrics::{KEYS_DERIVED_TOTAL, KEYS_GENERATED_TOTAL, RETRIES_TOTAL};

/// Registers the descriptions of the client layer's metrics (and the retrier's) with the
/// installed recorder; [`RetryLayerBuilder::build`](crate::RetryLayerBuilder::build) calls it.
pub(crate) fn describe() {
    idem_retry::metrics::describe();
    metrics::describe_counter!(
        RETRIES_TOTAL,
        "Retries the client layer made, by the failure that caused them."
    );
    metrics::describe_counter!(
        KEYS_GENERATED_TOTAL,
        "Idempotency keys the client layer made for writes that came without one, outside any run."
    );
    metrics::describe_counter!(
        KEYS_DERIVED_TOTAL,
        "Idempotency keys the client layer derived from the inbound request being served, for writes that came without one."
    );
}

/// A snapshot of a [`RetryLayer`](crate::RetryLayer)'s counters, shared by every service it made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// The retrier's own counters: calls, attempts, retries and give-ups by why.
    pub retrier: RetryStats,
    /// Keys the layer made for writes that came without one, outside any run (random).
    pub keys_generated: u64,
    /// Keys the layer derived from the run being served, for writes that came without one.
    pub keys_derived: u64,
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
    keys_generated: AtomicU64,
    keys_derived: AtomicU64,
}

impl Counters {
    pub(crate) fn retry(&self, why: Failure) {
        self.retries_by.add(why);
        metrics::counter!(RETRIES_TOTAL, idem_retry::metrics::REASON => why.as_str()).increment(1);
    }

    pub(crate) fn key_generated(&self) {
        self.keys_generated.fetch_add(1, Relaxed);
        metrics::counter!(KEYS_GENERATED_TOTAL).increment(1);
    }

    pub(crate) fn key_derived(&self) {
        self.keys_derived.fetch_add(1, Relaxed);
        metrics::counter!(KEYS_DERIVED_TOTAL).increment(1);
    }

    pub(crate) fn snapshot(&self, retrier: RetryStats) -> ClientStats {
        ClientStats {
            retrier,
            keys_generated: self.keys_generated.load(Relaxed),
            keys_derived: self.keys_derived.load(Relaxed),
            retries_by: self.retries_by.snapshot(),
        }
    }
}
