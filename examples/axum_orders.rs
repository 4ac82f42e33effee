//! An axum service with idem in front of its writes, in one file to copy: a router, an auth
//! middleware that sets the [`Tenant`], the [`IdemLayer`] over an engine, a `POST /orders` handler.
//!
//! Run: `cargo run --release --example axum_orders --features tower` checks itself: it prints
//! executed, replayed and conflict with each status and `idempotent-replayed` header (`Some("true")`
//! on the replay), and exits non-zero if one is wrong. Add `-- --serve` to keep serving on :3000:
//!
//! ```text
//! curl -i http://127.0.0.1:3000/orders -H 'authorization: Bearer token-alice' \
//!      -H 'Idempotency-Key: "3f1c2b7e-9d4a-4c55"' -d 'sku=book-42&qty=1'
//! ```

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use idem::dedup::Engine;
use idem::tower::{IdemLayer, StoredResponse, Tenant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The side effect: every order the handler creates gets the next number.
async fn create_order(
    State(orders): State<Arc<AtomicU64>>,
    Extension(tenant): Extension<Tenant>,
    body: String,
) -> impl IntoResponse {
    let id = orders.fetch_add(1, Ordering::SeqCst) + 1;
    let json = format!(
        r#"{{"order":{id},"tenant":"{}","form":"{body}"}}"#,
        tenant.as_str()
    );
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        json,
    )
}

/// Authentication: a bearer token becomes the request's [`Tenant`]; idem files every stored
/// response under it, so one tenant can never replay another's. A real one checks the token.
async fn auth(mut req: Request, next: Next) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let tenant = match bearer.and_then(|v| v.strip_prefix("Bearer ")) {
        Some("token-alice") => "tenant-alice",
        Some("token-bob") => "tenant-bob",
        _ => return StatusCode::UNAUTHORIZED.into_response(),
    };
    req.extensions_mut().insert(Tenant::new(tenant));
    next.run(req).await
}

fn app(engine: Engine<StoredResponse>, orders: Arc<AtomicU64>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .layer(IdemLayer::new(engine)) // HTTP POST and PATCH are writes
        .layer(middleware::from_fn(auth)) // the outer layer: runs first
        .with_state(orders)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let engine = Engine::<StoredResponse>::builder().build()?; // 24 h TTL, one shard per core
    let orders = Arc::new(AtomicU64::new(0));
    let serve = std::env::args().any(|a| a == "--serve");
    let port = if serve { 3000 } else { 0 };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(axum::serve(listener, app(engine, orders.clone())).into_future());
    println!("serving POST http://{addr}/orders");
    if serve {
        return Ok(server.await??);
    }

    // (what, form body, the status and `idempotent-replayed` it must get), all with one key
    let checks = [
        ("executed", "sku=42&qty=1", 201, None),
        ("replayed", "sku=42&qty=1", 201, Some("true")),
        ("conflict", "sku=42&qty=3", 422, None),
    ];
    for (what, form, want, replayed) in checks {
        let (status, headers, body) = post_order(addr, form).await?;
        let marked = headers.get("idempotent-replayed").map(|v| v.to_str());
        let marked = marked.and_then(Result::ok);
        println!("{what:<9} {} {marked:?} {body}", status.as_u16());
        if status != want || marked != replayed {
            let want = format!("{want} {replayed:?}");
            return Err(format!("{what}: got {status} {marked:?}, want {want}").into());
        }
    }
    let n = orders.load(Ordering::SeqCst);
    println!("{n} order(s) created for one intent");
    match n {
        1 => Ok(()),
        n => Err(format!("{n} orders for one intent, want 1").into()),
    }
}

/// `POST /orders` as tenant-alice with one idempotency key and this form body (HTTP/1.1, hyper's
/// client). The key is an RFC 8941 string; a bare token works too.
async fn post_order(
    addr: std::net::SocketAddr,
    form: &'static str,
) -> Result<(StatusCode, HeaderMap, String), Error> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("http://{addr}/orders"))
        .header(header::AUTHORIZATION, "Bearer token-alice")
        .header("idempotency-key", "\"3f1c2b7e-9d4a-4c55\"")
        .body(Full::new(Bytes::from_static(form.as_bytes())))?;
    let (parts, body) = client.request(req).await?.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok((
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}
