//! Scopes: the (tenant, method, key) triple results are filed under.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::key::{IdempotencyKey, KeyError};

/// The longest tenant accepted, in bytes.
pub const MAX_TENANT_LEN: usize = 128;
/// The longest method accepted, in bytes.
pub const MAX_METHOD_LEN: usize = 256;

/// Encodings up to this many bytes are assembled on the stack (see `Scope::encode`).
const STACK_ENCODING: usize = 128;

/// Where one intent's result lives: tenant + method + [`IdempotencyKey`].
///
/// # Why scoped
///
/// Deduplicating by key alone lets two tenants that happen to pick the same key read each other's
/// results; deduplicating by method alone merges two different orders of one user. A scope keeps
/// both apart.
///
/// # Encoding
///
/// A scope's identity is one byte string, built injectively so that no two different triples share
/// it, whatever bytes tenant and method hold:
///
/// ```text
/// u16 big-endian len(tenant) ‖ tenant ‖ u16 big-endian len(method) ‖ method ‖ key
/// ```
///
/// Equality and hashing use these bytes. The bytes are shared (`Arc`), so cloning a scope and
/// storing it in the engine never copies them.
///
/// # Examples
///
/// ```
/// use idem_core::{IdempotencyKey, Scope};
///
/// let key = IdempotencyKey::parse("order-2024-0001")?;
/// let scope = Scope::new("tenant-0042", "/shop.v1.Shop/CreateOrder", &key)?;
/// assert_eq!(scope.tenant(), "tenant-0042");
/// assert_eq!(scope.key(), "order-2024-0001");
///
/// // Same key, other tenant: another scope.
/// assert_ne!(scope, Scope::new("tenant-0043", "/shop.v1.Shop/CreateOrder", &key)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    encoded: Arc<[u8]>,
}

/// Why a scope could not be built; the message names the broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeError {
    /// The tenant is empty.
    EmptyTenant,
    /// The tenant is longer than [`MAX_TENANT_LEN`] bytes.
    TenantTooLong {
        /// The length that was given.
        len: usize,
    },
    /// The method is empty.
    EmptyMethod,
    /// The method is longer than [`MAX_METHOD_LEN`] bytes.
    MethodTooLong {
        /// The length that was given.
        len: usize,
    },
    /// The key broke the key rule (8 to 64 characters of `A-Z a-z 0-9 _ -`).
    Key(KeyError),
    /// Encoded bytes given to [`Scope::from_encoded`] are not a scope encoding.
    Malformed(&'static str),
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeError::EmptyTenant => f.write_str("the tenant of an idempotency scope must not be empty"),
            ScopeError::TenantTooLong { len } => write!(
                f,
                "the tenant of an idempotency scope must be at most {MAX_TENANT_LEN} bytes: this one has {len}"
            ),
            ScopeError::EmptyMethod => f.write_str("the method (request path) of an idempotency scope must not be empty"),
            ScopeError::MethodTooLong { len } => write!(
                f,
                "the method (request path) of an idempotency scope must be at most {MAX_METHOD_LEN} bytes: this one has {len}"
            ),
            ScopeError::Key(e) => e.fmt(f),
            ScopeError::Malformed(why) => write!(f, "bytes that are not an encoded idempotency scope: {why}"),
        }
    }
}

impl std::error::Error for ScopeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ScopeError::Key(e) => Some(e),
            _ => None,
        }
    }
}

impl From<KeyError> for ScopeError {
    fn from(e: KeyError) -> Self {
        ScopeError::Key(e)
    }
}

fn check_tenant(tenant: &str) -> Result<(), ScopeError> {
    match tenant.len() {
        0 => Err(ScopeError::EmptyTenant),
        len if len > MAX_TENANT_LEN => Err(ScopeError::TenantTooLong { len }),
        _ => Ok(()),
    }
}

fn check_method(method: &str) -> Result<(), ScopeError> {
    match method.len() {
        0 => Err(ScopeError::EmptyMethod),
        len if len > MAX_METHOD_LEN => Err(ScopeError::MethodTooLong { len }),
        _ => Ok(()),
    }
}

impl Scope {
    /// Builds a scope from a tenant, a method and a parsed key.
    ///
    /// # Errors
    ///
    /// [`ScopeError`] when tenant or method is empty or too long.
    pub fn new(tenant: &str, method: &str, key: &IdempotencyKey) -> Result<Self, ScopeError> {
        check_tenant(tenant)?;
        check_method(method)?;
        Ok(Scope::encode(tenant, method, key.as_str()))
    }

    /// The encoding of parts already checked: assembled on the stack when it fits (typical
    /// scopes are ~80 bytes), then copied into its one shared allocation. Assembling it in a
    /// `Vec` first took a second allocation and a second copy on every request.
    fn encode(tenant: &str, method: &str, key: &str) -> Scope {
        // Both lengths are checked against limits far below `u16::MAX`.
        let (tl, ml) = (tenant.len() as u16, method.len() as u16);
        let parts: [&[u8]; 5] = [
            &tl.to_be_bytes(),
            tenant.as_bytes(),
            &ml.to_be_bytes(),
            method.as_bytes(),
            key.as_bytes(),
        ];
        let len = parts.iter().map(|p| p.len()).sum();
        let encoded: Arc<[u8]> = if len <= STACK_ENCODING {
            let mut buf = [0; STACK_ENCODING];
            let mut at = 0;
            for p in parts {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            Arc::from(&buf[..len])
        } else {
            Arc::from(parts.concat())
        };
        Scope { encoded }
    }

    /// Builds a scope from three strings, validating the key too.
    ///
    /// # Errors
    ///
    /// [`ScopeError`] naming the first broken rule; nothing is stored for a bad scope.
    pub fn parse(tenant: &str, method: &str, key: &str) -> Result<Self, ScopeError> {
        check_tenant(tenant)?;
        check_method(method)?;
        // The key is checked where it lies: no `IdempotencyKey` (an allocation) just to read it.
        crate::key::validate(key.as_bytes())?;
        Ok(Scope::encode(tenant, method, key))
    }

    /// Decodes bytes made by [`as_bytes`](Self::as_bytes), validating every part.
    ///
    /// # Errors
    ///
    /// [`ScopeError::Malformed`] for a truncated or non-UTF-8 encoding, or the rule a part breaks.
    pub fn from_encoded(bytes: &[u8]) -> Result<Self, ScopeError> {
        let (tenant, rest) = split_part(bytes, "tenant")?;
        let (method, key) = split_part(rest, "method")?;
        let tenant = std::str::from_utf8(tenant)
            .map_err(|_| ScopeError::Malformed("tenant is not UTF-8"))?;
        let method = std::str::from_utf8(method)
            .map_err(|_| ScopeError::Malformed("method is not UTF-8"))?;
        check_tenant(tenant)?;
        check_method(method)?;
        let key = IdempotencyKey::from_bytes(key)?;
        Scope::new(tenant, method, &key)
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        let (t, _, _) = self.parts();
        t
    }

    /// The method (for gRPC and HTTP: the request path).
    pub fn method(&self) -> &str {
        let (_, m, _) = self.parts();
        m
    }

    /// The idempotency key, as text.
    pub fn key(&self) -> &str {
        let (_, _, k) = self.parts();
        k
    }

    /// The injective encoding (see the type docs); stable across versions.
    pub fn as_bytes(&self) -> &[u8] {
        &self.encoded
    }

    /// SHA-256 over the encoding ([`as_bytes`](Self::as_bytes)): a name for the scope that is
    /// the same in every process and version, shows neither the tenant nor the key, and that no
    /// client can make two scopes share (the encoding is injective). A shared store keys a
    /// scope's record by it (or by a prefix of it), and logs name a scope by a prefix of it;
    /// [`Hex`](crate::Hex) writes it as text.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_core::{Hex, Scope};
    ///
    /// let a = Scope::parse("tenant-1", "/shop.v1.Shop/CreateOrder", "order-0001")?;
    /// let b = Scope::parse("tenant-2", "/shop.v1.Shop/CreateOrder", "order-0001")?;
    /// assert_eq!(a.digest(), Scope::digest_encoded(a.as_bytes()));
    /// assert_ne!(a.digest(), b.digest());
    /// assert!(!Hex(&a.digest()).to_string().contains("order"));
    /// # Ok::<(), idem_core::ScopeError>(())
    /// ```
    pub fn digest(&self) -> [u8; 32] {
        Self::digest_encoded(self.as_bytes())
    }

    /// The [`digest`](Self::digest) of a scope's encoding as a store keeps it, without decoding
    /// it: SHA-256 over `bytes`, whatever they hold.
    pub fn digest_encoded(bytes: &[u8]) -> [u8; 32] {
        Sha256::digest(bytes).into()
    }

    fn parts(&self) -> (&str, &str, &str) {
        let b = &self.encoded[..];
        let tl = u16::from_be_bytes([b[0], b[1]]) as usize;
        let t = &b[2..2 + tl];
        let ml_at = 2 + tl;
        let ml = u16::from_be_bytes([b[ml_at], b[ml_at + 1]]) as usize;
        let m = &b[ml_at + 2..ml_at + 2 + ml];
        let k = &b[ml_at + 2 + ml..];
        // Every constructor validated UTF-8, so these never fall back.
        (
            std::str::from_utf8(t).unwrap_or_default(),
            std::str::from_utf8(m).unwrap_or_default(),
            std::str::from_utf8(k).unwrap_or_default(),
        )
    }
}

fn split_part<'a>(b: &'a [u8], what: &'static str) -> Result<(&'a [u8], &'a [u8]), ScopeError> {
    if b.len() < 2 {
        return Err(ScopeError::Malformed(if what == "tenant" {
            "missing tenant length"
        } else {
            "missing method length"
        }));
    }
    let len = u16::from_be_bytes([b[0], b[1]]) as usize;
    let rest = &b[2..];
    if rest.len() < len {
        return Err(ScopeError::Malformed(if what == "tenant" {
            "tenant shorter than its length prefix"
        } else {
            "method shorter than its length prefix"
        }));
    }
    Ok(rest.split_at(len))
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, m, k) = self.parts();
        f.debug_struct("Scope")
            .field("tenant", &t)
            .field("method", &m)
            .field("key", &k)
            .finish()
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, m, k) = self.parts();
        write!(f, "{t:?}:{m:?}:{k}")
    }
}
