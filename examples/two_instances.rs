//! Two instances of a service, one Redis: a client's retries land on both, the side effect
//! happens once (D1–D3).
//!
//! ```sh
//! cargo run --release --example two_instances --features redis
//! REDIS_URL=redis://127.0.0.1:6379/ ALLOW_VOLATILE=1 cargo run --release --example two_instances --features redis
//! ```
//!
//! Without `REDIS_URL` the example starts its own `redis-server` (append-only file, fsync on every
//! write) on a free loopback port, and stops it at the end.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::redis::{RedisTier, TieredEngine};
use idem::{Fingerprint, IdempotencyKey, Scope, Status};
use idem_shop::redis_server::{OwnRedis, Persistence};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _own) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let own = OwnRedis::start(Persistence::AofAlways).await?;
            println!("started redis-server at {} (appendfsync always)", own.url());
            (own.url(), Some(own))
        }
    };

    // Two instances: each its own engine and its own Redis connections.
    // A Redis without an append-only file is refused (a restart would lose records) unless
    // ALLOW_VOLATILE=1 says this is a throwaway one.
    let allow = std::env::var("ALLOW_VOLATILE").is_ok_and(|v| v == "1");
    let connect = || async {
        // The error's Display explains the rule and the way out; show that, not its Debug.
        let tier = RedisTier::builder()
            .allow_volatile(allow)
            .connect(&url)
            .await;
        tier.map_err(|e| e.to_string())
    };
    let a = TieredEngine::<String>::builder(connect().await?).build()?;
    let b = TieredEngine::<String>::builder(connect().await?).build()?;

    let key = IdempotencyKey::generate(); // once per business intent
    let scope = Scope::new("tenant-0042", "/shop.v1.Shop/CreateOrder", &key)?;
    let body = Fingerprint::of(br#"{"sku":"book-42","qty":1}"#);
    let side_effects = Arc::new(AtomicU32::new(0));

    // A client and its retries hit both instances at once: 4 calls on A, 4 on B.
    let calls = (0..8).map(|i| {
        let (engine, name) = if i % 2 == 0 {
            (a.clone(), "A")
        } else {
            (b.clone(), "B")
        };
        let (scope, side_effects) = (scope.clone(), side_effects.clone());
        tokio::spawn(async move {
            let out = engine
                .execute(&scope, body, move |token| async move {
                    side_effects.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await; // the write
                    Ok::<_, Status>(format!("order-1001 (written with fencing token {token})"))
                })
                .await;
            (name, out)
        })
    });
    for call in futures::future::join_all(calls).await {
        let (name, out) = call?;
        let out = out?;
        println!(
            "instance {name}: {:<8} from {:<13} -> {}",
            format!("{:?}", out.kind()),
            format!("{:?}", out.source()),
            out.value()
        );
    }
    println!(
        "side effects: {} (8 calls, 2 instances)",
        side_effects.load(Ordering::SeqCst)
    );

    // A late retry on B: replayed from B's own engine, no Redis round trip.
    let before = b.remote().commands_sent();
    let late = b
        .execute(&scope, body, |_| async { Ok::<_, Status>("never".into()) })
        .await?;
    println!(
        "late retry on B: {:?}, Redis calls made: {}",
        late.kind(),
        b.remote().commands_sent() - before
    );

    // The same key with another payload, on either instance: refused (K4).
    let other = Fingerprint::of(br#"{"sku":"book-42","qty":2}"#);
    for (name, engine) in [("A", &a), ("B", &b)] {
        let err = engine
            .execute(&scope, other, |_| async { Ok::<_, Status>("never".into()) })
            .await
            .unwrap_err();
        println!(
            "other payload on {name}: {} ({})",
            err.code(),
            err.code().http_status()
        );
    }
    println!("tier A: {:?}", a.stats());
    println!("tier B: {:?}", b.stats());
    assert_eq!(side_effects.load(Ordering::SeqCst), 1);
    Ok(())
}
