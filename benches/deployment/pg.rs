//! The PostgreSQL pair: bare `BEGIN; INSERT; COMMIT` against the INSERT in idem's transaction.

use std::net::SocketAddr;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Extension;
use http::StatusCode;
use idem_postgres::{PgEngine, PgTransaction};
use idem_shop::auth::BearerTenantLayer;
use idem_test_support::postgres::PgCluster;
use idem_tower::{IdemLayer, StoredResponse};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::pinned::median;
use crate::{load, serve};

const INSERT: &str = "INSERT INTO orders (intent, sku, qty, token) VALUES ($1, 'book-1', 1, $2)";

async fn pool(url: &str, n: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(n)
        .min_connections(n)
        .connect(url)
        .await
        .expect("connect to the bench's PostgreSQL")
}

/// The bare handler: `BEGIN; INSERT; COMMIT` on the pool.
async fn bare_order(State(pool): State<PgPool>, body: bytes::Bytes) -> Response {
    let intent = String::from_utf8_lossy(&body).into_owned();
    let res = async {
        let mut tx = pool.begin().await?;
        sqlx::query(INSERT)
            .bind(intent)
            .bind(0i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }
    .await;
    match res {
        Ok(()) => (StatusCode::CREATED, "order").into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The same INSERT in idem's transaction.
async fn idem_order(Extension(tx): Extension<PgTransaction>, body: bytes::Bytes) -> Response {
    let intent = String::from_utf8_lossy(&body).into_owned();
    let token = i64::try_from(tx.token().get()).unwrap_or(i64::MAX);
    let res = async {
        let mut conn = tx
            .lock()
            .await
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        sqlx::query(INSERT)
            .bind(intent)
            .bind(token)
            .execute(&mut *conn)
            .await
    }
    .await;
    match res {
        Ok(_) => (StatusCode::CREATED, "order").into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Server-side counters of the bench's cluster: (statements so far, WAL position in bytes).
async fn meter(m: &PgPool) -> (f64, f64) {
    sqlx::query_as::<_, (f64, f64)>(
        "SELECT (SELECT COALESCE(sum(calls), 0)::float8 FROM pg_stat_statements \
                 WHERE query NOT LIKE '%pg_stat_statements%' \
                   AND query NOT LIKE '%pg_current_wal_lsn%'), \
                (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8",
    )
    .fetch_one(m)
    .await
    .expect("read pg_stat_statements and the WAL position")
}

/// One side's figures for one run.
#[derive(Default, Clone, Copy)]
struct Figures {
    rps: f64,
    stmts: f64,
    wal: f64,
    counted: f64,
}

async fn measure(
    m: &PgPool,
    addr: SocketAddr,
    conns: usize,
    n: u64,
    key: String,
    unique: bool,
    counted: impl Fn() -> u64,
) -> Figures {
    let (s0, w0) = meter(m).await;
    let c0 = counted();
    let l = load::run(addr, conns, n, key, unique).await;
    assert_eq!(l.not_ok, 0, "every request must succeed");
    let (s1, w1) = meter(m).await;
    let per = l.done as f64;
    Figures {
        rps: per / l.elapsed.as_secs_f64(),
        stmts: (s1 - s0) / per,
        wal: (w1 - w0) / per,
        counted: (counted() - c0) as f64 / per,
    }
}

pub async fn pg_part(pairs: u64, n: u64, conns: usize) {
    let mut cluster = PgCluster::start();
    let url = cluster.url();
    {
        let p = pool(&url, 1).await;
        sqlx::raw_sql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            .execute(&p)
            .await
            .expect("preload pg_stat_statements");
        p.close().await;
    }
    cluster.stop();
    cluster.start_again();
    let m = pool(&url, 1).await;
    sqlx::raw_sql(
        "CREATE EXTENSION pg_stat_statements; \
         CREATE TABLE orders (id bigserial PRIMARY KEY, intent text NOT NULL, \
         sku text NOT NULL, qty int NOT NULL, token bigint NOT NULL)",
    )
    .execute(&m)
    .await
    .expect("create the orders table");
    let bare_pool = pool(&url, conns as u32).await;
    let engine = PgEngine::<StoredResponse>::builder(pool(&url, conns as u32).await)
        .build()
        .await
        .expect("the PgEngine");
    let bare = serve(
        axum::Router::new()
            .route("/orders", post(bare_order))
            .with_state(bare_pool)
            .layer(BearerTenantLayer),
    )
    .await;
    let layered = serve(
        axum::Router::new()
            .route("/orders", post(idem_order))
            .layer(
                tower::ServiceBuilder::new()
                    .layer(BearerTenantLayer)
                    .layer(IdemLayer::new(engine.clone())),
            ),
    )
    .await;
    let e = engine.clone();
    let counted = move || e.queries_sent();
    for unique in [true, false] {
        let (mut b, mut i, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..pairs + 1 {
            let key = format!("pg-{unique}-{round}");
            if !unique {
                // The replayed key's first (running) request, outside the measurement.
                load::run(layered, 1, 1, key.clone(), false).await;
            }
            let mut one = [Figures::default(); 2];
            for k in 0..2 {
                let idem_side = (k + round as usize) % 2 == 1;
                let addr = if idem_side { layered } else { bare };
                let f = measure(&m, addr, conns, n, key.clone(), unique, &counted).await;
                one[usize::from(idem_side)] = f;
            }
            if round == 0 {
                continue; // warm-up
            }
            ratios.push(one[1].rps / one[0].rps);
            b.push(one[0]);
            i.push(one[1]);
        }
        let med = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
        println!(
            "pg {:<7} ratio idem/bare {:.2}x (pairs {:?}) | bare {:.0} req/s, {:.2} stmts, \
             {:.0} B WAL per intent | idem {:.0} req/s, {:.2} stmts ({:.2} counted by idem), \
             {:.0} B WAL per intent",
            if unique { "unique" } else { "replay" },
            median(ratios.clone()),
            crate::pinned::two_places(&ratios),
            med(&b, |f| f.rps),
            med(&b, |f| f.stmts),
            med(&b, |f| f.wal),
            med(&i, |f| f.rps),
            med(&i, |f| f.stmts),
            med(&i, |f| f.counted),
            med(&i, |f| f.wal),
        );
    }
}
