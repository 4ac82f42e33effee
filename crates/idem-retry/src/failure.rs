//! Why an attempt failed, as the client layers built on the retrier count their retries.

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
