//! The Redis pair: the trivial handler behind `IdemLayer` over the tiered engine on Redis,
//! against the same handler behind the middleware most services write by hand (`SET k pending
//! NX PX`, run, `SET k result PX`; on a taken key `GET` and replay, or 409 while pending).

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use http_body_util::BodyExt;
use idem_redis::{RedisTier, TieredEngine};
use idem_shop::auth::BearerTenantLayer;
use idem_test_support::redis::{raw, RedisServer};
use idem_tower::{IdemLayer, StoredResponse};
use redis::aio::ConnectionManager;

use crate::pinned::median;
use crate::{load, serve};

/// The trivial handler both sides run.
async fn order() -> Response {
    (StatusCode::CREATED, "order").into_response()
}

/// The hand-rolled middleware: claim with `SET NX`, run, store `<status> <body>`; a taken key
/// replays what is stored, or answers 409 while it is pending.
async fn hand_rolled(State(mgr): State<ConnectionManager>, req: Request, next: Next) -> Response {
    // (The body is not `Sync`: nothing that borrows the request may live across an await.)
    let key = {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        format!(
            "hr:{}:{}",
            header("authorization"),
            header("idempotency-key")
        )
    };
    let mut c = mgr.clone();
    let claimed: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg("pending")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .unwrap_or(None);
    if claimed.is_none() {
        let stored: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap_or(None);
        return match stored {
            Some(v) if v != b"pending" => {
                let (status, body) = v.split_at(3);
                let status = std::str::from_utf8(status)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .unwrap_or(StatusCode::OK);
                (status, body[1..].to_vec()).into_response()
            }
            _ => StatusCode::CONFLICT.into_response(),
        };
    }
    let resp = next.run(req).await;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut stored = format!("{} ", parts.status.as_u16()).into_bytes();
    stored.extend_from_slice(&body);
    let _: Result<(), _> = redis::cmd("SET")
        .arg(&key)
        .arg(stored)
        .arg("PX")
        .arg(86_400_000)
        .query_async(&mut c)
        .await;
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// The commands idem's scripts call inside Redis: `INFO commandstats` lists them beside the
/// `EVALSHA` whose time already includes theirs, so they are left out where scripts ran.
const IN_SCRIPTS: [&str; 10] = [
    "hmget", "hset", "hget", "time", "get", "set", "pexpire", "pttl", "publish", "del",
];

/// Redis' own top-level (calls, µs) since the last `CONFIG RESETSTAT` (`INFO commandstats`,
/// without INFO and CONFIG), and its main thread's CPU µs so far (`INFO cpu`).
async fn commandstats(port: u16) -> (f64, f64, f64) {
    let stats = raw(port, "INFO commandstats")
        .await
        .expect("INFO commandstats");
    let lines: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .collect();
    let scripted = lines.iter().any(|l| l.starts_with("cmdstat_eval"));
    let (mut calls, mut usec) = (0.0, 0.0);
    for l in lines {
        let name = l
            .trim_start_matches("cmdstat_")
            .split(':')
            .next()
            .unwrap_or("");
        if name == "info" || name.starts_with("config") || (scripted && IN_SCRIPTS.contains(&name))
        {
            continue;
        }
        if std::env::var_os("IDEM_DEPLOY_VERBOSE").is_some() {
            println!("  {l}");
        }
        let field = |f: &str| -> f64 {
            l.split(&format!("{f}="))
                .nth(1)
                .and_then(|x| x.split(',').next())
                .and_then(|x| x.parse().ok())
                .unwrap_or(0.0)
        };
        calls += field("calls");
        usec += field("usec");
    }
    let cpu = raw(port, "INFO cpu").await.expect("INFO cpu");
    let secs = |f: &str| -> f64 {
        cpu.lines()
            .find_map(|l| l.strip_prefix(&format!("{f}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let main = secs("used_cpu_user_main_thread") + secs("used_cpu_sys_main_thread");
    (calls, usec, main * 1e6)
}

/// One side's run: (requests/s, Redis calls, Redis command µs, Redis main-thread CPU µs; each
/// per intent).
async fn side(
    port: u16,
    addr: SocketAddr,
    conns: usize,
    n: u64,
    key: String,
    unique: bool,
) -> [f64; 4] {
    raw(port, "CONFIG RESETSTAT")
        .await
        .expect("CONFIG RESETSTAT");
    let (_, _, cpu0) = commandstats(port).await;
    let l = load::run(addr, conns, n, key, unique).await;
    assert_eq!(l.not_ok, 0, "every request must succeed");
    let (calls, usec, cpu1) = commandstats(port).await;
    let per = l.done as f64;
    [
        per / l.elapsed.as_secs_f64(),
        calls / per,
        usec / per,
        (cpu1 - cpu0) / per,
    ]
}

/// The Redis pair on a `redis-server` of the bench's own (no persistence: opted in).
pub async fn redis_part(pairs: u64, n: u64, conns: usize) {
    let server = RedisServer::start().await;
    let url = server.url();
    let port = server.port();
    let tier = RedisTier::builder()
        .allow_volatile(true)
        .connect(&url)
        .await
        .expect("the Redis tier");
    let engine = TieredEngine::<StoredResponse>::builder(tier)
        .build()
        .expect("the tiered engine");
    let mgr = redis::Client::open(url.as_str())
        .expect("redis url")
        .get_connection_manager()
        .await
        .expect("the hand-rolled middleware's connection");
    let hand = serve(
        axum::Router::new()
            .route("/orders", post(order))
            .layer(axum::middleware::from_fn_with_state(mgr, hand_rolled))
            .layer(BearerTenantLayer),
    )
    .await;
    let layered = serve(
        axum::Router::new().route("/orders", post(order)).layer(
            tower::ServiceBuilder::new()
                .layer(BearerTenantLayer)
                .layer(IdemLayer::new(engine.clone())),
        ),
    )
    .await;
    for unique in [true, false] {
        let (mut h, mut i, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..pairs + 1 {
            let key = format!("redis-{unique}-{round}");
            if !unique {
                // The replayed key's first (running) request on each side, not measured.
                load::run(layered, 1, 1, key.clone(), false).await;
                load::run(hand, 1, 1, key.clone(), false).await;
            }
            let mut one = [[0.0; 4]; 2];
            for k in 0..2 {
                let idem_side = (k + round as usize) % 2 == 1;
                let addr = if idem_side { layered } else { hand };
                one[usize::from(idem_side)] = side(port, addr, conns, n, key.clone(), unique).await;
            }
            if round == 0 {
                continue; // warm-up
            }
            ratios.push(one[1][0] / one[0][0]);
            h.push(one[0]);
            i.push(one[1]);
        }
        let med = |v: &[[f64; 4]], k: usize| median(v.iter().map(|f| f[k]).collect());
        println!(
            "redis {:<7} ratio idem/hand-rolled {:.2}x (pairs {:?}) | hand-rolled {:.0} req/s, \
             {:.2} calls, {:.2} us in commands, {:.1} us Redis CPU per intent | idem {:.0} req/s, \
             {:.2} calls, {:.2} us in commands, {:.1} us Redis CPU per intent",
            if unique { "unique" } else { "replay" },
            median(ratios.clone()),
            crate::pinned::two_places(&ratios),
            med(&h, 0),
            med(&h, 1),
            med(&h, 2),
            med(&h, 3),
            med(&i, 0),
            med(&i, 1),
            med(&i, 2),
            med(&i, 3),
        );
    }
}
