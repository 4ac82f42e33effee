//! Durations and waits for tests.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `n` milliseconds.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Milliseconds since the Unix epoch on the wall clock: a moment that two processes agree on
/// (when both should start sending, say).
///
/// # Panics
///
/// When the clock is before 1970.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits (on tokio's timer, polling every 20 ms) until `check` holds, for at most `limit`.
///
/// # Panics
///
/// With `what` when `limit` passes first.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
