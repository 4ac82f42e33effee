//! One attempt's outcome, read as the retrier classifies it.

use std::time::Duration;

use idem_core::headers::REASON;
use idem_core::{Code, Reason, Status};
use idem_retry::{Classify, Failure};
use reqwest::header::RETRY_AFTER;

/// A failed attempt: its status, the kind counted for retries, and what came back.
pub(crate) struct AttemptError {
    pub(crate) status: Status,
    pub(crate) kind: Failure,
    pub(crate) outcome: Failed,
}

pub(crate) enum Failed {
    /// The server answered with an error status.
    Response(Box<reqwest::Response>),
    /// No answer: a transport error, or an error from a middleware after this one.
    Error(reqwest_middleware::Error),
    /// The attempt's time ran out.
    Timeout(Duration),
    /// The body could not be sent again (a stream): never reached once the call is unretryable.
    NotResendable,
}

impl Classify for AttemptError {
    fn code(&self) -> Code {
        self.status.code()
    }
    fn reason(&self) -> Option<&Reason> {
        self.status.reason()
    }
    fn retry_after(&self) -> Option<Duration> {
        self.status.retry_after()
    }
}

/// A response: `Ok` for a status below 400 (1xx–3xx are answers, not failures), else the failure
/// it stands for: the code of its HTTP status, its `idem-reason`, and its `Retry-After` as
/// pushback.
pub(crate) fn response(response: reqwest::Response) -> Result<reqwest::Response, AttemptError> {
    let http = response.status().as_u16();
    if http < 400 {
        return Ok(response);
    }
    let headers = response.headers();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let status = idem_retry::status_from_http(http, header(REASON), header(RETRY_AFTER.as_str()));
    Err(AttemptError {
        kind: Failure::from_code(status.code()),
        status,
        outcome: Failed::Response(Box::new(response)),
    })
}

/// An attempt that ended in an error instead of a response.
///
/// A reqwest error is a transport error unless the request could not even be built: it may or
/// may not have reached the server, so it is `UNAVAILABLE` with reason `UNKNOWN_OUTCOME`, retried
/// only for keyed or idempotent calls. An error from a middleware after this one is `UNKNOWN`,
/// not retried: nothing says it is transient.
pub(crate) fn error(e: reqwest_middleware::Error) -> AttemptError {
    let (status, kind) = match &e {
        reqwest_middleware::Error::Reqwest(re) if re.is_builder() => (
            Status::new(
                Code::InvalidArgument,
                format!("the request could not be built: {re}"),
            ),
            Failure::Other,
        ),
        reqwest_middleware::Error::Reqwest(re) => (
            Status::new(Code::Unavailable, format!("transport error: {re}"))
                .with_reason(Reason::UNKNOWN_OUTCOME),
            Failure::Transport,
        ),
        reqwest_middleware::Error::Middleware(me) => (
            Status::new(Code::Unknown, format!("a later middleware failed: {me}")),
            Failure::Other,
        ),
    };
    AttemptError {
        status,
        kind,
        outcome: Failed::Error(e),
    }
}

/// An attempt that ran past `after`.
pub(crate) fn timeout(after: Duration) -> AttemptError {
    AttemptError {
        status: Status::new(
            Code::DeadlineExceeded,
            format!(
                "attempt timed out after {} ms (client deadline)",
                after.as_millis()
            ),
        ),
        kind: Failure::Timeout,
        outcome: Failed::Timeout(after),
    }
}

/// A retry of a request whose body is a stream: it cannot be sent again.
pub(crate) fn not_resendable() -> AttemptError {
    AttemptError {
        status: Status::new(
            Code::InvalidArgument,
            "the request body is a stream, which cannot be sent a second time",
        ),
        kind: Failure::Other,
        outcome: Failed::NotResendable,
    }
}
