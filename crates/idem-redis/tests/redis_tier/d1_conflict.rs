//! K4 across instances: same key, other fingerprint: FAILED_PRECONDITION on both instances.

use std::time::Duration;

use idem_core::{Code, Fingerprint, Reason, Status};
use idem_dedup::OutcomeKind;
use idem_test_support::redis::RedisServer;

use crate::{engine, scope, tier};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_conflict_across_instances_is_failed_precondition_on_both() {
    let redis = RedisServer::start().await;
    let a = engine(tier(&redis.url()).await);
    let b = engine(tier(&redis.url()).await);
    let s = scope("d1-conflict", 1);
    let (fp1, fp2) = (Fingerprint::of(b"qty=1"), Fingerprint::of(b"qty=2"));

    // A holds the scope (in flight) with fp1; B brings fp2.
    let (release, hold) = tokio::sync::oneshot::channel::<()>();
    let a2 = a.clone();
    let s2 = s.clone();
    let first = tokio::spawn(async move {
        a2.execute(&s2, fp1, move |_| async move {
            let _ = hold.await;
            Ok::<_, Status>("order-1".to_string())
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let in_flight = b
        .execute(&s, fp2, |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap_err();
    assert_eq!(in_flight.code(), Code::FailedPrecondition);
    assert_eq!(in_flight.reason(), Some(Reason::IDEMPOTENCY_CONFLICT));

    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap().kind(), OutcomeKind::Executed);

    // Completed: fp2 is refused on both instances; fp1 is replayed on both.
    for e in [&a, &b] {
        let err = e
            .execute(&s, fp2, |_| async {
                Ok::<_, Status>("must not run".into())
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
        let ok = e
            .execute(&s, fp1, |_| async {
                Ok::<_, Status>("must not run".into())
            })
            .await
            .unwrap();
        assert_eq!(ok.value(), "order-1");
    }
    assert_eq!(b.stats().conflicts, 2);
}
