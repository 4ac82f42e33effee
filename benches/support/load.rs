//! A small HTTP/1.1 load client for the deployment bench: `conns` keep-alive connections over
//! loopback, each sending `POST /orders` one after another until `n` requests are done, with a
//! fresh `Idempotency-Key` per request (`unique`) or one key for all (`replay`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The body of every request.
pub const BODY: &str = "intent_id=bench-order&sku=book-1&quantity=1";

/// What one load run saw.
pub struct Load {
    pub elapsed: Duration,
    pub done: u64,
    /// Responses whose status was not 2xx.
    pub not_ok: u64,
}

/// Sends `n` requests to `addr` over `conns` connections; keys are `<prefix>-<i>` (unique) or
/// `<prefix>` (replay).
pub async fn run(addr: SocketAddr, conns: usize, n: u64, prefix: String, unique: bool) -> Load {
    let next = Arc::new(AtomicU64::new(0));
    let not_ok = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (next, not_ok, prefix) = (next.clone(), not_ok.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.set_nodelay(true).ok();
            let mut buf = Vec::with_capacity(4096);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let key = if unique {
                    format!("{prefix}-{i}")
                } else {
                    prefix.clone()
                };
                let req = format!(
                    "POST /orders HTTP/1.1\r\nHost: bench\r\nContent-Type: \
                     application/x-www-form-urlencoded\r\nAuthorization: Bearer tenant-bench\r\n\
                     Idempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n{BODY}",
                    BODY.len()
                );
                s.write_all(req.as_bytes()).await.expect("send");
                if !read_response(&mut s, &mut buf).await {
                    not_ok.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("load task");
    }
    Load {
        elapsed: start.elapsed(),
        done: n,
        not_ok: not_ok.load(Ordering::Relaxed),
    }
}

/// Reads one response (head and a `Content-Length` body); true when its status is 2xx.
async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let k = s.read(&mut chunk).await.expect("read body");
                assert!(k > 0, "the server closed the connection");
                buf.extend_from_slice(&chunk[..k]);
            }
            return head.starts_with("http/1.1 2");
        }
        let k = s.read(&mut chunk).await.expect("read head");
        assert!(k > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..k]);
    }
}
