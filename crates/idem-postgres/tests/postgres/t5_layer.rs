//! T5 / D4 b: IdemLayer over the transactional engine. The inner service takes the transaction
//! from the request's extensions; the stored response commits with the order, and a failed
//! response rolls the order back.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use idem_postgres::{sqlx_status, PgEngine, PgTransaction};
use idem_tower::{IdemLayer, RequestBody, StoredResponse, Tenant};
use tower::{Layer, ServiceExt};

use crate::support::{pool, TestDb};

fn post(key: &str, body: &'static str) -> Request<Full<Bytes>> {
    let mut req = Request::post("/orders")
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    req.extensions_mut().insert(Tenant::new("tenant-1"));
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_idem_layer_commits_the_stored_response_with_the_order() {
    let db = TestDb::new("t5layer").await;
    let engine = PgEngine::<StoredResponse>::builder(pool(&db.url, 3).await)
        .schema(&db.schema)
        .apply_schema(false)
        .build()
        .await
        .unwrap();
    let insert = db.insert_order();
    let inner = tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
        let insert = insert.clone();
        async move {
            let tx = req
                .extensions()
                .get::<PgTransaction>()
                .cloned()
                .expect("the transaction is a request extension");
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let body = String::from_utf8_lossy(&body).into_owned();
            {
                let mut conn = tx.lock().await.unwrap();
                sqlx::query(&insert)
                    .bind(&body)
                    .bind("layer")
                    .bind(tx.token().get() as i64)
                    .execute(&mut *conn)
                    .await
                    .map_err(sqlx_status)
                    .unwrap();
            }
            // A body that says so fails after its write: the write must roll back.
            let status = if body.contains("fail") {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::CREATED
            };
            Ok::<_, Infallible>(
                Response::builder()
                    .status(status)
                    .body(Full::new(Bytes::from(format!("order for {body}"))))
                    .unwrap(),
            )
        }
    });
    let svc = IdemLayer::new(engine.clone()).layer(inner);

    let first = svc
        .clone()
        .oneshot(post("order-key-0001", "sku=42"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let again = svc
        .clone()
        .oneshot(post("order-key-0001", "sku=42"))
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let body = again.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"order for sku=42");
    assert_eq!(db.orders().await, vec![("sku=42".into(), "layer".into())]);
    assert_eq!(
        db.records().await,
        1,
        "the stored response committed with the order"
    );

    // Another instance (a second engine) replays the stored response from the table.
    let other = PgEngine::<StoredResponse>::builder(pool(&db.url, 2).await)
        .schema(&db.schema)
        .apply_schema(false)
        .build()
        .await
        .unwrap();
    let reached = Arc::new(AtomicU32::new(0));
    let r = reached.clone();
    let never = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        r.fetch_add(1, Ordering::SeqCst);
        async {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(StatusCode::INTERNAL_SERVER_ERROR)
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
        }
    });
    let replay = IdemLayer::new(other)
        .layer(never)
        .oneshot(post("order-key-0001", "sku=42"))
        .await
        .unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "a replay does not reach the service"
    );

    // A failed response is not stored, and its write is rolled back with it.
    let failed = svc
        .clone()
        .oneshot(post("order-key-0002", "fail"))
        .await
        .unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        db.orders().await.len(),
        1,
        "the failed request's order was rolled back"
    );
    assert_eq!(db.records().await, 1);
    db.drop_schema().await;
}

/// T1 / T5 over the remote-tier mode: the instance that ran the request says when its record
/// expires; another instance replays it without `idempotent-expires-at`, which it cannot know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_another_instances_replay_leaves_out_the_expiry_it_cannot_know() {
    let db = TestDb::new("t5exp").await;
    let instance = |tier| {
        let engine = idem_postgres::TieredEngine::<StoredResponse>::builder(tier)
            .build()
            .unwrap();
        IdemLayer::new(engine).layer(tower::service_fn(
            |_req: Request<RequestBody<Full<Bytes>>>| async {
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(StatusCode::CREATED)
                        .body(Full::new(Bytes::from_static(b"order")))
                        .unwrap(),
                )
            },
        ))
    };
    let a = instance(db.tier(2).await);
    let b = instance(db.tier(2).await);
    let ran = a.oneshot(post("exp-key-0001", "sku=1")).await.unwrap();
    assert_eq!(ran.status(), StatusCode::CREATED);
    assert!(ran.headers().contains_key("idempotent-expires-at"));
    let replay = b.oneshot(post("exp-key-0001", "sku=1")).await.unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert!(
        !replay.headers().contains_key("idempotent-expires-at"),
        "{:?}",
        replay.headers()
    );
    db.drop_schema().await;
}
