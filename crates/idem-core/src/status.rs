//! A status error: code + reason + message + retry hint.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{Code, Reason};

/// An error with a gRPC [`Code`], an optional [`Reason`], a human message and an optional
/// server-suggested retry delay.
///
/// Actions run by the dedup engine return `Result<V, Status>`: the code decides whether a failure
/// may be cached and whether a client may retry it. Cloning is cheap; the
/// optional source error is shared.
///
/// ```
/// use idem_core::{Code, Reason, Status};
/// use std::time::Duration;
///
/// let s = Status::new(Code::ResourceExhausted, "slow down")
///     .with_reason(Reason::RATE_LIMITED)
///     .with_retry_after(Duration::from_millis(250));
/// assert_eq!(s.code(), Code::ResourceExhausted);
/// assert_eq!(s.retry_after(), Some(Duration::from_millis(250)));
/// assert_eq!(s.to_string(), "RESOURCE_EXHAUSTED (RATE_LIMITED): slow down");
/// ```
#[derive(Clone)]
pub struct Status {
    code: Code,
    reason: Option<Reason>,
    message: Cow<'static, str>,
    retry_after: Option<Duration>,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Status {
    /// A status with a code and a message.
    pub fn new(code: Code, message: impl Into<Cow<'static, str>>) -> Self {
        Status {
            code,
            reason: None,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// Adds a reason.
    #[must_use]
    pub fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// Adds a retry-after hint (RetryInfo, `grpc-retry-pushback-ms`, `Retry-After`).
    #[must_use]
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Attaches the underlying error.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reason, if any.
    pub fn reason(&self) -> Option<&Reason> {
        self.reason.as_ref()
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The server's retry-after hint, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The source error as shared, for conversions that keep it (a `tonic::Status`'s source).
    #[cfg(feature = "tonic")]
    pub(crate) fn shared_source(
        &self,
    ) -> Option<&Arc<dyn std::error::Error + Send + Sync + 'static>> {
        self.source.as_ref()
    }
}

impl PartialEq for Status {
    /// Two statuses are equal when code, reason, message and retry hint are; sources are ignored.
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
            && self.reason == other.reason
            && self.message == other.message
            && self.retry_after == other.retry_after
    }
}

impl Eq for Status {}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Status");
        d.field("code", &self.code);
        if let Some(r) = &self.reason {
            d.field("reason", r);
        }
        d.field("message", &self.message);
        if let Some(r) = &self.retry_after {
            d.field("retry_after", r);
        }
        if let Some(s) = &self.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Some(r) => write!(f, "{} ({}): {}", self.code, r, self.message),
            None => write!(f, "{}: {}", self.code, self.message),
        }
    }
}

impl std::error::Error for Status {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<crate::KeyError> for Status {
    fn from(e: crate::KeyError) -> Self {
        Status::new(Code::InvalidArgument, e.to_string())
            .with_reason(Reason::INVALID_IDEMPOTENCY_KEY)
    }
}

/// A key error keeps [`Reason::INVALID_IDEMPOTENCY_KEY`]; a tenant or method over its limit is
/// [`Reason::INVALID_SCOPE`], so a client is never told its valid key is the problem.
impl From<crate::ScopeError> for Status {
    fn from(e: crate::ScopeError) -> Self {
        let reason = match e {
            crate::ScopeError::Key(_) => Reason::INVALID_IDEMPOTENCY_KEY,
            _ => Reason::INVALID_SCOPE,
        };
        Status::new(Code::InvalidArgument, e.to_string()).with_reason(reason)
    }
}
