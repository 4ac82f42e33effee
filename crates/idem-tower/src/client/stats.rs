//! What the client layer counted: calls, attempts, retries by reason, give-ups.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use idem_retry::RetryStats;

/// Counter: retries by the failure that caused them (label [`LABEL_REASON`]).
pub const RETRIES_TOTAL: &str = "idem_tower_client_retries_total";
/// Counter: keys the client layer made for writes that had none.
pub const KEYS_GENERATED_TOTAL: &str = "idem_tower_client_keys_generated_total";
/// Counter: keys the client layer derived from the run being served, for writes that had none.
pub const KEYS_DERIVED_TOTAL: &str = "idem_tower_client_keys_derived_total";
/// The label on [`RETRIES_TOTAL`]: [`Failure::as_str`].
pub const LABEL_REASON: &str = "reason";

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

/// Why an attempt failed, as the client layer counts retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The connection failed or was lost: before the request went out, or after (an unknown
    /// outcome, S3).
    Transport,
    /// The attempt's own timeout (the remaining deadline, or the per-attempt timeout) passed.
    Timeout,
    /// `UNAVAILABLE` (503).
    Unavailable,
    /// `RESOURCE_EXHAUSTED` (429), usually with a pushback.
    ResourceExhausted,
    /// `ABORTED` (409): the same key is still running on the server (`REQUEST_IN_FLIGHT`) or a
    /// version conflict.
    Aborted,
    /// `DEADLINE_EXCEEDED` (504) answered by the server.
    DeadlineExceeded,
    /// Anything else.
    Other,
}

impl Failure {
    /// All kinds, in table order.
    pub const ALL: [Failure; 7] = [
        Failure::Transport,
        Failure::Timeout,
        Failure::Unavailable,
        Failure::ResourceExhausted,
        Failure::Aborted,
        Failure::DeadlineExceeded,
        Failure::Other,
    ];

    /// A short name: `transport`, `timeout`, `unavailable`, `resource_exhausted`, `aborted`,
    /// `deadline_exceeded`, `other`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Failure::Transport => "transport",
            Failure::Timeout => "timeout",
            Failure::Unavailable => "unavailable",
            Failure::ResourceExhausted => "resource_exhausted",
            Failure::Aborted => "aborted",
            Failure::DeadlineExceeded => "deadline_exceeded",
            Failure::Other => "other",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn from_code(code: idem_core::Code) -> Failure {
        use idem_core::Code;
        match code {
            Code::Unavailable => Failure::Unavailable,
            Code::ResourceExhausted => Failure::ResourceExhausted,
            Code::Aborted => Failure::Aborted,
            Code::DeadlineExceeded => Failure::DeadlineExceeded,
            _ => Failure::Other,
        }
    }
}

/// A snapshot of a [`RetryLayer`](crate::RetryLayer)'s counters, shared by every service it made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// The retrier's own counters: calls, attempts, retries and give-ups by why.
    pub retrier: RetryStats,
    /// Retries by the failure that caused them, indexed like [`Failure::ALL`].
    pub retries_by: [u64; 7],
    /// Keys the layer made for writes that came without one, outside any run (random).
    pub keys_generated: u64,
    /// Keys the layer derived from the run being served, for writes that came without one.
    pub keys_derived: u64,
}

impl ClientStats {
    /// Retries caused by `failure`.
    pub const fn retries(&self, failure: Failure) -> u64 {
        self.retries_by[failure as usize]
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    retries_by: [AtomicU64; 7],
    keys_generated: AtomicU64,
    keys_derived: AtomicU64,
}

impl Counters {
    pub(crate) fn retry(&self, why: Failure) {
        self.retries_by[why.index()].fetch_add(1, Relaxed);
        metrics::counter!(RETRIES_TOTAL, LABEL_REASON => why.as_str()).increment(1);
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
        let mut retries_by = [0; 7];
        for (o, c) in retries_by.iter_mut().zip(&self.retries_by) {
            *o = c.load(Relaxed);
        }
        ClientStats {
            retrier,
            retries_by,
            keys_generated: self.keys_generated.load(Relaxed),
            keys_derived: self.keys_derived.load(Relaxed),
        }
    }
}
