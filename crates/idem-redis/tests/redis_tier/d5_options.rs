//! D3/D5 options of the builder on a real redis-server: `wait_replicas` with a claim or a
//! completion that no replica confirms, and a tier over the user's own `ConnectionManager`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Status};
use idem_dedup::OutcomeKind;
use idem_redis::{RedisTier, Source, TieredEngine};
use idem_test_support::redis::{raw, RedisServer};

use crate::{engine, fp, scope, tier};

fn waiting_engine(tier: RedisTier) -> TieredEngine<String> {
    TieredEngine::<String>::builder(tier)
        .lease(Duration::from_millis(500))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(50))
        .build()
        .unwrap()
}

async fn waiting_tier(url: &str) -> RedisTier {
    RedisTier::builder()
        .command_timeout(Duration::from_secs(3))
        .allow_volatile(true)
        .wait_replicas(1, Duration::from_millis(50))
        .connect(url)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_wait_replicas_unconfirmed_claim_runs_nothing_and_gives_the_scope_back() {
    let redis = RedisServer::start().await;
    // This server has no replica: WAIT 1 never confirms, so no claim may lead to a run (a
    // failover could lose it, and another instance would run the action too).
    let a = waiting_engine(waiting_tier(&redis.url()).await);
    let s = scope("d5-wait-claim", 1);
    let ran = Arc::new(AtomicU32::new(0));
    let r = ran.clone();
    let e = a
        .execute(&s, fp(1), move |_| async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Status>("order-1001".into())
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(e.to_string().contains("replicas"), "{e}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the action must not run");

    // The claim was given back: an instance without the option runs it at once, not after
    // the lease.
    let b = engine(tier(&redis.url()).await);
    let started = tokio::time::Instant::now();
    let out = b
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("order-1002".into())
        })
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert!(
        started.elapsed() < Duration::from_millis(450),
        "waited for the lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_wait_replicas_unconfirmed_completion_is_not_recorded() {
    let primary = RedisServer::start().await;
    let replica = RedisServer::start().await;
    let reply = raw(
        replica.port(),
        &format!("REPLICAOF 127.0.0.1 {}", primary.port()),
    )
    .await
    .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    // Until the replica is in sync, WAIT 1 answers 0.
    let synced = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let info = raw(primary.port(), "INFO replication").await.unwrap();
        if info.contains("connected_slaves:1") && info.contains("state=online") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < synced,
            "no replica in sync:\n{info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let a = waiting_engine(waiting_tier(&primary.url()).await);
    let s = scope("d5-wait", 1);
    let replica_port = replica.port();
    let out = a
        .execute(&s, fp(1), move |_| async move {
            // The claim was confirmed; now the replica stalls past the completion's wait.
            tokio::spawn(raw(replica_port, "DEBUG SLEEP 1"));
            tokio::time::sleep(Duration::from_millis(200)).await;
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
    let b = engine(tier(&primary.url()).await);
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
    let _ = a
        .execute(&s, fp(1), |t| async move {
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
