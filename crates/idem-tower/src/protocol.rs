//! gRPC or plain HTTP: how a request is recognised and how its outcome is read.

use std::time::Duration;

use http::HeaderMap;
use idem_core::{Code, Reason, Status};

use crate::headers;

/// Which wire protocol a request speaks. Decided by its `content-type`: `application/grpc` (with
/// any `+proto`/`+json` suffix) is gRPC, anything else is HTTP.
///
/// ```
/// use idem_tower::Protocol;
/// let mut h = http::HeaderMap::new();
/// h.insert("content-type", "application/grpc+proto".parse().unwrap());
/// assert_eq!(Protocol::of(&h), Protocol::Grpc);
/// h.insert("content-type", "application/json".parse().unwrap());
/// assert_eq!(Protocol::of(&h), Protocol::Http);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// gRPC over HTTP/2: errors are `grpc-status` trailers.
    Grpc,
    /// Plain HTTP: errors are HTTP statuses with a `application/problem+json` body.
    Http,
}

impl Protocol {
    /// The protocol of a request with these headers.
    pub fn of(headers: &HeaderMap) -> Protocol {
        match headers.get(http::header::CONTENT_TYPE) {
            Some(ct) if ct.as_bytes().starts_with(b"application/grpc") => Protocol::Grpc,
            _ => Protocol::Http,
        }
    }
}

/// The gRPC status code of a response: `grpc-status` in the trailers, or in the headers of a
/// trailers-only response. A response with neither is `UNKNOWN` (as gRPC clients treat it).
pub(crate) fn grpc_code(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Code {
    let raw = trailers
        .and_then(|t| t.get(headers::GRPC_STATUS))
        .or_else(|| headers.get(headers::GRPC_STATUS));
    raw.and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<i32>().ok())
        .and_then(Code::from_i32)
        .unwrap_or(Code::Unknown)
}

/// A response's outcome code alone: what deciding whether to store it needs, without the
/// message and the rest that [`response_status`] reads (and formats).
pub(crate) fn response_code(
    protocol: Protocol,
    http_status: u16,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
) -> Code {
    match protocol {
        Protocol::Grpc if http_status == 200 => grpc_code(headers, trailers),
        // A gRPC call answered with a non-200 HTTP status (a proxy, say): map it as gRPC does.
        Protocol::Grpc => grpc_code_from_http(http_status),
        Protocol::Http => Code::from_http_status(http_status),
    }
}

/// Reads a response's outcome as a [`Status`]: code, reason (`idem-reason`), message
/// (`grpc-message`) and retry-after (`grpc-retry-pushback-ms` or `Retry-After`).
pub(crate) fn response_status(
    protocol: Protocol,
    http_status: u16,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
) -> Status {
    let get = |name: &http::HeaderName| {
        trailers
            .and_then(|t| t.get(name))
            .or_else(|| headers.get(name))
            .and_then(|v| v.to_str().ok())
    };
    if protocol == Protocol::Http {
        return idem_retry::status_from_http(
            http_status,
            get(&headers::REASON),
            get(&headers::RETRY_AFTER),
        );
    }
    let code = response_code(protocol, http_status, headers, trailers);
    let message = match http_status {
        200 => trailers
            .and_then(grpc_message)
            .or_else(|| grpc_message(headers))
            .unwrap_or_default(),
        _ => format!("HTTP {http_status}"),
    };
    let mut status = Status::new(code, message);
    if let Some(r) = get(&headers::REASON) {
        status = status.with_reason(Reason::new(r.to_owned()));
    }
    let pushback = get(&headers::GRPC_PUSHBACK_MS)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis);
    if let Some(after) = pushback {
        status = status.with_retry_after(after);
    }
    status
}

/// The percent-decoded `grpc-message` of a map that has a `grpc-status` (gRPC's HTTP/2 protocol:
/// bytes outside printable ASCII, and `%`, travel as `%XX`; an undecodable sequence is kept as
/// sent, as gRPC's own implementations do).
fn grpc_message(map: &HeaderMap) -> Option<String> {
    map.get(headers::GRPC_STATUS)?;
    let raw = map.get("grpc-message").map_or(&b""[..], |v| v.as_bytes());
    Some(percent_decode(raw))
}

/// gRPC's percent-decoding of `grpc-message`.
pub(crate) fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// gRPC's percent-encoding of `grpc-message`: printable ASCII but `%` as is, every other byte of
/// the UTF-8 text as `%XX` (used when tonic, which does it otherwise, is not compiled in).
#[cfg_attr(feature = "grpc", allow(dead_code))]
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// gRPC's mapping of HTTP statuses seen instead of a gRPC response.
fn grpc_code_from_http(status: u16) -> Code {
    match status {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

#[cfg(test)]
mod percent_tests {
    use super::*;

    #[test]
    fn grpc_message_percent_coding_round_trips() {
        for text in [
            "plain",
            "100% sure",
            "caf\u{e9} \u{2014} ok",
            "line\nbreak",
            "%zz",
        ] {
            assert_eq!(percent_decode(percent_encode(text).as_bytes()), text);
        }
        assert_eq!(percent_encode("a%b\n"), "a%25b%0A");
        // A bad sequence is kept as sent.
        assert_eq!(percent_decode(b"50%"), "50%");
        assert_eq!(percent_decode(b"%G1x"), "%G1x");
    }
}
