//! K4 / D4: the same key with another body, across instances, is FAILED_PRECONDITION on both —
//! while the first is in flight and once it completed — in both modes; the action never runs.

use std::time::Duration;

use idem_core::{Fingerprint, Status};

use crate::support::TestDb;
use crate::{is_conflict, scope};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_conflict_across_instances_is_failed_precondition_on_both_remote_tier() {
    let db = TestDb::new("d4conflict").await;
    let lease = Duration::from_secs(10);
    let (a, b) = (db.tiered(2, lease).await, db.tiered(2, lease).await);
    let s = scope("d4-conflict", 1);
    let (one, two) = (Fingerprint::of(b"qty=1"), Fingerprint::of(b"qty=2"));

    // In flight on A: B's other body conflicts.
    let (a2, s2) = (a.clone(), s.clone());
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        a2.execute(&s2, one, move |_| async move {
            let _ = started_tx.send(());
            let _ = release.await;
            Ok::<_, Status>("order-1".to_string())
        })
        .await
    });
    started.await.unwrap();
    let e = b
        .execute(&s, two, |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap_err();
    assert!(is_conflict(&e), "{e}");
    release_tx.send(()).unwrap();
    assert_eq!(running.await.unwrap().unwrap().value(), "order-1");

    // Completed: the other body conflicts on both instances.
    for e in [&a, &b] {
        let err = e
            .execute(&s, two, |_| async {
                Ok::<_, Status>("must not run".into())
            })
            .await
            .unwrap_err();
        assert!(is_conflict(&err), "{err}");
    }
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_conflict_across_instances_is_failed_precondition_on_both_transactional() {
    let db = TestDb::new("d4txconflict").await;
    let (a, b) = (db.engine(3).await, db.engine(3).await);
    let s = scope("d4-txconflict", 1);
    let (one, two) = (Fingerprint::of(b"qty=1"), Fingerprint::of(b"qty=2"));
    let insert = db.insert_order();

    // In flight on A (its transaction open): B's other body waits for it, then conflicts.
    let (a2, s2) = (a.clone(), s.clone());
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
    let order = crate::place_order(insert.clone(), 1, "A".into());
    let running = tokio::spawn(async move {
        a2.execute(&s2, one, move |tx| async move {
            let v = order(tx).await?;
            let _ = started_tx.send(());
            let _ = release.await;
            Ok(v)
        })
        .await
    });
    started.await.unwrap();
    let b2 = b.clone();
    let s3 = s.clone();
    let ins = insert.clone();
    let waiting = tokio::spawn(async move {
        b2.execute(&s3, two, crate::place_order(ins, 1, "B".into()))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    release_tx.send(()).unwrap();
    let _ = running.await.unwrap().unwrap();
    let e = waiting.await.unwrap().unwrap_err();
    assert!(is_conflict(&e), "{e}");

    for e in [&a, &b] {
        let err = e
            .execute(
                &s,
                two,
                crate::place_order(insert.clone(), 1, "again".into()),
            )
            .await
            .unwrap_err();
        assert!(is_conflict(&err), "{err}");
    }
    assert_eq!(db.orders().await.len(), 1, "only the first body's order");
    db.drop_schema().await;
}
