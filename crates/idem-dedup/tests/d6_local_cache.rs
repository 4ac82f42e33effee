//! D6: the local engine in front of a shared record is a cache, configured by one
//! `LocalCache` for every engine that has one: by default a copy lives 5 minutes, never longer
//! than the records' TTL, and the settings given reach the local engine.

mod common;
mod tier;

use std::time::Duration;

use common::{fp, scope};
use idem_core::Status;
use idem_dedup::tiered::TieredEngine;
use idem_dedup::{LocalCache, OutcomeKind, Source};
use tier::MemTier;
use tokio::time::Instant;

/// Another instance's result, replayed through the tier on `b`: it carries `b`'s copy's expiry.
async fn copy_expiry(
    a: &TieredEngine<String, MemTier>,
    b: &TieredEngine<String, MemTier>,
) -> Duration {
    let s = scope("order-local-0001");
    let ran = a
        .execute(&s, fp("x"), |_| async { Ok::<_, Status>("v".to_owned()) })
        .await
        .unwrap();
    assert_eq!(ran.source(), Source::ThisInstance);
    let before = Instant::now();
    let there = b
        .execute(&s, fp("x"), |_| async { Ok::<_, Status>("w".to_owned()) })
        .await
        .unwrap();
    assert_eq!(
        (there.kind(), there.source(), there.value().as_str()),
        (OutcomeKind::Replayed, Source::OtherInstance, "v")
    );
    there.expires_at() - before
}

#[tokio::test(start_paused = true)]
async fn d6_a_tiered_engines_local_copy_lives_five_minutes_by_default() {
    let tier = MemTier::default();
    let build = || {
        TieredEngine::<String, MemTier>::builder(tier.clone())
            .ttl(Duration::from_secs(3600))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    assert_eq!(copy_expiry(&a, &b).await, Duration::from_secs(300));
}

#[tokio::test(start_paused = true)]
async fn d6_a_local_copy_never_outlives_the_records_ttl() {
    let tier = MemTier::default();
    let build = |local: LocalCache| {
        TieredEngine::<String, MemTier>::builder(tier.clone())
            .ttl(Duration::from_secs(60))
            .local(local)
            .build()
            .unwrap()
    };
    let a = build(LocalCache::new());
    let b = build(LocalCache::new().ttl(Duration::from_secs(3600)));
    assert_eq!(copy_expiry(&a, &b).await, Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn d6_the_local_cache_given_is_the_local_engines() {
    let tier = MemTier::default();
    let a = TieredEngine::<String, MemTier>::builder(tier.clone())
        .local(LocalCache::new().shards(3))
        .build()
        .unwrap();
    let b = TieredEngine::<String, MemTier>::builder(tier.clone())
        .local(LocalCache::new().ttl(Duration::from_secs(10)).shards(2))
        .build()
        .unwrap();
    assert_eq!(a.local_stats().shards.len(), 3);
    assert_eq!(b.local_stats().shards.len(), 2);
    assert_eq!(copy_expiry(&a, &b).await, Duration::from_secs(10));

    // A setting the local engine refuses is refused by the tiered engine's build.
    let err = TieredEngine::<String, MemTier>::builder(tier)
        .local(LocalCache::new().max_entries(0))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("max_entries"), "{err}");
}
