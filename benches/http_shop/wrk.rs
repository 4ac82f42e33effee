//! `wrk` for the http_shop bench: the Lua scripts of its two workloads, one run of `wrk` pinned
//! beside the server, and what its report says.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::pinned::cpu_ns;

pub(crate) const COMMON_LUA: &str = r#"wrk.method = "POST"
wrk.body = "intent_id=bench-order&sku=book-1&quantity=1"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "Bearer tenant-bench"
local prefix = 0
function init(args)
  prefix = tonumber(args[1]) or 0
"#;

/// Every request a fresh key: the run's prefix (a wrk argument) and a counter.
pub(crate) const UNIQUE_LUA: &str = r#"  counter = 0
end
function request()
  counter = counter + 1
  wrk.headers["Idempotency-Key"] = string.format("%08x-0000-4000-8000-%012d", prefix, counter)
  return wrk.format()
end
"#;

/// One key for the whole run (wrk builds the request once).
pub(crate) const REPLAY_LUA: &str = r#"  wrk.headers["Idempotency-Key"] = string.format("%08x-0000-4000-8000-000000000001", prefix)
end
"#;

pub(crate) fn write_scripts(dir: &Path) -> (PathBuf, PathBuf) {
    let unique = dir.join("http_unique.lua");
    let replay = dir.join("http_replay.lua");
    std::fs::write(&unique, format!("{COMMON_LUA}{UNIQUE_LUA}")).expect("write unique.lua");
    std::fs::write(&replay, format!("{COMMON_LUA}{REPLAY_LUA}")).expect("write replay.lua");
    (unique, replay)
}

/// What one `wrk` run measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wrk {
    pub(crate) rps: f64,
    pub(crate) requests: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) bad: u64,
    /// Server CPU µs per request over the run.
    pub(crate) cpu_us_per_req: f64,
    /// Server CPU time over wall time (1.0: its core was busy the whole run).
    pub(crate) server_busy: f64,
}

pub(crate) fn duration_us(s: &str) -> Option<f64> {
    let (num, mul) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|x| x * mul)
}

pub(crate) fn parse_wrk(out: &str) -> Wrk {
    let mut w = Wrk::default();
    for line in out.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        match t.as_slice() {
            ["Requests/sec:", x, ..] => w.rps = x.parse().unwrap_or(0.0),
            ["50%", x, ..] => w.p50_us = duration_us(x).unwrap_or(0.0),
            ["99%", x, ..] => w.p99_us = duration_us(x).unwrap_or(0.0),
            [n, "requests", "in", ..] => w.requests = n.parse().unwrap_or(0.0),
            ["Non-2xx", "or", "3xx", "responses:", n, ..] => w.bad += n.parse().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                // connect 0, read 0, write 0, timeout 0
                w.bad += rest
                    .iter()
                    .filter_map(|x| x.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    w
}

pub(crate) struct Load {
    pub(crate) pin: bool,
    pub(crate) conns: u64,
}

pub(crate) fn run_wrk(load: &Load, script: &Path, addr: SocketAddr, secs: u64, run_id: u64) -> Wrk {
    let mut cmd = if load.pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "1", "wrk"]);
        c
    } else {
        Command::new("wrk")
    };
    cmd.args(["-t1", &format!("-c{}", load.conns), &format!("-d{secs}s")])
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(format!("http://{addr}/orders"))
        .arg("--")
        .arg(run_id.to_string());
    let (cpu0, t0) = (cpu_ns(), Instant::now());
    let out = cmd.output().expect("run wrk");
    let (cpu, wall) = (cpu_ns() - cpu0, t0.elapsed());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wrk failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut w = parse_wrk(&text);
    if w.requests > 0.0 {
        w.cpu_us_per_req = cpu as f64 / 1e3 / w.requests;
    }
    w.server_busy = cpu as f64 / wall.as_nanos() as f64;
    w
}
