//! Idempotency keys.

use std::fmt;
use std::sync::Arc;

/// The shortest key accepted.
pub const MIN_KEY_LEN: usize = 8;
/// The longest key accepted. A hyphenated UUID (36 characters) fits.
pub const MAX_KEY_LEN: usize = 64;

/// Namespace UUID for [`IdempotencyKey::derive`]: the UUIDv5 of the name `idem.key.v1` under the
/// RFC 9562 URL namespace. Changing it changes every derived key, so it is fixed forever.
const DERIVE_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x0d93_4cc1_5516_57f0_bfea_522e_d413_3b9c);

/// A client-chosen key that names one business intent.
///
/// A key is made **once** per intent — when the user clicks "pay", not per HTTP request — and every
/// retry of that intent carries the same key. The server files results under
/// (tenant, method, key) (see [`Scope`](crate::Scope)), so two tenants may use the same key.
///
/// Valid keys match `[A-Za-z0-9_-]{8,64}`. A key that parsed is valid forever; cloning is cheap
/// (one reference count).
///
/// # Examples
///
/// ```
/// use idem_core::IdempotencyKey;
///
/// let key = IdempotencyKey::parse("3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10")?;
/// assert_eq!(key.as_str().len(), 36);
///
/// let err = IdempotencyKey::parse("short").unwrap_err();
/// assert!(err.to_string().contains("8-64 characters"));
/// # Ok::<(), idem_core::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(Arc<str>);

/// Why a string is not a valid [`IdempotencyKey`]; the message names the broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Fewer than [`MIN_KEY_LEN`] characters.
    TooShort {
        /// The length that was given.
        len: usize,
    },
    /// More than [`MAX_KEY_LEN`] characters.
    TooLong {
        /// The length that was given.
        len: usize,
    },
    /// A byte outside `[A-Za-z0-9_-]`.
    InvalidChar {
        /// Byte offset of the first bad byte.
        index: usize,
        /// The bad byte.
        byte: u8,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::TooShort { len } => write!(
                f,
                "idempotency key must be {MIN_KEY_LEN}-{MAX_KEY_LEN} characters of A-Z a-z 0-9 _ -: this one has {len}, too short"
            ),
            KeyError::TooLong { len } => write!(
                f,
                "idempotency key must be {MIN_KEY_LEN}-{MAX_KEY_LEN} characters of A-Z a-z 0-9 _ -: this one has {len}, too long"
            ),
            KeyError::InvalidChar { index, byte } => write!(
                f,
                "idempotency key must be {MIN_KEY_LEN}-{MAX_KEY_LEN} characters of A-Z a-z 0-9 _ -: byte 0x{byte:02x} at position {index} is not one of them"
            ),
        }
    }
}

impl std::error::Error for KeyError {}

impl IdempotencyKey {
    /// Parses and validates a key.
    ///
    /// # Errors
    ///
    /// [`KeyError`] naming the broken rule: length outside 8..=64 or a byte outside `[A-Za-z0-9_-]`.
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        validate(s.as_bytes())?;
        Ok(IdempotencyKey(Arc::from(s)))
    }

    /// Validates raw bytes (for example an HTTP header value) and makes a key from them.
    ///
    /// # Errors
    ///
    /// As [`parse`](Self::parse).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        validate(bytes)?;
        // validate() admits ASCII only, so this cannot fail.
        let s = std::str::from_utf8(bytes).map_err(|e| KeyError::InvalidChar {
            index: e.valid_up_to(),
            byte: bytes[e.valid_up_to()],
        })?;
        Ok(IdempotencyKey(Arc::from(s)))
    }

    /// A fresh random key: a hyphenated version-4 UUID.
    ///
    /// Call it once per business intent and keep the key for every retry of that intent.
    ///
    /// ```
    /// let a = idem_core::IdempotencyKey::generate();
    /// let b = idem_core::IdempotencyKey::generate();
    /// assert_ne!(a, b);
    /// assert_eq!(a.as_str().len(), 36);
    /// ```
    pub fn generate() -> Self {
        let mut buf = uuid::Uuid::encode_buffer();
        let s = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
        IdempotencyKey(Arc::from(&*s))
    }

    /// A stable key derived from a business id and an operation name.
    ///
    /// The same inputs give the same key in every process, version and platform, so a client that
    /// restarts mid-retry (or a second client acting for the same order) sends the same key.
    ///
    /// # Algorithm (fixed forever)
    ///
    /// The key is the lower-case hyphenated RFC 9562 **UUIDv5** (SHA-1 name-based) of the name
    /// `len(business_id) as u32 big-endian ‖ business_id ‖ len(operation) as u32 big-endian ‖ operation`
    /// (UTF-8 bytes) under the namespace `0d934cc1-5516-57f0-bfea-522ed4133b9c`
    /// (itself the UUIDv5 of `idem.key.v1` in the RFC 9562 URL namespace). Length prefixes make
    /// the derivation injective: `("ab", "c")` and `("a", "bc")` give different keys.
    ///
    /// ```
    /// use idem_core::IdempotencyKey;
    /// let k = IdempotencyKey::derive("order-1001", "CreateOrder");
    /// assert_eq!(k, IdempotencyKey::derive("order-1001", "CreateOrder"));
    /// assert_eq!(k.as_str(), "595adbff-8b2b-59ac-badd-f55cab0b478f");
    /// ```
    pub fn derive(business_id: &str, operation: &str) -> Self {
        let mut name = Vec::with_capacity(8 + business_id.len() + operation.len());
        name.extend_from_slice(&(business_id.len() as u32).to_be_bytes());
        name.extend_from_slice(business_id.as_bytes());
        name.extend_from_slice(&(operation.len() as u32).to_be_bytes());
        name.extend_from_slice(operation.as_bytes());
        let mut buf = uuid::Uuid::encode_buffer();
        let s = uuid::Uuid::new_v5(&DERIVE_NAMESPACE, &name)
            .hyphenated()
            .encode_lower(&mut buf);
        IdempotencyKey(Arc::from(&*s))
    }

    /// A key from text that is valid by construction (a derivation's output).
    pub(crate) fn from_valid(text: &str) -> Self {
        debug_assert!(validate(text.as_bytes()).is_ok());
        IdempotencyKey(Arc::from(text))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The bytes a key may hold: ASCII letters and digits, `-` and `_`.
static KEY_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
        c += 1;
    }
    table
};

/// Checks a key against the key rule. Every request's key passes through here (the server layer
/// parses the key header of every call, replays included), so the common case, a valid key,
/// is one table look-up per byte folded without a branch; the position of a bad byte is
/// looked for only once the key is known to hold one. (The per-byte range tests with an early
/// exit it replaces took ~13 instructions per byte, callgrind.)
pub(crate) fn validate(b: &[u8]) -> Result<(), KeyError> {
    if b.len() < MIN_KEY_LEN {
        return Err(KeyError::TooShort { len: b.len() });
    }
    if b.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: b.len() });
    }
    if b.iter().fold(true, |ok, &c| ok & KEY_BYTE[usize::from(c)]) {
        return Ok(());
    }
    let index = b
        .iter()
        .position(|&c| !KEY_BYTE[usize::from(c)])
        .unwrap_or_default();
    Err(KeyError::InvalidChar {
        index,
        byte: b[index],
    })
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&&*self.0).finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        IdempotencyKey::parse(s)
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: &str) -> Result<Self, KeyError> {
        IdempotencyKey::parse(s)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        IdempotencyKey::parse(&s)
    }
}
