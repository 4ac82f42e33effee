//! R8, R2: HTTP's `Retry-After` read as pushback, both forms (delay-seconds and HTTP-date), and
//! every value that is neither read as no pushback at all.

use std::time::{Duration, SystemTime};

use idem_retry::parse_retry_after;

/// Wed, 21 Oct 2015 07:28:00 GMT.
fn at_0728() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480)
}

#[test]
fn r8_retry_after_delay_seconds() {
    let now = at_0728();
    for (v, secs) in [
        ("0", 0),
        ("1", 1),
        ("120", 120),
        (" 7 ", 7),
        ("\t30", 30),
        ("007", 7),
    ] {
        assert_eq!(
            parse_retry_after(v, now),
            Some(Duration::from_secs(secs)),
            "{v:?}"
        );
    }
    // More digits than a u64 holds still asks for a wait: the longest there is.
    assert_eq!(
        parse_retry_after("99999999999999999999999", now),
        Some(Duration::MAX)
    );
}

#[test]
fn r8_retry_after_http_date_in_all_three_forms() {
    let now = at_0728();
    let ten = Some(Duration::from_secs(10));
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now), ten);
    // The obsolete RFC 850 and asctime forms, which HTTP recipients must accept.
    assert_eq!(
        parse_retry_after("Wednesday, 21-Oct-15 07:28:10 GMT", now),
        ten
    );
    assert_eq!(parse_retry_after("Wed Oct 21 07:28:10 2015", now), ten);
    // Now and the past: no wait (the retrier then falls back to its backoff).
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(
        parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now),
        Some(Duration::ZERO)
    );
}

#[test]
fn r8_retry_after_that_is_neither_form_is_no_pushback() {
    let now = at_0728();
    for v in [
        "",
        "  ",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "5s",
        "soon",
        "Wed, 21 Oct 2015 25:00:00 GMT",
        "21 Oct 2015",
    ] {
        assert_eq!(parse_retry_after(v, now), None, "{v:?}");
    }
}
