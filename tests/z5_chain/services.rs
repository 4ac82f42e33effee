//! The services of the Z5 chain: the stock service and the payment provider (each behind
//! `IdemLayer` with an engine of its own, counting what they really did per intent), and the
//! order service (behind `IdemLayer` on a shared tier), whose handler deducts stock through
//! idem's tower `RetryLayer` and charges through `idem-reqwest`, both without setting a key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_core::IdempotencyKey;
use idem_dedup::{Deduplicator, Engine};
use idem_postgres::{sqlx, sqlx_status, PgEngine, PgTransaction};
use idem_redis::{RedisTier, TieredEngine};
use idem_reqwest::RetryMiddleware;
use idem_tower::{IdemLayer, RetryLayer, RetryService, SetTenantLayer, StoredResponse, Tenant};
use tower::{Layer, ServiceExt};

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// What a downstream service did: its side effect per intent, and the requests that reached it
/// (replays included).
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<LedgerState>>);

#[derive(Default)]
struct LedgerState {
    per_intent: HashMap<String, u32>,
    total: u32,
    requests: u32,
}

impl Ledger {
    /// Side effects for `intent`.
    pub fn of(&self, intent: &str) -> u32 {
        let s = self.0.lock().unwrap();
        s.per_intent.get(intent).copied().unwrap_or(0)
    }

    /// Side effects in all.
    pub fn total(&self) -> u32 {
        self.0.lock().unwrap().total
    }

    /// Requests that reached the service, replays included.
    pub fn requests(&self) -> u32 {
        self.0.lock().unwrap().requests
    }
}

/// A downstream service on `route` (the stock service's deduction, the payment provider's
/// charge): behind `IdemLayer` with its own engine, so it honours `Idempotency-Key`; each run
/// of its handler is one side effect, answered `<what>-<n>`. The request's body names the intent.
pub async fn downstream(route: &'static str, what: &'static str) -> (SocketAddr, Ledger) {
    let ledger = Ledger::default();
    let effect = ledger.clone();
    let handler = post(move |body: Bytes| {
        let ledger = effect.clone();
        async move {
            let intent = String::from_utf8_lossy(&body).into_owned();
            let n = {
                let mut s = ledger.0.lock().unwrap();
                *s.per_intent.entry(intent).or_default() += 1;
                s.total += 1;
                s.total
            };
            (StatusCode::CREATED, format!("{what}-{n}"))
        }
    });
    let seen = ledger.clone();
    let app = Router::new()
        .route(route, handler)
        .layer(IdemLayer::new(Engine::builder().build().unwrap()))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("order-service"))
        }))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: axum::middleware::Next| {
                seen.0.lock().unwrap().requests += 1;
                next.run(req)
            },
        ));
    (serve(app).await, ledger)
}

/// Where the order service keeps its records and its orders.
#[derive(Clone, Debug)]
pub enum Tier {
    /// A tiered engine on Redis (lease renewed while the handler runs); each order is an
    /// `INCR` of the intent's counter under `prefix`.
    Redis { url: String, prefix: String },
    /// `PgEngine`, the transactional mode: each order is a row inserted in the run's
    /// transaction, committed with the record.
    Postgres { url: String, schema: String },
}

impl Tier {
    /// The tier's name in the table.
    pub fn name(&self) -> &'static str {
        match self {
            Tier::Redis { .. } => "Redis (tiered)",
            Tier::Postgres { .. } => "PostgreSQL (transactional)",
        }
    }

    /// The Redis server's port.
    pub fn redis_port(url: &str) -> u16 {
        let rest = url.trim_start_matches("redis://127.0.0.1:");
        rest.trim_end_matches('/')
            .parse()
            .expect("a loopback Redis URL")
    }

    /// Orders the order service recorded for `intent`.
    pub async fn orders(&self, intent: &str) -> u32 {
        match self {
            Tier::Redis { url, prefix } => {
                let reply = idem_test_support::redis::raw(
                    Tier::redis_port(url),
                    &format!("GET {prefix}order:{intent}"),
                )
                .await
                .unwrap();
                // `$-1` (none) or `$<len>\r\n<n>\r\n`.
                reply
                    .lines()
                    .nth(1)
                    .map_or(0, |n| n.trim().parse().unwrap())
            }
            Tier::Postgres { url, schema } => {
                let pool = pg_pool(url, 1).await;
                let n: i64 = sqlx::query_scalar(&format!(
                    "SELECT count(*) FROM \"{schema}\".orders WHERE intent = $1"
                ))
                .bind(intent)
                .fetch_one(&pool)
                .await
                .unwrap();
                n as u32
            }
        }
    }
}

pub async fn pg_pool(url: &str, max: u32) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("Z5 needs PostgreSQL at {url} ({e})"))
}

/// How the order handler keys its downstream writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// As the docs say: no key set; idem derives it from the inbound intent (K7).
    Derived,
    /// The mistake K7 exists for: a fresh key drawn by hand for each downstream call.
    DrawnByHand,
}

/// One order-service instance.
#[derive(Clone, Debug)]
pub struct OrderConfig {
    pub tier: Tier,
    pub lease: Duration,
    pub stock: SocketAddr,
    pub payment: Option<SocketAddr>,
    pub keys: Keys,
    /// Whether the handler stops for good after its downstream calls, before its order (the
    /// instance is then killed there): it prints `CALLED <intent>` first.
    pub hold_after_calls: bool,
}

impl OrderConfig {
    /// The configuration as a worker process's environment.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let (kind, url, name) = match &self.tier {
            Tier::Redis { url, prefix } => ("redis", url, prefix),
            Tier::Postgres { url, schema } => ("postgres", url, schema),
        };
        let mut env = vec![
            ("Z5_TIER", kind.to_owned()),
            ("Z5_URL", url.clone()),
            ("Z5_NAME", name.clone()),
            ("Z5_LEASE_MS", self.lease.as_millis().to_string()),
            ("Z5_STOCK", self.stock.to_string()),
            ("Z5_DRAWN", (self.keys == Keys::DrawnByHand).to_string()),
            ("Z5_HOLD", self.hold_after_calls.to_string()),
        ];
        if let Some(p) = self.payment {
            env.push(("Z5_PAYMENT", p.to_string()));
        }
        env
    }

    /// The configuration a worker process was given.
    pub fn from_env() -> OrderConfig {
        let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set"));
        let (url, name) = (var("Z5_URL"), var("Z5_NAME"));
        OrderConfig {
            tier: match var("Z5_TIER").as_str() {
                "redis" => Tier::Redis { url, prefix: name },
                _ => Tier::Postgres { url, schema: name },
            },
            lease: Duration::from_millis(var("Z5_LEASE_MS").parse().unwrap()),
            stock: var("Z5_STOCK").parse().unwrap(),
            payment: std::env::var("Z5_PAYMENT").ok().map(|p| p.parse().unwrap()),
            keys: match var("Z5_DRAWN").as_str() {
                "true" => Keys::DrawnByHand,
                _ => Keys::Derived,
            },
            hold_after_calls: var("Z5_HOLD") == "true",
        }
    }
}

struct Orders {
    cfg: OrderConfig,
    stock: RetryService<HttpClient>,
    payment: reqwest_middleware::ClientWithMiddleware,
}

/// Starts an order-service instance as `cfg` says; returns its address.
pub async fn order_instance(cfg: OrderConfig) -> SocketAddr {
    let orders = Arc::new(Orders {
        stock: RetryLayer::new().layer(http_client()),
        payment: reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new())
            .build(),
        cfg: cfg.clone(),
    });
    match &cfg.tier {
        Tier::Redis { url, prefix } => {
            let tier = RedisTier::builder()
                .prefix(prefix.clone())
                .command_timeout(Duration::from_secs(2))
                .connect(url)
                .await
                .expect("connect the order service to Redis");
            let engine = TieredEngine::<StoredResponse>::builder(tier)
                .lease(cfg.lease)
                .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
                .build()
                .unwrap();
            serve(order_router(engine, orders)).await
        }
        Tier::Postgres { url, schema } => {
            let engine = PgEngine::<StoredResponse>::builder(pg_pool(url, 16).await)
                .schema(schema)
                .apply_schema(false)
                .build()
                .await
                .expect("the order service's PgEngine");
            serve(order_router(engine, orders)).await
        }
    }
}

fn order_router<D: Deduplicator<Value = StoredResponse>>(engine: D, orders: Arc<Orders>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .with_state(orders)
        .layer(IdemLayer::new(engine))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("tenant-z5"))
        }))
}

/// CreateOrder: deduct, charge (when there is a payment provider), record the order, answer.
async fn create_order(State(o): State<Arc<Orders>>, req: Request) -> (StatusCode, String) {
    let tx = req.extensions().get::<PgTransaction>().cloned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let intent = String::from_utf8_lossy(&body).into_owned();
    let deduction = match o.deduct(&intent).await {
        Ok(d) => d,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("stock: {e}")),
    };
    let charge = match o.cfg.payment {
        Some(addr) => match o.charge(addr, &intent).await {
            Ok(c) => c,
            Err(e) => return (StatusCode::BAD_GATEWAY, format!("payment: {e}")),
        },
        None => "no charge".to_owned(),
    };
    if o.cfg.hold_after_calls {
        println!("CALLED {intent}");
        std::future::pending::<()>().await;
    }
    if let Err(e) = o.record(&intent, tx).await {
        return (StatusCode::SERVICE_UNAVAILABLE, e);
    }
    (
        StatusCode::CREATED,
        format!("order for {intent}: {deduction}, {charge}"),
    )
}

impl Orders {
    /// The header a hand-drawn key goes in (the control run only).
    fn drawn_key(&self) -> Option<String> {
        (self.cfg.keys == Keys::DrawnByHand).then(|| IdempotencyKey::generate().to_header_value())
    }

    async fn deduct(&self, intent: &str) -> Result<String, String> {
        let mut req = http::Request::post(format!("http://{}/stock/deduct", self.cfg.stock));
        if let Some(key) = self.drawn_key() {
            req = req.header("idempotency-key", key);
        }
        let req = req.body(Full::new(Bytes::from(intent.to_owned()))).unwrap();
        let reply = self
            .stock
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| e.to_string())?;
        let ok = reply.status().is_success();
        let text = reply
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&text.to_bytes()).into_owned();
        if ok {
            Ok(text)
        } else {
            Err(text)
        }
    }

    async fn charge(&self, addr: SocketAddr, intent: &str) -> Result<String, String> {
        let mut req = self
            .payment
            .post(format!("http://{addr}/v1/charges"))
            .body(intent.to_owned());
        if let Some(key) = self.drawn_key() {
            req = req.header("idempotency-key", key);
        }
        let reply = req.send().await.map_err(|e| e.to_string())?;
        let ok = reply.status().is_success();
        let text = reply.text().await.map_err(|e| e.to_string())?;
        if ok {
            Ok(text)
        } else {
            Err(text)
        }
    }

    /// The order service's own write.
    async fn record(&self, intent: &str, tx: Option<PgTransaction>) -> Result<(), String> {
        match &self.cfg.tier {
            Tier::Redis { url, prefix } => {
                let reply = idem_test_support::redis::raw(
                    Tier::redis_port(url),
                    &format!("INCR {prefix}order:{intent}"),
                )
                .await
                .map_err(|e| e.to_string())?;
                if reply.starts_with(':') {
                    Ok(())
                } else {
                    Err(reply)
                }
            }
            Tier::Postgres { schema, .. } => {
                let tx = tx.ok_or("no transaction in the request")?;
                let mut conn = tx.lock().await.map_err(|e| e.to_string())?;
                sqlx::query(&format!(
                    "INSERT INTO \"{schema}\".orders (intent) VALUES ($1)"
                ))
                .bind(intent)
                .execute(&mut *conn)
                .await
                .map_err(|e| sqlx_status(e).to_string())?;
                Ok(())
            }
        }
    }
}
