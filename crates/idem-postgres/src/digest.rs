//! Where a scope lives in PostgreSQL: the row's key and the scope's advisory lock.
//!
//! A scope's row is keyed by SHA-256 over [`Scope::as_bytes`], the scope's injective encoding:
//! 32 bytes, so no tenant, method or key chosen by a client can make two scopes share a
//! row. The first 8 bytes, as a signed big-endian integer, are the key of the transaction-scoped
//! advisory lock that serializes every write of the scope's record; two scopes sharing a lock key
//! (one chance in 2^64 per pair) only wait for each other, they never share a record.

use idem_core::{Hex, Scope};

/// A scope's digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ScopeDigest(pub(crate) [u8; 32]);

impl ScopeDigest {
    pub(crate) fn of(scope: &Scope) -> Self {
        ScopeDigest(scope.digest())
    }

    /// The advisory lock key.
    pub(crate) fn lock_key(&self) -> i64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        i64::from_be_bytes(b)
    }

    /// Lower-case hex, as in completion notices.
    pub(crate) fn hex(&self) -> String {
        hex(&self.0)
    }

    /// From the hex of a notice's payload.
    pub(crate) fn from_hex(s: &str) -> Option<Self> {
        let s = s.as_bytes();
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.chunks(2).enumerate() {
            out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(ScopeDigest(out))
    }
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    Hex(bytes).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d4_digest_round_trips_through_hex_and_keys_the_lock() {
        let s = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001").unwrap();
        let d = ScopeDigest::of(&s);
        assert_eq!(ScopeDigest::from_hex(&d.hex()), Some(d));
        assert_eq!(ScopeDigest::from_hex("zz"), None);
        assert_eq!(d.lock_key().to_be_bytes(), d.0[..8]);
        let other = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0002").unwrap();
        assert_ne!(ScopeDigest::of(&other), d);
    }
}
