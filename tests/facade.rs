//! The facade re-exports the parts the README uses.

use idem::dedup::{Engine, OutcomeKind};
use idem::{Fingerprint, IdempotencyKey, Scope, Status};

#[tokio::test]
async fn readme_example_runs_through_the_facade() {
    let engine = Engine::<u64>::builder().build().unwrap();
    let key = IdempotencyKey::generate();
    let scope = Scope::new("tenant-0042", "/shop.v1.Shop/CreateOrder", &key).unwrap();
    let body = Fingerprint::of(br#"{"sku":"book-42","qty":1}"#);
    let create = |_| async { Ok::<_, Status>(1001) };
    let first = engine.execute(&scope, body, create).await.unwrap();
    let retry = engine.execute(&scope, body, create).await.unwrap();
    assert_eq!(first.kind(), OutcomeKind::Executed);
    assert_eq!(
        (retry.kind(), *retry.value()),
        (OutcomeKind::Replayed, *first.value())
    );
}
