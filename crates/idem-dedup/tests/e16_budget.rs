//! E16: a byte budget beside `max_entries` (a weigher, as moka's), and each tenant's share of the
//! entries and bytes. Nothing is ever evicted; new scopes are refused with a retry-after hint.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, fp, gated_leader, joiners, Runs};
use idem_core::{Code, Fingerprint, Reason, Scope};
use idem_dedup::{DedupError, Engine, OutcomeKind};
use tokio::time::advance;

type Body = Arc<[u8]>;

fn body(len: usize) -> Body {
    Arc::from(vec![7u8; len])
}

fn scope_of(tenant: &str, i: u64) -> Scope {
    Scope::parse(
        tenant,
        "/shop.v1.Shop/CreateOrder",
        &format!("order-{i:08}"),
    )
    .unwrap()
}

async fn store(engine: &Engine<Body>, s: &Scope, len: usize) -> Result<OutcomeKind, DedupError> {
    engine
        .execute(s, fp("a"), move |_| async move { Ok(body(len)) })
        .await
        .map(|o| o.kind())
}

/// E16: while the stored values weigh `max_bytes` or more, new scopes get RESOURCE_EXHAUSTED
/// with the retry-after hint and run nothing; every stored value still replays; a forget and an
/// expiry give the bytes back.
#[tokio::test(start_paused = true)]
async fn e16_byte_budget_refuses_new_scopes_never_evicts_and_frees_on_expiry() {
    let ttl = Duration::from_secs(60);
    let engine = Engine::<Body>::builder()
        .shards(2)
        .ttl(ttl)
        .max_bytes(100)
        .weigher(|b: &Body| b.len())
        .retry_after(Duration::from_millis(250))
        .build()
        .unwrap();
    for i in 0..3 {
        assert_eq!(
            store(&engine, &scope_of("t", i), 40).await.unwrap(),
            OutcomeKind::Executed
        );
        eventually("weighed", || engine.stats().bytes == 40 * (i + 1)).await;
    }
    // 120 bytes stored: the third value took the total past the budget and was stored anyway.
    let runs = Runs::default();
    let r = runs.clone();
    let err = engine
        .execute(&scope_of("t", 3), fp("a"), move |_| async move {
            r.hit();
            Ok(body(1))
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        DedupError::Overloaded {
            retry_after: Duration::from_millis(250)
        }
    );
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(runs.get(), 0);
    for i in 0..3 {
        let out = engine
            .execute(&scope_of("t", i), fp("a"), |_| async { Ok(body(0)) })
            .await
            .unwrap();
        assert_eq!((out.kind(), out.value().len()), (OutcomeKind::Replayed, 40));
    }
    // A forget gives its bytes back before it returns: 80 < 100.
    assert!(engine.forget(&scope_of("t", 0)).await.unwrap());
    assert_eq!(
        store(&engine, &scope_of("t", 3), 10).await.unwrap(),
        OutcomeKind::Executed
    );
    eventually("weighed", || engine.stats().bytes == 90).await;
    assert_eq!(
        store(&engine, &scope_of("t", 4), 10).await.unwrap(),
        OutcomeKind::Executed
    );
    eventually("weighed", || engine.stats().bytes == 100).await;
    assert_eq!(
        store(&engine, &scope_of("t", 5), 1)
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    advance(ttl).await;
    eventually("expired", || engine.stats().bytes == 0).await;
    assert_eq!(
        store(&engine, &scope_of("t", 5), 1).await.unwrap(),
        OutcomeKind::Executed
    );
}

/// E16: a value that alone weighs more than the whole budget is still stored, returned to its
/// leader and its waiters and replayed (refusing to store it would let the retry run the side
/// effect again); new scopes are refused until it is gone.
#[tokio::test]
async fn e16_a_value_over_the_budget_is_stored_returned_and_replayed() {
    let engine = Engine::<Body>::builder()
        .shards(1)
        .max_bytes(10)
        .weigher(|b: &Body| b.len())
        .build()
        .unwrap();
    let s = scope_of("t", 1);
    let (leader, release) = gated_leader(&engine, &s, "a", || Ok(body(1000))).await;
    let waiters = joiners(&engine, &s, "a", 3, body(0)).await;
    release.send(()).unwrap();
    let out = leader.await.unwrap().unwrap();
    assert_eq!(
        (out.kind(), out.value().len()),
        (OutcomeKind::Executed, 1000)
    );
    for w in waiters {
        let out = w.await.unwrap().unwrap();
        assert_eq!((out.kind(), out.value().len()), (OutcomeKind::Joined, 1000));
    }
    let replay = engine
        .execute(&s, Fingerprint::of(b"a"), |_| async { Ok(body(0)) })
        .await
        .unwrap();
    assert_eq!(
        (replay.kind(), replay.value().len()),
        (OutcomeKind::Replayed, 1000)
    );
    assert_eq!(engine.stats().bytes, 1000);
    assert_eq!(
        store(&engine, &scope_of("t", 2), 1)
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    assert!(engine.forget(&s).await.unwrap());
    assert_eq!(
        store(&engine, &scope_of("t", 2), 1).await.unwrap(),
        OutcomeKind::Executed
    );
}

/// E16: one tenant floods new keys; it is refused for itself alone (RESOURCE_EXHAUSTED, reason
/// TENANT_QUOTA_EXCEEDED, with the retry-after hint) once it holds its share, its own results
/// keep replaying, and another tenant is still served. Without the share the flood would fill
/// all 100 entries and lock the other tenant out for a whole TTL.
#[tokio::test]
async fn e16_a_tenant_flooding_new_keys_is_refused_alone_and_others_are_served() {
    // 100 entries over 4 shards: parts of 25; a tenant may hold 40% of each, 10 per shard.
    let engine = Engine::<Body>::builder()
        .shards(4)
        .max_entries(100)
        .tenant_share(40)
        .retry_after(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut admitted = Vec::new();
    for i in 0..1000 {
        let s = scope_of("flood", i);
        match store(&engine, &s, 1).await {
            Ok(kind) => {
                assert_eq!(kind, OutcomeKind::Executed);
                admitted.push(s);
            }
            Err(err) => {
                assert_eq!(
                    err,
                    DedupError::TenantQuotaExceeded {
                        retry_after: Duration::from_millis(300)
                    }
                );
                assert_eq!(err.code(), Code::ResourceExhausted);
                assert_eq!(err.reason(), Some(Reason::new("TENANT_QUOTA_EXCEEDED")));
                assert_eq!(
                    err.to_status().retry_after(),
                    Some(Duration::from_millis(300))
                );
            }
        }
    }
    // A thousand keys reach every shard, so the flood holds its share exactly: 4 x 10.
    assert_eq!(admitted.len(), 40);
    assert_eq!(engine.stats().outcomes.tenant_refused, 960);
    for s in &admitted {
        let out = engine
            .execute(s, fp("a"), |_| async { Ok(body(2)) })
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Replayed);
    }
    for i in 0..8 {
        assert_eq!(
            store(&engine, &scope_of("calm", i), 1).await.unwrap(),
            OutcomeKind::Executed,
            "the other tenant is served"
        );
    }
    eventually("48 entries", || engine.stats().entries() == 48).await;
}

/// E16: the share counts bytes too: a tenant whose stored values weigh its share of a shard's
/// part of `max_bytes` is refused there, and another tenant is still served.
#[tokio::test]
async fn e16_a_tenant_is_held_to_its_share_of_the_bytes() {
    // 1000 bytes over 2 shards: parts of 500; 50% of each, 250 bytes per shard per tenant.
    let engine = Engine::<Body>::builder()
        .shards(2)
        .max_bytes(1000)
        .weigher(|b: &Body| b.len())
        .tenant_share(50)
        .build()
        .unwrap();
    let mut stored = 0;
    for i in 0..200 {
        match store(&engine, &scope_of("big", i), 100).await {
            Ok(_) => stored += 1,
            Err(err) => assert!(
                matches!(err, DedupError::TenantQuotaExceeded { .. }),
                "{err}"
            ),
        }
    }
    // Per shard: admitted at 0, 100 and 200 bytes; refused from 300 on.
    assert_eq!(stored, 6);
    eventually("weighed", || engine.stats().bytes == 600).await;
    for i in 0..4 {
        assert_eq!(
            store(&engine, &scope_of("small", i), 10).await.unwrap(),
            OutcomeKind::Executed
        );
    }
}

/// E16 (issue 17): a completed entry counts in its tenant's share until it goes, by expiry or by
/// forget, and then gives the room back to that tenant; tenants whose names are prefixes of
/// each other are counted apart; scopes longer than any inline copy count like short ones.
#[tokio::test(start_paused = true)]
async fn e16_a_tenants_share_is_given_back_when_its_results_expire_or_are_forgotten() {
    let ttl = Duration::from_secs(60);
    // 20 entries on one shard, 25% each: 5 per tenant.
    let engine = Engine::<Body>::builder()
        .shards(1)
        .max_entries(20)
        .tenant_share(25)
        .ttl(ttl)
        .build()
        .unwrap();
    let long_method = format!("/{}/CreateOrder", "very.long.package.name".repeat(8));
    let long = |i: u64| Scope::parse("ab", &long_method, &format!("order-{i:08}")).unwrap();
    for i in 0..5 {
        assert_eq!(store(&engine, &long(i), 1).await, Ok(OutcomeKind::Executed));
        assert_eq!(
            store(&engine, &scope_of("a", i), 1).await,
            Ok(OutcomeKind::Executed)
        );
    }
    let full = |r: Result<OutcomeKind, DedupError>| {
        matches!(r, Err(DedupError::TenantQuotaExceeded { .. }))
    };
    assert!(full(store(&engine, &long(5), 1).await));
    assert!(full(store(&engine, &scope_of("a", 5), 1).await));
    // A forget gives one entry back to its tenant only.
    assert!(engine.forget(&scope_of("a", 0)).await.unwrap());
    assert!(full(store(&engine, &long(5), 1).await));
    assert_eq!(
        store(&engine, &scope_of("a", 5), 1).await,
        Ok(OutcomeKind::Executed)
    );
    // Expiry gives everything back.
    advance(ttl).await;
    eventually("expired", || engine.stats().completed == 0).await;
    for i in 10..15 {
        assert_eq!(store(&engine, &long(i), 1).await, Ok(OutcomeKind::Executed));
        assert_eq!(
            store(&engine, &scope_of("a", i), 1).await,
            Ok(OutcomeKind::Executed)
        );
    }
    assert!(full(store(&engine, &long(15), 1).await));
}

/// E16: the byte budget's settings are refused unless they make sense, naming the rule.
#[tokio::test]
async fn e16_builder_refuses_a_byte_budget_without_a_weigher_and_a_bad_share() {
    let weigh = |b: &Body| b.len();
    let cases: [(idem_dedup::EngineBuilder<Body>, &str); 5] = [
        (
            Engine::builder().max_bytes(1 << 20),
            "max_bytes needs a weigher",
        ),
        (Engine::builder().weigher(weigh), "weigher needs max_bytes"),
        (
            Engine::builder().max_bytes(0).weigher(weigh),
            "max_bytes must be at least 1",
        ),
        (Engine::builder().tenant_share(0), "tenant_share"),
        (Engine::builder().tenant_share(101), "tenant_share"),
    ];
    for (b, rule) in cases {
        let err = b.build().unwrap_err();
        assert!(err.to_string().contains(rule), "{err} should say {rule}");
    }
}
