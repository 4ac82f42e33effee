//! K7, R6: `Call::outbound` and `Call::outbound_step`, the bare retrier's keys for writes sent
//! downstream: derived from the run being served (the same on a re-run of the intent, on any
//! instance), fresh outside a run, and the same on every attempt of the call.

use std::sync::Mutex;

use idem_core::run::{downstream_key, Run, RunStart, Step};
use idem_core::{Code, IdempotencyKey, Scope};
use idem_retry::{Call, CallKind, Retrier, RetryPolicy, VirtualScheduler};

fn inbound() -> Scope {
    Scope::parse(
        "tenant-0042",
        "/shop.v1.Shop/CreateOrder",
        "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
    )
    .unwrap()
}

fn key(call: &Call) -> IdempotencyKey {
    assert_eq!(call.kind(), CallKind::Keyed);
    call.key().cloned().unwrap()
}

#[tokio::test]
async fn k7_outbound_inside_a_run_is_the_runs_ordinal_key() {
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let (a, b, other) = run
        .clone()
        .attach(async {
            (
                key(&Call::outbound("/stock.v1.Stock/Deduct")),
                key(&Call::outbound("/stock.v1.Stock/Deduct")),
                key(&Call::outbound("POST /v1/charges")),
            )
        })
        .await;
    let d = run.digest();
    assert_eq!(
        a,
        downstream_key(d, "/stock.v1.Stock/Deduct", Step::Ordinal(0))
    );
    assert_eq!(
        b,
        downstream_key(d, "/stock.v1.Stock/Deduct", Step::Ordinal(1))
    );
    // Each target counts its own calls.
    assert_eq!(
        other,
        downstream_key(d, "POST /v1/charges", Step::Ordinal(0))
    );
    // The vector of idem-core's k7 tests: this scope's first deduction.
    assert_eq!(a.as_str(), "6aa27a68-36cc-8c77-adcd-cca020495d81");
}

#[tokio::test]
async fn k7_outbound_rerun_of_the_intent_sends_the_same_keys() {
    let handler = || async {
        vec![
            key(&Call::outbound("/stock.v1.Stock/Deduct")),
            key(&Call::outbound_step("POST /v1/charges", "charge")),
            key(&Call::outbound("/stock.v1.Stock/Deduct")),
        ]
    };
    let first = Run::new(&inbound(), None, RunStart::Fresh)
        .attach(handler())
        .await;
    // Another instance takes the intent over after the first run died.
    let again = Run::new(&inbound(), Some(9), RunStart::TakeOver)
        .attach(handler())
        .await;
    assert_eq!(first, again);
    // Another intent (another inbound key) derives other keys.
    let other = Scope::parse(
        "tenant-0042",
        "/shop.v1.Shop/CreateOrder",
        "another-key-0001",
    )
    .unwrap();
    let theirs = Run::new(&other, None, RunStart::Fresh)
        .attach(handler())
        .await;
    for k in &theirs {
        assert!(!first.contains(k));
    }
}

#[tokio::test]
async fn k7_outbound_step_is_the_named_key_whatever_came_before() {
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let named = run
        .clone()
        .attach(async {
            // Ordinal calls before it do not move a named step.
            let _ = Call::outbound("POST /v1/charges");
            let _ = Call::outbound("POST /v1/charges");
            key(&Call::outbound_step("POST /v1/charges", "charge"))
        })
        .await;
    assert_eq!(named, run.key_for("POST /v1/charges", "charge"));
    // And a named step does not take an ordinal: the next ordinal call is still the third.
    let third = run
        .clone()
        .attach(async { key(&Call::outbound("POST /v1/charges")) })
        .await;
    assert_eq!(
        third,
        downstream_key(run.digest(), "POST /v1/charges", Step::Ordinal(2))
    );
}

#[tokio::test]
async fn k7_outbound_outside_a_run_is_a_fresh_key_per_call() {
    assert!(Run::current().is_none());
    let a = key(&Call::outbound("POST /v1/charges"));
    let b = key(&Call::outbound("POST /v1/charges"));
    let c = key(&Call::outbound_step("POST /v1/charges", "charge"));
    let d = key(&Call::outbound_step("POST /v1/charges", "charge"));
    assert_ne!(a, b);
    assert_ne!(c, d);
    // Random (version 4) keys, not derived (version 8) ones.
    for k in [&a, &b, &c, &d] {
        assert_eq!(k.as_str().as_bytes()[14], b'4', "{k}");
    }
}

#[tokio::test]
async fn k7_outbound_call_carries_its_one_key_on_every_attempt_r6() {
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let clock = VirtualScheduler::instant();
    let retrier = Retrier::new(RetryPolicy::default()).with_scheduler(clock.clone());
    let seen = Mutex::new(Vec::new());
    let call = run
        .clone()
        .attach(async { Call::outbound("/stock.v1.Stock/Deduct") })
        .await;
    let r: Result<(), Code> = retrier
        .call(&call, |attempt| {
            seen.lock().unwrap().push(attempt.key().cloned());
            async { Err(Code::Unavailable) }
        })
        .await;
    assert_eq!(r, Err(Code::Unavailable));
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 3);
    let want = downstream_key(run.digest(), "/stock.v1.Stock/Deduct", Step::Ordinal(0));
    assert!(seen.iter().all(|k| k.as_ref() == Some(&want)));
}
