//! The tier's connection, and the health check that replaces it when it stops answering.
//!
//! A Redis Cluster client can stall after a failover: every call, on every slot, times out until
//! the process restarts, although a fresh client connects at once. So the tier keeps its
//! connection behind a short lock, cloned out for each call (never held across an `.await`), and
//! watches the calls' results: when at least [`FAILURES`] calls fail (an error or the time limit)
//! within one health window, it dials a fresh client in the background and swaps it in, at most
//! once per window. Each swap is counted ([`RedisTier::reconnects`](crate::RedisTier::reconnects),
//! metric `idem_redis_reconnects_total`) and logged as a warning. Calls already in flight finish
//! on the old connection; it closes when the last of them is done.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::metrics::RECONNECTS_TOTAL;

/// Failed calls within one health window that make the tier dial a fresh client.
pub(crate) const FAILURES: u32 = 3;

/// How to dial a fresh connection.
#[derive(Clone)]
pub(crate) enum Dial {
    Single(redis::Client, ConnectionManagerConfig),
    Cluster(ClusterClient),
    /// A connection the user handed in: it is never replaced.
    Fixed,
}

impl Dial {
    pub(crate) async fn dial(&self) -> Result<Conn, redis::RedisError> {
        match self {
            Dial::Single(client, cfg) => Ok(Conn::Single(
                client
                    .get_connection_manager_with_config(cfg.clone())
                    .await?,
            )),
            Dial::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
            Dial::Fixed => Err(redis::RedisError::from(std::io::Error::other(
                "a connection handed in is not replaced",
            ))),
        }
    }
}

pub(crate) struct Link {
    conn: RwLock<Conn>,
    dial: Dial,
    connect_timeout: Duration,
    /// `None`: never replace the connection.
    window: Option<Duration>,
    epoch: Instant,
    window_start_ms: AtomicU64,
    failures: AtomicU32,
    /// When the last replacement was tried, in ms since `epoch`, plus one (0: never).
    last_dial_ms: AtomicU64,
    dialing: AtomicBool,
    reconnects: AtomicU64,
}

impl Link {
    pub(crate) fn new(
        conn: Conn,
        dial: Dial,
        connect_timeout: Duration,
        window: Option<Duration>,
    ) -> Arc<Self> {
        let window = if matches!(dial, Dial::Fixed) {
            None
        } else {
            window
        };
        Arc::new(Link {
            conn: RwLock::new(conn),
            dial,
            connect_timeout,
            window,
            epoch: Instant::now(),
            window_start_ms: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            last_dial_ms: AtomicU64::new(0),
            dialing: AtomicBool::new(false),
            reconnects: AtomicU64::new(0),
        })
    }

    /// The current connection (a clone: the lock is released before the call).
    pub(crate) fn get(&self) -> Conn {
        self.conn.read().clone()
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(*self.conn.read(), Conn::Cluster(_))
    }

    /// Connections swapped in since the tier was built.
    pub(crate) fn reconnects(&self) -> u64 {
        self.reconnects.load(Relaxed)
    }

    /// Notes a call's result; after enough failures, dials a fresh client in the background.
    pub(crate) fn note<T, E>(self: &Arc<Self>, result: &Result<T, E>) {
        if result.is_ok() {
            return;
        }
        let Some(window) = self.window else { return };
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        let start = self.window_start_ms.load(Relaxed);
        let failures = if now.saturating_sub(start) > window_ms {
            self.window_start_ms.store(now, Relaxed);
            self.failures.store(1, Relaxed);
            1
        } else {
            self.failures.fetch_add(1, Relaxed) + 1
        };
        if failures < FAILURES {
            return;
        }
        let last = self.last_dial_ms.load(Relaxed);
        if last != 0 && now.saturating_sub(last - 1) < window_ms {
            return;
        }
        if self.dialing.swap(true, Relaxed) {
            return;
        }
        self.last_dial_ms.store(now + 1, Relaxed);
        let link = self.clone();
        tokio::spawn(async move {
            let fresh = tokio::time::timeout(link.connect_timeout, link.dial.dial()).await;
            match fresh {
                Ok(Ok(conn)) => {
                    *link.conn.write() = conn;
                    link.reconnects.fetch_add(1, Relaxed);
                    link.failures.store(0, Relaxed);
                    metrics::counter!(RECONNECTS_TOTAL).increment(1);
                    tracing::warn!(
                        failures,
                        window_ms,
                        "redis calls kept failing: a fresh client replaced the connection"
                    );
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "redis: a fresh client could not connect")
                }
                Err(_) => tracing::debug!("redis: a fresh client did not connect in time"),
            }
            link.dialing.store(false, Relaxed);
        });
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
