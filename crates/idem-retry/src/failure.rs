//! Why an attempt failed, as the client layers built on the retrier count their retries, and the
//! counts by kind.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use idem_core::Code;

/// Why an attempt failed, as a client counts its retries: the `reason` label
/// ([`metrics::REASON`](crate::metrics::REASON)) of the retry counters of idem's client layers
/// (`idem-tower`'s and `idem-reqwest`'s), and the key of their per-failure counts.
///
/// ```
/// use idem_core::Code;
/// use idem_retry::Failure;
///
/// assert_eq!(Failure::from_code(Code::Unavailable), Failure::Unavailable);
/// assert_eq!(Failure::from_code(Code::NotFound), Failure::Other);
/// assert_eq!(Failure::ResourceExhausted.as_str(), "resource_exhausted");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Failure {
    /// The connection failed or was lost: before the request went out, or after it (an unknown
    /// outcome).
    Transport,
    /// The attempt's own timeout (the time left of the call, or the per-attempt timeout) passed.
    Timeout,
    /// `UNAVAILABLE` (HTTP 502, 503).
    Unavailable,
    /// `RESOURCE_EXHAUSTED` (HTTP 429), usually with a pushback.
    ResourceExhausted,
    /// `ABORTED` (HTTP 409): the same key still running on the server (`REQUEST_IN_FLIGHT`), or
    /// a version conflict.
    Aborted,
    /// `DEADLINE_EXCEEDED` (HTTP 408, 504) answered by the server.
    DeadlineExceeded,
    /// Anything else.
    Other,
}

impl Failure {
    /// Every kind, in the order above.
    pub const ALL: &'static [Failure] = &[
        Failure::Transport,
        Failure::Timeout,
        Failure::Unavailable,
        Failure::ResourceExhausted,
        Failure::Aborted,
        Failure::DeadlineExceeded,
        Failure::Other,
    ];

    /// The label value: `transport`, `timeout`, `unavailable`, `resource_exhausted`, `aborted`,
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

    /// The kind of a failure the server answered with `code` (a transport error or a timeout is
    /// not an answer: those are [`Transport`](Failure::Transport) and
    /// [`Timeout`](Failure::Timeout)).
    pub const fn from_code(code: Code) -> Failure {
        match code {
            Code::Unavailable => Failure::Unavailable,
            Code::ResourceExhausted => Failure::ResourceExhausted,
            Code::Aborted => Failure::Aborted,
            Code::DeadlineExceeded => Failure::DeadlineExceeded,
            _ => Failure::Other,
        }
    }
}

/// How many kinds [`Failure::ALL`] holds.
const KINDS: usize = Failure::ALL.len();

/// Counts by [`Failure`], as a client reports its retries by the failure that caused them: a
/// snapshot of [`FailureCounters`].
///
/// ```
/// use idem_retry::{Failure, FailureCounters};
///
/// let counters = FailureCounters::default(); // shared by a client's clones
/// counters.add(Failure::Unavailable);
/// counters.add(Failure::Unavailable);
/// counters.add(Failure::Timeout);
/// let counts = counters.snapshot();
/// assert_eq!(counts.get(Failure::Unavailable), 2);
/// assert_eq!(counts.get(Failure::Timeout), 1);
/// assert_eq!(counts.get(Failure::Transport), 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureCounts([u64; KINDS]);

impl FailureCounts {
    /// The count of `failure`.
    pub const fn get(&self, failure: Failure) -> u64 {
        self.0[failure as usize]
    }
}

/// Counters by [`Failure`], safe to share between tasks; read them with
/// [`snapshot`](Self::snapshot).
#[derive(Debug, Default)]
pub struct FailureCounters([AtomicU64; KINDS]);

impl FailureCounters {
    /// Counts one `failure`.
    pub fn add(&self, failure: Failure) {
        self.0[failure as usize].fetch_add(1, Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> FailureCounts {
        FailureCounts(std::array::from_fn(|i| self.0[i].load(Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::{Failure, FailureCounters};

    /// Each kind counts in a place of its own (the discriminant is its place in `ALL`).
    #[test]
    fn e9_each_failure_counts_apart() {
        let counters = FailureCounters::default();
        for (i, f) in Failure::ALL.iter().enumerate() {
            for _ in 0..=i {
                counters.add(*f);
            }
        }
        let counts = counters.snapshot();
        for (i, f) in Failure::ALL.iter().enumerate() {
            assert_eq!(counts.get(*f), i as u64 + 1, "{f:?}");
        }
    }
}
