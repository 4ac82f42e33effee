//! The key header: reading the caller's key, sending the call's key.

use idem_core::IdempotencyKey;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// The key header as the caller left it on the request.
pub(crate) enum CallerKey {
    /// No key header.
    Absent,
    /// One valid key, as an RFC 8941 sf-string (`"..."`) or a plain token.
    Valid(IdempotencyKey),
    /// A key the server would refuse: not a valid key, badly quoted, not ASCII, or the header
    /// repeated.
    Malformed,
}

/// The caller's key in `headers[name]`, read as a server's idem layer reads it
/// ([`IdempotencyKey::from_header_value`]): a quoted sf-string without escapes, or the bare key.
pub(crate) fn caller_key(headers: &HeaderMap, name: &HeaderName) -> CallerKey {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return CallerKey::Absent;
    };
    if values.next().is_some() {
        return CallerKey::Malformed;
    }
    IdempotencyKey::from_header_value(value.as_bytes())
        .map_or(CallerKey::Malformed, CallerKey::Valid)
}

/// `key` as the header value every attempt sends: an RFC 8941 sf-string
/// ([`IdempotencyKey::to_header_value`]).
pub(crate) fn header_value(key: &IdempotencyKey) -> Option<HeaderValue> {
    HeaderValue::try_from(key.to_header_value()).ok()
}
