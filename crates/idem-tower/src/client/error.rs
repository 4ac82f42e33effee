//! The error of a call the client layer gave up on.

use std::fmt;

use http::{HeaderMap, Response};
use idem_core::{Code, IdempotencyKey, Status};
use idem_retry::{GiveUp, RetryError};

use crate::body::ReplayBody;
use crate::client::attempt::{AttemptError, Failed};
#[cfg(feature = "grpc")]
use crate::client::pushback::{status_details, GRPC_STATUS_DETAILS};
use crate::client::{AttemptTimedOut, CallReport};
#[cfg(feature = "grpc")]
use crate::headers;
use crate::{BoxError, Protocol};

/// The error [`RetryService`](crate::RetryService) returns when it gave up on a call: why no
/// further attempt was made ([`reason`](Self::reason)), how many were made
/// ([`attempts`](Self::attempts)), the key they carried, the last failure as a [`Status`], and
/// the last response if there was one.
///
/// Every call that does not succeed ends in this error — a gRPC status other than `OK`, an HTTP
/// status outside 2xx, a transport error, an attempt that timed out — so the service's error is a
/// `BoxError` you can downcast to `CallFailed`. A successful response carries a [`CallReport`]
/// instead.
///
/// # Examples
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use idem_core::Code;
/// use idem_retry::GiveUp;
/// use idem_tower::{BoxError, CallFailed, ReplayBody, RetryLayer};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // A gRPC server that is always UNAVAILABLE.
/// let down = tower::service_fn(|_req: http::Request<Full<Bytes>>| async {
///     let mut r = http::Response::new(ReplayBody::empty());
///     r.headers_mut().insert("content-type", "application/grpc".parse().unwrap());
///     r.headers_mut().insert("grpc-status", "14".parse().unwrap());
///     Ok::<_, BoxError>(r)
/// });
/// let request = || {
///     http::Request::post("http://shop/shop.v1.Shop/GetBook")
///         .header("content-type", "application/grpc")
///         .body(Full::new(Bytes::new()))
///         .unwrap()
/// };
/// let client = RetryLayer::new().layer(down);
///
/// let err = client.clone().oneshot(request()).await.unwrap_err();
/// let failed = err.downcast_ref::<CallFailed>().unwrap();
/// assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 3));
/// assert_eq!(failed.code(), Code::Unavailable);
///
/// // What a tonic client over the layer sees: the server's status, the give-up as its source.
/// let status = tonic::Status::from_error(client.oneshot(request()).await.unwrap_err());
/// assert_eq!(status.code(), tonic::Code::Unavailable);
/// let failed = std::error::Error::source(&status)
///     .and_then(|e| e.downcast_ref::<CallFailed>())
///     .unwrap();
/// assert_eq!(failed.attempts(), 3);
/// # }
/// ```
///
/// # Source
///
/// tonic turns the error into a `tonic::Status` by the first status it finds in the source chain,
/// so for gRPC it sees the server's own code, message, details and metadata, as without the layer,
/// and keeps the `CallFailed` as the status's source.
///
/// | last failure | [`source`](std::error::Error::source) | [`response`](Self::response) |
/// |---|---|---|
/// | gRPC status | the server's `tonic::Status` | the response |
/// | HTTP status | the [`Status`] read from it | the response (its problem document, say) |
/// | gRPC transport error (an unknown outcome) | an `UNAVAILABLE` `tonic::Status` with reason `UNKNOWN_OUTCOME` (its `ErrorInfo`), whose source is the transport error | none |
/// | HTTP transport error | the transport error | none |
/// | gRPC attempt timed out | a `DEADLINE_EXCEEDED` `tonic::Status` | none |
/// | HTTP attempt timed out | [`AttemptTimedOut`](crate::AttemptTimedOut) | none |
#[derive(Debug)]
pub struct CallFailed {
    /// Why, after how many attempts, and the last failure.
    gave_up: RetryError<Status>,
    report: CallReport,
    response: Option<Box<Response<ReplayBody>>>,
    source: BoxError,
}

impl CallFailed {
    /// The error of a call given up on: the last failure, why, and the report.
    pub(super) fn from_give_up(
        protocol: Protocol,
        report: CallReport,
        gave_up: RetryError<AttemptError>,
    ) -> Self {
        let (reason, attempts) = (gave_up.reason(), gave_up.attempts());
        let AttemptError {
            status, outcome, ..
        } = gave_up.into_error();
        let (response, source): (_, BoxError) = match outcome {
            Failed::Response(r, Some(grpc)) => (Some(r), Box::new(grpc)),
            Failed::Response(r, None) => (Some(r), Box::new(status.clone())),
            Failed::Transport(e) => (None, transport_source(protocol, &status, e)),
            Failed::Timeout(after) => match protocol {
                Protocol::Grpc => (None, Box::new(grpc_status(&status))),
                Protocol::Http => (None, Box::new(AttemptTimedOut { after })),
            },
        };
        CallFailed {
            gave_up: RetryError::new(reason, attempts, status),
            report,
            response,
            source,
        }
    }

    /// Why no further attempt was made: the failure was not retryable, no attempts were left, the
    /// deadline left no room, the retry budget was spent, or the server's pushback said not to
    /// retry.
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

    /// The attempts and the key, as a success's [`CallReport`] has them.
    pub const fn report(&self) -> &CallReport {
        &self.report
    }

    /// The last failure's status code.
    pub fn code(&self) -> Code {
        self.gave_up.error().code()
    }

    /// The last failure: code, message, `idem-reason` and retry-after. A transport error is
    /// `UNAVAILABLE` with reason `UNKNOWN_OUTCOME`; an attempt timeout is `DEADLINE_EXCEEDED`.
    pub const fn status(&self) -> &Status {
        self.gave_up.error()
    }

    /// The last attempt's response, if the server answered.
    pub fn response(&self) -> Option<&Response<ReplayBody>> {
        self.response.as_deref()
    }

    /// The last attempt's response, by value, if the server answered.
    pub fn into_response(self) -> Option<Response<ReplayBody>> {
        self.response.map(|r| *r)
    }
}

/// The retrier's own words: `gave up after 3 attempts (no attempts were left): UNAVAILABLE: ...`.
impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.gave_up, f)
    }
}

impl std::error::Error for CallFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// The status a gRPC client reads: `tonic::Status` with feature `grpc`, else idem's own.
#[cfg(feature = "grpc")]
pub(crate) type GrpcStatus = tonic::Status;
/// The status a gRPC client reads: `tonic::Status` with feature `grpc`, else idem's own.
#[cfg(not(feature = "grpc"))]
pub(crate) type GrpcStatus = Status;

/// Without tonic: the status itself.
#[cfg(not(feature = "grpc"))]
pub(crate) fn tonic_status(
    _headers: &HeaderMap,
    _trailers: Option<&HeaderMap>,
    status: &Status,
) -> GrpcStatus {
    status.clone()
}

/// Without tonic: the status itself.
#[cfg(not(feature = "grpc"))]
fn grpc_status(status: &Status) -> GrpcStatus {
    status.clone()
}

/// Without tonic there is no `tonic::Status` to find: the transport error itself.
#[cfg(not(feature = "grpc"))]
fn transport_source(_protocol: Protocol, _status: &Status, e: BoxError) -> BoxError {
    e
}

/// The source of a give-up after a transport error. On gRPC: the `UNAVAILABLE` /
/// `UNKNOWN_OUTCOME` `tonic::Status` (with its `ErrorInfo`), whose source is the transport error,
/// so that tonic, which turns a service's error into the first `tonic::Status` of its source
/// chain, tells the caller to retry with the same key, rather than mapping the transport error
/// itself to `INTERNAL` (an HTTP/2 reset) or `UNKNOWN`, which read as "it did not run". On HTTP:
/// the transport error.
#[cfg(feature = "grpc")]
fn transport_source(protocol: Protocol, status: &Status, e: BoxError) -> BoxError {
    match protocol {
        Protocol::Grpc => {
            let mut grpc = grpc_status(status);
            grpc.set_source(std::sync::Arc::from(e));
            Box::new(grpc)
        }
        Protocol::Http => e,
    }
}

/// The `tonic::Status` a tonic client would have read from this failed gRPC response: code,
/// message, details and metadata from the trailers (or the headers of a trailers-only response),
/// else `status` converted. Details that are not base64 are dropped rather than handed to tonic,
/// which would panic on them.
#[cfg(feature = "grpc")]
pub(crate) fn tonic_status(
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    status: &Status,
) -> tonic::Status {
    let map = trailers
        .filter(|t| t.contains_key(headers::GRPC_STATUS))
        .unwrap_or(headers);
    let mut map = map.clone();
    if map
        .get(GRPC_STATUS_DETAILS)
        .is_some_and(|v| status_details(v).is_none())
    {
        map.remove(GRPC_STATUS_DETAILS);
    }
    tonic::Status::from_header_map(&map).unwrap_or_else(|| grpc_status(status))
}

/// `status` as a `tonic::Status`: code, message, reason (`ErrorInfo`), retry-after (`RetryInfo`).
#[cfg(feature = "grpc")]
fn grpc_status(status: &Status) -> tonic::Status {
    tonic::Status::from(status)
}
