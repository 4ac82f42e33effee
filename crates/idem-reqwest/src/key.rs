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

/// The caller's key in `headers[name]`. The same forms a server's idem layer accepts: a quoted
/// sf-string without escapes, or the bare key.
pub(crate) fn caller_key(headers: &HeaderMap, name: &HeaderName) -> CallerKey {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return CallerKey::Absent;
    };
    if values.next().is_some() {
        return CallerKey::Malformed;
    }
    let Ok(text) = value.to_str() else {
        return CallerKey::Malformed;
    };
    let inner = match text.strip_prefix('"') {
        Some(rest) => match rest.strip_suffix('"') {
            // Escapes (\" and \\) are legal in sf-strings but never in a key.
            Some(inner) if !inner.contains(['"', '\\']) => inner,
            _ => return CallerKey::Malformed,
        },
        None => text,
    };
    IdempotencyKey::parse(inner).map_or(CallerKey::Malformed, CallerKey::Valid)
}

/// `key` as the header value every attempt sends: an RFC 8941 sf-string, the form the IETF
/// Idempotency-Key draft gives (a key's characters never need escaping).
pub(crate) fn header_value(key: &IdempotencyKey) -> Option<HeaderValue> {
    HeaderValue::try_from(format!("\"{}\"", key.as_str())).ok()
}
