//! D1: two engines with their own connections on one Redis: side effects == intents.

use idem_core::Status;
use idem_dedup::OutcomeKind;
use idem_redis::{RedisTier, Source};
use std::time::Duration;

use idem_test_support::redis::RedisServer;

use crate::{engine, exactly_once_workload, fp, scope, tier};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_two_engines_thousands_of_intents_one_side_effect_each() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    // 8,000 calls start at once, in a debug build, beside other tests' servers on two cores: a
    // longer time limit than the other tests', so the burst itself is never taken for an outage.
    let slow_ok = || async {
        RedisTier::builder()
            .command_timeout(Duration::from_secs(10))
            .allow_volatile(true)
            .connect(&redis.url())
            .await
            .expect("connect to the test redis")
    };
    let a = engine(slow_ok().await);
    let b = engine(slow_ok().await);
    let intents = 2_000;
    let effects = exactly_once_workload(&[a.clone(), b.clone()], "d1-two", intents, 4).await;
    assert_eq!(effects as usize, intents);

    // Each intent ran once in total: executed on one engine, taken from Redis on the other.
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.executed + sb.executed, intents as u64);
    assert_eq!(
        sa.remote_replayed + sa.remote_joined + sb.remote_replayed + sb.remote_joined,
        intents as u64,
        "{sa:?} {sb:?}"
    );
    assert_eq!(
        sa.unavailable + sb.unavailable + sa.fenced_out + sb.fenced_out,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_other_instance_replays_and_local_replay_costs_no_round_trip() {
    let redis = RedisServer::start().await;
    let a = engine(tier(&redis.url()).await);
    let b = engine(tier(&redis.url()).await);
    let s = scope("d1-replay", 1);
    let first = a
        .execute(&s, fp(1), |t| async move {
            Ok::<_, Status>(format!("ran with {t}"))
        })
        .await
        .unwrap();
    assert_eq!(
        (first.kind(), first.source()),
        (OutcomeKind::Executed, Source::ThisInstance)
    );
    assert!(first.fencing_token().unwrap().is_fenced());

    let other = b
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap();
    assert_eq!(
        (other.kind(), other.source()),
        (OutcomeKind::Replayed, Source::OtherInstance)
    );
    assert_eq!(other.value(), first.value());

    // Replays of results this instance holds: no Redis command at all.
    let before_server = redis.commands_processed().await;
    let before_a = a.remote().commands_sent();
    let before_b = b.remote().commands_sent();
    for _ in 0..100 {
        let r = a
            .execute(&s, fp(1), |_| async { Ok::<_, Status>("x".into()) })
            .await
            .unwrap();
        assert_eq!(r.kind(), OutcomeKind::Replayed);
        let r = b
            .execute(&s, fp(1), |_| async { Ok::<_, Status>("x".into()) })
            .await
            .unwrap();
        assert_eq!(r.kind(), OutcomeKind::Replayed);
    }
    assert_eq!(a.remote().commands_sent(), before_a);
    assert_eq!(b.remote().commands_sent(), before_b);
    assert_eq!(redis.commands_processed().await, before_server);
}
