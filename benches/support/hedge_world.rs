//! The hedging bench's world: axum instances behind `IdemLayer` on one Redis tier, each with its
//! scripted slowness and failures, and the client's balancer over them.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request as AxumRequest;
use axum::middleware::Next;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use idem_redis::{RedisTier, TieredEngine};
use idem_test_support::redis::RedisServer;
use idem_tower::{BoxError, IdemLayer, SetTenantLayer, StoredResponse, Tenant};

/// A connection to the one Redis tier all instances share.
pub async fn tier(redis: &RedisServer) -> RedisTier {
    RedisTier::builder()
        .prefix("bench-hedging")
        .allow_volatile(true)
        .connect(&redis.url())
        .await
        .unwrap()
}

/// What an instance counts (the two hedging instances share one).
#[derive(Clone, Default)]
pub struct Counts {
    /// Runs of the write's handler by key.
    pub runs: Arc<Mutex<HashMap<String, u32>>>,
    /// Requests dropped before their answer (the client gave up on them).
    pub cancelled: Arc<AtomicU64>,
    /// `GET /report` requests so far (its failure script).
    pub reports: Arc<AtomicU64>,
}

struct Unfinished(Arc<AtomicU64>, bool);
impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Relaxed);
        }
    }
}

pub async fn instance(tier: RedisTier, counts: Counts, slow_every: Option<u64>) -> SocketAddr {
    let engine = TieredEngine::<StoredResponse>::builder(tier)
        .build()
        .unwrap();
    let c = counts.clone();
    let orders = post(move |req: AxumRequest| {
        let c = c.clone();
        async move {
            let key = req.headers()["idempotency-key"]
                .to_str()
                .unwrap()
                .to_owned();
            *c.runs.lock().unwrap().entry(key).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            (StatusCode::CREATED, "created")
        }
    });
    let c = counts.clone();
    let report = get(move || {
        let n = c.reports.fetch_add(1, Relaxed) + 1;
        async move {
            let (ms, status) = match (n % 5, n % 10) {
                (0, 0) => (120, StatusCode::SERVICE_UNAVAILABLE),
                (0, _) => (10, StatusCode::SERVICE_UNAVAILABLE),
                _ => (80, StatusCode::OK),
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            status
        }
    });
    let seen = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/orders", orders)
        .route("/report", report)
        .layer(IdemLayer::new(engine))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("bench"))
        }))
        .layer(axum::middleware::from_fn(
            move |req: AxumRequest, next: Next| {
                let (c, seen) = (counts.clone(), seen.clone());
                async move {
                    let mut guard = Unfinished(c.cancelled.clone(), false);
                    let n = seen.fetch_add(1, Relaxed) + 1;
                    if slow_every.is_some_and(|k| n % k == 0) {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    let r = next.run(req).await;
                    guard.1 = true;
                    r
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

pub type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A call's first copy by the hash of its key, each further copy to the next instance; counts
/// the requests it sends.
#[derive(Clone)]
pub struct Balancer {
    client: Http,
    addrs: Arc<Vec<SocketAddr>>,
    copies: Arc<Mutex<HashMap<String, usize>>>,
    /// Requests sent so far.
    pub sent: Arc<AtomicU64>,
}

impl Balancer {
    pub fn new(client: &Http, addrs: Vec<SocketAddr>) -> Balancer {
        Balancer {
            client: client.clone(),
            addrs: Arc::new(addrs),
            copies: Arc::default(),
            sent: Arc::default(),
        }
    }
}

impl tower::Service<Request<Full<Bytes>>> for Balancer {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, mut req: Request<Full<Bytes>>) -> Self::Future {
        self.sent.fetch_add(1, Relaxed);
        let key = req
            .headers()
            .get("idempotency-key")
            .map(|k| k.to_str().unwrap_or_default().to_owned());
        let i = match key {
            Some(key) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut h);
                let mut copies = self.copies.lock().unwrap();
                let copy = copies.entry(key).or_default();
                *copy += 1;
                (h.finish() as usize + *copy - 1) % self.addrs.len()
            }
            None => 0,
        };
        let path = req.uri().path().to_owned();
        *req.uri_mut() = format!("http://{}{path}", self.addrs[i]).parse().unwrap();
        let client = self.client.clone();
        Box::pin(async move { client.request(req).await.map_err(BoxError::from) })
    }
}
