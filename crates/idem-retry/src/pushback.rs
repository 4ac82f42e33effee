//! Reading a server's pushback off the wire: HTTP's `Retry-After`.
//!
//! # Why a parser here
//!
//! A server that is overloaded or rate limiting knows better than any backoff formula when it can
//! take the call again, and says so: `Retry-After` on HTTP. A client that retries sooner only
//! adds to the load the server is shedding. The [`Retrier`](crate::Retrier) obeys a pushback
//! exactly ([`Classify::retry_after`](crate::Classify::retry_after)); every HTTP client built on
//! it reads the header the same way, with this function, so an answer means the same thing to
//! each of them.

use std::time::{Duration, SystemTime};

/// The wait an HTTP `Retry-After` value asks for, measured from `now`; `None` when the value is
/// neither of the two forms HTTP defines.
///
/// | value | wait |
/// |---|---|
/// | delay-seconds: ASCII digits only (`120`) | that many seconds; a number too large for a `u64` waits the longest a [`Duration`] holds |
/// | an HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`, and the two obsolete forms HTTP recipients must accept) | from `now` until then; zero if it has passed |
/// | anything else (`-1`, `1.5`, `+5`, `soon`, empty) | `None`: no pushback, the policy's backoff applies |
///
/// Whitespace around the value is ignored. A zero wait is a pushback of nothing: the retrier
/// then uses its backoff, never a retry at once.
///
/// `now` is a parameter so that a caller (or a test) decides which clock an HTTP-date is read
/// against; clients pass `SystemTime::now()`.
///
/// ```
/// use idem_retry::parse_retry_after;
/// use std::time::{Duration, SystemTime};
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_470); // 07:27:50 GMT
/// assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
///     Some(Duration::from_secs(10))
/// );
/// assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO));
/// assert_eq!(parse_retry_after("-1", now), None);
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Only digits: a number, however large (a `u64` overflows past ~585 billion years).
        return Some(value.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}
