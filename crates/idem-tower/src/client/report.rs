//! What a caller is told about a call: a [`CallReport`] on every success, and the source of a
//! call whose last HTTP attempt timed out.

use std::fmt;
use std::time::Duration;

use idem_core::IdempotencyKey;

/// Put in the extensions of every successful response the client layer returns: how the call
/// went. A call that failed reports the same through [`CallFailed::report`](crate::CallFailed::report).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallReport {
    /// Attempts made, first included.
    pub attempts: u32,
    /// The key every attempt carried, if the call was keyed.
    pub key: Option<IdempotencyKey>,
}

/// The source of a [`CallFailed`](crate::CallFailed) whose last HTTP attempt timed out (on gRPC the source is a
/// `DEADLINE_EXCEEDED` `tonic::Status` instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTimedOut {
    /// How long the attempt was given.
    pub after: Duration,
}

impl fmt::Display for AttemptTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt timed out after {} ms", self.after.as_millis())
    }
}

impl std::error::Error for AttemptTimedOut {}
