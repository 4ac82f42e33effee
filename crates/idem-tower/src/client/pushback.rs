//! What a failed gRPC response says about retrying it.
//!
//! Two places carry a server's pushback:
//!
//! 1. `grpc-retry-pushback-ms` (gRPC A6): one non-negative integer of milliseconds means "retry
//!    after exactly this long"; a negative or malformed value, or more than one value, means "do
//!    not retry".
//! 2. `RetryInfo.retry_delay` inside the `google.rpc.Status` of `grpc-status-details-bin`
//!    (decoded by `tonic-types`), which Google APIs and our own server layer send.
//!
//! When both are present the `grpc-retry-pushback-ms` header wins, malformed or not: it is the
//! one gRPC A6 defines for retries. Undecodable details, or a `RetryInfo` without a delay, are no
//! pushback (the policy's backoff applies); they never forbid a retry.

use std::time::Duration;

#[cfg(feature = "grpc")]
use http::HeaderName;
use http::{HeaderMap, HeaderValue};
use idem_core::Status;

use crate::headers;

/// The binary `google.rpc.Status` of a gRPC error: `grpc-status-details-bin`.
#[cfg(feature = "grpc")]
pub(crate) const GRPC_STATUS_DETAILS: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");

/// A server's pushback on one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// None given: the policy's backoff applies.
    None,
    /// Retry after exactly this long.
    After(Duration),
    /// Do not retry.
    Stop,
}

impl Pushback {
    /// The pushback of a gRPC response with these headers and trailers (trailers-only responses
    /// carry it in the headers).
    pub(crate) fn of_grpc(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Pushback {
        let mut values = trailers
            .into_iter()
            .flat_map(|t| t.get_all(headers::GRPC_PUSHBACK_MS))
            .chain(headers.get_all(headers::GRPC_PUSHBACK_MS));
        match (values.next(), values.next()) {
            (None, _) => retry_info(headers, trailers).map_or(Pushback::None, Pushback::After),
            (Some(v), None) => parse_pushback_ms(v).map_or(Pushback::Stop, |ms| {
                Pushback::After(Duration::from_millis(ms))
            }),
            // Repeated: gRPC A6 reads it as malformed.
            (Some(_), Some(_)) => Pushback::Stop,
        }
    }

    /// `status` with its retry-after set to this pushback's delay, and only that
    /// (`response_status` reads the first `grpc-retry-pushback-ms` only, and no `RetryInfo`).
    pub(crate) fn apply_to(self, status: Status) -> Status {
        let mut s = Status::new(status.code(), status.message().to_owned());
        if let Some(r) = status.reason() {
            s = s.with_reason(r.clone());
        }
        match self {
            Pushback::After(d) => s.with_retry_after(d),
            Pushback::None | Pushback::Stop => s,
        }
    }
}

/// A non-negative integer of milliseconds (ASCII digits, surrounding whitespace allowed), as gRPC
/// A6 requires; `None` for anything else (`-1`, `xxx`, empty, `1.5`, a number past `u64`).
fn parse_pushback_ms(v: &HeaderValue) -> Option<u64> {
    let s = v.to_str().ok()?.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Without tonic-types (feature `grpc` off) `RetryInfo` is not read.
#[cfg(not(feature = "grpc"))]
fn retry_info(_headers: &HeaderMap, _trailers: Option<&HeaderMap>) -> Option<Duration> {
    None
}

/// `RetryInfo.retry_delay` from `grpc-status-details-bin`, if it is there and decodes.
#[cfg(feature = "grpc")]
fn retry_info(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Option<Duration> {
    let raw = trailers
        .and_then(|t| t.get(GRPC_STATUS_DETAILS))
        .or_else(|| headers.get(GRPC_STATUS_DETAILS))?;
    let details = status_details(raw)?;
    use tonic_types::StatusExt;
    tonic::Status::with_details(tonic::Code::Unknown, "", details)
        .get_details_retry_info()?
        .retry_delay
}

/// The bytes of a `grpc-status-details-bin` value (base64, padded or not), or `None` if it is not
/// base64. Unlike `tonic::Status::from_header_map`, never panics on a bad value.
#[cfg(feature = "grpc")]
pub(crate) fn status_details(raw: &HeaderValue) -> Option<bytes::Bytes> {
    let mut one = HeaderMap::with_capacity(1);
    one.insert(GRPC_STATUS_DETAILS, raw.clone());
    tonic::metadata::MetadataMap::from_headers(one)
        .get_bin(GRPC_STATUS_DETAILS.as_str())?
        .to_bytes()
        .ok()
}
