//! T6 (feature `tonic`): an idem `Status` becomes a `tonic::Status` and back with nothing lost —
//! code, message, reason (as `ErrorInfo` in idem's domain), retry-after (as `RetryInfo`), source —
//! and a `tonic::Status` from another server is read by the same rules.
#![cfg(feature = "tonic")]

use std::time::Duration;

use idem_core::{Code, Reason, Status, ERROR_DOMAIN};
use proptest::prelude::*;
use tonic_types::{ErrorDetails, StatusExt};

#[derive(Debug)]
struct Cause;

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the pool is closed")
    }
}

impl std::error::Error for Cause {}

#[test]
fn t6_status_to_tonic_keeps_reason_as_error_info_and_retry_after_as_retry_info() {
    let status = Status::new(Code::ResourceExhausted, "slow down")
        .with_reason(Reason::RATE_LIMITED)
        .with_retry_after(Duration::from_millis(1500))
        .with_source(Cause);
    let tonic = tonic::Status::from(&status);
    assert_eq!(tonic.code(), tonic::Code::ResourceExhausted);
    assert_eq!(tonic.message(), "slow down");
    let details = tonic.get_error_details();
    let info = details.error_info().expect("an ErrorInfo");
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        ("RATE_LIMITED", ERROR_DOMAIN)
    );
    assert_eq!(
        details.retry_info().expect("a RetryInfo").retry_delay,
        Some(Duration::from_millis(1500))
    );
    assert_eq!(tonic.metadata().get("idem-reason").unwrap(), "RATE_LIMITED");
    assert_eq!(
        tonic.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1500"
    );
    let source = std::error::Error::source(&tonic).expect("the source is kept");
    assert!(source.downcast_ref::<Cause>().is_some(), "{source}");

    // What travels on the wire (trailers) decodes the same way on the other side.
    let mut headers = http::HeaderMap::new();
    tonic.add_header(&mut headers).unwrap();
    let received = tonic::Status::from_header_map(&headers).unwrap();
    assert_eq!(Status::from(received), status);
}

#[test]
fn t6_status_without_reason_or_retry_after_has_neither_detail() {
    let tonic = tonic::Status::from(Status::new(Code::NotFound, "no such order"));
    assert_eq!(tonic.code(), tonic::Code::NotFound);
    let details = tonic.get_error_details();
    assert!(details.error_info().is_none());
    assert!(details.retry_info().is_none());
    assert!(tonic.metadata().get("idem-reason").is_none());
    let back = Status::from(tonic);
    assert_eq!(back, Status::new(Code::NotFound, "no such order"));
}

#[test]
fn t6_tonic_status_of_another_server_is_read_by_its_details_then_its_metadata() {
    // Another domain's ErrorInfo still gives the reason.
    let mut details = ErrorDetails::new();
    details.set_error_info(
        "QUOTA_EXCEEDED",
        "payments.example",
        std::collections::HashMap::<String, String>::new(),
    );
    details.set_retry_info(Some(Duration::from_secs(2)));
    let theirs = tonic::Status::with_error_details(
        tonic::Code::ResourceExhausted,
        "quota exceeded",
        details,
    );
    let s = Status::from(theirs);
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert_eq!(s.reason(), Some(&Reason::new("QUOTA_EXCEEDED")));
    assert_eq!(s.retry_after(), Some(Duration::from_secs(2)));
    let source = std::error::Error::source(&s).expect("the tonic status is the source");
    assert!(source.downcast_ref::<tonic::Status>().is_some());

    // No details: the metadata gives them.
    let mut plain = tonic::Status::unavailable("down");
    plain
        .metadata_mut()
        .insert("idem-reason", "UPSTREAM_UNAVAILABLE".parse().unwrap());
    plain
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "40".parse().unwrap());
    let s = Status::from(plain);
    assert_eq!(s.reason(), Some(&Reason::UPSTREAM_UNAVAILABLE));
    assert_eq!(s.retry_after(), Some(Duration::from_millis(40)));

    // A malformed pushback is no retry-after.
    let mut bad = tonic::Status::unavailable("down");
    bad.metadata_mut()
        .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
    assert_eq!(Status::from(bad).retry_after(), None);
}

#[test]
fn t6_every_code_maps_to_the_same_tonic_code_and_back() {
    for code in Code::ALL {
        let t = tonic::Code::from(code);
        assert_eq!(i32::from(t), code.as_i32());
        assert_eq!(Code::from(t), code);
    }
}

fn any_code() -> impl Strategy<Value = Code> {
    (0usize..17).prop_map(|i| Code::ALL[i])
}

proptest! {
    #[test]
    fn t6_status_round_trips_through_tonic_status(
        code in any_code(),
        message in ".{0,80}",
        reason in proptest::option::of("[A-Z][A-Z_]{0,30}"),
        after in proptest::option::of(0u64..86_400_000_000_000),
    ) {
        let mut status = Status::new(code, message);
        if let Some(r) = reason {
            status = status.with_reason(Reason::new(r));
        }
        if let Some(ns) = after {
            status = status.with_retry_after(Duration::from_nanos(ns));
        }
        let back = Status::from(tonic::Status::from(&status));
        prop_assert_eq!(back, status);
    }
}
