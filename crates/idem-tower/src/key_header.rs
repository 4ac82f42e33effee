//! Reading the idempotency key from a request header (T2).

use std::fmt;

use http::{HeaderMap, HeaderName};
use idem_core::{IdempotencyKey, KeyError};

/// Why a key header was refused; each names the rule (T2, K1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyHeaderError {
    /// The header appeared more than once.
    Repeated,
    /// The value is not visible ASCII.
    NotAscii,
    /// A `"`-quoted value that is not a plain RFC 8941 sf-string of key characters.
    BadQuoting,
    /// The key itself broke K1.
    Key(KeyError),
}

impl fmt::Display for KeyHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyHeaderError::Repeated => {
                f.write_str("the idempotency key header was sent more than once: send exactly one")
            }
            KeyHeaderError::NotAscii => {
                f.write_str("the idempotency key header must be visible ASCII")
            }
            KeyHeaderError::BadQuoting => f.write_str(
                "the idempotency key header must be a quoted string (\"...\", RFC 8941) or a bare key",
            ),
            KeyHeaderError::Key(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for KeyHeaderError {}

/// Reads the key from `headers[name]` (T2).
///
/// The value is an RFC 8941 sf-string (`"3f1c2b7e-..."`, as the IETF draft says) or a bare token
/// (as Stripe's clients send); either way the key inside must pass K1 (`[A-Za-z0-9_-]{8,64}`).
/// Two headers of that name are an error. `Ok(None)` means there is no such header.
///
/// # Errors
///
/// [`KeyHeaderError`], naming the rule that was broken.
///
/// # Examples
///
/// ```
/// use idem_tower::{key_from_headers, KeyHeaderError};
/// let name = http::HeaderName::from_static("idempotency-key");
/// let mut h = http::HeaderMap::new();
/// assert_eq!(key_from_headers(&h, &name), Ok(None));
///
/// h.insert(&name, "\"order-0001\"".parse().unwrap());
/// assert_eq!(key_from_headers(&h, &name).unwrap().unwrap().as_str(), "order-0001");
/// h.insert(&name, "order-0001".parse().unwrap());
/// assert_eq!(key_from_headers(&h, &name).unwrap().unwrap().as_str(), "order-0001");
///
/// h.append(&name, "order-0002".parse().unwrap());
/// assert_eq!(key_from_headers(&h, &name), Err(KeyHeaderError::Repeated));
/// ```
pub fn key_from_headers(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<IdempotencyKey>, KeyHeaderError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyHeaderError::Repeated);
    }
    // The value exactly as sent: HTTP/1 parsers drop the whitespace around a field value (RFC
    // 9110), HTTP/2 and gRPC carry it, and a key with a space is not a key (K1).
    let text = value.to_str().map_err(|_| KeyHeaderError::NotAscii)?;
    let inner = match text.strip_prefix('"') {
        Some(rest) => {
            let inner = rest.strip_suffix('"').ok_or(KeyHeaderError::BadQuoting)?;
            // Escapes (\" and \\) are legal in sf-strings but never in a K1 key.
            if inner.contains(['"', '\\']) {
                return Err(KeyHeaderError::BadQuoting);
            }
            inner
        }
        None => text,
    };
    IdempotencyKey::parse(inner)
        .map(Some)
        .map_err(KeyHeaderError::Key)
}
