//! Reason codes: the machine-readable "why" next to a status code.

use std::borrow::Cow;
use std::fmt;

/// The `google.rpc.ErrorInfo.domain` under which idem's reasons travel on gRPC: `idem`. Every
/// error idem's server layer answers itself carries it, and so does a [`Status`](crate::Status)
/// converted to a `tonic::Status` (feature `tonic`).
pub const ERROR_DOMAIN: &str = "idem";

/// A machine-readable reason (an `UPPER_SNAKE` word, as in `google.rpc.ErrorInfo.reason`) that
/// refines a [`Code`](crate::Code). Classification reads both: `UNAVAILABLE` with
/// [`UPSTREAM_UNAVAILABLE`](Reason::UPSTREAM_UNAVAILABLE) is worth a retry, `ABORTED` with
/// [`STOCK_CONFLICT`](Reason::STOCK_CONFLICT) only after a refresh.
///
/// ```
/// use idem_core::Reason;
/// assert_eq!(Reason::RATE_LIMITED.as_str(), "RATE_LIMITED");
/// assert_eq!(Reason::new("OUT_OF_PAPER"), Reason::new(String::from("OUT_OF_PAPER")));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reason(Cow<'static, str>);

impl Reason {
    /// A dependency of the server is down (retryable).
    pub const UPSTREAM_UNAVAILABLE: Reason = Reason(Cow::Borrowed("UPSTREAM_UNAVAILABLE"));
    /// The caller is over a rate limit; wait the retry-after.
    pub const RATE_LIMITED: Reason = Reason(Cow::Borrowed("RATE_LIMITED"));
    /// A versioned write lost a race; re-read, then retry with the new version.
    pub const STOCK_CONFLICT: Reason = Reason(Cow::Borrowed("STOCK_CONFLICT"));
    /// The same idempotency key came with another request fingerprint.
    pub const IDEMPOTENCY_CONFLICT: Reason = Reason(Cow::Borrowed("IDEMPOTENCY_CONFLICT"));
    /// A duplicate arrived while the first request was running, under the Reject policy.
    pub const REQUEST_IN_FLIGHT: Reason = Reason(Cow::Borrowed("REQUEST_IN_FLIGHT"));
    /// The dedup engine is full.
    pub const ENGINE_FULL: Reason = Reason(Cow::Borrowed("ENGINE_FULL"));
    /// A run passed its in-flight lease and was cancelled.
    pub const LEASE_EXPIRED: Reason = Reason(Cow::Borrowed("LEASE_EXPIRED"));
    /// The engine is shutting down.
    pub const SHUTTING_DOWN: Reason = Reason(Cow::Borrowed("SHUTTING_DOWN"));
    /// The action panicked.
    pub const ACTION_PANICKED: Reason = Reason(Cow::Borrowed("ACTION_PANICKED"));
    /// The idempotency key broke its rule: 8 to 64 characters of `A-Z a-z 0-9 _ -`.
    pub const INVALID_IDEMPOTENCY_KEY: Reason = Reason(Cow::Borrowed("INVALID_IDEMPOTENCY_KEY"));
    /// The scope around a valid key is refused: the tenant or the method (request path) is empty
    /// or over its length limit.
    pub const INVALID_SCOPE: Reason = Reason(Cow::Borrowed("INVALID_SCOPE"));
    /// A write came without an idempotency key.
    pub const MISSING_IDEMPOTENCY_KEY: Reason = Reason(Cow::Borrowed("MISSING_IDEMPOTENCY_KEY"));
    /// The connection was lost after the request was sent: the outcome is unknown.
    pub const UNKNOWN_OUTCOME: Reason = Reason(Cow::Borrowed("UNKNOWN_OUTCOME"));
    /// The request ran once, but its response was too large for the server to store, so a
    /// duplicate cannot be given it; the duplicate gets this instead of a second run.
    pub const RESPONSE_NOT_STORED: Reason = Reason(Cow::Borrowed("RESPONSE_NOT_STORED"));
    /// A holder's claim on a shared tier was taken over by a later claim (its lease lapsed and
    /// another run holds a higher fencing token): its result was not stored.
    pub const FENCED_OUT: Reason = Reason(Cow::Borrowed("FENCED_OUT"));
    /// The run a caller waited for ended without a result (its leader went away before starting,
    /// or the scope was forgotten); retry with the same key.
    pub const RUN_ABANDONED: Reason = Reason(Cow::Borrowed("RUN_ABANDONED"));
    /// A new scope was refused because its tenant holds its whole share of the engine; other
    /// tenants are still served. Retry after the hint.
    pub const TENANT_QUOTA_EXCEEDED: Reason = Reason(Cow::Borrowed("TENANT_QUOTA_EXCEEDED"));
    /// A write came without the tenant its server needs (the header a gateway sets is missing,
    /// empty or repeated).
    pub const MISSING_TENANT: Reason = Reason(Cow::Borrowed("MISSING_TENANT"));
    /// The request body is over the server's limit and was refused unread; never retried.
    pub const REQUEST_TOO_LARGE: Reason = Reason(Cow::Borrowed("REQUEST_TOO_LARGE"));

    /// A reason from any text (conventionally `UPPER_SNAKE`).
    pub fn new(s: impl Into<Cow<'static, str>>) -> Self {
        Reason(s.into())
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reason({})", self.0)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
