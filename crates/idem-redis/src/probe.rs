//! The startup probe: dial (or use a connection) and read the server's persistence settings,
//! again with a capped backoff while Redis is still starting, until the startup timeout.

use std::future::Future;
use std::time::Duration;

use redis::{ErrorKind, RedisError};
use tokio::time::Instant;

use crate::config::RedisTierBuilder;
use crate::conn::Conn;
use crate::error::{dial_failed, ConnectError};
use crate::link::Dial;
use crate::persistence::{config_value, Persistence};

/// The weakest persistence found, and the node (`host:port`) that has it, where known.
pub(crate) type Found = (Option<String>, Persistence);

/// Why [`until_ready`] stopped trying.
enum Stop {
    /// Redis was still starting (or unreachable) when the startup timeout came.
    StillStarting(RedisError),
    /// An error that another try cannot fix.
    Failed(RedisError),
}

/// Runs `attempt` until it succeeds, fails for good, or another try would end past
/// `timeout`; between tries it sleeps 20 ms, doubling up to 500 ms.
async fn until_ready<T, Fut>(timeout: Duration, mut attempt: impl FnMut() -> Fut) -> Result<T, Stop>
where
    Fut: Future<Output = Result<T, RedisError>>,
{
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(20);
    loop {
        match attempt().await {
            Ok(ready) => return Ok(ready),
            Err(e) if !is_starting(&e) => return Err(Stop::Failed(e)),
            Err(e) if Instant::now() + backoff >= deadline => return Err(Stop::StillStarting(e)),
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}

impl RedisTierBuilder {
    /// Dials and reads the persistence settings, again and again while Redis is still starting.
    /// `address` names where the dial goes, for the error that says it could not connect.
    pub(crate) async fn dial_until_ready(
        &self,
        dial: &Dial,
        address: Option<&str>,
    ) -> Result<(Conn, Found), ConnectError> {
        let attempt = || async {
            let conn = match tokio::time::timeout(self.connect_timeout, dial.dial()).await {
                Ok(conn) => conn?,
                Err(_) => return Err(timed_out()),
            };
            let persistence = read_persistence(&conn, self.command_timeout).await?;
            Ok((conn, persistence))
        };
        until_ready(self.startup_timeout, attempt)
            .await
            .map_err(|stop| match stop {
                Stop::StillStarting(e) if e.is_timeout() => {
                    ConnectError::Timeout(self.startup_timeout)
                }
                Stop::StillStarting(e) => dial_failed(address, e),
                Stop::Failed(e) => ConnectError::Redis(e),
            })
    }

    /// Reads the persistence settings over a given connection, again while Redis is starting.
    pub(crate) async fn read_until_ready(&self, conn: &Conn) -> Result<Found, ConnectError> {
        until_ready(self.startup_timeout, || {
            read_persistence(conn, self.command_timeout)
        })
        .await
        .map_err(|(Stop::StillStarting(e) | Stop::Failed(e))| ConnectError::Redis(e))
    }
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "connection attempt timed out",
    ))
}

/// Errors that mean "not ready yet": worth another try while the startup timeout lasts.
fn is_starting(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.kind() == ErrorKind::ClusterConnectionNotFound
        || matches!(
            e.code(),
            Some("LOADING" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN")
        )
}

/// The weakest persistence of the server (every primary of a cluster), with the node that has it.
/// `CONFIG GET` refused (disabled or renamed): [`Persistence::Unknown`].
async fn read_persistence(conn: &Conn, limit: Duration) -> Result<Found, RedisError> {
    // CONFIG GET is answered while Redis still loads its data; PING is not (LOADING).
    conn.on_every_primary(&redis::cmd("PING"), limit).await?;
    let mut settings: Vec<(String, [String; 3])> = Vec::new();
    for (i, name) in ["appendonly", "appendfsync", "save"].iter().enumerate() {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(*name);
        let replies = match conn.on_every_primary(&cmd, limit).await {
            Ok(r) => r,
            Err(e) if is_starting(&e) => return Err(e),
            Err(_) => return Ok((None, Persistence::Unknown)),
        };
        for (node, v) in replies {
            let Some(value) = config_value(&v) else {
                return Ok((known(node), Persistence::Unknown));
            };
            match settings.iter_mut().find(|(n, _)| *n == node) {
                Some((_, s)) => s[i] = value,
                None => {
                    let mut s: [String; 3] = Default::default();
                    s[i] = value;
                    settings.push((node, s));
                }
            }
        }
    }
    Ok(settings
        .into_iter()
        .map(|(node, [aof, fsync, save])| {
            (known(node), Persistence::from_config(&aof, &fsync, &save))
        })
        .min_by_key(|(_, p)| *p)
        .unwrap_or((None, Persistence::Unknown)))
}

/// A node's address as `on_every_primary` gives it: empty for one server (unknown there).
fn known(node: String) -> Option<String> {
    (!node.is_empty()).then_some(node)
}

/// The addresses of a cluster's seed nodes, for an error that says where the dial went.
pub(crate) fn seeds(clients: &[redis::Client]) -> String {
    let addrs: Vec<String> = clients
        .iter()
        .map(|c| c.get_connection_info().addr().to_string())
        .collect();
    addrs.join(", ")
}
