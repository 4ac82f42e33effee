//! The headers idem's server layers and clients speak, by name, and the one reading of an
//! idempotency key header's value that all of them share.
//!
//! The names are plain text here, so that every crate agrees on them without depending on an
//! HTTP library; `idem-tower` has them as `http::HeaderName`s.
//!
//! | name | direction | meaning |
//! |---|---|---|
//! | [`HTTP_KEY`] `idempotency-key` | request | the key on HTTP routes: an RFC 8941 sf-string or a bare token |
//! | [`GRPC_KEY`] `x-idempotency-key` | request | the key on gRPC routes |
//! | [`REASON`] `idem-reason` | response | the machine-readable reason of an error (`ENGINE_FULL`, ...) |
//! | [`GRPC_PUSHBACK_MS`] `grpc-retry-pushback-ms` | response | gRPC's retry-after, in whole milliseconds |

use std::fmt;

use crate::{IdempotencyKey, KeyError};

/// The idempotency-key header on HTTP routes: `idempotency-key`, the IETF Idempotency-Key
/// draft's name (header names are case-insensitive, so `Idempotency-Key` is the same header).
pub const HTTP_KEY: &str = "idempotency-key";
/// The idempotency-key header on gRPC routes: `x-idempotency-key`.
pub const GRPC_KEY: &str = "x-idempotency-key";
/// The machine-readable reason of an error (`STOCK_CONFLICT`, `ENGINE_FULL`, ...), as text for
/// clients that do not decode gRPC's error details: `idem-reason`.
pub const REASON: &str = "idem-reason";
/// gRPC's server pushback, in whole milliseconds: `grpc-retry-pushback-ms`.
pub const GRPC_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// Why an idempotency key header was refused; each names the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyHeaderError {
    /// The header appeared more than once.
    Repeated,
    /// The value is not visible ASCII.
    NotAscii,
    /// A `"`-quoted value that is not a plain RFC 8941 sf-string of key characters.
    BadQuoting,
    /// The key itself is not a valid [`IdempotencyKey`].
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

impl IdempotencyKey {
    /// The key in one idempotency key header value, exactly as sent: an RFC 8941 sf-string
    /// (`"3f1c2b7e-..."`, as the IETF draft says) or a bare token (as Stripe's clients send).
    /// Either way the key inside must be valid ([`parse`](Self::parse)).
    ///
    /// The value is not trimmed: HTTP/1 parsers drop the whitespace around a field value, HTTP/2
    /// and gRPC carry it, and a key with a space is not a key. A header sent more than once is
    /// for the caller to refuse ([`KeyHeaderError::Repeated`]), before it gets here.
    ///
    /// # Errors
    ///
    /// [`KeyHeaderError`] naming the rule: the value is not visible ASCII, its quoting is not a
    /// plain sf-string (escapes are legal in sf-strings but never in a key), or the key is not
    /// valid.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_core::{IdempotencyKey, KeyHeaderError};
    ///
    /// let quoted = IdempotencyKey::from_header_value(b"\"order-0001\"")?;
    /// let bare = IdempotencyKey::from_header_value(b"order-0001")?;
    /// assert_eq!((quoted.as_str(), bare.as_str()), ("order-0001", "order-0001"));
    ///
    /// assert_eq!(IdempotencyKey::from_header_value(b"\"order-0001"), Err(KeyHeaderError::BadQuoting));
    /// assert_eq!(IdempotencyKey::from_header_value(b"\"order\\\"0001\""), Err(KeyHeaderError::BadQuoting));
    /// assert_eq!(IdempotencyKey::from_header_value("ördér-0001".as_bytes()), Err(KeyHeaderError::NotAscii));
    /// assert!(matches!(IdempotencyKey::from_header_value(b" order-0001"), Err(KeyHeaderError::Key(_))));
    /// # Ok::<(), KeyHeaderError>(())
    /// ```
    pub fn from_header_value(value: &[u8]) -> Result<IdempotencyKey, KeyHeaderError> {
        // Visible ASCII as `http::HeaderValue::to_str` has it: printable bytes and tab.
        if !value
            .iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        {
            return Err(KeyHeaderError::NotAscii);
        }
        let inner = match value.strip_prefix(b"\"") {
            Some(rest) => {
                let inner = rest.strip_suffix(b"\"").ok_or(KeyHeaderError::BadQuoting)?;
                if inner.iter().any(|&b| b == b'"' || b == b'\\') {
                    return Err(KeyHeaderError::BadQuoting);
                }
                inner
            }
            None => value,
        };
        IdempotencyKey::from_bytes(inner).map_err(KeyHeaderError::Key)
    }

    /// The key as an HTTP client sends it in the [`HTTP_KEY`] header: an RFC 8941 sf-string, the
    /// form the IETF Idempotency-Key draft gives (a key's characters never need escaping). Read
    /// back by [`from_header_value`](Self::from_header_value).
    ///
    /// ```
    /// use idem_core::IdempotencyKey;
    /// let key = IdempotencyKey::parse("order-0001")?;
    /// assert_eq!(key.to_header_value(), "\"order-0001\"");
    /// assert_eq!(IdempotencyKey::from_header_value(key.to_header_value().as_bytes()), Ok(key));
    /// # Ok::<(), idem_core::KeyError>(())
    /// ```
    pub fn to_header_value(&self) -> String {
        format!("\"{}\"", self.as_str())
    }
}
