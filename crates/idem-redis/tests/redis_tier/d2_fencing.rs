//! D1/D2: a holder stalls past its lease; one waiting instance claims and completes; the stalled
//! holder's late completion is fenced out and its token is lower.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Fingerprint, Reason, Status};
use idem_dedup::OutcomeKind;
use idem_redis::{RedisTier, Source, TieredEngine};
use tokio::time::Instant;

use crate::support::RedisServer;
use crate::{scope, tier};

fn short_lease(t: RedisTier) -> TieredEngine<String> {
    TieredEngine::<String>::builder(t)
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .local_shards(1)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_lease_lapse_fences_out_the_stalled_holder() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let a = short_lease(tier(&redis.url()).await);
    let b = short_lease(tier(&redis.url()).await);
    let c = short_lease(tier(&redis.url()).await);
    let s = scope("d2-fence", 1);
    let fp = Fingerprint::of(b"qty=1");
    let start = Instant::now();

    // A claims, then stalls for 1 s: past its 300 ms lease.
    let token_a = Arc::new(AtomicU64::new(0));
    let (a2, s2, ta) = (a.clone(), s.clone(), token_a.clone());
    let stalled = tokio::spawn(async move {
        a2.execute(&s2, fp, move |token| async move {
            ta.store(token.get(), Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1000)).await;
            Ok::<_, Status>("from A".to_string())
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_ne!(token_a.load(Ordering::SeqCst), 0, "A claimed");

    // B and C arrive while A holds the claim: they wait; when the lease lapses one of them
    // claims and runs, the other joins it.
    let runs = Arc::new(AtomicU32::new(0));
    let token_new = Arc::new(AtomicU64::new(0));
    let waiter = |e: TieredEngine<String>| {
        let (s, runs, tn) = (s.clone(), runs.clone(), token_new.clone());
        tokio::spawn(async move {
            e.execute(&s, fp, move |token| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tn.store(token.get(), Ordering::SeqCst);
                Ok::<_, Status>("from the new holder".to_string())
            })
            .await
        })
    };
    let (wb, wc) = (waiter(b.clone()), waiter(c.clone()));
    let (ob, oc) = (wb.await.unwrap().unwrap(), wc.await.unwrap().unwrap());
    let took_over = start.elapsed();
    assert!(
        took_over >= Duration::from_millis(250) && took_over < Duration::from_millis(900),
        "the new holder completed at {took_over:?}: after A's lease, before A woke"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "exactly one waiter ran");
    let mut kinds = [ob.kind(), oc.kind()];
    kinds.sort_by_key(|k| k.as_str());
    assert_eq!(kinds, [OutcomeKind::Executed, OutcomeKind::Joined]);
    assert_eq!(ob.value(), "from the new holder");
    assert_eq!(oc.value(), "from the new holder");

    // A wakes and completes late: fenced out, nothing overwritten, its caller learns it.
    let late = stalled.await.unwrap().unwrap_err();
    assert_eq!(late.code(), Code::Aborted, "{late}");
    assert_eq!(late.reason(), Some(Reason::new("FENCED_OUT")));
    assert_eq!(a.stats().fenced_out, 1);
    let (ta, tn) = (
        token_a.load(Ordering::SeqCst),
        token_new.load(Ordering::SeqCst),
    );
    assert!(
        ta < tn,
        "stale token {ta} must be lower than the new holder's {tn}"
    );

    // Everyone, A included, now gets the new holder's result.
    for e in [&a, &b, &c] {
        let r = e
            .execute(&s, fp, |_| async { Ok::<_, Status>("must not run".into()) })
            .await
            .unwrap();
        assert_eq!(r.value(), "from the new holder");
    }
    let again = a
        .execute(&s, fp, |_| async { Ok::<_, Status>("x".into()) })
        .await
        .unwrap();
    assert_eq!(again.source(), Source::OtherInstance);
}
