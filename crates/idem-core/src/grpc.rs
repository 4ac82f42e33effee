//! [`Status`] as a `tonic::Status` and back (feature `tonic`), so `?` works in a tonic handler
//! and nothing of the status is lost on the way: code, message, reason, retry-after and source.
//!
//! A gRPC client reads a status in three places, and the conversion fills all three, the way
//! idem's own server layer answers:
//!
//! | part of [`Status`] | `grpc-status-details-bin` (a `google.rpc.Status`) | metadata |
//! |---|---|---|
//! | code, message | the same code and message | `grpc-status`, `grpc-message` |
//! | reason | `ErrorInfo { reason, domain: "idem" }` ([`ERROR_DOMAIN`]) | `idem-reason` |
//! | retry-after | `RetryInfo { retry_delay }` | `grpc-retry-pushback-ms` (whole milliseconds) |
//!
//! The source error, if any, becomes the `tonic::Status`'s source. The other way, a
//! `tonic::Status` from any server becomes a [`Status`] with its code and message, the reason of
//! its `ErrorInfo` (whatever its domain; else its `idem-reason` metadata), the delay of its
//! `RetryInfo` (else its `grpc-retry-pushback-ms`), and the `tonic::Status` itself as the
//! source, so its other details stay readable.
//!
//! # Examples
//!
//! A tonic handler that calls code returning idem's [`Status`]:
//!
//! ```
//! use idem_core::{Code, Reason, Status};
//! use std::time::Duration;
//! use tonic_types::StatusExt;
//!
//! fn reserve(stock: u32) -> Result<u32, Status> {
//!     if stock == 0 {
//!         return Err(Status::new(Code::Unavailable, "the warehouse is not answering")
//!             .with_reason(Reason::UPSTREAM_UNAVAILABLE)
//!             .with_retry_after(Duration::from_millis(250)));
//!     }
//!     Ok(stock - 1)
//! }
//!
//! fn handler(stock: u32) -> Result<tonic::Response<u32>, tonic::Status> {
//!     let left = reserve(stock)?; // idem's Status becomes a tonic::Status
//!     Ok(tonic::Response::new(left))
//! }
//!
//! let status = handler(0).unwrap_err();
//! assert_eq!(status.code(), tonic::Code::Unavailable);
//! assert_eq!(status.message(), "the warehouse is not answering");
//! let details = status.get_error_details();
//! assert_eq!(details.error_info().unwrap().reason, "UPSTREAM_UNAVAILABLE");
//! assert_eq!(details.error_info().unwrap().domain, idem_core::ERROR_DOMAIN);
//! assert_eq!(details.retry_info().unwrap().retry_delay, Some(Duration::from_millis(250)));
//! assert_eq!(status.metadata().get("grpc-retry-pushback-ms").unwrap(), "250");
//!
//! // And back, as a client of that handler would read it.
//! let back = Status::from(status);
//! assert_eq!(back.reason(), Some(&Reason::UPSTREAM_UNAVAILABLE));
//! assert_eq!(back.retry_after(), Some(Duration::from_millis(250)));
//! ```

use std::collections::HashMap;
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic_types::{ErrorDetails, StatusExt};

use crate::{Code, Reason, Status, ERROR_DOMAIN};

/// The metadata key of a status' reason, as text (for clients that do not decode the details).
const REASON_KEY: &str = crate::headers::REASON;
/// The metadata key of gRPC's pushback (gRPC A6): whole milliseconds.
const PUSHBACK_KEY: &str = crate::headers::GRPC_PUSHBACK_MS;

#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<Code> for tonic::Code {
    fn from(code: Code) -> tonic::Code {
        tonic::Code::from_i32(code.as_i32())
    }
}

/// The same code; a number outside the 17 (which tonic keeps as `Unknown` already) is `UNKNOWN`.
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<tonic::Code> for Code {
    fn from(code: tonic::Code) -> Code {
        Code::from_i32(i32::from(code)).unwrap_or(Code::Unknown)
    }
}

/// The status as a tonic handler returns it (see the [table](self)): code and message, the
/// reason as `ErrorInfo` and `idem-reason`, the retry-after as `RetryInfo` and
/// `grpc-retry-pushback-ms`, and the source.
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<&Status> for tonic::Status {
    fn from(status: &Status) -> tonic::Status {
        let mut metadata = MetadataMap::new();
        let mut details = ErrorDetails::new();
        if let Some(reason) = status.reason() {
            // A reason that is not visible ASCII still travels in the ErrorInfo.
            if let Ok(v) = MetadataValue::try_from(reason.as_str()) {
                metadata.insert(REASON_KEY, v);
            }
            details.set_error_info(
                reason.as_str(),
                ERROR_DOMAIN,
                HashMap::<String, String>::new(),
            );
        }
        if let Some(after) = status.retry_after() {
            let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
            metadata.insert(PUSHBACK_KEY, MetadataValue::from(ms));
            details.set_retry_info(Some(after));
        }
        let mut out = tonic::Status::with_error_details_and_metadata(
            status.code().into(),
            status.message(),
            details,
            metadata,
        );
        if let Some(source) = status.shared_source() {
            out.set_source(source.clone());
        }
        out
    }
}

/// As the conversion from `&Status`: the status, by value.
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<Status> for tonic::Status {
    fn from(status: Status) -> tonic::Status {
        tonic::Status::from(&status)
    }
}

/// A status from a tonic client or server: its code and message; the reason of its `ErrorInfo`
/// (any domain), else its `idem-reason` metadata; the delay of its `RetryInfo`, else its
/// `grpc-retry-pushback-ms`; and the `tonic::Status` itself as the source.
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<tonic::Status> for Status {
    fn from(status: tonic::Status) -> Status {
        let details = status.get_error_details();
        let reason = details
            .error_info()
            .map(|info| info.reason.clone())
            .or_else(|| text(status.metadata(), REASON_KEY).map(str::to_owned))
            .filter(|r| !r.is_empty());
        let retry_after = details
            .retry_info()
            .and_then(|info| info.retry_delay)
            .or_else(|| pushback_ms(status.metadata()));
        let mut out = Status::new(status.code().into(), status.message().to_owned());
        if let Some(reason) = reason {
            out = out.with_reason(Reason::new(reason));
        }
        if let Some(after) = retry_after {
            out = out.with_retry_after(after);
        }
        out.with_source(status)
    }
}

fn text<'a>(metadata: &'a MetadataMap, key: &str) -> Option<&'a str> {
    metadata.get(key)?.to_str().ok()
}

/// `grpc-retry-pushback-ms` if it is one non-negative integer (gRPC A6).
fn pushback_ms(metadata: &MetadataMap) -> Option<Duration> {
    let v = text(metadata, PUSHBACK_KEY)?.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().map(Duration::from_millis)
}
