//! D3/D5 options of the builder on a real redis-server: `wait_replicas` without enough replicas,
//! and a tier over the user's own `ConnectionManager`.

use std::time::Duration;

use idem_core::Status;
use idem_dedup::OutcomeKind;
use idem_redis::{RedisTier, Source, TieredEngine};

use crate::support::{raw, RedisServer};
use crate::{engine, fp, scope, tier};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_wait_replicas_unconfirmed_completion_is_not_recorded() {
    let redis = RedisServer::start().await;
    // This server has no replica: WAIT 1 never confirms.
    let waiting = RedisTier::builder()
        .command_timeout(Duration::from_secs(3))
        .allow_volatile(true)
        .wait_replicas(1, Duration::from_millis(50))
        .connect(&redis.url())
        .await
        .unwrap();
    let a = TieredEngine::<String>::builder(waiting)
        .lease(Duration::from_millis(500))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(50))
        .build()
        .unwrap();
    let s = scope("d5-wait", 1);
    let out = a
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("order-1001".into())
        })
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert!(
        !out.is_recorded(),
        "no replica confirmed it: the caller must not be told it is recorded"
    );
    assert_eq!(a.stats().unrecorded, 1);

    // Redis itself has the result (only the replicas' confirmation was missing): another
    // instance replays it.
    let b = engine(tier(&redis.url()).await);
    let other = b
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap();
    assert_eq!(other.value(), "order-1001");
    assert_eq!(other.source(), Source::OtherInstance);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_tier_over_the_users_own_connection_manager() {
    let redis = RedisServer::start().await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mgr = client.get_connection_manager().await.unwrap();
    let own = RedisTier::builder()
        .allow_volatile(true)
        .from_connection_manager(mgr.clone(), Some(client))
        .await
        .unwrap();
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut mgr.clone())
        .await
        .unwrap();
    let a = engine(own);
    let b = engine(tier(&redis.url()).await);
    let s = scope("d3-own", 1);
    a.execute(&s, fp(1), |t| async move {
        Ok::<_, Status>(format!("ran with {t}"))
    })
    .await
    .unwrap();
    // The scripts went over the user's own connection.
    let me = raw(redis.port(), &format!("CLIENT LIST ID {id}"))
        .await
        .unwrap();
    assert!(me.contains("cmd=evalsha"), "{me}");
    let other = b
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap();
    assert_eq!(other.kind(), OutcomeKind::Replayed);
}
