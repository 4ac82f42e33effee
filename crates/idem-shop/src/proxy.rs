//! A fault-injecting TCP proxy for HTTP/2 (gRPC) on loopback.
//!
//! It forwards bytes unchanged but reads the HTTP/2 frame headers going by, so it can pick a fault
//! per *request* (a new stream's `HEADERS` frame) rather than per connection:
//!
//! | fault | what the client sees | did the server run it? |
//! |---|---|---|
//! | drop before send | connection reset; the request never left the proxy | no |
//! | drop after send | connection reset when the answer starts | yes: an unknown outcome |
//! | slow | the answer is held for `slow_by` (past the client's attempt timeout) | yes |
//!
//! Frames are never reordered (HPACK state is per connection), so a held answer also holds the
//! connection's later answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use crate::rng::Rng;

/// Fault probabilities per request (0 to 1) and the delay of slow answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProxyFaults {
    /// Drop the connection before the request is forwarded.
    pub drop_before_send: f64,
    /// Forward the request, drop the connection when the answer starts.
    pub drop_after_send: f64,
    /// Hold the answer for `slow_by`.
    pub slow: f64,
    /// How long a slow answer is held.
    pub slow_by: Duration,
    /// Seed of the fault dice.
    pub seed: u64,
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct ProxyCounts {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Requests seen (new streams).
    pub requests: AtomicU64,
    /// Connections dropped before a request was forwarded.
    pub dropped_before_send: AtomicU64,
    /// Connections dropped after a request was forwarded, when its answer started.
    pub dropped_after_send: AtomicU64,
    /// Answers held for `slow_by`.
    pub slowed: AtomicU64,
}

/// A running proxy; dropping it stops accepting.
#[derive(Debug)]
pub struct FaultProxy {
    /// Where clients connect (127.0.0.1).
    pub addr: SocketAddr,
    /// What it did so far.
    pub counts: Arc<ProxyCounts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    DropAfterSend,
    Slow,
}

const PREFACE: usize = 24;
const HEADERS: u8 = 0x1;

/// Starts a proxy on `127.0.0.1:0` in front of `upstream`.
///
/// # Errors
///
/// Binding the listener failed.
pub async fn start(upstream: SocketAddr, faults: ProxyFaults) -> std::io::Result<FaultProxy> {
    start_many(vec![upstream], faults).await
}

/// Starts a proxy on `127.0.0.1:0` that spreads connections over `upstreams`, round robin: a
/// client that reconnects after a dropped connection lands on the next instance, as behind a
/// load balancer, so retries of one intent reach different instances.
///
/// # Errors
///
/// Binding the listener failed, or `upstreams` is empty.
pub async fn start_many(
    upstreams: Vec<SocketAddr>,
    faults: ProxyFaults,
) -> std::io::Result<FaultProxy> {
    if upstreams.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the proxy needs at least one upstream",
        ));
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counts = Arc::new(ProxyCounts::default());
    let rng = Arc::new(Rng::new(faults.seed));
    let c = counts.clone();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let n = c.connections.fetch_add(1, Relaxed);
            let upstream = upstreams[(n as usize) % upstreams.len()];
            let (c, rng) = (c.clone(), rng.clone());
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    connection(client, server, faults, rng, c).await;
                }
            });
        }
    });
    Ok(FaultProxy { addr, counts, task })
}

async fn connection(
    client: TcpStream,
    server: TcpStream,
    faults: ProxyFaults,
    rng: Arc<Rng>,
    counts: Arc<ProxyCounts>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let streams: Arc<Mutex<HashMap<u32, Fault>>> = Arc::default();
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = upstream(cr, sw, faults, &rng, &counts, &streams);
    let down = downstream(sr, cw, faults, &counts, &streams);
    // Whichever direction ends (EOF, error or an injected drop) ends the connection: both
    // sockets are dropped here, which resets them.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

async fn read_frame(from: &mut OwnedReadHalf, buf: &mut Vec<u8>) -> std::io::Result<(u8, u32)> {
    let mut head = [0u8; 9];
    from.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let kind = head[3];
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7FFF_FFFF;
    buf.clear();
    buf.extend_from_slice(&head);
    buf.resize(9 + len, 0);
    from.read_exact(&mut buf[9..]).await?;
    Ok((kind, stream))
}

/// Client → server: picks each new stream's fault.
async fn upstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    faults: ProxyFaults,
    rng: &Rng,
    counts: &ProxyCounts,
    streams: &Mutex<HashMap<u32, Fault>>,
) -> std::io::Result<()> {
    let mut preface = [0u8; PREFACE];
    from.read_exact(&mut preface).await?;
    to.write_all(&preface).await?;
    let mut seen_max = 0u32;
    let mut buf = Vec::with_capacity(16 * 1024);
    loop {
        let (kind, stream) = read_frame(&mut from, &mut buf).await?;
        if kind == HEADERS && stream > seen_max {
            seen_max = stream;
            counts.requests.fetch_add(1, Relaxed);
            let roll = rng.next_f64();
            if roll < faults.drop_before_send {
                counts.dropped_before_send.fetch_add(1, Relaxed);
                return Ok(());
            } else if roll < faults.drop_before_send + faults.drop_after_send {
                streams.lock().insert(stream, Fault::DropAfterSend);
            } else if roll < faults.drop_before_send + faults.drop_after_send + faults.slow {
                streams.lock().insert(stream, Fault::Slow);
            }
        }
        to.write_all(&buf).await?;
    }
}

/// Server → client: applies the fault when a stream's answer starts.
async fn downstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    faults: ProxyFaults,
    counts: &ProxyCounts,
    streams: &Mutex<HashMap<u32, Fault>>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(16 * 1024);
    loop {
        let (_kind, stream) = read_frame(&mut from, &mut buf).await?;
        if stream != 0 {
            let fault = streams.lock().remove(&stream);
            match fault {
                Some(Fault::DropAfterSend) => {
                    counts.dropped_after_send.fetch_add(1, Relaxed);
                    return Ok(());
                }
                Some(Fault::Slow) => {
                    counts.slowed.fetch_add(1, Relaxed);
                    tokio::time::sleep(faults.slow_by).await;
                }
                None => {}
            }
        }
        to.write_all(&buf).await?;
    }
}
