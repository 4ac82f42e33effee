//! What a caller is told about a call: a [`CallReport`] on every response, a [`CallFailed`] error
//! when no response came back.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use idem_core::{Code, IdempotencyKey, Status};
use idem_retry::{GiveUp, RetryError};

use crate::stats::KeySource;

/// The error type of a failed attempt's source.
pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// Put in the extensions of every response the middleware returns: how the call went.
///
/// A response with an HTTP error status (4xx, 5xx) is still a response: the middleware returns
/// the last one, so the caller reads its body (an RFC 9457 problem document, say), and
/// [`gave_up`](Self::gave_up) says why no further attempt was made. A call that got no response
/// at all ends in a [`CallFailed`] error, which carries the same report.
///
/// ```no_run
/// # async fn f(client: reqwest_middleware::ClientWithMiddleware) -> reqwest_middleware::Result<()> {
/// use idem_reqwest::CallReport;
///
/// let response = client.post("http://payments.internal/v1/charges").body("{}").send().await?;
/// let report = CallReport::of(&response).expect("sent through the middleware");
/// println!("{} attempt(s), key {:?}", report.attempts, report.key);
/// if let Some(why) = report.gave_up {
///     println!("{}: {}", response.status(), why.explain());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallReport {
    /// Attempts made, first included.
    pub attempts: u32,
    /// The key every attempt carried, if the call was keyed.
    pub key: Option<IdempotencyKey>,
    /// Where that key came from, if the call was keyed.
    pub key_source: Option<KeySource>,
    /// `None` when the last attempt succeeded (a status below 400); otherwise why the
    /// middleware made no further attempt.
    pub gave_up: Option<GiveUp>,
}

impl CallReport {
    /// The report on a response the middleware returned.
    pub fn of(response: &reqwest::Response) -> Option<&CallReport> {
        response.extensions().get::<CallReport>()
    }
}

/// The error of a call that got no response back: every attempt ended in a transport error or
/// timed out (or the last one did, and no further attempt was allowed). It says why no further
/// attempt was made ([`reason`](Self::reason)), how many were made, the key they carried, and the
/// last failure as a [`Status`]; its [`source`](StdError::source) is the last attempt's error.
///
/// The middleware returns it as [`reqwest_middleware::Error::Middleware`]; get it back with
/// [`CallFailed::of`].
///
/// | last failure | [`code`](Self::code) | [`source`](StdError::source) |
/// |---|---|---|
/// | transport error (connect, reset, a lost answer) | `UNAVAILABLE`, reason `UNKNOWN_OUTCOME` | the [`reqwest_middleware::Error`] ([`reqwest_error`](Self::reqwest_error) has the reqwest one) |
/// | the attempt timed out | `DEADLINE_EXCEEDED` | [`AttemptTimedOut`] |
/// | a middleware after this one failed | `UNKNOWN` | that [`reqwest_middleware::Error`] |
/// | the request could not be built, or its body cannot be sent again | `INVALID_ARGUMENT` | the error, or a [`Status`] saying so |
///
/// # Examples
///
/// ```
/// use idem_reqwest::{CallFailed, RetryMiddleware};
/// use idem_retry::{GiveUp, RetryError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // A port nothing listens on: every attempt is refused.
/// let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
///     .with(RetryMiddleware::new())
///     .build();
///
/// let err = client.get(format!("http://127.0.0.1:{port}/v1/charges/ch_42")).send().await.unwrap_err();
/// let failed = CallFailed::of(&err).unwrap();
/// assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 3)); // a read: retried
/// assert!(failed.reqwest_error().unwrap().is_connect());
///
/// // A write without a key the caller chose gets one, and is retried with it.
/// let err = client.post(format!("http://127.0.0.1:{port}/v1/charges")).send().await.unwrap_err();
/// let failed = CallFailed::of(&err).unwrap();
/// assert_eq!(failed.attempts(), 3);
/// assert!(failed.key().is_some()); // call again with it to join what the server did
/// # }
/// ```
#[derive(Debug)]
pub struct CallFailed {
    /// Why, after how many attempts, and the last failure.
    pub(crate) gave_up: RetryError<Status>,
    pub(crate) report: CallReport,
    pub(crate) source: BoxError,
}

impl CallFailed {
    /// The `CallFailed` inside an error the middleware returned, if it is one.
    pub fn of(error: &reqwest_middleware::Error) -> Option<&CallFailed> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<CallFailed>(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }

    /// Why no further attempt was made: the failure was not retryable (a write without a key, a
    /// body that cannot be sent again), no attempts were left, the deadline left no room, or the
    /// retry budget was spent.
    pub const fn reason(&self) -> GiveUp {
        self.gave_up.reason()
    }

    /// Attempts made, the first one included.
    pub const fn attempts(&self) -> u32 {
        self.report.attempts
    }

    /// The key every attempt carried, if the call was keyed. Call again with it to join or replay
    /// what the server did.
    pub const fn key(&self) -> Option<&IdempotencyKey> {
        self.report.key.as_ref()
    }

    /// Attempts, key and why, as a response's [`CallReport`] has them.
    pub const fn report(&self) -> &CallReport {
        &self.report
    }

    /// The last failure's status code.
    pub fn code(&self) -> Code {
        self.gave_up.error().code()
    }

    /// The last failure: code, message and reason.
    pub const fn status(&self) -> &Status {
        self.gave_up.error()
    }

    /// The reqwest error of the last attempt, if it ended in one.
    pub fn reqwest_error(&self) -> Option<&reqwest::Error> {
        match self.source.downcast_ref::<reqwest_middleware::Error>()? {
            reqwest_middleware::Error::Reqwest(e) => Some(e),
            reqwest_middleware::Error::Middleware(_) => None,
        }
    }
}

/// The retrier's own words: `gave up after 3 attempts (no attempts were left): UNAVAILABLE: ...`.
impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.gave_up, f)
    }
}

impl StdError for CallFailed {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// The source of a [`CallFailed`] whose last attempt timed out.
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

impl StdError for AttemptTimedOut {}
