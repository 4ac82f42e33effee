//! Why a call did not get a value; every error maps to a status code.

use std::fmt;
use std::time::Duration;

use idem_core::{Code, Reason, Status};

use crate::OutcomeKind;

/// Why [`Engine::execute`](crate::Engine::execute) returned no value. Each variant maps to a gRPC
/// code ([`code`](Self::code)) and converts into a [`Status`] with a reason, so a server answers
/// gRPC and HTTP correctly with one conversion.
///
/// | variant | code | retry? |
/// |---|---|---|
/// | [`Conflict`](Self::Conflict) | `FAILED_PRECONDITION` | never: the key names another request |
/// | [`Action`](Self::Action) | the action's own code | as that code says |
/// | [`Panicked`](Self::Panicked) | `INTERNAL` | no |
/// | [`Overloaded`](Self::Overloaded) | `RESOURCE_EXHAUSTED` + retry-after | after the hint |
/// | [`TenantQuotaExceeded`](Self::TenantQuotaExceeded) | `RESOURCE_EXHAUSTED` + retry-after | after the hint |
/// | [`InFlight`](Self::InFlight) | `ABORTED` + retry-after | after the hint |
/// | [`LeaseExpired`](Self::LeaseExpired) | `UNAVAILABLE` | yes, same key |
/// | [`Abandoned`](Self::Abandoned) | `UNAVAILABLE` | yes, same key |
/// | [`DeadlineExceeded`](Self::DeadlineExceeded) | `DEADLINE_EXCEEDED` | if budget remains |
/// | [`ShuttingDown`](Self::ShuttingDown) | `UNAVAILABLE` | yes, elsewhere |
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DedupError {
    /// Same scope, other request fingerprint. The action did not run.
    Conflict,
    /// The action failed with its own status; every waiter of that run gets the same error.
    /// `outcome` says whether this call ran the action, joined it, or got a cached
    /// failure replayed (only for codes declared cacheable).
    Action {
        /// The action's error.
        status: Status,
        /// How this call met the failure.
        outcome: OutcomeKind,
    },
    /// The action panicked. The shard keeps serving.
    Panicked {
        /// The panic message, when it was a string.
        message: String,
    },
    /// `max_entries` is reached, or the stored values weigh `max_bytes`, and this scope is new.
    /// Nothing is evicted.
    Overloaded {
        /// When to try again.
        retry_after: Duration,
    },
    /// This scope is new and its tenant holds its whole share of the engine
    /// ([`tenant_share`](crate::EngineBuilder::tenant_share)); other tenants are
    /// still served. Reason `TENANT_QUOTA_EXCEEDED`.
    TenantQuotaExceeded {
        /// When to try again.
        retry_after: Duration,
    },
    /// The scope is in flight and the engine's policy is
    /// [`InFlightPolicy::Reject`](crate::InFlightPolicy::Reject).
    InFlight {
        /// When to try again.
        retry_after: Duration,
    },
    /// The run passed `in_flight_timeout`: it was cancelled, or it completed only after
    /// the engine had ended it at its lease, and its result was not stored. Either way nothing is
    /// stored and every caller of the run, its leader included, gets this error; a retry with the
    /// same key runs the action again.
    LeaseExpired {
        /// The lease that ran out.
        after: Duration,
    },
    /// The run this call was waiting for ended without a result (its leader's call was dropped
    /// before the action started, or an operator forgot the in-flight entry). Retry with the same
    /// key.
    Abandoned,
    /// This caller's own deadline passed while it waited. The run goes on and its
    /// result is stored for the retry that follows.
    DeadlineExceeded,
    /// The engine is shutting down or stopped.
    ShuttingDown,
}

impl DedupError {
    /// The status code.
    pub fn code(&self) -> Code {
        match self {
            DedupError::Conflict => Code::FailedPrecondition,
            DedupError::Action { status, .. } => status.code(),
            DedupError::Panicked { .. } => Code::Internal,
            DedupError::Overloaded { .. } => Code::ResourceExhausted,
            DedupError::TenantQuotaExceeded { .. } => Code::ResourceExhausted,
            DedupError::InFlight { .. } => Code::Aborted,
            DedupError::LeaseExpired { .. } => Code::Unavailable,
            DedupError::Abandoned => Code::Unavailable,
            DedupError::DeadlineExceeded => Code::DeadlineExceeded,
            DedupError::ShuttingDown => Code::Unavailable,
        }
    }

    /// The retry-after hint, where there is one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            DedupError::Overloaded { retry_after }
            | DedupError::TenantQuotaExceeded { retry_after }
            | DedupError::InFlight { retry_after } => Some(*retry_after),
            DedupError::Action { status, .. } => status.retry_after(),
            _ => None,
        }
    }

    /// The reason code that goes with [`code`](Self::code).
    pub fn reason(&self) -> Option<Reason> {
        match self {
            DedupError::Conflict => Some(Reason::IDEMPOTENCY_CONFLICT),
            DedupError::Action { status, .. } => status.reason().cloned(),
            DedupError::Panicked { .. } => Some(Reason::ACTION_PANICKED),
            DedupError::Overloaded { .. } => Some(Reason::ENGINE_FULL),
            DedupError::TenantQuotaExceeded { .. } => Some(Reason::TENANT_QUOTA_EXCEEDED),
            DedupError::InFlight { .. } => Some(Reason::REQUEST_IN_FLIGHT),
            DedupError::LeaseExpired { .. } => Some(Reason::LEASE_EXPIRED),
            DedupError::Abandoned => Some(Reason::RUN_ABANDONED),
            DedupError::DeadlineExceeded => None,
            DedupError::ShuttingDown => Some(Reason::SHUTTING_DOWN),
        }
    }

    /// This error as a [`Status`] (code, reason, message, retry-after).
    pub fn to_status(&self) -> Status {
        if let DedupError::Action { status, .. } = self {
            return status.clone();
        }
        let mut s = Status::new(self.code(), self.to_string());
        if let Some(r) = self.reason() {
            s = s.with_reason(r);
        }
        if let Some(after) = self.retry_after() {
            s = s.with_retry_after(after);
        }
        s
    }
}

impl fmt::Display for DedupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupError::Conflict => f.write_str(
                "this idempotency key was already used for a different request: send a new key for a new request, or the same request again to get its result",
            ),
            // The status says what failed (the action, or a shared store): said once.
            DedupError::Action { status, .. } => status.fmt(f),
            DedupError::Panicked { message } => write!(f, "the request's handler panicked: {message}"),
            DedupError::Overloaded { retry_after } => write!(
                f,
                "the server holds as many requests as it can remember right now: retry after {} ms",
                retry_after.as_millis()
            ),
            DedupError::TenantQuotaExceeded { retry_after } => write!(
                f,
                "this tenant holds its whole share of the requests the server remembers: retry after {} ms",
                retry_after.as_millis()
            ),
            DedupError::InFlight { retry_after } => write!(
                f,
                "a request with this idempotency key is still being processed: retry after {} ms",
                retry_after.as_millis()
            ),
            DedupError::LeaseExpired { after } => write!(
                f,
                "the request took longer than its limit of {} ms and was stopped; its result was not stored: retry with the same key",
                after.as_millis()
            ),
            DedupError::Abandoned => {
                f.write_str("the run this call waited for ended without a result; retry with the same key")
            }
            DedupError::DeadlineExceeded => {
                f.write_str("the caller's deadline passed while waiting; the request goes on and a retry with the same key gets its result")
            }
            DedupError::ShuttingDown => f.write_str("the server is shutting down: retry with the same key"),
        }
    }
}

impl std::error::Error for DedupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // The status is what this error displays; its own cause comes next in a chain.
            DedupError::Action { status, .. } => std::error::Error::source(status),
            _ => None,
        }
    }
}

impl From<DedupError> for Status {
    fn from(e: DedupError) -> Status {
        e.to_status()
    }
}

/// The error as a tonic handler returns it, by way of [`to_status`](DedupError::to_status):
/// the code, the message, the reason as a `google.rpc.ErrorInfo` and the retry-after as a
/// `RetryInfo` (and as `grpc-retry-pushback-ms`). An action's own failure is its status.
///
/// ```
/// use idem_core::Reason;
/// use idem_dedup::DedupError;
/// use std::time::Duration;
///
/// fn handler() -> Result<tonic::Response<()>, tonic::Status> {
///     Err(DedupError::InFlight { retry_after: Duration::from_millis(100) })?
/// }
/// let status = handler().unwrap_err();
/// assert_eq!(status.code(), tonic::Code::Aborted);
/// // A client reads the ErrorInfo and the RetryInfo back:
/// let read = idem_core::Status::from(status);
/// assert_eq!(read.reason(), Some(&Reason::REQUEST_IN_FLIGHT));
/// assert_eq!(read.retry_after(), Some(Duration::from_millis(100)));
/// ```
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<DedupError> for tonic::Status {
    fn from(e: DedupError) -> tonic::Status {
        tonic::Status::from(e.to_status())
    }
}
