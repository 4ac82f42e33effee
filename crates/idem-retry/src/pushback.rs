//! Reading a server's answer off the wire as a client retries it: HTTP's `Retry-After`, and an
//! HTTP answer's status, reason and pushback together.
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

use idem_core::{Code, Reason, Status};

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

/// What an HTTP answer says to a client that retries it, as a [`Status`]: the code its status
/// stands for ([`Code::from_http_status`]), the message `HTTP <status>`, the server's reason (its
/// `idem-reason` header, [`idem_core::headers::REASON`]) and its `Retry-After` as the retry-after
/// ([`parse_retry_after`], against the system clock). Every HTTP client built on the retrier reads
/// an answer with it, so the same answer is retried the same way by each of them.
///
/// `reason` and `retry_after` are the header values, if the answer has them.
///
/// ```
/// use idem_core::{Code, Reason};
/// use idem_retry::status_from_http;
/// use std::time::Duration;
///
/// let busy = status_from_http(503, Some("UPSTREAM_UNAVAILABLE"), Some("2"));
/// assert_eq!(busy.code(), Code::Unavailable);
/// assert_eq!(busy.reason(), Some(&Reason::UPSTREAM_UNAVAILABLE));
/// assert_eq!(busy.retry_after(), Some(Duration::from_secs(2)));
/// assert_eq!(busy.message(), "HTTP 503");
///
/// let ok = status_from_http(201, None, Some("soon"));
/// assert_eq!((ok.code(), ok.retry_after()), (Code::Ok, None));
/// ```
pub fn status_from_http(status: u16, reason: Option<&str>, retry_after: Option<&str>) -> Status {
    let mut read = Status::new(Code::from_http_status(status), format!("HTTP {status}"));
    if let Some(r) = reason {
        read = read.with_reason(Reason::new(r.to_owned()));
    }
    if let Some(after) = retry_after.and_then(|v| parse_retry_after(v, SystemTime::now())) {
        read = read.with_retry_after(after);
    }
    read
}
