//! D1/D2: a holder stalls past its lease; one waiting instance claims and completes; the stalled
//! holder's late completion is fenced out and its token is lower.

use std::time::Duration;

use idem_core::Fingerprint;
use idem_dedup::OutcomeKind;
use idem_redis::{LocalCache, RedisTier, TieredEngine};
use idem_test_support::fencing::{assert_fenced_out, take_over, StalledHolder};
use idem_test_support::redis::RedisServer;
use tokio::time::Instant;

use crate::{scope, tier};

fn short_lease(t: RedisTier) -> TieredEngine<String> {
    TieredEngine::<String>::builder(t)
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .local(LocalCache::new().shards(1))
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
    let stalled = StalledHolder::spawn(&a, &s, fp, Duration::from_millis(1000));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_ne!(stalled.token(), 0, "A claimed");

    // B and C arrive while A holds the claim: they wait; when the lease lapses one of them
    // claims and runs, the other joins it.
    let new = take_over(&b, &c, &s, fp).await;
    let took_over = start.elapsed();
    assert!(
        took_over >= Duration::from_millis(250) && took_over < Duration::from_millis(900),
        "the new holder completed at {took_over:?}: after A's lease, before A woke"
    );
    let [ob, oc] = &new.outcomes;
    assert_eq!(new.runs, 1, "exactly one waiter ran");
    let mut kinds = [ob.kind(), oc.kind()];
    kinds.sort_by_key(|k| k.as_str());
    assert_eq!(kinds, [OutcomeKind::Executed, OutcomeKind::Joined]);
    assert_eq!(ob.value(), "from the new holder");
    assert_eq!(oc.value(), "from the new holder");

    // A wakes and completes late: fenced out, nothing overwritten, its caller learns it; then
    // everyone, A included, gets the new holder's result.
    assert_fenced_out(stalled, &new, [&a, &b, &c], &s, fp).await;
}
