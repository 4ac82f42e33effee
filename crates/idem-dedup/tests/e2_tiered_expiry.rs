//! E2 for the tiered engine: a result this instance ran and recorded tells its callers when the
//! shared record expires (`ttl` from completion), not when the shorter-lived local copy does.

mod common;
mod tier;

use std::time::Duration;

use common::{fp, scope};
use idem_core::Status;
use idem_dedup::tiered::TieredEngine;
use idem_dedup::{LocalCache, OutcomeKind, Source};
use tier::MemTier;
use tokio::time::Instant;

#[tokio::test]
async fn e2_a_recorded_run_expires_with_the_shared_record_not_the_local_copy() {
    let tier = MemTier::default();
    let build = || {
        TieredEngine::<String, MemTier>::builder(tier.clone())
            .ttl(Duration::from_secs(3600))
            .local(LocalCache::new().ttl(Duration::from_secs(10)).shards(1))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let s = scope("expiry-key-0001");
    let before = Instant::now();
    let ran = a
        .execute(&s, fp("body"), |_| async {
            Ok::<_, Status>("v".to_owned())
        })
        .await
        .unwrap();
    let after = Instant::now();
    assert_eq!(
        (ran.kind(), ran.source()),
        (OutcomeKind::Executed, Source::ThisInstance)
    );
    assert!(ran.is_recorded());
    let hour = Duration::from_secs(3600);
    assert!(
        ran.expires_at() >= before + hour && ran.expires_at() <= after + hour,
        "the record lives an hour from completion, not the local copy's 10 s"
    );
    // A local replay of it says the same.
    let again = a
        .execute(&s, fp("body"), |_| async {
            Ok::<_, Status>("other".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(again.kind(), OutcomeKind::Replayed);
    assert_eq!(again.expires_at(), ran.expires_at());
    // Another instance cannot tell when the record lapses: it reports its own copy's expiry.
    let there = b
        .execute(&s, fp("body"), |_| async {
            Ok::<_, Status>("other".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(
        (there.kind(), there.source()),
        (OutcomeKind::Replayed, Source::OtherInstance)
    );
    assert!(there.expires_at() <= Instant::now() + Duration::from_secs(10));
}
