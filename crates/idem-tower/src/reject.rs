//! Errors the server layer answers itself, as gRPC statuses or HTTP problem+json.

use http::{HeaderValue, Response, StatusCode};
use idem_core::{Code, Status};

use crate::body::ReplayBody;
use crate::{headers, Protocol};

/// An error response the way the server layer answers its own refusals, for middleware of your
/// own that must answer like it: on gRPC a trailers-only response whose
/// `grpc-status-details-bin` (with feature `grpc`, the default) carries a `google.rpc.Status` with `ErrorInfo` (the status' reason,
/// domain [`ERROR_DOMAIN`](idem_core::ERROR_DOMAIN)) and `RetryInfo` (its retry-after); on HTTP an RFC 9457
/// `application/problem+json` document with `Retry-After`.
///
/// ```
/// use idem_core::{Code, Reason, Status};
/// use idem_tower::wire::error_response;
/// use idem_tower::Protocol;
/// let status = Status::new(Code::ResourceExhausted, "slow down").with_reason(Reason::RATE_LIMITED);
/// let http = error_response(Protocol::Http, &status);
/// assert_eq!(http.status(), 429);
/// assert_eq!(http.headers()["content-type"], "application/problem+json");
/// let grpc = error_response(Protocol::Grpc, &status);
/// assert_eq!(grpc.headers()["grpc-status"], "8");
/// # #[cfg(feature = "grpc")]
/// assert!(grpc.headers().contains_key("grpc-status-details-bin"));
/// ```
pub fn error_response(protocol: Protocol, status: &Status) -> Response<ReplayBody> {
    render(protocol, status, None)
}

/// Renders `status` for `protocol`.
///
/// gRPC: a trailers-only response (`grpc-status`, `grpc-message` naming the rule, `idem-reason`,
/// `grpc-retry-pushback-ms`). HTTP: `http` (or the code's HTTP status), `Retry-After` in whole
/// seconds rounded up, `idem-reason`, and an RFC 9457 `application/problem+json` body.
pub(crate) fn render(
    protocol: Protocol,
    status: &Status,
    http: Option<StatusCode>,
) -> Response<ReplayBody> {
    match protocol {
        Protocol::Grpc => grpc(status),
        Protocol::Http => problem(status, http),
    }
}

/// Without tonic (feature `grpc` off): the same trailers-only response, minus the details.
#[cfg(not(feature = "grpc"))]
fn grpc(status: &Status) -> Response<ReplayBody> {
    let mut r = Response::new(ReplayBody::empty());
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(
        headers::GRPC_STATUS,
        HeaderValue::from(status.code().as_i32()),
    );
    if let Ok(v) = HeaderValue::from_str(&crate::protocol::percent_encode(status.message())) {
        h.insert("grpc-message", v);
    }
    if let Some(reason) = status.reason() {
        if let Ok(v) = HeaderValue::from_str(reason.as_str()) {
            h.insert(headers::REASON, v);
        }
    }
    if let Some(after) = status.retry_after() {
        h.insert(
            headers::GRPC_PUSHBACK_MS,
            HeaderValue::from(after.as_millis() as u64),
        );
    }
    r
}

/// With tonic: idem-core's conversion (code, message, `idem-reason`, `grpc-retry-pushback-ms`,
/// and `grpc-status-details-bin` with the `ErrorInfo` and `RetryInfo`), as a trailers-only
/// response.
#[cfg(feature = "grpc")]
fn grpc(status: &Status) -> Response<ReplayBody> {
    let mut r = tonic::Status::from(status).into_http::<ReplayBody>();
    r.extensions_mut().clear();
    r
}

fn problem(status: &Status, http: Option<StatusCode>) -> Response<ReplayBody> {
    let code = status.code();
    let http = http
        .or_else(|| StatusCode::from_u16(code.http_status()).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = status
        .reason()
        .map(|r| r.as_str().to_ascii_lowercase().replace('_', "-"))
        .unwrap_or_else(|| code.as_str().to_ascii_lowercase().replace('_', "-"));
    let mut body = String::with_capacity(160 + status.message().len());
    body.push_str("{\"type\":\"urn:idem:problem:");
    body.push_str(&kind);
    body.push_str("\",\"title\":\"");
    escape(&mut body, http.canonical_reason().unwrap_or("Error"));
    body.push_str("\",\"status\":");
    body.push_str(http.as_str());
    body.push_str(",\"detail\":\"");
    escape(&mut body, status.message());
    body.push_str("\",\"code\":\"");
    body.push_str(code.as_str());
    body.push('"');
    if let Some(reason) = status.reason() {
        body.push_str(",\"reason\":\"");
        escape(&mut body, reason.as_str());
        body.push('"');
    }
    body.push('}');

    let mut r = Response::new(ReplayBody::new(body.into(), None));
    *r.status_mut() = http;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(reason) = status.reason() {
        if let Ok(v) = HeaderValue::from_str(reason.as_str()) {
            h.insert(headers::REASON, v);
        }
    }
    if let Some(after) = status.retry_after() {
        let secs = after.as_millis().div_ceil(1000).max(1);
        h.insert(headers::RETRY_AFTER, HeaderValue::from(secs as u64));
    }
    r
}

/// JSON string escaping (RFC 8259 §7).
fn escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

/// The status of a request refused for its size; never retried (INVALID_ARGUMENT), 413 on HTTP.
pub(crate) fn too_large(limit: usize) -> (Status, Option<StatusCode>) {
    (
        Status::new(
            Code::InvalidArgument,
            format!("the request body is over the limit of {limit} bytes; it was refused unread"),
        )
        .with_reason(idem_core::Reason::REQUEST_TOO_LARGE),
        Some(StatusCode::PAYLOAD_TOO_LARGE),
    )
}
