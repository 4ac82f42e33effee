//! The numbers a claim carries: its [`FencingToken`], which only grows per scope, and the
//! [`OwnerId`] of the engine that made it.

use std::fmt;
use std::hash::BuildHasher;

/// A number handed out with each claim of a scope that only grows: a later claim of the same
/// scope always gets a larger token than every earlier one, even across a loss of the tier's
/// data (each tier's docs say how it keeps that).
///
/// Pass it to the store that takes the side effect; the [module docs](crate::remote#fencing-what-a-token-protects-and-what-it-does-not)
/// say exactly what that protects.
///
/// [`FencingToken::UNFENCED`] (zero) marks a run made without any claim (fail-open); real
/// tokens start at 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of a run made without a claim (fail-open): lower than every real token.
    pub const UNFENCED: FencingToken = FencingToken(0);

    /// A token from its number.
    pub const fn new(n: u64) -> Self {
        FencingToken(n)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Whether this is a real claim's token (not [`UNFENCED`](Self::UNFENCED)).
    pub const fn is_fenced(self) -> bool {
        self.0 != 0
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Names the maker of a claim: one per tiered engine, random (see the [module
/// docs](crate::remote#owners-and-orphans)). Shown as 32 hex digits.
///
/// ```
/// use idem_dedup::remote::OwnerId;
/// let a = OwnerId::random();
/// assert_ne!(a, OwnerId::random());
/// assert_eq!(a.to_string().len(), 32);
/// assert_eq!(OwnerId::from_u128(255).to_string(), "000000000000000000000000000000ff");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerId(u128);

impl OwnerId {
    /// A new random id (from the standard library's randomly seeded hasher, the clock and the
    /// process id, so two processes, or two engines in one, never share one in practice).
    pub fn random() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let one = std::hash::RandomState::new().hash_one((nanos, std::process::id(), 1u8));
        let two = std::hash::RandomState::new().hash_one((nanos, std::process::id(), 2u8));
        OwnerId((u128::from(one) << 64) | u128::from(two))
    }

    /// An id from its number (tests, or an id kept across restarts on purpose).
    pub const fn from_u128(n: u128) -> Self {
        OwnerId(n)
    }

    /// The number.
    pub const fn get(self) -> u128 {
        self.0
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({:032x})", self.0)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}
