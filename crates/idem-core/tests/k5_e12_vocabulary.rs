//! K5 fingerprints, E12 codes, statuses and deadlines.

use std::time::Duration;

use idem_core::{Code, CodeSet, Deadline, Fingerprint, Reason, Status};

/// Vectors from Python's `xxhash.xxh3_128_hexdigest` (an independent implementation).
#[test]
fn k5_fingerprint_test_vectors() {
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let vectors: [(&[u8], &str); 4] = [
        (b"", "99aa06d3014798d86001c324468d497f"),
        (b"a", "a96faf705af16834e6c632b61e964e1f"),
        (
            br#"{"sku":"book-42","qty":1}"#,
            "0ce770f76cc7ca4826809b3f1709ea4c",
        ),
        (&all_bytes, "f1f8a93f50849ac39408a4433b952d71"),
    ];
    for (input, want) in vectors {
        assert_eq!(Fingerprint::of(input).to_string(), want);
    }
}

#[test]
fn k5_streaming_equals_one_shot() {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    for chunk in [1, 7, 64, 1000, 4096] {
        let mut b = Fingerprint::builder();
        for c in data.chunks(chunk) {
            b.update(c);
        }
        assert_eq!(b.finish(), Fingerprint::of(&data), "chunk {chunk}");
    }
    let fp = Fingerprint::of(b"x");
    assert_eq!(Fingerprint::from_u128(fp.as_u128()), fp);
    assert_eq!(u128::from_be_bytes(fp.to_bytes()), fp.as_u128());
}

#[test]
fn e12_all_17_codes_round_trip_and_map_to_http() {
    assert_eq!(Code::ALL.len(), 17);
    for (i, c) in Code::ALL.iter().enumerate() {
        assert_eq!(c.as_i32(), i as i32);
        assert_eq!(Code::from_i32(i as i32), Some(*c));
        assert!((200..=599).contains(&c.http_status()));
        assert_eq!(c.as_str(), c.to_string());
    }
    assert_eq!(Code::from_i32(17), None);
    assert_eq!(Code::from_i32(-1), None);
    assert_eq!(Code::FailedPrecondition.http_status(), 422);
    assert_eq!(Code::Aborted.http_status(), 409);
    assert_eq!(Code::ResourceExhausted.http_status(), 429);
    assert_eq!(Code::Unavailable.http_status(), 503);
    assert_eq!(Code::InvalidArgument.http_status(), 400);
    assert_eq!(Code::Unauthenticated.http_status(), 401);
}

#[test]
fn e13_code_sets() {
    let s: CodeSet = [Code::FailedPrecondition, Code::InvalidArgument]
        .into_iter()
        .collect();
    assert!(s.contains(Code::FailedPrecondition));
    assert!(!s.contains(Code::Unavailable));
    assert!(!s
        .without(Code::InvalidArgument)
        .contains(Code::InvalidArgument));
    assert!(CodeSet::EMPTY.is_empty());
}

#[test]
fn status_carries_code_reason_and_hint() {
    let s = Status::new(Code::Aborted, "stale version").with_reason(Reason::STOCK_CONFLICT);
    assert_eq!(s.code(), Code::Aborted);
    assert_eq!(s.reason(), Some(&Reason::STOCK_CONFLICT));
    assert_eq!(s.retry_after(), None);
    assert_eq!(s.clone(), s);
    let io = std::io::Error::other("boom");
    let s = Status::new(Code::Internal, "wrapped").with_source(io);
    assert!(std::error::Error::source(&s).is_some());
}

#[tokio::test(start_paused = true)]
async fn deadline_reads_tokios_clock() {
    let d = Deadline::after(Duration::from_millis(100));
    assert_eq!(d.remaining(), Duration::from_millis(100));
    assert!(d.has_budget(Duration::from_millis(100)));
    tokio::time::advance(Duration::from_millis(60)).await;
    assert_eq!(d.remaining(), Duration::from_millis(40));
    assert!(!d.has_budget(Duration::from_millis(50)));
    tokio::time::advance(Duration::from_millis(60)).await;
    assert!(d.is_expired());
    assert_eq!(d.remaining(), Duration::ZERO);
    let far = Deadline::after(Duration::MAX);
    assert!(far.has_budget(Duration::from_secs(86_400)));
    assert_eq!(d.min(far), d);
}
