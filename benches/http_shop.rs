//! The user-level benchmark: the axum shop's `POST /orders` with and without
//! `idem_tower::IdemLayer` in front, driven over loopback by `wrk`, the two servers alternated in
//! one run, and the ratios layered / bare reported.
//!
//! `cargo bench -p idem-benches --bench http_shop`; `IDEM_BENCH_QUICK=1` for a shorter run. Needs
//! `wrk` on the `PATH` (`apt-get install -y wrk`); without it the bench says so and exits 0.
//!
//! * One process serves both: the bare router on one loopback port, the layered router on
//!   another. Both have the same handler (the shop's `create_order` with no simulated work) and
//!   the shop's toy [`BearerTenantLayer`]; the layered one adds `IdemLayer` inside it, as
//!   `idem_shop::http::router` stacks them. The engine is in-process (`idem_dedup::Engine`),
//!   results kept 1 s (`IDEM_HTTP_TTL_MS`), as in the peers bench's unique workload.
//! * With `taskset` and at least 2 CPUs, the bench re-runs itself under `taskset -c 0` (the
//!   server: a tokio runtime with one worker) and starts each `wrk` under `taskset -c 1`.
//! * Two workloads: `unique` (every request a fresh `Idempotency-Key`, from a Lua counter) and
//!   `replay` (one key and one body for the whole run; the layered server runs the handler once
//!   per TTL and replays the stored response to the rest). The bare server runs the handler for
//!   every request in both.
//! * Per workload: a warm-up run of each server, then `IDEM_HTTP_PAIRS` pairs (5; quick 3) of
//!   `IDEM_HTTP_SECS`-second runs (5; quick 3), which server goes first alternating, a pause of
//!   `IDEM_HTTP_GAP_MS` (1,500 ms) after each run so results left by one run expire before the
//!   next starts. The ratio is the median of the pairs' ratios of requests/s. Beside it the
//!   server's CPU time per request (the sum of its threads' `/proc/self/task/*/schedstat`), which
//!   does not depend on whether `wrk` or the server was the bottleneck, and their ratio (bare
//!   over layered, per pair): the throughput ratio of a server that has its core to itself.
//! * `IDEM_HTTP_ONLY=unique` (or `replay`) runs one workload (for profiling); `IDEM_HTTP_CONNS`
//!   (64) sets wrk's connections, `IDEM_HTTP_WORKERS` (1) the server's tokio workers;
//!   `IDEM_HTTP_PROFILE=bare` (or `layered`) drives only that server and writes no summary, so
//!   `perf record` sees one side.
//!
//! Writes `target/idem-bench/http_shop.json` and prints a table.

#[path = "support/pinned.rs"]
mod pinned;
#[path = "support/shop_route.rs"]
mod shop_route;
#[path = "http_shop/wrk.rs"]
mod wrk;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use idem_dedup::Engine;
use idem_tower::StoredResponse;
use serde_json::{json, Map, Value};

use pinned::{cpus, env_u64, has, median, out_dir, pin_self, quick, r3};
use shop_route::{BODY, TENANT};
use wrk::{run_wrk, write_scripts, Load, Wrk};

/// Starts both servers on the current runtime: (bare, layered, the layered side's engine).
async fn serve(ttl: Duration) -> (SocketAddr, SocketAddr, Engine<StoredResponse>) {
    let (bare, layered, engine) = shop_route::routers(ttl);
    let mut addrs = Vec::new();
    for app in [bare, layered] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        addrs.push(listener.local_addr().expect("local addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
    }
    (addrs[0], addrs[1], engine)
}

/// One `POST /orders` over a fresh connection: (status, the response head in lower case).
fn post_once(addr: SocketAddr, key: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let req = format!(
        "POST /orders HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: Bearer {TENANT}\r\nIdempotency-Key: {key}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let head = resp
        .split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head)
}

/// Checks that the servers answer as the workloads assume: `201` everywhere, the layered one
/// replaying a repeated key (`idempotent-replayed`), the bare one not.
fn self_check(bare: SocketAddr, layered: SocketAddr) {
    let key = "00000000-0000-4000-8000-selfcheck001";
    for addr in [bare, layered] {
        for _ in 0..2 {
            let (status, _) = post_once(addr, key);
            assert_eq!(status, 201, "POST /orders on {addr} answered {status}");
        }
    }
    let (_, head) = post_once(layered, key);
    assert!(
        head.contains("idempotent-replayed"),
        "the layered server did not replay a repeated key:\n{head}"
    );
    let (_, head) = post_once(bare, key);
    assert!(
        !head.contains("idempotent-replayed"),
        "the bare server replayed"
    );
}

/// This process' resident memory in MiB (`/proc/self/statm`, 4 KiB pages), 0 where unknown.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |pages| pages * 4096.0 / (1 << 20) as f64)
}

fn main() {
    if !has("wrk") {
        println!("http_shop: wrk is not on the PATH (apt-get install -y wrk); nothing measured");
        return;
    }
    if let Some(code) = pin_self() {
        std::process::exit(code);
    }
    let pin = pinned::is_pinned();
    let quick = quick();
    let pairs = env_u64("IDEM_HTTP_PAIRS", if quick { 3 } else { 5 });
    let secs = env_u64("IDEM_HTTP_SECS", if quick { 3 } else { 5 });
    let gap = Duration::from_millis(env_u64("IDEM_HTTP_GAP_MS", 1_500));
    let ttl = Duration::from_millis(env_u64("IDEM_HTTP_TTL_MS", 1_000));
    let workers = env_u64("IDEM_HTTP_WORKERS", 1) as usize;
    let load = Load {
        pin,
        conns: env_u64("IDEM_HTTP_CONNS", 64),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime");
    let (bare, layered, _engine) = rt.block_on(serve(ttl));
    self_check(bare, layered);
    let dir = out_dir();
    let (unique_lua, replay_lua) = write_scripts(&dir);
    println!(
        "http_shop: {} CPUs, {}; server: {workers} tokio worker(s){}; wrk -t1 -c{} {}; \
         {pairs} pairs of {secs} s runs per workload, {} ms pause after each; results kept {} ms",
        cpus(),
        if quick { "QUICK" } else { "full" },
        if pin { " on CPU 0" } else { ", not pinned" },
        load.conns,
        if pin { "on CPU 1" } else { "not pinned" },
        gap.as_millis(),
        ttl.as_millis()
    );
    println!("bare: http://{bare}/orders  layered: http://{layered}/orders");

    let mut run_id: u64 = std::process::id() as u64 * 1000;
    let mut workloads = Map::new();
    let mut table = Vec::new();
    let only = std::env::var("IDEM_HTTP_ONLY").unwrap_or_default();
    // `IDEM_HTTP_PROFILE=bare|layered`: drive only that server (for `perf record`); no summary.
    let profile_side = std::env::var("IDEM_HTTP_PROFILE").ok();
    for (name, script) in [("unique", &unique_lua), ("replay", &replay_lua)] {
        if !only.is_empty() && !only.split(',').any(|w| w.trim() == name) {
            continue;
        }
        // Warm-up: connections, allocator, the engine's tables; measured by nobody.
        for (side, addr) in [("bare", bare), ("layered", layered)] {
            if profile_side.as_deref().is_some_and(|p| p != side) {
                continue;
            }
            run_id += 1;
            run_wrk(&load, script, addr, 2, run_id);
            rt.block_on(async { tokio::time::sleep(gap).await });
        }
        let (mut b, mut l, mut ratios, mut cpu_diff, mut cpu_ratios) =
            (vec![], vec![], vec![], vec![], vec![]);
        let mut runs = Vec::new();
        for pair in 0..pairs {
            let order = if pair % 2 == 0 {
                [("bare", bare), ("layered", layered)]
            } else {
                [("layered", layered), ("bare", bare)]
            };
            let (mut x, mut y) = (Wrk::default(), Wrk::default());
            for (side, addr) in order {
                if profile_side.as_deref().is_some_and(|p| p != side) {
                    continue;
                }
                run_id += 1;
                let w = run_wrk(&load, script, addr, secs, run_id);
                println!(
                    "  {name} pair {pair} {side:>7}: {:>9.0} req/s  p50 {:>7.0} us  p99 {:>7.0} us  \
                     server {:>5.1} us/req, busy {:.2}  bad {}  rss {:.0} MiB",
                    w.rps,
                    w.p50_us,
                    w.p99_us,
                    w.cpu_us_per_req,
                    w.server_busy,
                    w.bad,
                    rss_mib()
                );
                runs.push(json!({
                    "pair": pair, "side": side, "rps": w.rps.round(), "p50_us": w.p50_us,
                    "p99_us": w.p99_us, "server_cpu_us_per_req": r3(w.cpu_us_per_req),
                    "server_busy": r3(w.server_busy), "bad_responses": w.bad,
                    "server_rss_mib_after": rss_mib().round(),
                }));
                assert_eq!(
                    w.bad, 0,
                    "{name} {side}: non-2xx responses or socket errors"
                );
                if side == "bare" {
                    x = w;
                } else {
                    y = w;
                }
                rt.block_on(async { tokio::time::sleep(gap).await });
            }
            if profile_side.is_some() {
                continue;
            }
            ratios.push(y.rps / x.rps);
            cpu_diff.push(y.cpu_us_per_req - x.cpu_us_per_req);
            cpu_ratios.push(x.cpu_us_per_req / y.cpu_us_per_req);
            b.push(x);
            l.push(y);
        }
        if profile_side.is_some() {
            continue;
        }
        let col = |v: &[Wrk], f: fn(&Wrk) -> f64| median(v.iter().map(f).collect());
        let ratio = median(ratios);
        let target = if name == "unique" { 0.9 } else { 1.0 };
        let mut m = Map::new();
        m.insert("pairs".into(), json!(pairs));
        m.insert("run_secs".into(), json!(secs));
        m.insert("bare_rps".into(), json!(col(&b, |w| w.rps).round()));
        m.insert("layered_rps".into(), json!(col(&l, |w| w.rps).round()));
        m.insert("layered_vs_bare_paired".into(), json!(r3(ratio)));
        m.insert("target".into(), json!(target));
        m.insert("met".into(), json!(ratio >= target));
        m.insert("bare_p50_us".into(), json!(col(&b, |w| w.p50_us)));
        m.insert("layered_p50_us".into(), json!(col(&l, |w| w.p50_us)));
        m.insert("bare_p99_us".into(), json!(col(&b, |w| w.p99_us)));
        m.insert("layered_p99_us".into(), json!(col(&l, |w| w.p99_us)));
        let (bc, lc) = (col(&b, |w| w.cpu_us_per_req), col(&l, |w| w.cpu_us_per_req));
        m.insert("bare_server_cpu_us_per_req".into(), json!(r3(bc)));
        m.insert("layered_server_cpu_us_per_req".into(), json!(r3(lc)));
        let extra = median(cpu_diff);
        m.insert(
            "layer_server_cpu_us_per_req_paired".into(),
            json!(r3(extra)),
        );
        m.insert(
            "bare_server_busy".into(),
            json!(r3(col(&b, |w| w.server_busy))),
        );
        m.insert(
            "layered_server_busy".into(),
            json!(r3(col(&l, |w| w.server_busy))),
        );
        // What the ratio would be were the server's core its own and saturated: bare CPU per
        // request over layered CPU per request, per pair. Independent of how much of its core
        // the server got in a run, which on a shared machine moves from run to run.
        let cpu_ratio = median(cpu_ratios);
        m.insert("cpu_per_req_ratio_paired".into(), json!(r3(cpu_ratio)));
        m.insert("runs".into(), Value::Array(runs));
        table.push((
            name,
            ratio,
            target,
            col(&b, |w| w.rps),
            col(&l, |w| w.rps),
            bc,
            lc,
            extra,
            cpu_ratio,
        ));
        workloads.insert(name.into(), Value::Object(m));
    }
    let summary = json!({
        "workloads": workloads,
        "meta": {
            "quick": quick, "cpus": cpus(), "pinned": pin, "server_workers": workers,
            "wrk_connections": load.conns, "wrk_threads": 1, "pause_ms": gap.as_millis() as u64,
            "ttl_ms": ttl.as_millis() as u64, "body": BODY,
        }
    });
    if profile_side.is_some() {
        return;
    }
    let path = dir.join("http_shop.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&summary).expect("json") + "\n",
    )
    .expect("write http_shop.json");
    println!();
    println!(
        "## http_shop (POST /orders over loopback; ratio: median of the pairs' layered/bare req/s)"
    );
    println!("| workload | bare req/s | layered req/s | layered / bare (paired) | target | | server µs/req bare | layered | layer's µs/req (paired) | CPU-bound ratio (paired) |");
    println!("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for (name, ratio, target, br, lr, bc, lc, extra, cpu_ratio) in table {
        println!(
            "| {name} | {br:.0} | {lr:.0} | {ratio:.3}x | >= {target:.1}x | {} | {bc:.1} | {lc:.1} | {extra:+.1} | {cpu_ratio:.3}x |",
            if ratio >= target { "met" } else { "NOT met" }
        );
    }
    println!();
    println!("summary: {}", path.display());
    drop(rt);
}
