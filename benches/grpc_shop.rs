//! The user-level benchmark over gRPC (optional part): the tonic shop's `CreateOrder`
//! with and without `idem_tower::IdemLayer`, driven over loopback by a tonic load client, the two
//! servers alternated in one run, the ratios layered / bare reported. The HTTP twin is
//! `http_shop.rs`; the method is the same (BENCHMARKS.md).
//!
//! `cargo bench -p idem-benches --bench grpc_shop`; `IDEM_BENCH_QUICK=1` for a shorter run.
//!
//! * One process serves both, on two loopback ports: `ShopServer` under the shop's
//!   `BearerTenantLayer`, and the same with `idem_shop::grpc::idem_layer` inside it (the shop's
//!   writes), over an in-process `idem_dedup::Engine` (results kept 1 s, `IDEM_GRPC_TTL_MS`). The
//!   shop does no simulated work.
//! * With `taskset` and at least 2 CPUs the server process re-runs itself under `taskset -c 0`
//!   (one tokio worker); the load client is this same binary again (`IDEM_GRPC_CLIENT` set)
//!   under `taskset -c 1`: one tokio worker, `IDEM_GRPC_CONNS` (4) HTTP/2 connections,
//!   `IDEM_GRPC_TASKS` (64) concurrent calls in a closed loop for the run's length.
//! * `unique`: every call a fresh `x-idempotency-key`; `replay`: one key per run. Pairs of runs
//!   (`IDEM_GRPC_PAIRS` 5, quick 3; `IDEM_GRPC_SECS` 5, quick 3), which server goes first
//!   alternating, a pause (`IDEM_GRPC_GAP_MS`, 1,500) after each; the median of the pairs'
//!   layered / bare calls/s, and the server's CPU per call as in `http_shop`. Every call must
//!   succeed, or the bench fails.
//!
//! Writes `target/idem-bench/grpc_shop.json` and prints a table. The small helpers at the end
//! are `http_shop.rs`'s, repeated so that each bench reads on its own.

#[path = "support/pinned.rs"]
mod pinned;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_dedup::Engine;
use idem_shop::auth::BearerTenantLayer;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::shop_server::ShopServer;
use idem_shop::{pb, Shop};
use idem_tower::StoredResponse;
use serde_json::{json, Map, Value};

use pinned::{cpu_ns, cpus, env_u64, median, out_dir, pin_self, quick, r3};

const TENANT: &str = "Bearer tenant-bench";
const INTENT: &str = "bench-order";
const CLIENT_ENV: &str = "IDEM_GRPC_CLIENT";

/// Starts both servers: (bare, layered, the bare shop, the layered shop).
async fn serve(ttl: Duration) -> (SocketAddr, SocketAddr, Shop, Shop) {
    let engine = Engine::<StoredResponse>::builder()
        .ttl(ttl)
        .max_entries(8_000_000)
        .build()
        .expect("engine");
    let (bare_shop, layered_shop) = (Shop::new(), Shop::new());
    let mut addrs = Vec::new();
    for layered in [false, true] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        addrs.push(listener.local_addr().expect("local addr"));
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        if layered {
            let stack = tower::ServiceBuilder::new()
                .layer(BearerTenantLayer)
                .layer(idem_shop::grpc::idem_layer(&engine))
                .into_inner();
            let svc = ShopServer::new(layered_shop.clone());
            tokio::spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .layer(stack)
                    .add_service(svc)
                    .serve_with_incoming(incoming)
                    .await;
            });
        } else {
            let stack = tower::ServiceBuilder::new()
                .layer(BearerTenantLayer)
                .into_inner();
            let svc = ShopServer::new(bare_shop.clone());
            tokio::spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .layer(stack)
                    .add_service(svc)
                    .serve_with_incoming(incoming)
                    .await;
            });
        }
    }
    (addrs[0], addrs[1], bare_shop, layered_shop)
}

fn request(key: &str) -> tonic::Request<pb::CreateOrderRequest> {
    let mut r = tonic::Request::new(pb::CreateOrderRequest {
        intent_id: INTENT.into(),
        sku: "book-1".into(),
        quantity: 1,
    });
    let md = r.metadata_mut();
    md.insert("authorization", TENANT.parse().expect("ascii"));
    md.insert("x-idempotency-key", key.parse().expect("ascii"));
    r
}

/// The load client (this binary with `IDEM_GRPC_CLIENT=addr,secs,mode,run_id,conns,tasks`):
/// prints `ok <calls> err <calls> secs <elapsed>`.
fn client(spec: &str) {
    let f: Vec<&str> = spec.split(',').collect();
    let addr: SocketAddr = f[0].parse().expect("addr");
    let secs: f64 = f[1].parse().expect("secs");
    let unique = f[2] == "unique";
    let run_id: u64 = f[3].parse().expect("run id");
    let conns: usize = f[4].parse().expect("conns");
    let tasks: usize = f[5].parse().expect("tasks");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut clients = Vec::new();
        for _ in 0..conns {
            let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
            clients.push(ShopClient::new(ch));
        }
        let (ok, err, next) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(1)),
        );
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(secs);
        let mut handles = Vec::new();
        for t in 0..tasks {
            let mut c = clients[t % conns].clone();
            let (ok, err, next) = (ok.clone(), err.clone(), next.clone());
            handles.push(tokio::spawn(async move {
                while Instant::now() < end {
                    let n = if unique {
                        next.fetch_add(1, Relaxed)
                    } else {
                        1
                    };
                    let key = format!("{run_id:08x}-0000-4000-8000-{n:012}");
                    match c.create_order(request(&key)).await {
                        Ok(_) => ok.fetch_add(1, Relaxed),
                        Err(_) => err.fetch_add(1, Relaxed),
                    };
                }
            }));
        }
        for h in handles {
            h.await.expect("client task");
        }
        println!(
            "ok {} err {} secs {}",
            ok.load(Relaxed),
            err.load(Relaxed),
            start.elapsed().as_secs_f64()
        );
    });
}

#[derive(Debug, Clone, Copy, Default)]
struct Run {
    cps: f64,
    cpu_us_per_call: f64,
    server_busy: f64,
}

struct Load {
    pin: bool,
    conns: u64,
    tasks: u64,
}

fn run_client(load: &Load, addr: SocketAddr, secs: u64, mode: &str, run_id: u64) -> Run {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = if load.pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]).arg(exe);
        c
    } else {
        Command::new(exe)
    };
    cmd.env(
        CLIENT_ENV,
        format!(
            "{addr},{secs},{mode},{run_id},{},{}",
            load.conns, load.tasks
        ),
    );
    let (cpu0, t0) = (cpu_ns(), Instant::now());
    let out = cmd.output().expect("run the load client");
    let (cpu, wall) = (cpu_ns() - cpu0, t0.elapsed());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Vec<&str> = text.split_whitespace().collect();
    let (ok, err, elapsed): (f64, u64, f64) = match t.as_slice() {
        ["ok", ok, "err", err, "secs", s, ..] => (
            ok.parse().unwrap_or(0.0),
            err.parse().unwrap_or(0),
            s.parse().unwrap_or(1.0),
        ),
        _ => panic!("unexpected client output: {text}"),
    };
    assert_eq!(err, 0, "{mode}: {err} calls failed");
    Run {
        cps: ok / elapsed,
        cpu_us_per_call: if ok > 0.0 { cpu as f64 / 1e3 / ok } else { 0.0 },
        server_busy: cpu as f64 / wall.as_nanos() as f64,
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CLIENT_ENV) {
        client(&spec);
        return;
    }
    if let Some(code) = pin_self() {
        std::process::exit(code);
    }
    let pin = pinned::is_pinned();
    let quick = quick();
    let pairs = env_u64("IDEM_GRPC_PAIRS", if quick { 3 } else { 5 });
    let secs = env_u64("IDEM_GRPC_SECS", if quick { 3 } else { 5 });
    let gap = Duration::from_millis(env_u64("IDEM_GRPC_GAP_MS", 1_500));
    let ttl = Duration::from_millis(env_u64("IDEM_GRPC_TTL_MS", 1_000));
    let load = Load {
        pin,
        conns: env_u64("IDEM_GRPC_CONNS", 4).max(1),
        tasks: env_u64("IDEM_GRPC_TASKS", 64).max(1),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (bare, layered, bare_shop, layered_shop) = rt.block_on(serve(ttl));
    // Self-check: two calls with one key each; the layered shop must record one order, the
    // bare one two.
    rt.block_on(async {
        for addr in [bare, layered] {
            let mut c = ShopClient::connect(format!("http://{addr}"))
                .await
                .expect("connect");
            for _ in 0..2 {
                c.create_order(request("00000000-0000-4000-8000-selfcheck001"))
                    .await
                    .expect("CreateOrder");
            }
        }
    });
    assert_eq!(bare_shop.orders_for(INTENT).len(), 2, "bare shop");
    assert_eq!(layered_shop.orders_for(INTENT).len(), 1, "layered shop");
    println!(
        "grpc_shop: {} CPUs, {}; server: 1 tokio worker{}; client: {} connections, {} tasks{}; \
         {pairs} pairs of {secs} s runs per workload, {} ms pause after each; results kept {} ms",
        cpus(),
        if quick { "QUICK" } else { "full" },
        if pin { " on CPU 0" } else { ", not pinned" },
        load.conns,
        load.tasks,
        if pin { " on CPU 1" } else { ", not pinned" },
        gap.as_millis(),
        ttl.as_millis()
    );
    let pause = |rt: &tokio::runtime::Runtime| rt.block_on(async { tokio::time::sleep(gap).await });
    let mut run_id: u64 = u64::from(std::process::id()) * 1000;
    let mut workloads = Map::new();
    let mut lines = Vec::new();
    for mode in ["unique", "replay"] {
        for addr in [bare, layered] {
            run_id += 1;
            run_client(&load, addr, 2, mode, run_id);
            pause(&rt);
        }
        let (mut ratios, mut diffs, mut cpu_ratios) = (vec![], vec![], vec![]);
        let (mut b, mut l) = (vec![], vec![]);
        let mut runs = Vec::new();
        for pair in 0..pairs {
            let order = if pair % 2 == 0 {
                [("bare", bare), ("layered", layered)]
            } else {
                [("layered", layered), ("bare", bare)]
            };
            let (mut x, mut y) = (Run::default(), Run::default());
            for (side, addr) in order {
                run_id += 1;
                let r = run_client(&load, addr, secs, mode, run_id);
                println!(
                    "  {mode} pair {pair} {side:>7}: {:>9.0} calls/s  server {:>5.1} us/call, busy {:.2}",
                    r.cps, r.cpu_us_per_call, r.server_busy
                );
                runs.push(json!({
                    "pair": pair, "side": side, "calls_per_sec": r.cps.round(),
                    "server_cpu_us_per_call": r3(r.cpu_us_per_call), "server_busy": r3(r.server_busy),
                }));
                if side == "bare" {
                    x = r;
                } else {
                    y = r;
                }
                pause(&rt);
            }
            ratios.push(y.cps / x.cps);
            diffs.push(y.cpu_us_per_call - x.cpu_us_per_call);
            cpu_ratios.push(x.cpu_us_per_call / y.cpu_us_per_call);
            b.push(x);
            l.push(y);
        }
        let col = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
        let (ratio, diff, cpu_ratio) = (median(ratios), median(diffs), median(cpu_ratios));
        let target = if mode == "unique" { 0.9 } else { 1.0 };
        let (bc, lc) = (
            col(&b, |r| r.cpu_us_per_call),
            col(&l, |r| r.cpu_us_per_call),
        );
        let mut m = Map::new();
        m.insert("pairs".into(), json!(pairs));
        m.insert(
            "bare_calls_per_sec".into(),
            json!(col(&b, |r| r.cps).round()),
        );
        m.insert(
            "layered_calls_per_sec".into(),
            json!(col(&l, |r| r.cps).round()),
        );
        m.insert("layered_vs_bare_paired".into(), json!(r3(ratio)));
        m.insert("target".into(), json!(target));
        m.insert("bare_server_cpu_us_per_call".into(), json!(r3(bc)));
        m.insert("layered_server_cpu_us_per_call".into(), json!(r3(lc)));
        m.insert(
            "layer_server_cpu_us_per_call_paired".into(),
            json!(r3(diff)),
        );
        m.insert("cpu_per_call_ratio_paired".into(), json!(r3(cpu_ratio)));
        m.insert("runs".into(), Value::Array(runs));
        workloads.insert(mode.into(), Value::Object(m));
        lines.push(format!(
            "| {mode} | {:.0} | {:.0} | {ratio:.3}x | >= {target:.1}x | {} | {bc:.1} | {lc:.1} | {diff:+.1} | {cpu_ratio:.3}x |",
            col(&b, |r| r.cps),
            col(&l, |r| r.cps),
            if ratio >= target { "met" } else { "NOT met" }
        ));
    }
    let summary = json!({
        "workloads": workloads,
        "meta": {
            "quick": quick, "cpus": cpus(), "pinned": pin, "server_workers": 1,
            "client_connections": load.conns, "client_tasks": load.tasks,
            "pause_ms": gap.as_millis() as u64, "ttl_ms": ttl.as_millis() as u64,
        }
    });
    let path = out_dir().join("grpc_shop.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&summary).expect("json") + "\n",
    )
    .expect("write grpc_shop.json");
    println!();
    println!("## grpc_shop (CreateOrder over loopback; ratio: median of the pairs' layered/bare calls/s)");
    println!("| workload | bare calls/s | layered calls/s | layered / bare (paired) | target | | server µs/call bare | layered | layer's µs/call (paired) | CPU-bound ratio (paired) |");
    println!("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for line in lines {
        println!("{line}");
    }
    println!();
    println!("summary: {}", path.display());
    drop(rt);
}
