//! What a deployment pays: the user-level pairs where a team would measure idem,
//! alternated in one run, with the deterministic counts of the shared tier beside each ratio.
//!
//! `cargo bench -p idem-benches --bench deployment`; `IDEM_BENCH_QUICK=1` for a short run
//! (about a minute). Starts a PostgreSQL cluster of its own (`idem-test-support`'s
//! `PgCluster`, fsync off, `pg_stat_statements` preloaded), so the WAL and statement counts
//! are this bench's alone.
//!
//! * `pg`: an axum `POST /orders` whose handler INSERTs one order: bare (`BEGIN; INSERT;
//!   COMMIT` on a `PgPool`) against the same INSERT behind `IdemLayer` over `PgEngine`, in
//!   idem's transaction (the `PgTransaction` request extension). Per side and workload
//!   (`unique` keys, `replay` of one key): requests/s, and per intent the statements the
//!   server ran (`pg_stat_statements`, BEGIN/COMMIT/ROLLBACK included), the WAL bytes
//!   (`pg_current_wal_lsn()` before and after) and, for idem, the statements it counted
//!   itself (`PgEngine::queries_sent`).
//! * `redis`: the trivial handler behind `IdemLayer` over the tiered engine on Redis (a
//!   `redis-server` of the bench's own) against the hand-rolled `SET NX` middleware most
//!   services write; beside each, Redis' calls and its own time per intent (`INFO
//!   commandstats`, reset before each run). The tier alone against the raw two-command floor
//!   is idem-redis' `redis_tier` bench.
//! * `layer`: the shop's trivial `POST /orders` bare against the same behind `IdemLayer` over
//!   the in-process engine (as `http_shop`, without wrk).
//!
//! Each pair runs `IDEM_DEPLOY_PAIRS` times (5; quick 3), which side goes first alternating;
//! the ratio is the median of the pairs' ratios (idem / bare requests/s). The load client is
//! in this process (`IDEM_DEPLOY_CONNS` keep-alive connections, 16), so the ratios are of the
//! whole process, client included; the counts do not depend on that.
//!
//! `IDEM_DEPLOY_ONLY=pg` (or `redis`, `layer`) runs one part.

#[path = "support/load.rs"]
mod load;
#[path = "support/pinned.rs"]
#[allow(dead_code)]
mod pinned;
#[path = "support/shop_route.rs"]
#[allow(dead_code)]
mod shop_route;

use std::net::SocketAddr;
use std::time::Duration;

use pinned::{env_u64, median, quick};

#[path = "deployment/pg.rs"]
mod pg;
#[path = "deployment/redis.rs"]
mod redis_pair;

/// Serves `app` on a loopback port.
async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

async fn layer_part(pairs: u64, n: u64, conns: usize) {
    let (bare, layered, _engine) = shop_route::routers(Duration::from_secs(60));
    let (bare, layered) = (serve(bare).await, serve(layered).await);
    for unique in [true, false] {
        let mut ratios = Vec::new();
        for round in 0..pairs + 1 {
            let key = format!("layer-{unique}-{round}");
            let mut rps = [0.0; 2];
            for k in 0..2 {
                let idem_side = (k + round as usize) % 2 == 1;
                let addr = if idem_side { layered } else { bare };
                let l = load::run(addr, conns, n, key.clone(), unique).await;
                assert_eq!(l.not_ok, 0, "every request must succeed");
                rps[usize::from(idem_side)] = l.done as f64 / l.elapsed.as_secs_f64();
            }
            if round > 0 {
                ratios.push(rps[1] / rps[0]);
            }
        }
        println!(
            "layer {:<7} ratio idem/bare {:.2}x (pairs {:?})",
            if unique { "unique" } else { "replay" },
            median(ratios.clone()),
            crate::pinned::two_places(&ratios),
        );
    }
}

fn main() {
    let q = quick();
    let pairs = env_u64("IDEM_DEPLOY_PAIRS", if q { 3 } else { 5 });
    let conns = env_u64("IDEM_DEPLOY_CONNS", 16) as usize;
    let only = std::env::var("IDEM_DEPLOY_ONLY").unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if only.is_empty() || only == "pg" {
            pg::pg_part(pairs, if q { 2_000 } else { 8_000 }, conns).await;
        }
        if only.is_empty() || only == "redis" {
            redis_pair::redis_part(pairs, if q { 10_000 } else { 40_000 }, conns).await;
        }
        if only.is_empty() || only == "layer" {
            layer_part(pairs, if q { 20_000 } else { 100_000 }, conns).await;
        }
    });
}
