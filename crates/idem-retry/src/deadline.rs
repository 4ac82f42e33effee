//! The checks made before every retry.
//!
//! A retry is made only if all three hold: the failure is retryable (see
//! [`classify`](crate::classify)), attempts are left, and the call's remaining deadline covers the
//! wait *plus* a minimum attempt time. A retry that would start with 5 ms left cannot succeed; it
//! only makes the caller wait longer for the same failure. A delay that would overrun the deadline
//! therefore ends the call at once, with the last error.

use std::time::Duration;

use idem_core::Deadline;

use crate::metrics::GiveUp;
use crate::policy::RetryPolicy;

/// Whether `deadline` leaves room for waiting `delay` and then running an attempt of at least
/// `min_attempt`: `remaining >= delay + min_attempt`. No deadline always leaves room.
///
/// ```
/// use idem_core::Deadline;
/// use idem_retry::leaves_room;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let d = Deadline::after(Duration::from_millis(100));
/// assert!(leaves_room(Some(&d), Duration::from_millis(50), Duration::from_millis(50)));
/// assert!(!leaves_room(Some(&d), Duration::from_millis(51), Duration::from_millis(50)));
/// assert!(leaves_room(None, Duration::from_secs(3600), Duration::from_millis(50)));
/// # }
/// ```
pub fn leaves_room(deadline: Option<&Deadline>, delay: Duration, min_attempt: Duration) -> bool {
    match deadline {
        None => true,
        Some(d) => match delay.checked_add(min_attempt) {
            Some(needed) => d.has_budget(needed),
            None => false,
        },
    }
}

/// The attempt and deadline checks, after the `attempts_made`-th attempt failed with a
/// retryable error whose wait is `delay`.
///
/// # Errors
///
/// [`GiveUp::Attempts`] when `attempts_made >= policy.max_attempts()`, else [`GiveUp::Deadline`]
/// when `deadline` does not leave `delay + policy.min_attempt_time()`.
///
/// ```
/// use idem_core::Deadline;
/// use idem_retry::{check_retry, GiveUp, RetryPolicy};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let policy = RetryPolicy::default(); // 3 attempts, 50 ms minimum attempt
/// let d = Deadline::after(Duration::from_millis(100));
/// let ms = Duration::from_millis;
/// assert_eq!(check_retry(&policy, 1, Some(&d), ms(20)), Ok(()));
/// assert_eq!(check_retry(&policy, 3, Some(&d), ms(20)), Err(GiveUp::Attempts));
/// assert_eq!(check_retry(&policy, 1, Some(&d), ms(60)), Err(GiveUp::Deadline));
/// # }
/// ```
pub fn check_retry(
    policy: &RetryPolicy,
    attempts_made: u32,
    deadline: Option<&Deadline>,
    delay: Duration,
) -> Result<(), GiveUp> {
    if attempts_made >= policy.max_attempts() {
        return Err(GiveUp::Attempts);
    }
    if !leaves_room(deadline, delay, policy.min_attempt_time()) {
        return Err(GiveUp::Deadline);
    }
    Ok(())
}
