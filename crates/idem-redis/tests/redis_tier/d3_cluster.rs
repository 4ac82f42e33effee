//! D3: the same exactly-once workload against a 3-master Redis Cluster.

use idem_core::Status;
use idem_redis::{LocalCache, RedisTier, TieredEngine};
use std::time::Duration;

use idem_test_support::redis::RedisCluster;

use crate::{exactly_once_workload, fp, scope};

async fn cluster_engine(urls: &[String]) -> TieredEngine<String> {
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let tier = RedisTier::builder()
        .command_timeout(Duration::from_secs(10))
        .allow_volatile(true)
        .connect_cluster(&nodes)
        .await
        .expect("connect to the test cluster");
    TieredEngine::<String>::builder(tier)
        .local(LocalCache::new().shards(2))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_cluster_two_engines_one_side_effect_per_intent() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let cluster = RedisCluster::start().await;
    let urls = cluster.urls();
    let a = cluster_engine(&urls).await;
    let b = cluster_engine(&urls[1..]).await;
    let intents = 1_000;
    let effects = exactly_once_workload(&[a.clone(), b.clone()], "d3-cluster", intents, 3).await;
    assert_eq!(effects as usize, intents);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.executed + sb.executed, intents as u64);
    assert_eq!(sa.unavailable + sb.unavailable, 0);

    // Scopes whose tenant holds braces still land in one slot per scope (scripts would fail
    // with CROSSSLOT otherwise).
    let s = idem_core::Scope::parse("ten{a}nt", "/x}{y", "brace-key-0001").unwrap();
    let r = a
        .execute(&s, fp(0), |_| async { Ok::<_, Status>("ok".into()) })
        .await
        .unwrap();
    let again = b
        .execute(&s, fp(0), |_| async { Ok::<_, Status>("no".into()) })
        .await
        .unwrap();
    assert_eq!(r.value(), again.value());
    let _ = scope;
}
