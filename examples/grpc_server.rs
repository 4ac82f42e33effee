//! The shop over gRPC (tonic) behind the idem layer, with a Prometheus `/metrics` endpoint.
//!
//! GetBook is a read; CreateOrder and DeductStock are writes, deduplicated by `x-idempotency-key`
//! per tenant (`authorization: Bearer <tenant>`, a toy auth layer). The example makes a few calls
//! to show a replay, a key conflict and a stale stock version, prints part of `/metrics`, then
//! keeps serving if run with `--serve`.
//!
//! ```sh
//! cargo run --release --example grpc_server [-- --serve] [--addr 127.0.0.1:50051]
//! # two instances sharing one Redis: a retry on either replays the other's result
//! cargo run --release --example grpc_server -- --serve --addr 127.0.0.1:50051 --redis redis://127.0.0.1:6379/ --allow-volatile
//! cargo run --release --example grpc_server -- --serve --addr 127.0.0.1:50052 --redis redis://127.0.0.1:6379/ --allow-volatile
//! ```

use idem::dedup::{Deduplicator, Engine};
use idem_redis::{RedisTier, TieredEngine};
use idem_shop::args::ServerArgs;
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::{CreateOrderRequest, DeductStockRequest, GetBookRequest};
use idem_shop::{grpc, metrics, Shop};
use idem_tower::StoredResponse;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn with_key<T>(msg: T, key: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", "Bearer tenant-0042".parse().unwrap());
    r.metadata_mut()
        .insert("x-idempotency-key", key.parse().unwrap());
    r
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = ServerArgs::from_env("grpc_server");
    let metrics_addr = metrics::serve(metrics::recorder()).await?;
    match &args.redis {
        None => run(&args, metrics_addr, Engine::builder().build()?).await,
        Some(url) => {
            let tier = RedisTier::builder()
                .allow_volatile(args.allow_volatile)
                .connect(url)
                .await?;
            println!("deduplicating through Redis at {url} (shared with every instance)");
            run(
                &args,
                metrics_addr,
                TieredEngine::<StoredResponse>::builder(tier).build()?,
            )
            .await
        }
    }
}

async fn run<D: Deduplicator<Value = StoredResponse>>(
    args: &ServerArgs,
    metrics_addr: std::net::SocketAddr,
    engine: D,
) -> Result<(), BoxError> {
    let server = grpc::serve_on(
        args.listener().await?,
        Shop::new(),
        engine,
        StatusFaults::default(),
        grpc::idem_layer,
    )
    .await?;
    println!(
        "gRPC shop on http://{}   /metrics on http://{metrics_addr}/metrics",
        server.addr
    );

    let mut shop = ShopClient::connect(format!("http://{}", server.addr)).await?;
    let order = CreateOrderRequest {
        intent_id: "checkout-1001".into(),
        sku: "book-42".into(),
        quantity: 1,
    };
    let first = shop
        .create_order(with_key(order.clone(), "checkout-1001-create"))
        .await?;
    let again = shop
        .create_order(with_key(order.clone(), "checkout-1001-create"))
        .await?;
    println!(
        "CreateOrder → order {}; retry with the same key → order {} (idempotent-replayed: {:?})",
        first.get_ref().order_id,
        again.get_ref().order_id,
        again.metadata().get("idempotent-replayed")
    );
    let other = CreateOrderRequest {
        quantity: 2,
        ..order
    };
    let err = shop
        .create_order(with_key(other, "checkout-1001-create"))
        .await
        .unwrap_err();
    println!(
        "same key, other payload → {:?}: {}",
        err.code(),
        err.message()
    );

    let book = shop
        .get_book(GetBookRequest {
            sku: "book-42".into(),
        })
        .await?
        .into_inner();
    let stale = DeductStockRequest {
        sku: "book-42".into(),
        quantity: 1,
        expected_version: book.stock_version + 7,
        intent_id: String::new(),
    };
    let err = shop
        .deduct_stock(with_key(stale, "deduct-0001-a"))
        .await
        .unwrap_err();
    println!(
        "DeductStock with a stale version → {:?} ({:?}): {}",
        err.code(),
        err.metadata().get("idem-reason"),
        err.message()
    );
    let fresh = DeductStockRequest {
        sku: "book-42".into(),
        quantity: 1,
        expected_version: book.stock_version,
        intent_id: String::new(),
    };
    let stock = shop
        .deduct_stock(with_key(fresh, "deduct-0001-b"))
        .await?
        .into_inner();
    println!(
        "DeductStock with the read version → stock {} at version {}",
        stock.stock, stock.version
    );

    let text = metrics::scrape(metrics_addr).await?;
    println!("\n/metrics (idem lines):");
    for line in text
        .lines()
        .filter(|l| l.starts_with("idem_dedup_") || l.starts_with("idem_tier_"))
    {
        println!("  {line}");
    }
    if args.serve {
        println!("\nserving until killed");
        std::future::pending::<()>().await;
    }
    Ok(())
}
