//! R2, S2, S3: the decision for every status code and reason, per call kind.

use std::time::Duration;

use idem_core::{Code, IdempotencyKey, Reason, Status};
use idem_retry::{classify, Call, CallKind, Decision, NotRetryable, Wait};

const RETRY: Decision = Decision::Retry(Wait::Backoff);
const WITHIN: Decision = Decision::RetryWithinDeadline(Wait::Backoff);
const REFRESH: Decision = Decision::RefreshThenRetry(Wait::Backoff);
const OK: Decision = Decision::Never(NotRetryable::NotAFailure);
const PERM: Decision = Decision::Never(NotRetryable::Permanent);
const UNSAFE: Decision = Decision::Never(NotRetryable::Unsafe);
const NOT_TRANSIENT: Decision = Decision::Never(NotRetryable::NotTransient);

fn key() -> IdempotencyKey {
    IdempotencyKey::derive("order-1001", "CreateOrder")
}

/// The three call kinds, in the order of the table's columns.
fn calls() -> [Call; 3] {
    [
        Call::idempotent(),
        Call::keyed(key()),
        Call::non_idempotent(),
    ]
}

/// The table printed in the crate's closing note: code x (idempotent, keyed, neither).
const TABLE: [(Code, [Decision; 3]); 17] = [
    (Code::Ok, [OK, OK, OK]),
    (Code::Cancelled, [PERM, PERM, PERM]),
    (Code::Unknown, [NOT_TRANSIENT, NOT_TRANSIENT, UNSAFE]),
    (Code::InvalidArgument, [PERM, PERM, PERM]),
    (Code::DeadlineExceeded, [WITHIN, WITHIN, UNSAFE]),
    (Code::NotFound, [PERM, PERM, PERM]),
    (Code::AlreadyExists, [PERM, PERM, PERM]),
    (Code::PermissionDenied, [PERM, PERM, PERM]),
    (Code::ResourceExhausted, [RETRY, RETRY, UNSAFE]),
    (Code::FailedPrecondition, [PERM, PERM, PERM]),
    (Code::Aborted, [REFRESH, REFRESH, UNSAFE]),
    (Code::OutOfRange, [PERM, PERM, PERM]),
    (Code::Unimplemented, [PERM, PERM, PERM]),
    (Code::Internal, [NOT_TRANSIENT, NOT_TRANSIENT, UNSAFE]),
    (Code::Unavailable, [RETRY, RETRY, UNSAFE]),
    (Code::DataLoss, [PERM, PERM, PERM]),
    (Code::Unauthenticated, [PERM, PERM, PERM]),
];

#[test]
fn r2_decision_table_all_codes() {
    assert_eq!(
        calls().map(|c| c.kind()),
        [CallKind::Idempotent, CallKind::Keyed, CallKind::Neither]
    );
    println!(
        "{:<20} {:<22} {:<22} {:<22}",
        "code", "idempotent", "keyed", "neither"
    );
    for (i, (code, want)) in TABLE.iter().enumerate() {
        assert_eq!(*code, Code::ALL[i], "the table lists all 17 codes in order");
        let got = calls().map(|c| classify(code, &c));
        assert_eq!(got, *want, "{code}");
        // A Status with the same code decides the same.
        let status = Status::new(*code, "x");
        assert_eq!(calls().map(|c| classify(&status, &c)), *want, "{code}");
        println!(
            "{:<20} {:<22} {:<22} {:<22}",
            code.as_str(),
            got[0].as_str(),
            got[1].as_str(),
            got[2].as_str()
        );
    }

    // Declared transient: INTERNAL and UNKNOWN become retryable, for idempotent calls only.
    for code in [Code::Internal, Code::Unknown] {
        let got = calls().map(|c| classify(&code, &c.declare_transient()));
        assert_eq!(got, [RETRY, UNSAFE, UNSAFE], "{code} declared transient");
    }
    // The declaration changes nothing else.
    for (code, want) in TABLE {
        if code != Code::Internal && code != Code::Unknown {
            let got = calls().map(|c| classify(&code, &c.declare_transient()));
            assert_eq!(got, want, "{code} declared transient");
        }
    }
    // An idempotent call that also carries a key is idempotent.
    let both = Call::idempotent().with_key(key());
    assert_eq!(both.kind(), CallKind::Idempotent);
    assert_eq!(classify(&Code::Internal, &both.declare_transient()), RETRY);
}

#[test]
fn r2_reason_codes_refine_the_code() {
    let with = |code, reason| Status::new(code, "x").with_reason(reason);
    let cases = [
        (
            with(Code::Unavailable, Reason::UPSTREAM_UNAVAILABLE),
            [RETRY, RETRY, UNSAFE],
        ),
        (
            with(Code::Internal, Reason::UPSTREAM_UNAVAILABLE),
            [RETRY, RETRY, UNSAFE],
        ),
        (
            with(Code::ResourceExhausted, Reason::RATE_LIMITED),
            [RETRY, RETRY, UNSAFE],
        ),
        (
            with(Code::Unavailable, Reason::RATE_LIMITED),
            [RETRY, RETRY, UNSAFE],
        ),
        (
            with(Code::Aborted, Reason::STOCK_CONFLICT),
            [REFRESH, REFRESH, UNSAFE],
        ),
        (
            with(Code::Internal, Reason::STOCK_CONFLICT),
            [REFRESH, REFRESH, UNSAFE],
        ),
        // The server is still running the first attempt (E14): resend the same key.
        (
            with(Code::Aborted, Reason::REQUEST_IN_FLIGHT),
            [RETRY, RETRY, UNSAFE],
        ),
        // DEADLINE_EXCEEDED stays conditional on the deadline whatever the reason.
        (
            with(Code::DeadlineExceeded, Reason::UNKNOWN_OUTCOME),
            [WITHIN, WITHIN, UNSAFE],
        ),
        // Permanent codes stay permanent whatever the reason.
        (
            with(Code::InvalidArgument, Reason::RATE_LIMITED),
            [PERM, PERM, PERM],
        ),
        (
            with(Code::FailedPrecondition, Reason::IDEMPOTENCY_CONFLICT),
            [PERM, PERM, PERM],
        ),
    ];
    for (status, want) in cases {
        assert_eq!(calls().map(|c| classify(&status, &c)), want, "{status}");
    }
}

#[test]
fn s3_unknown_outcome_is_retried_only_with_the_same_key_or_idempotence() {
    for code in [Code::Unavailable, Code::Unknown, Code::Internal] {
        let lost =
            Status::new(code, "connection lost after send").with_reason(Reason::UNKNOWN_OUTCOME);
        assert_eq!(
            calls().map(|c| classify(&lost, &c)),
            [RETRY, RETRY, UNSAFE],
            "{code}"
        );
    }
}

#[test]
fn r2_resource_exhausted_waits_for_pushback_never_at_once() {
    let ms = Duration::from_millis;
    let hinted = Status::new(Code::ResourceExhausted, "slow down").with_retry_after(ms(250));
    assert_eq!(
        classify(&hinted, &Call::idempotent()),
        Decision::Retry(Wait::Pushback(ms(250)))
    );
    // No hint, or a zero hint: the local backoff (never zero: base_delay > 0 is enforced).
    let zero = Status::new(Code::ResourceExhausted, "slow down").with_retry_after(Duration::ZERO);
    assert_eq!(classify(&zero, &Call::idempotent()), RETRY);
    // Pushback also rides on the conditional decisions.
    let aborted = Status::new(Code::Aborted, "x").with_retry_after(ms(5));
    assert_eq!(
        classify(&aborted, &Call::keyed(key())),
        Decision::RefreshThenRetry(Wait::Pushback(ms(5)))
    );
}
