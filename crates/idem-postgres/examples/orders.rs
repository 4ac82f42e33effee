//! Orders whose idempotency record commits in the same transaction as the order (D4).
//!
//! Two engines stand for two instances of a service behind a load balancer. Every intent is
//! sent to both at once, and once more as a late retry; each order row is INSERTed inside the
//! run's transaction, so the order and its record commit together or not at all. At the end
//! the orders table holds exactly one row per intent.
//!
//! ```text
//! cargo run -p idem-postgres --example orders                       # 127.0.0.1:5432/test
//! DATABASE_URL=postgres://app@db/shop cargo run -p idem-postgres --example orders
//! ```

use std::time::Duration;

use idem_core::{Fingerprint, IdempotencyKey, Scope, Status};
use idem_postgres::{sqlx_status, PgEngine, PgTransaction};
use sqlx::postgres::PgPoolOptions;

const SCHEMA: &str = "idem_orders_example";
const INTENTS: usize = 200;

/// The side effect: one order row, inside the run's transaction. Returns the order id.
async fn create_order(tx: PgTransaction, sku: String, qty: i32) -> Result<i64, Status> {
    let mut conn = tx.lock().await?;
    sqlx::query_scalar(&format!(
        "INSERT INTO {SCHEMA}.orders (sku, qty, token) VALUES ($1, $2, $3) RETURNING id"
    ))
    .bind(sku)
    .bind(qty)
    .bind(tx.token().get() as i64)
    .fetch_one(&mut *conn)
    .await
    .map_err(sqlx_status)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .test_before_acquire(false)
        .connect(&url)
        .await?;
    // A fresh demo schema: idem's table beside the orders table.
    sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}; \
         CREATE TABLE {SCHEMA}.orders (id bigserial PRIMARY KEY, sku text NOT NULL, \
         qty int NOT NULL, token bigint NOT NULL)"
    ))
    .execute(&pool)
    .await?;

    // Two instances (each applies the schema: idempotent).
    let engine = || {
        PgEngine::<String>::builder(pool.clone())
            .schema(SCHEMA)
            .ttl(Duration::from_secs(3600))
            .build()
    };
    let (a, b) = (engine().await?, engine().await?);

    // One key per business intent, made by the client once and reused by every retry.
    let intents: Vec<(Scope, Fingerprint, String)> = (0..INTENTS)
        .map(|i| {
            let key = IdempotencyKey::generate();
            let scope = Scope::new("tenant-0042", "/shop.v1.Shop/CreateOrder", &key).unwrap();
            let body = format!("sku=book-{i}&qty=1");
            (scope, Fingerprint::of(body.as_bytes()), format!("book-{i}"))
        })
        .collect();

    let mut calls = tokio::task::JoinSet::new();
    for (scope, fp, sku) in &intents {
        for engine in [&a, &b] {
            let (engine, scope, fp, sku) = (engine.clone(), scope.clone(), *fp, sku.clone());
            calls.spawn(async move {
                engine
                    .execute(&scope, fp, move |tx| async move {
                        let id = create_order(tx, sku, 1).await?;
                        Ok(format!("order {id}"))
                    })
                    .await
                    .map(|out| out.kind())
            });
        }
    }
    let (mut executed, mut duplicates) = (0, 0);
    while let Some(r) = calls.join_next().await {
        match r?? {
            idem_dedup::OutcomeKind::Executed => executed += 1,
            _ => duplicates += 1,
        }
    }
    // A late retry of every intent on instance B: replayed, nothing runs.
    for (scope, fp, sku) in &intents {
        let sku = sku.clone();
        let out = b
            .execute(scope, *fp, move |tx| async move {
                Ok(format!("order {}", create_order(tx, sku, 1).await?))
            })
            .await?;
        assert!(out.is_duplicate());
        duplicates += 1;
    }
    // The same key with another body: refused on both instances (K4).
    let (scope, _, _) = &intents[0];
    for engine in [&a, &b] {
        let e = engine
            .execute(scope, Fingerprint::of(b"sku=book-0&qty=9"), |_tx| async {
                Ok::<_, Status>("must not run".to_string())
            })
            .await
            .unwrap_err();
        println!("same key, other body: {e}");
    }

    let orders: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {SCHEMA}.orders"))
        .fetch_one(&pool)
        .await?;
    println!(
        "{INTENTS} intents, {} calls: {executed} executed, {duplicates} joined or replayed; \
         {orders} orders",
        INTENTS * 3
    );
    assert_eq!(orders as usize, INTENTS, "one order per intent");
    sqlx::raw_sql(&format!("DROP SCHEMA {SCHEMA} CASCADE"))
        .execute(&pool)
        .await?;
    Ok(())
}
