//! How a call ended when the retrier gave up: the last error, why no further attempt was made, and
//! after how many attempts.

use std::fmt;

use crate::metrics::GiveUp;

/// The outcome of a call the [`Retrier`](crate::Retrier) gave up on, from
/// [`Retrier::call_reporting`](crate::Retrier::call_reporting): the last attempt's error (or the
/// refresh step's), why no further attempt was made, and how many attempts were made.
///
/// [`Retrier::call`](crate::Retrier::call) returns only the error; this keeps the rest, so a
/// caller (or a layer such as `idem-tower`'s client) can tell "the budget was spent after 1
/// attempt" from "3 attempts all failed".
///
/// # Examples
///
/// ```
/// use idem_core::Code;
/// use idem_retry::{Call, GiveUp, Retrier};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let err = Retrier::default()
///     .call_reporting(&Call::idempotent(), |_| async { Err::<(), _>(Code::Unavailable) })
///     .await
///     .unwrap_err();
/// assert_eq!(err.reason(), GiveUp::Attempts); // 3 attempts, the default, all failed
/// assert_eq!(err.attempts(), 3);
/// assert_eq!(*err.error(), Code::Unavailable);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryError<E> {
    reason: GiveUp,
    attempts: u32,
    error: E,
}

impl<E> RetryError<E> {
    /// The outcome of a call that ended on `error` after `attempts` attempts, for `reason`. The
    /// retrier makes these; other layers and tests may too.
    pub const fn new(reason: GiveUp, attempts: u32, error: E) -> Self {
        RetryError {
            reason,
            attempts,
            error,
        }
    }

    /// Why no further attempt was made.
    pub const fn reason(&self) -> GiveUp {
        self.reason
    }

    /// Attempts made, the first one included.
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last error: the last attempt's, or the refresh step's if that failed.
    pub const fn error(&self) -> &E {
        &self.error
    }

    /// The last error, by value.
    pub fn into_error(self) -> E {
        self.error
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "gave up after {} attempt{plural} ({}): {}",
            self.attempts,
            self.reason.explain(),
            self.error
        )
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
