//! The shop over HTTP (axum) behind the idem layer: `Idempotency-Key` per T2 (an RFC 8941
//! sf-string or a bare token), errors as `application/problem+json` with 400 / 409 / 422 / 429.
//!
//! The example serves on a free loopback port (or `--addr`), makes a few calls with hyper's client
//! to show a replay and each error, then keeps serving if run with `--serve`. Prometheus metrics
//! are on a second port, at `/metrics`.
//!
//! ```sh
//! cargo run --release --example http_server [-- --serve] [--addr 127.0.0.1:8080]
//! # instances sharing one Redis: a retry on either replays the other's result
//! cargo run --release --example http_server -- --serve --addr 127.0.0.1:8080 --redis redis://127.0.0.1:6379/ --allow-volatile
//! # or sharing one PostgreSQL (the records in table `idem.records`)
//! cargo run --release --example http_server -- --serve --addr 127.0.0.1:8080 --postgres postgres://127.0.0.1/test
//! ```

use std::time::Duration;

use idem::dedup::{Deduplicator, Engine, InFlightPolicy};
use idem_postgres::PgTier;
use idem_redis::{RedisTier, TieredEngine};
use idem_shop::args::ServerArgs;
use idem_shop::http::{post_form, serve_on};
use idem_shop::{metrics, Shop};
use idem_tower::{IdemLayer, StoredResponse};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = ServerArgs::from_env("http_server");
    let metrics_addr = metrics::serve(metrics::recorder()).await?;
    println!("/metrics on http://{metrics_addr}/metrics");
    if args.redis.is_some() && args.postgres.is_some() {
        return Err("--redis and --postgres each keep the record: pass one of them".into());
    }
    if let Some(url) = &args.postgres {
        let pool = idem_postgres::sqlx::PgPool::connect(url).await?;
        let tier = PgTier::builder(pool).build().await?; // applies the schema if missing
        println!("deduplicating through PostgreSQL at {url} (shared with every instance)");
        return run(
            &args,
            idem_postgres::TieredEngine::<StoredResponse>::builder(tier).build()?,
        )
        .await;
    }
    match &args.redis {
        None => {
            let engine = Engine::builder()
                .in_flight_policy(InFlightPolicy::Reject) // duplicates in flight get 409, as the IETF draft says
                .build()?;
            run(&args, engine).await
        }
        Some(url) => {
            let tier = RedisTier::builder()
                .allow_volatile(args.allow_volatile)
                .connect(url)
                .await?;
            println!("deduplicating through Redis at {url} (shared with every instance)");
            run(
                &args,
                TieredEngine::<StoredResponse>::builder(tier).build()?,
            )
            .await
        }
    }
}

async fn run<D: Deduplicator<Value = StoredResponse>>(
    args: &ServerArgs,
    engine: D,
) -> Result<(), BoxError> {
    let shop = Shop::with_work(Duration::from_millis(200));
    let addr = serve_on(args.listener().await?, shop, IdemLayer::new(engine)).await?;
    println!("HTTP shop on http://{addr}  (POST /orders, POST /stock/{{sku}}/deduct, GET /books/{{sku}})\n");
    let body = "intent_id=checkout-7&sku=book-1&quantity=1";
    let show = |what: &str, r: &idem_shop::http::Reply| {
        let replayed = r
            .headers
            .get("idempotent-replayed")
            .map(|v| format!("  [idempotent-replayed: {}]", v.to_str().unwrap_or("?")))
            .unwrap_or_default();
        println!("{what:<34} → {} {}{replayed}", r.status.as_u16(), r.body);
    };

    let (a, b) = tokio::join!(
        post_form(
            addr,
            "/orders",
            Some("\"checkout-7-create\""),
            "tenant-0042",
            body
        ),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            post_form(
                addr,
                "/orders",
                Some("checkout-7-create"),
                "tenant-0042",
                body,
            )
            .await
        }
    );
    show("POST /orders", &a?);
    show("same key while in flight", &b?);
    show(
        "same key again (replay)",
        &post_form(
            addr,
            "/orders",
            Some("checkout-7-create"),
            "tenant-0042",
            body,
        )
        .await?,
    );
    show(
        "same key, other payload",
        &post_form(
            addr,
            "/orders",
            Some("checkout-7-create"),
            "tenant-0042",
            "intent_id=checkout-7&sku=book-1&quantity=3",
        )
        .await?,
    );
    show(
        "no Idempotency-Key",
        &post_form(addr, "/orders", None, "tenant-0042", body).await?,
    );
    show(
        "bad key",
        &post_form(addr, "/orders", Some("not a key"), "tenant-0042", body).await?,
    );

    if args.serve {
        println!("\nserving until killed");
        std::future::pending::<()>().await;
    }
    Ok(())
}
