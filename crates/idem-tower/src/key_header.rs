//! Reading the idempotency key from a request header.

use http::{HeaderMap, HeaderName};
use idem_core::{IdempotencyKey, KeyHeaderError};

/// Reads the key from `headers[name]`.
///
/// The value is an RFC 8941 sf-string (`"3f1c2b7e-..."`, as the IETF draft says) or a bare token
/// (as Stripe's clients send), read exactly as sent
/// ([`IdempotencyKey::from_header_value`]); either way the key inside must be valid
/// (`[A-Za-z0-9_-]{8,64}`). Two headers of that name are an error. `Ok(None)` means there is no
/// such header.
///
/// # Errors
///
/// [`KeyHeaderError`], naming the rule that was broken.
///
/// # Examples
///
/// ```
/// use idem_core::KeyHeaderError;
/// use idem_tower::key_from_headers;
///
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
    IdempotencyKey::from_header_value(value.as_bytes()).map(Some)
}
