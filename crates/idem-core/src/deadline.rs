//! Deadlines and time budgets.

use std::time::Duration;

use tokio::time::Instant;

/// The moment a whole call (first attempt and every retry) must be done by.
///
/// A deadline is set once, where the call starts, and every layer reads the *remaining* time from it
/// rather than applying its own timeout (a timeout per attempt per layer multiplies). The retrier
/// checks [`has_budget`](Self::has_budget) before each retry; the gRPC client layer
/// sends [`remaining`](Self::remaining) as `grpc-timeout`.
///
/// Time comes from tokio's clock (`tokio::time::Instant`), which is the system clock unless a test
/// paused it; no runtime is needed to read it.
///
/// ```
/// use idem_core::Deadline;
/// use std::time::Duration;
///
/// let d = Deadline::after(Duration::from_millis(100));
/// assert!(d.remaining() <= Duration::from_millis(100));
/// assert!(!d.has_budget(Duration::from_secs(1)));
/// assert!(!d.is_expired());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    /// A deadline `budget` from now. A budget too large to represent becomes ~30 years.
    pub fn after(budget: Duration) -> Self {
        let now = Instant::now();
        let at = now
            .checked_add(budget)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
        Deadline { at }
    }

    /// A deadline at an instant of tokio's clock.
    pub const fn at(at: Instant) -> Self {
        Deadline { at }
    }

    /// The instant.
    pub const fn instant(&self) -> Instant {
        self.at
    }

    /// Time left; zero once passed.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whether at least `min` is left.
    pub fn has_budget(&self, min: Duration) -> bool {
        self.remaining() >= min
    }

    /// Whether the deadline has passed (no time left at all).
    pub fn is_expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// The earlier of two deadlines.
    pub fn min(self, other: Deadline) -> Deadline {
        if other.at < self.at {
            other
        } else {
            self
        }
    }
}
