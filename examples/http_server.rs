//! The shop over HTTP (axum) behind the idem layer: `Idempotency-Key` per SPEC T2 (an RFC 8941
//! sf-string or a bare token), errors as `application/problem+json` with 400 / 409 / 422 / 429.
//!
//! The example serves on a free loopback port, makes a few calls with hyper's client to show a
//! replay and each error, then keeps serving if run with `--serve`.
//!
//! Run: `cargo run --release --example http_server [-- --serve]`

use std::time::Duration;

use idem::dedup::{Engine, InFlightPolicy};
use idem_shop::http::{post_form, serve};
use idem_shop::Shop;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let engine = Engine::builder()
        .in_flight_policy(InFlightPolicy::Reject) // duplicates in flight get 409, as the IETF draft says
        .build()?;
    let addr = serve(Shop::with_work(Duration::from_millis(200)), engine).await?;
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

    if std::env::args().any(|a| a == "--serve") {
        println!("\nserving until killed");
        std::future::pending::<()>().await;
    }
    Ok(())
}
