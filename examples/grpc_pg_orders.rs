//! A tonic service whose writes commit with their idempotency record, in one file to copy: the
//! tenant set from the call's metadata by a layer *outside* `IdemLayer`, `IdemLayer` over a
//! `PgEngine`, and a `CreateOrder` handler that INSERTs its order in the transaction idem opened
//! for the call (the `PgTransaction` in the request's extensions). The order and its record commit
//! together or not at all, so no crash, retry or second instance can charge twice.
//!
//! Two servers on one database stand for two instances behind a load balancer. A tonic client
//! (through `RetryLayer`) sends every intent to both, and once more later; at the end the table
//! holds one order per intent, and the run exits non-zero if it does not.
//!
//! ```text
//! cargo run --release --example grpc_pg_orders --features postgres,grpc   # 127.0.0.1:5432/test
//! DATABASE_URL=postgres://app@db/shop cargo run --release --example grpc_pg_orders --features postgres,grpc
//! ```

use std::net::SocketAddr;

use idem::postgres::sqlx::postgres::PgPoolOptions;
use idem::postgres::{sqlx, sqlx_status, PgEngine, PgTransaction};
use idem::tower::{IdemLayer, RetryLayer, SetTenantLayer, StoredResponse, Tenant, Writes};
use idem::IdempotencyKey;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::shop_server::{Shop, ShopServer};
use idem_shop::pb::{Book, CreateOrderRequest, DeductStockRequest, GetBookRequest, Order, Stock};
use tonic::{Request, Response, Status};

type Error = Box<dyn std::error::Error + Send + Sync>;

const SCHEMA: &str = "idem_grpc_pg_example";
const INTENTS: usize = 100;

/// The service. Its only side effect is a row in `orders`, written through the call's
/// transaction: idem commits it with the call's record.
struct Orders;

#[tonic::async_trait]
impl Shop for Orders {
    async fn create_order(
        &self,
        request: Request<CreateOrderRequest>,
    ) -> Result<Response<Order>, Status> {
        // Put there by IdemLayer over a PgEngine: the transaction that will hold the record.
        let tx = request
            .extensions()
            .get::<PgTransaction>()
            .cloned()
            .ok_or_else(|| {
                Status::internal("CreateOrder must run behind IdemLayer over PgEngine")
            })?;
        let tenant = request.extensions().get::<Tenant>().cloned();
        let req = request.into_inner();
        let mut conn = tx.lock().await?; // `?`: idem's errors convert to tonic::Status
        let id: i64 = sqlx::query_scalar(&format!(
            "INSERT INTO {SCHEMA}.orders (tenant, intent, sku, qty) VALUES ($1, $2, $3, $4) \
             RETURNING id"
        ))
        .bind(tenant.as_ref().map(Tenant::as_str))
        .bind(&req.intent_id)
        .bind(&req.sku)
        .bind(req.quantity as i32)
        .fetch_one(&mut *conn)
        .await
        .map_err(sqlx_status)?; // retryable SQLSTATEs stay UNAVAILABLE, with their reason
        Ok(Response::new(Order {
            order_id: id as u64,
            intent_id: req.intent_id,
            sku: req.sku,
            quantity: req.quantity,
        }))
    }

    async fn get_book(&self, _: Request<GetBookRequest>) -> Result<Response<Book>, Status> {
        Err(Status::unimplemented("this example only takes orders"))
    }

    async fn deduct_stock(
        &self,
        _: Request<DeductStockRequest>,
    ) -> Result<Response<Stock>, Status> {
        Err(Status::unimplemented("this example only takes orders"))
    }
}

/// One instance: the tenant from the `authorization` metadata (a real service checks the token),
/// then idem, then the service. The order matters: an interceptor on the service itself
/// (`ShopServer::with_interceptor`) runs *inside* IdemLayer, too late to give it a tenant.
async fn instance(engine: PgEngine<StoredResponse>) -> Result<SocketAddr, Error> {
    let tenant = SetTenantLayer::new(|head: &http::request::Parts| {
        let bearer = head.headers.get("authorization")?.to_str().ok()?;
        Some(Tenant::new(
            bearer.strip_prefix("Bearer token-")?.to_owned(),
        ))
    });
    let idem = IdemLayer::builder(engine)
        .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
        .build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tonic::transport::Server::builder()
        .layer(tenant) // outer: runs first
        .layer(idem)
        .add_service(ShopServer::new(Orders))
        .serve_with_incoming(incoming);
    tokio::spawn(server);
    Ok(addr)
}

/// A client of one instance: retries with the same key (RetryLayer), bearer token of `alice`.
fn client(
    addr: SocketAddr,
) -> Result<ShopClient<idem::tower::RetryService<tonic::transport::Channel>>, Error> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    let retrying = tower::ServiceBuilder::new()
        .layer(
            RetryLayer::builder()
                .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
                .build()?,
        )
        .service(channel);
    Ok(ShopClient::new(retrying))
}

/// One call of intent `i`: its key is derived from the intent, so every copy carries the same.
async fn create(
    mut client: ShopClient<idem::tower::RetryService<tonic::transport::Channel>>,
    i: usize,
) -> Result<u64, Status> {
    let intent = format!("checkout-{i:05}");
    let mut req = Request::new(CreateOrderRequest {
        intent_id: intent.clone(),
        sku: "book-42".into(),
        quantity: 1,
    });
    let key = IdempotencyKey::derive(&intent, "CreateOrder");
    let md = req.metadata_mut();
    md.insert(
        "authorization",
        "Bearer token-alice".parse().expect("ascii"),
    );
    md.insert(
        "x-idempotency-key",
        key.as_str().parse().expect("a key is ascii"),
    );
    Ok(client.create_order(req).await?.into_inner().order_id)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await?;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .execute(&pool)
        .await?;
    sqlx::query(&format!("CREATE SCHEMA {SCHEMA}"))
        .execute(&pool)
        .await?;
    sqlx::query(&format!(
        "CREATE TABLE {SCHEMA}.orders (id bigserial PRIMARY KEY, tenant text, intent text NOT NULL, \
         sku text NOT NULL, qty int NOT NULL)"
    ))
    .execute(&pool)
    .await?;

    // Two instances, each with its own engine (its own local cache), one record in PostgreSQL.
    let engine = || {
        PgEngine::<StoredResponse>::builder(pool.clone())
            .schema(SCHEMA)
            .build()
    };
    let (a, b) = (
        instance(engine().await?).await?,
        instance(engine().await?).await?,
    );

    // Every intent to both instances at once, as a client's retry landing elsewhere would.
    let mut calls = Vec::new();
    for i in 0..INTENTS {
        calls.push(tokio::spawn(create(client(a)?, i)));
        calls.push(tokio::spawn(create(client(b)?, i)));
    }
    let mut answers = vec![None; INTENTS];
    for (n, call) in calls.into_iter().enumerate() {
        let id = call.await??;
        let seen = answers[n / 2].get_or_insert(id);
        assert_eq!(*seen, id, "both copies of an intent get the same order");
    }
    // A late retry of intent 0: replayed from the record, the same order.
    let late = create(client(b)?, 0).await?;

    let (rows, intents): (i64, i64) = sqlx::query_as(&format!(
        "SELECT count(*), count(DISTINCT intent) FROM {SCHEMA}.orders"
    ))
    .fetch_one(&pool)
    .await?;
    println!(
        "intents {INTENTS}, calls {}, orders {rows}",
        2 * INTENTS + 1
    );
    let ok = rows == INTENTS as i64 && intents == rows && Some(late) == answers[0];
    if !ok {
        eprintln!("FAILED: expected one order per intent and the late retry replayed");
        std::process::exit(1);
    }
    println!("OK: one order per intent; each committed with its record");
    sqlx::query(&format!("DROP SCHEMA {SCHEMA} CASCADE"))
        .execute(&pool)
        .await?;
    Ok(())
}
