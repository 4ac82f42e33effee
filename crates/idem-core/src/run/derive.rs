//! The derivation of downstream keys (version 1): a pure function, pinned by test vectors.

use sha2::{Digest, Sha256};

use crate::IdempotencyKey;

/// The version tag that starts every name [`downstream_key`] hashes. A new derivation gets a new
/// tag; this one is fixed forever.
const DOWNSTREAM_V1: &[u8] = b"idem.downstream.v1\0";

/// Where a downstream call stands in its run: its count among the run's calls to the same
/// target, or a name the caller gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step<'a> {
    /// The *n*-th call to the target in the run, counted from 0.
    Ordinal(u32),
    /// A step named by the caller.
    Named(&'a str),
}

/// The idempotency key a run of the intent whose scope digest is `origin` sends to `target` for
/// `step`.
///
/// # Algorithm (version 1, fixed forever)
///
/// The key is the lower-case hyphenated RFC 9562 **UUIDv8** whose 122 free bits are the first bits
/// of SHA-256 over
///
/// ```text
/// "idem.downstream.v1" 0x00 ‖ origin (32 bytes) ‖ u32 big-endian len(target) ‖ target
///   ‖ 0x00 ‖ u32 big-endian n            for Step::Ordinal(n)
///   ‖ 0x01 ‖ u32 big-endian len(name) ‖ name   for Step::Named(name)
/// ```
///
/// (the first 16 bytes of the hash, with the version nibble set to 8 and the variant bits to
/// `10`). `origin` is SHA-256 of the inbound scope's injective encoding, so two tenants, two
/// methods or two keys never share an origin, and the length prefixes keep every field apart:
/// distinct inputs give distinct keys, short of a SHA-256 collision. A derived key passes the key
/// rules (36 characters of hex digits and `-`).
///
/// ```
/// use idem_core::run::{downstream_key, Step};
/// let origin = [0u8; 32];
/// let key = downstream_key(&origin, "/stock.v1.Stock/Deduct", Step::Ordinal(0));
/// assert_eq!(key.as_str(), "f0f461cb-29c5-8531-8097-26c6cb35c4e9");
/// ```
pub fn downstream_key(origin: &[u8; 32], target: &str, step: Step<'_>) -> IdempotencyKey {
    let mut h = Sha256::new();
    h.update(DOWNSTREAM_V1);
    h.update(origin);
    h.update(len_prefix(target.len()));
    h.update(target.as_bytes());
    match step {
        Step::Ordinal(n) => {
            h.update([0u8]);
            h.update(n.to_be_bytes());
        }
        Step::Named(name) => {
            h.update([1u8]);
            h.update(len_prefix(name.len()));
            h.update(name.as_bytes());
        }
    }
    let hash = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash[..16]);
    let mut buf = uuid::Uuid::encode_buffer();
    let text = uuid::Uuid::new_v8(bytes)
        .hyphenated()
        .encode_lower(&mut buf);
    IdempotencyKey::from_valid(text)
}

/// A length as the derivation writes it. Targets and names longer than 4 GiB cannot be sent in
/// any request, so saturating never merges two real inputs.
fn len_prefix(len: usize) -> [u8; 4] {
    u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes()
}
