//! The shop over HTTP (axum) behind the idem layer: `Idempotency-Key` on `POST`s.
//!
//! | route | what |
//! |---|---|
//! | `GET /books/{sku}` | a book (read) |
//! | `POST /orders` | form `intent_id=..&sku=..&quantity=..` → `201` + the order (write) |
//! | `POST /stock/{sku}/deduct` | form `quantity=..&expected_version=..` → `200`; `409` + `idem-reason: STOCK_CONFLICT` on a stale version |

use std::net::SocketAddr;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::StatusCode;
use idem_dedup::{Deduplicator, Engine};
use idem_tower::{IdemLayer, StoredResponse};
use tokio::net::TcpListener;

use crate::auth::BearerTenantLayer;
use crate::{pb, Shop};

/// The router with [`BearerTenantLayer`] and `idem` in front of every route.
pub fn router<D: Deduplicator<Value = StoredResponse>>(
    shop: Shop,
    idem: IdemLayer<D>,
) -> axum::Router {
    axum::Router::new()
        .route("/books/{sku}", get(get_book))
        .route("/orders", post(create_order))
        .route("/stock/{sku}/deduct", post(deduct_stock))
        .with_state(shop)
        .layer(
            tower::ServiceBuilder::new()
                .layer(BearerTenantLayer)
                .layer(idem),
        )
}

/// Serves the HTTP shop on `127.0.0.1:0` with the default idem layer (HTTP `POST` is a write).
///
/// # Errors
///
/// Binding the listener failed.
pub async fn serve(shop: Shop, engine: Engine<StoredResponse>) -> std::io::Result<SocketAddr> {
    serve_with(shop, IdemLayer::new(engine)).await
}

/// As [`serve`], with this idem layer.
///
/// # Errors
///
/// Binding the listener failed.
pub async fn serve_with<D: Deduplicator<Value = StoredResponse>>(
    shop: Shop,
    idem: IdemLayer<D>,
) -> std::io::Result<SocketAddr> {
    serve_on(TcpListener::bind("127.0.0.1:0").await?, shop, idem).await
}

/// As [`serve_with`], on a listener of the caller's (a fixed `--addr`).
///
/// # Errors
///
/// Reading the listener's address failed.
pub async fn serve_on<D: Deduplicator<Value = StoredResponse>>(
    listener: TcpListener,
    shop: Shop,
    idem: IdemLayer<D>,
) -> std::io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    let app = router(shop, idem);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// A field of an `application/x-www-form-urlencoded` body, decoded (`+` is a space, `%XX` a byte).
fn form(body: &[u8], name: &str) -> Option<String> {
    std::str::from_utf8(body).ok()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (decode(k)? == name).then(|| decode(v)).flatten()
    })
}

fn decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// A JSON response, serialised by serde_json (so any value is escaped correctly).
fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error(status: tonic::Status) -> Response {
    let code = idem_core::Code::from_i32(status.code() as i32).unwrap_or(idem_core::Code::Unknown);
    let http =
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json(
        http,
        serde_json::json!({ "code": code.as_str(), "detail": status.message() }),
    );
    if let Some(reason) = status.metadata().get("idem-reason") {
        if let Ok(v) = http::HeaderValue::from_bytes(reason.as_encoded_bytes()) {
            r.headers_mut().insert("idem-reason", v);
        }
    }
    r
}

async fn get_book(State(shop): State<Shop>, Path(sku): Path<String>) -> Response {
    match shop.book(&sku) {
        Ok(b) => json(
            StatusCode::OK,
            serde_json::json!({
                "sku": b.sku, "title": b.title, "price_cents": b.price_cents,
                "stock": b.stock, "stock_version": b.stock_version,
            }),
        ),
        Err(e) => error(e),
    }
}

async fn create_order(State(shop): State<Shop>, body: Bytes) -> Response {
    let req = pb::CreateOrderRequest {
        intent_id: form(&body, "intent_id").unwrap_or_default(),
        sku: form(&body, "sku").unwrap_or_default(),
        quantity: form(&body, "quantity")
            .and_then(|q| q.parse().ok())
            .unwrap_or(0),
    };
    match shop.create_order(req).await {
        Ok(o) => json(
            StatusCode::CREATED,
            serde_json::json!({
                "order_id": o.order_id, "intent_id": o.intent_id, "sku": o.sku,
                "quantity": o.quantity,
            }),
        ),
        Err(e) => error(e),
    }
}

async fn deduct_stock(State(shop): State<Shop>, Path(sku): Path<String>, body: Bytes) -> Response {
    let req = pb::DeductStockRequest {
        sku,
        quantity: form(&body, "quantity")
            .and_then(|q| q.parse().ok())
            .unwrap_or(0),
        expected_version: form(&body, "expected_version")
            .and_then(|q| q.parse().ok())
            .unwrap_or(0),
        intent_id: String::new(),
    };
    match shop.deduct_stock(&req) {
        Ok(s) => json(
            StatusCode::OK,
            serde_json::json!({ "sku": s.sku, "stock": s.stock, "version": s.version }),
        ),
        Err(e) => error(e),
    }
}

/// What [`post_form`] got back.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body as text.
    pub body: String,
}

/// `POST http://{addr}{path}` with a form body, an optional `Idempotency-Key` and a bearer tenant
/// (HTTP/1.1, hyper's client), for the examples.
///
/// # Errors
///
/// Connection or HTTP errors.
pub async fn post_form(
    addr: SocketAddr,
    path: &str,
    key: Option<&str>,
    tenant: &str,
    body: &str,
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::{BodyExt, Full};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("authorization", format!("Bearer {tenant}"));
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned())))?)
        .await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
