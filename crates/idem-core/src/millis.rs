//! Durations as a count of milliseconds.

use std::time::Duration;

/// `d` in whole milliseconds, rounded down; `u64::MAX` for a longer duration than that holds
/// (about 584 million years). How idem writes a duration as a number: in event fields
/// (`lease_ms`, `delay_ms`) and in a store's expiries.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_core::whole_millis;
///
/// assert_eq!(whole_millis(Duration::from_micros(2_999)), 2);
/// assert_eq!(whole_millis(Duration::MAX), u64::MAX);
/// ```
pub fn whole_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
