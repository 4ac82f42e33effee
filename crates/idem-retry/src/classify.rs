//! Which failures are worth another attempt.
//!
//! A retry must be able to succeed *and* must not add a side effect. The first half comes from
//! the status code and reason (a bad argument fails the same way every time); the second from the
//! call ([`CallKind`]): only idempotent or keyed calls are ever repeated.

use std::time::Duration;

use idem_core::{Code, Reason, Status};

use crate::call::{Call, CallKind};

/// What the classifier reads from an error. Implement it to plug your own error type into the
/// [`Retrier`](crate::Retrier); [`Status`] and bare [`Code`]s implement it already.
///
/// # Examples
///
/// ```
/// use idem_core::{Code, Reason};
/// use idem_retry::{classify, Call, Classify, Decision, Wait};
/// use std::time::Duration;
///
/// #[derive(Debug)]
/// enum ShopError {
///     OutOfStock,
///     Overloaded { retry_after_ms: u64 },
///     ConnectionReset,
/// }
///
/// impl Classify for ShopError {
///     fn code(&self) -> Code {
///         match self {
///             ShopError::OutOfStock => Code::FailedPrecondition,
///             ShopError::Overloaded { .. } => Code::ResourceExhausted,
///             ShopError::ConnectionReset => Code::Unavailable,
///         }
///     }
///     fn reason(&self) -> Option<&Reason> {
///         match self {
///             // Reset after the request went out: the outcome is unknown (S3).
///             ShopError::ConnectionReset => Some(&Reason::UNKNOWN_OUTCOME),
///             _ => None,
///         }
///     }
///     fn retry_after(&self) -> Option<Duration> {
///         match self {
///             ShopError::Overloaded { retry_after_ms } => Some(Duration::from_millis(*retry_after_ms)),
///             _ => None,
///         }
///     }
/// }
///
/// let read = Call::idempotent();
/// assert!(matches!(classify(&ShopError::OutOfStock, &read), Decision::Never(_)));
/// assert_eq!(
///     classify(&ShopError::Overloaded { retry_after_ms: 300 }, &read),
///     Decision::Retry(Wait::Pushback(Duration::from_millis(300))),
/// );
/// // An unknown outcome on a write without a key is never retried.
/// assert!(matches!(
///     classify(&ShopError::ConnectionReset, &Call::non_idempotent()),
///     Decision::Never(_),
/// ));
/// ```
pub trait Classify {
    /// The status code.
    fn code(&self) -> Code;

    /// The machine-readable reason, if any.
    fn reason(&self) -> Option<&Reason> {
        None
    }

    /// The server's retry-after hint (RetryInfo, `grpc-retry-pushback-ms`, `Retry-After`): the
    /// exact wait before the next attempt. A zero hint counts as none: the policy's
    /// backoff applies, since a retry is never immediate. Default: `None`.
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// Whether the server asked for no retry at all. gRPC A6 reads a
    /// `grpc-retry-pushback-ms` that is negative, not a number or given more than once that way;
    /// the error then ends the call ([`NotRetryable::Pushback`]) whatever its code. Default:
    /// `false`.
    fn forbids_retry(&self) -> bool {
        false
    }
}

impl Classify for Status {
    fn code(&self) -> Code {
        Status::code(self)
    }

    fn reason(&self) -> Option<&Reason> {
        Status::reason(self)
    }

    fn retry_after(&self) -> Option<Duration> {
        Status::retry_after(self)
    }
}

impl Classify for Code {
    fn code(&self) -> Code {
        *self
    }
}

impl<E: Classify + ?Sized> Classify for Box<E> {
    fn code(&self) -> Code {
        (**self).code()
    }

    fn reason(&self) -> Option<&Reason> {
        (**self).reason()
    }

    fn retry_after(&self) -> Option<Duration> {
        (**self).retry_after()
    }

    fn forbids_retry(&self) -> bool {
        (**self).forbids_retry()
    }
}

/// How long to wait before a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wait {
    /// The policy's backoff delay ([`RetryPolicy::delay_after`](crate::RetryPolicy::delay_after)).
    Backoff,
    /// The server's retry-after, which overrides the backoff.
    Pushback(Duration),
}

/// Why a failure is not retried at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotRetryable {
    /// `OK`: nothing failed.
    NotAFailure,
    /// The code fails the same way every time (`INVALID_ARGUMENT`, `NOT_FOUND`, ...) or the caller
    /// gave up (`CANCELLED`).
    Permanent,
    /// A retry could repeat a side effect: the call is neither idempotent nor keyed, or an
    /// `INTERNAL`/`UNKNOWN` failure hit a call that is not idempotent.
    Unsafe,
    /// `INTERNAL`/`UNKNOWN` without the caller declaring them transient.
    NotTransient,
    /// The server's pushback said not to retry ([`Classify::forbids_retry`]).
    Pushback,
}

/// The classifier's verdict on one failure. The retrier still checks attempts, deadline
/// and budget before acting on a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Retry after the wait.
    Retry(Wait),
    /// `DEADLINE_EXCEEDED`: retry after the wait only if the call has an overall deadline with
    /// enough budget left for the wait plus a minimum attempt.
    RetryWithinDeadline(Wait),
    /// `ABORTED` / `STOCK_CONFLICT`: retry after the wait only through a caller-supplied refresh
    /// step (re-read the version); never resend the same request unchanged.
    RefreshThenRetry(Wait),
    /// Do not retry.
    Never(NotRetryable),
}

impl Decision {
    /// The wait before the retry, or `None` for [`Decision::Never`].
    pub const fn wait(&self) -> Option<Wait> {
        match *self {
            Decision::Retry(w)
            | Decision::RetryWithinDeadline(w)
            | Decision::RefreshThenRetry(w) => Some(w),
            Decision::Never(_) => None,
        }
    }

    /// A short, stable name for tables and logs, ignoring the wait: `retry`,
    /// `retry-within-deadline`, `refresh-then-retry`, `never:permanent`, `never:unsafe`,
    /// `never:not-transient`, `never:not-a-failure`, `never:pushback`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Decision::Retry(_) => "retry",
            Decision::RetryWithinDeadline(_) => "retry-within-deadline",
            Decision::RefreshThenRetry(_) => "refresh-then-retry",
            Decision::Never(NotRetryable::Permanent) => "never:permanent",
            Decision::Never(NotRetryable::Unsafe) => "never:unsafe",
            Decision::Never(NotRetryable::NotTransient) => "never:not-transient",
            Decision::Never(NotRetryable::NotAFailure) => "never:not-a-failure",
            Decision::Never(NotRetryable::Pushback) => "never:pushback",
        }
    }
}

/// Classifies one failure of `call`.
///
/// In order:
/// 1. `OK` is not a failure. `CANCELLED`, `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`,
///    `PERMISSION_DENIED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED`, `DATA_LOSS` and
///    `UNAUTHENTICATED` are permanent, whatever the reason says.
/// 2. A call that is neither idempotent nor keyed is never retried.
/// 3. A server that forbids the retry ([`Classify::forbids_retry`]: a negative, malformed or
///    repeated `grpc-retry-pushback-ms`) is obeyed, whatever the code.
/// 4. `DEADLINE_EXCEEDED` is retried only within the call's deadline, whatever the reason.
///    Reasons refine the other codes: `RATE_LIMITED` is handled as `RESOURCE_EXHAUSTED`,
///    `STOCK_CONFLICT` as `ABORTED`, `UPSTREAM_UNAVAILABLE` and `UNKNOWN_OUTCOME` as
///    `UNAVAILABLE`, and `REQUEST_IN_FLIGHT` (the server is still running the first attempt)
///    as a plain retry: resending the same key then gets the stored result. An unknown
///    outcome (connection lost after send) is thus retried only for an idempotent call or
///    with the call's one key, which every attempt carries.
/// 5. `UNAVAILABLE`: backoff. `RESOURCE_EXHAUSTED`: the server's retry-after if it gave a
///    non-zero one, else backoff — never at once. `ABORTED`: only after a refresh.
///    `INTERNAL`/`UNKNOWN`: only if declared transient ([`Call::declare_transient`]) and the call
///    is idempotent.
///
/// On any retryable failure, a non-zero server retry-after (pushback) replaces the backoff: the
/// wait is exactly that long, with no jitter and no cap.
///
/// ```
/// use idem_core::{Code, IdempotencyKey, Reason, Status};
/// use idem_retry::{classify, Call, Decision, NotRetryable, Wait};
///
/// let write = Call::keyed(IdempotencyKey::derive("order-1001", "CreateOrder"));
/// assert_eq!(classify(&Code::Unavailable, &write), Decision::Retry(Wait::Backoff));
/// assert_eq!(classify(&Code::Aborted, &write), Decision::RefreshThenRetry(Wait::Backoff));
/// assert_eq!(classify(&Code::InvalidArgument, &write), Decision::Never(NotRetryable::Permanent));
/// assert_eq!(
///     classify(&Code::Unavailable, &Call::non_idempotent()),
///     Decision::Never(NotRetryable::Unsafe),
/// );
/// let lost = Status::new(Code::Unknown, "connection reset").with_reason(Reason::UNKNOWN_OUTCOME);
/// assert_eq!(classify(&lost, &write), Decision::Retry(Wait::Backoff));
/// ```
pub fn classify<E: Classify + ?Sized>(error: &E, call: &Call) -> Decision {
    let code = error.code();
    match code {
        Code::Ok => return Decision::Never(NotRetryable::NotAFailure),
        Code::Cancelled
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::DataLoss
        | Code::Unauthenticated => return Decision::Never(NotRetryable::Permanent),
        Code::Unknown
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Internal
        | Code::Unavailable => {}
    }
    let kind = call.kind();
    if kind == CallKind::Neither {
        return Decision::Never(NotRetryable::Unsafe);
    }
    if error.forbids_retry() {
        return Decision::Never(NotRetryable::Pushback);
    }
    let pushback = error.retry_after().filter(|d| !d.is_zero());
    let wait = pushback.map_or(Wait::Backoff, Wait::Pushback);

    if code == Code::DeadlineExceeded {
        return Decision::RetryWithinDeadline(wait);
    }
    // Reasons refine the other codes.
    if let Some(r) = error.reason() {
        if *r == Reason::STOCK_CONFLICT {
            return Decision::RefreshThenRetry(wait);
        }
        if *r == Reason::RATE_LIMITED
            || *r == Reason::UPSTREAM_UNAVAILABLE
            || *r == Reason::UNKNOWN_OUTCOME
            || *r == Reason::REQUEST_IN_FLIGHT
        {
            return Decision::Retry(wait);
        }
    }
    match code {
        Code::Aborted => Decision::RefreshThenRetry(wait),
        Code::Internal | Code::Unknown => {
            if !call.is_transient_declared() {
                Decision::Never(NotRetryable::NotTransient)
            } else if kind != CallKind::Idempotent {
                Decision::Never(NotRetryable::Unsafe)
            } else {
                Decision::Retry(wait)
            }
        }
        // UNAVAILABLE, RESOURCE_EXHAUSTED (the permanent codes returned above).
        _ => Decision::Retry(wait),
    }
}
