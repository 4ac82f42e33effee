//! Request fingerprints.

use std::fmt;

/// A stable 128-bit hash of a request's canonical bytes.
///
/// The engine stores the fingerprint of the first request for a scope. A later request with the same
/// scope but another fingerprint is a *conflict*: one key cannot name two different
/// operations, so the action does not run and the caller gets `FAILED_PRECONDITION`.
///
/// # Algorithm (fixed forever)
///
/// **XXH3-128** with seed 0 over the canonical bytes, as in the reference xxHash implementation
/// (`XXH3_128bits`). The value is the 128-bit result; [`Display`](fmt::Display) prints it as 32
/// lower-case hex digits, high half first (the same text as `xxhash.xxh3_128_hexdigest` in Python).
/// Canonical bytes are the caller's to define: for protobuf, the encoded message; for JSON, a
/// canonical serialisation. Streaming ([`FingerprintBuilder`]) gives the same value as one call.
///
/// Test vectors (checked against an independent implementation):
///
/// | input | fingerprint |
/// |---|---|
/// | empty | `99aa06d3014798d86001c324468d497f` |
/// | `a` | `a96faf705af16834e6c632b61e964e1f` |
/// | `{"sku":"book-42","qty":1}` | `0ce770f76cc7ca4826809b3f1709ea4c` |
///
/// ```
/// use idem_core::Fingerprint;
/// let fp = Fingerprint::of(br#"{"sku":"book-42","qty":1}"#);
/// assert_eq!(fp.to_string(), "0ce770f76cc7ca4826809b3f1709ea4c");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fingerprint {
    // Two halves rather than a `u128`: 8-byte alignment keeps the records that store it compact.
    hi: u64,
    lo: u64,
}

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Fingerprint::from_u128(xxhash_rust::xxh3::xxh3_128(bytes))
    }

    /// A fingerprint from its 128-bit value (for example one read back from a store).
    pub const fn from_u128(v: u128) -> Self {
        Fingerprint {
            hi: (v >> 64) as u64,
            lo: v as u64,
        }
    }

    /// The 128-bit value.
    pub const fn as_u128(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }

    /// The value as 16 big-endian bytes.
    pub const fn to_bytes(self) -> [u8; 16] {
        self.as_u128().to_be_bytes()
    }

    /// Starts a streaming fingerprint (for bodies that arrive in frames).
    pub fn builder() -> FingerprintBuilder {
        FingerprintBuilder(xxhash_rust::xxh3::Xxh3::new())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({:032x})", self.as_u128())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

/// Computes a [`Fingerprint`] over bytes fed in pieces; the result equals [`Fingerprint::of`] over
/// the concatenation.
///
/// The hasher's state is held inline, not on the heap (about 600 bytes, so making one allocates
/// nothing): build and finish it in one function, or box it before keeping it in a long-lived
/// future.
///
/// ```
/// use idem_core::Fingerprint;
/// let mut b = Fingerprint::builder();
/// b.update(b"{\"sku\":");
/// b.update(b"\"book-42\",\"qty\":1}");
/// assert_eq!(b.finish(), Fingerprint::of(br#"{"sku":"book-42","qty":1}"#));
/// ```
pub struct FingerprintBuilder(xxhash_rust::xxh3::Xxh3);

impl FingerprintBuilder {
    /// Feeds more bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The fingerprint of everything fed so far.
    pub fn finish(&self) -> Fingerprint {
        Fingerprint::from_u128(self.0.digest128())
    }
}

impl fmt::Debug for FingerprintBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FingerprintBuilder").finish_non_exhaustive()
    }
}
