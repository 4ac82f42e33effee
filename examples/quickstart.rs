//! A runnable tour of the embedded engine: execute, join, replay, conflict, failure, expiry, stats.
//!
//! Run: `cargo run --release --example quickstart`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::dedup::{Engine, OutcomeKind};
use idem::{Code, Fingerprint, IdempotencyKey, Scope, Status};

const METHOD: &str = "/shop.v1.Shop/CreateOrder";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::<Arc<str>>::builder()
        .shards(4)
        .ttl(Duration::from_millis(300)) // short, so the tour can show expiry
        .build()?;
    let orders_created = Arc::new(AtomicU32::new(0));
    let create_order = |id: &'static str| {
        let orders = orders_created.clone();
        move |_| async move {
            orders.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await; // the side effect takes a while
            Ok::<_, Status>(Arc::from(id))
        }
    };

    println!("idem quickstart: one business intent, one key, one side effect\n");
    let key = IdempotencyKey::generate();
    let scope = Scope::new("tenant-0042", METHOD, &key)?;
    let body = Fingerprint::of(br#"{"sku":"book-42","qty":1}"#);
    println!("key   {key}\nscope {scope}\nfingerprint {body}\n");

    // 1. Five concurrent duplicates (a user double-clicking, a gateway retrying).
    let calls = (0..5).map(|_| engine.execute(&scope, body, create_order("order-1001")));
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let out = out?;
        println!("call {i}: {:<8} -> {}", out.kind().as_str(), out.value());
    }

    // 2. A late retry within the TTL: replayed, nothing runs.
    let out = engine
        .execute(&scope, body, create_order("order-XXXX"))
        .await?;
    println!("retry : {:<8} -> {}", out.kind().as_str(), out.value());
    assert_eq!(out.kind(), OutcomeKind::Replayed);

    // 3. Same key, different payload: a conflict (FAILED_PRECONDITION), nothing runs.
    let other = Fingerprint::of(br#"{"sku":"book-42","qty":2}"#);
    let err = engine
        .execute(&scope, other, create_order("order-YYYY"))
        .await
        .unwrap_err();
    println!("reuse : {} -> {}", err.code(), err);

    // 4. A failure is shared by the waiters and not stored: the next call runs again.
    let flaky = Scope::new("tenant-0042", METHOD, &IdempotencyKey::generate())?;
    let err = engine
        .execute(&flaky, body, |_| async {
            Err(Status::new(Code::Unavailable, "payment gateway down"))
        })
        .await
        .unwrap_err();
    println!("fail  : {} -> {}", err.code(), err);
    let out = engine
        .execute(&flaky, body, create_order("order-1002"))
        .await?;
    println!("again : {:<8} -> {}", out.kind().as_str(), out.value());

    // 5. A bad key never reaches the engine: the error names the rule.
    let bad = IdempotencyKey::parse("not a key!").unwrap_err();
    println!("bad   : {bad}");

    // 6. Expiry: after the TTL the scope executes again.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let out = engine
        .execute(&scope, body, create_order("order-1003"))
        .await?;
    println!(
        "expiry: {:<8} -> {} (TTL passed)",
        out.kind().as_str(),
        out.value()
    );

    // 7. An operator's look-up (it goes through the shard's mailbox, behind the completion that
    //    the leader sent as its call returned), then stats, read without touching any mailbox
    //    (shards publish them after each batch).
    let info = engine.lookup(&scope).await?;
    println!("lookup: {info:?}");
    while engine.stats().in_flight > 0 {
        tokio::task::yield_now().await;
    }
    let st = engine.stats();
    let o = st.outcomes;
    println!(
        "\nstats: executed={} joined={} replayed={} conflicts={} failed={} expired={} in_flight={} completed={}",
        o.executed, o.joined, o.replayed, o.conflicts, o.failed, o.expired, st.in_flight, st.completed
    );
    let created = orders_created.load(Ordering::SeqCst);
    println!("orders actually created: {created} (one per intent run: 1001, 1002, and 1003 after expiry)");
    assert_eq!(created, 3);
    let report = engine.shutdown(Duration::from_secs(1)).await;
    println!("shut down with {} runs unfinished", report.unfinished);
    Ok(())
}
