//! Z4: the Z1 chaos run across two server instances that share one Redis. The fault-injecting
//! proxy spreads the clients' connections over both instances (round robin), so a retry after a
//! dropped connection lands on the other instance, as behind a load balancer; both instances
//! write to one orders table. Asserted exactly, per intent id: every intent reported successful
//! was created exactly once, none was created twice — and the instances did meet each other's
//! runs through Redis.
//!
//! The test starts its own `redis-server` (append-only file, fsync on every write) on a free
//! loopback port; it fails, saying why, when `redis-server` is not installed.

use idem_shop::chaos::{self, ChaosConfig, Instances};
use idem_shop::redis_server::{OwnRedis, Persistence};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z4_two_instances_on_one_redis_every_success_created_exactly_once() {
    let redis = OwnRedis::start(Persistence::AofAlways)
        .await
        .expect("Z4 needs redis-server on the PATH");
    let mut cfg = ChaosConfig::twenty_percent(100, 4, 0x24);
    cfg.instances = Instances::Redis {
        url: redis.url(),
        count: 2,
        allow_volatile: false,
    };
    let report = chaos::run(cfg).await.unwrap();
    println!("{}", report.table());

    assert_eq!(report.results.len(), 400);
    assert_eq!(report.instances, 2);
    assert_eq!(report.violations(), Vec::<String>::new());
    assert_eq!(report.succeeded() + report.gave_up(), 400);
    let tier = report.tier.expect("a tiered run reports tier counts");
    // Every order was created under a Redis claim; none without one.
    assert_eq!(tier.fail_open, 0);
    assert_eq!(tier.executed as usize, report.orders_created());
    // Retries crossed instances: some duplicates were answered with the other instance's run.
    assert!(
        tier.remote_replayed + tier.remote_joined > 0,
        "no duplicate ever reached the other instance: {tier:?}"
    );
    assert!(report.client.retrier.retries > 0);
}
