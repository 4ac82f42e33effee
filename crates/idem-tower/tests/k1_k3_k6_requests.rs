//! What makes two requests the same write: the exact key (K1), the scope around it (K3), the
//! whole request (K6), and which routes are writes at all (T1). The layer is driven in process
//! (`oneshot`), so each rule is checked on exactly the bytes it sees.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use idem_core::{MAX_METHOD_LEN, MAX_TENANT_LEN};
use idem_dedup::Engine;
use idem_tower::{IdemLayer, RequestBody, StoredResponse, Tenant, Writes};
use tower::{Layer, Service, ServiceExt};

type Inner = tower::util::BoxCloneSyncService<
    Request<RequestBody<Full<Bytes>>>,
    Response<Full<Bytes>>,
    Infallible,
>;

/// A handler that counts its runs and answers `run-<n>`.
fn counting() -> (Arc<AtomicU32>, Inner) {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let svc = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("run-{n}"))))) }
    });
    (runs, tower::util::BoxCloneSyncService::new(svc))
}

fn request(method: Method, uri: &str, key: &str, tenant: &str, grpc: bool) -> Request<Full<Bytes>> {
    let mut b = Request::builder().method(method).uri(uri);
    if grpc {
        b = b
            .header("content-type", "application/grpc")
            .header("x-idempotency-key", key);
    } else {
        b = b.header("idempotency-key", key);
    }
    let mut req = b
        .body(Full::new(Bytes::from_static(b"{\"sku\":1}")))
        .unwrap();
    req.extensions_mut().insert(Tenant::new(tenant.to_owned()));
    req
}

async fn call<S>(svc: &S, req: Request<Full<Bytes>>) -> (http::response::Parts, String)
where
    S: Service<Request<Full<Bytes>>, Response = Response<idem_tower::ResponseBody<Full<Bytes>>>>
        + Clone,
    S::Error: std::fmt::Debug,
{
    let resp = svc.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.unwrap();
    let mut parts = parts;
    if let Some(t) = collected.trailers() {
        parts.headers.extend(t.clone());
    }
    (
        parts,
        String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
    )
}

fn layer() -> IdemLayer {
    IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .writes(Writes::predicate(|m, _| m == Method::POST))
        .build()
        .unwrap()
}

/// Issue 16, item 1 (K1): a key is the exact header value. gRPC and HTTP/2 carry spaces around a
/// value that HTTP/1 parsers drop; `'pad-key-00001 '` must be refused, not trimmed into
/// `'pad-key-00001'` and replayed.
#[tokio::test]
async fn k1_key_with_leading_or_trailing_space_is_refused_not_trimmed() {
    let (runs, inner) = counting();
    let svc = layer().layer(inner);
    let (ok, body) = call(
        &svc,
        request(
            Method::POST,
            "/shop.v1.Shop/CreateOrder",
            "pad-key-00001",
            "t-1",
            true,
        ),
    )
    .await;
    assert!(ok.headers.get("idem-reason").is_none());
    assert_eq!(body, "run-1");
    for padded in ["pad-key-00001 ", " pad-key-00001", "\tpad-key-00001"] {
        for grpc in [true, false] {
            let (parts, body) = call(
                &svc,
                request(
                    Method::POST,
                    "/shop.v1.Shop/CreateOrder",
                    padded,
                    "t-1",
                    grpc,
                ),
            )
            .await;
            if grpc {
                assert_eq!(parts.headers["grpc-status"], "3", "{padded:?}: {body}");
            // INVALID_ARGUMENT
            } else {
                assert_eq!(parts.status, 400, "{padded:?}: {body}");
            }
            assert_eq!(parts.headers["idem-reason"], "INVALID_IDEMPOTENCY_KEY");
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Issue 16, item 2 (K3): a tenant or a path over its limit is the scope's fault. The answer
/// has its own reason and problem type and does not blame the (valid) key.
#[tokio::test]
async fn k3_scope_errors_have_their_own_reason_and_problem_type() {
    let (runs, inner) = counting();
    let svc = layer().layer(inner);
    let long_tenant = "t".repeat(MAX_TENANT_LEN + 1);
    let long_path = format!("/{}", "p".repeat(MAX_METHOD_LEN));
    for (tenant, path) in [
        (long_tenant.as_str(), "/orders"),
        ("t-1", long_path.as_str()),
    ] {
        let (parts, body) = call(
            &svc,
            request(Method::POST, path, "valid-key-0001", tenant, false),
        )
        .await;
        assert_eq!(parts.status, 400, "{body}");
        assert_eq!(parts.headers["idem-reason"], "INVALID_SCOPE", "{body}");
        assert!(
            body.contains("\"type\":\"urn:idem:problem:invalid-scope\""),
            "{body}"
        );
        assert!(
            !body.contains("idempotency key must"),
            "the key is not the problem: {body}"
        );
        assert!(
            !body.contains("(K"),
            "no internal IDs in client messages: {body}"
        );
    }
    let (parts, _) = call(
        &svc,
        request(
            Method::POST,
            "/shop.v1.Shop/CreateOrder",
            "valid-key-0001",
            &long_tenant,
            true,
        ),
    )
    .await;
    assert_eq!(parts.headers["grpc-status"], "3");
    assert_eq!(parts.headers["idem-reason"], "INVALID_SCOPE");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// K6: the fingerprint covers method, path and query, body and the headers the user names. A
/// real `POST /orders` must not be replayed to `POST /orders?dry_run=true` with the same key.
#[tokio::test]
async fn k6_same_key_other_query_or_named_header_is_a_conflict() {
    let (runs, inner) = counting();
    let svc = IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .fingerprint_headers([http::HeaderName::from_static("x-currency")])
        .build()
        .unwrap()
        .layer(inner);
    let (first, body) = call(
        &svc,
        request(Method::POST, "/orders", "order-key-0001", "t-1", false),
    )
    .await;
    assert_eq!((first.status.as_u16(), body.as_str()), (200, "run-1"));
    let (dry, body) = call(
        &svc,
        request(
            Method::POST,
            "/orders?dry_run=true",
            "order-key-0001",
            "t-1",
            false,
        ),
    )
    .await;
    assert_eq!(dry.status, 422, "{body}");
    assert_eq!(dry.headers["idem-reason"], "IDEMPOTENCY_CONFLICT");
    let mut eur = request(Method::POST, "/orders", "order-key-0001", "t-1", false);
    eur.headers_mut()
        .insert("x-currency", "EUR".parse().unwrap());
    let (named, _) = call(&svc, eur).await;
    assert_eq!(named.status, 422);
    // A header nobody named does not count: a replay.
    let mut traced = request(Method::POST, "/orders", "order-key-0001", "t-1", false);
    traced
        .headers_mut()
        .insert("x-request-id", "abc".parse().unwrap());
    let (replay, body) = call(&svc, traced).await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(body, "run-1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// T1: `Writes::routes` matches method and path, so `GET /orders` is a read (no key needed)
/// while `POST /orders` is a write; `Writes::paths` would demand a key of both.
#[tokio::test]
async fn t1_writes_by_route_leave_reads_on_the_same_path_alone() {
    let (runs, inner) = counting();
    let svc = IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .writes(Writes::routes([(Method::POST, "/orders")]))
        .build()
        .unwrap()
        .layer(inner);
    let get = Request::get("/orders")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = call(&svc, get).await;
    assert_eq!((parts.status.as_u16(), body.as_str()), (200, "run-1"));
    let no_key = Request::post("/orders")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, _) = call(&svc, no_key).await;
    assert_eq!(parts.status, 401, "a write, refused: no tenant");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
