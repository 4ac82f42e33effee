//! [`RedisTierBuilder`]: connecting to Redis or Redis Cluster, with every default listed.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{ErrorKind, RedisError};
use tokio::time::Instant;

use crate::conn::Conn;
use crate::error::{dial_failed, ConnectError};
use crate::link::{Dial, Link};
use crate::metrics::VOLATILE;
use crate::persistence::{config_value, Persistence};
use crate::RedisTier;

/// Connects a [`RedisTier`].
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | [`prefix`](Self::prefix) | `idem:` | keys are `idem:{<digest>}`, `…:fence`, channel `…:done` |
/// | [`command_timeout`](Self::command_timeout) | 1 s | every Redis call; past it: `UNAVAILABLE` (D3) |
/// | [`connect_timeout`](Self::connect_timeout) | 1 s | each (re)connection attempt |
/// | [`startup_timeout`](Self::startup_timeout) | 10 s | `connect` retries while Redis is still starting (connection refused, `LOADING`) |
/// | [`allow_volatile`](Self::allow_volatile) | `false` | a Redis without an append-only file is refused ([`ConnectError::Volatile`]): its restart loses acknowledged records |
/// | [`health_window`](Self::health_window) | 3 s | 3 failed calls within it: a fresh client replaces the connection (at most once per window) |
/// | [`wait_replicas`](Self::wait_replicas) | off | a claim holds and a completion counts as recorded once Redis acknowledged it; with it, once `n` replicas have it too |
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idem_redis::ConnectError> {
/// use idem_redis::RedisTier;
/// use std::time::Duration;
///
/// let single = RedisTier::builder()
///     .prefix("shop:idem:")
///     .command_timeout(Duration::from_millis(250))
///     .connect("redis://127.0.0.1:6379/")
///     .await?;
/// let cluster = RedisTier::builder()
///     .wait_replicas(1, Duration::from_millis(100))
///     .connect_cluster(&["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
///     .await?;
/// // A development Redis without persistence: accepted only when asked for.
/// let dev = RedisTier::builder()
///     .allow_volatile(true)
///     .connect("redis://127.0.0.1:6379/")
///     .await?;
/// # let _ = (single, cluster, dev); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisTierBuilder {
    prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    startup_timeout: Duration,
    allow_volatile: bool,
    health_window: Duration,
    replace_stalled: bool,
    wait_replicas: Option<(u32, Duration)>,
}

impl Default for RedisTierBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// The weakest persistence found, and the node (`host:port`) that has it, where known.
type Found = (Option<String>, Persistence);

/// The settings a started tier keeps.
pub(crate) struct TierSettings {
    pub(crate) prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) wait_replicas: Option<(u32, Duration)>,
    pub(crate) persistence: Persistence,
}

impl RedisTierBuilder {
    /// A builder with every default (see the table above).
    pub fn new() -> Self {
        RedisTierBuilder {
            prefix: "idem:".to_owned(),
            command_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            startup_timeout: Duration::from_secs(10),
            allow_volatile: false,
            health_window: Duration::from_secs(3),
            replace_stalled: true,
            wait_replicas: None,
        }
    }

    /// The prefix of every key and channel. It must not contain `{` or `}` (the hash tag follows
    /// it). Default: `idem:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The time limit of every Redis call; a call that passes it answers `UNAVAILABLE`
    /// (D3). Default: 1 s.
    pub const fn command_timeout(mut self, d: Duration) -> Self {
        self.command_timeout = d;
        self
    }

    /// The time limit of each connection attempt (first connection and reconnections).
    /// Default: 1 s.
    pub const fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long `connect` keeps trying while Redis is still starting: the connection is
    /// refused, or Redis answers `LOADING` while it reads its data back. Other errors
    /// (authentication, a bad URL) fail at once. Default: 10 s.
    pub const fn startup_timeout(mut self, d: Duration) -> Self {
        self.startup_timeout = d;
        self
    }

    /// Accept a Redis that keeps no append-only file (`appendonly no`, with or without
    /// snapshots). Such a Redis loses acknowledged records when it restarts, so an intent whose
    /// record was lost may run a second time; fencing tokens still never repeat. With this set,
    /// `connect` logs a warning and sets the `idem_redis_volatile` gauge to 1 instead of failing
    /// with [`ConnectError::Volatile`]. Meant for development and tests. Default: `false`.
    pub const fn allow_volatile(mut self, allow: bool) -> Self {
        self.allow_volatile = allow;
        self
    }

    /// The health check's window: when at least 3 calls fail (an error or the time limit) within
    /// it, the tier dials a fresh client in the background and swaps it in, at most once per
    /// window, with a warning and the `idem_redis_reconnects_total` counter. This is what brings
    /// a cluster client back that stopped answering after a failover. Default: 3 s.
    pub const fn health_window(mut self, d: Duration) -> Self {
        self.health_window = d;
        self
    }

    /// Whether the health check may replace the connection at all (see
    /// [`health_window`](Self::health_window)). Turn it off only to compare with the client's
    /// own recovery. Default: `true`.
    pub const fn replace_stalled_clients(mut self, on: bool) -> Self {
        self.replace_stalled = on;
        self
    }

    /// After each claim and each completion, wait until `replicas` replicas have it (Redis
    /// `WAIT`), at most `timeout`; only then does the action run, and only then does the
    /// completion count as recorded. Replication in Redis is asynchronous: without this, a
    /// failover to a replica can lose a claim (and another instance then runs the action too)
    /// or a completion that was acknowledged a moment before (and the intent may run again). A
    /// claim that fewer replicas confirm in time is given back and the call fails with
    /// `UNAVAILABLE` (retryable) before its action runs. A completion that fewer replicas confirm:
    /// the caller still gets its result, marked not recorded, and the completion (with its
    /// wait) is retried in the background while the claim is still this run's. `WAIT` narrows
    /// the window; it does not make Redis replication synchronous (a failover may still pick a
    /// replica that had not confirmed). Default: off.
    pub const fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = Some((replicas, timeout));
        self
    }

    fn validate(&self) -> Result<(), ConnectError> {
        if self.prefix.contains(['{', '}']) {
            return Err(ConnectError::Invalid(
                "prefix must not contain '{' or '}' (the hash tag follows it)",
            ));
        }
        if self.command_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.health_window.is_zero()
        {
            return Err(ConnectError::Invalid(
                "command_timeout, connect_timeout and health_window must be greater than zero",
            ));
        }
        if let Some((n, wait)) = self.wait_replicas {
            if n == 0 || wait.is_zero() {
                return Err(ConnectError::Invalid(
                    "wait_replicas needs at least one replica and a timeout greater than zero",
                ));
            }
            if wait >= self.command_timeout {
                return Err(ConnectError::Invalid(
                    "the wait_replicas timeout must be shorter than command_timeout (the call \
                     and its wait share that limit)",
                ));
            }
        }
        Ok(())
    }

    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout))
            // Fail fast while Redis is down: no retry loop inside the manager (its first backoff
            // step is a second); the call answers UNAVAILABLE and the next call reconnects.
            .set_number_of_retries(0)
    }

    fn window(&self) -> Option<Duration> {
        self.replace_stalled.then_some(self.health_window)
    }

    /// Connects to one Redis server (`redis://host:port/db`, or `rediss://` with the `tls`
    /// feature) through a reconnecting `ConnectionManager`, checks the server's persistence
    /// settings, and starts the pub/sub subscriber. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ConnectError`]: a bad setting or URL, no connection within the startup timeout, or a
    /// volatile Redis without [`allow_volatile`](Self::allow_volatile).
    pub async fn connect(self, url: &str) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        check_url(url)?;
        let client = redis::Client::open(url)?;
        self.connect_client(client).await
    }

    /// As [`connect`](Self::connect), with a `redis::Client` you built yourself (for instance
    /// with your own TLS certificates, credentials or protocol version).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_client(self, client: redis::Client) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let address = client.get_connection_info().addr().to_string();
        let dial = Dial::Single(client.clone(), self.manager_config());
        let (conn, (node, persistence)) = self.dial_until_ready(&dial, Some(&address)).await?;
        // One server: the node is the server the client dialled.
        let persistence = (node.or(Some(address)), persistence);
        let link = Link::new(conn, dial, self.connect_timeout, self.window());
        self.finish(link, vec![client], persistence).await
    }

    /// A tier over a `ConnectionManager` you already have (shared with the rest of your
    /// service). `pubsub` is the client the completion notices are received with; without one,
    /// waits for another instance fall back to polling. The connection is never replaced by the
    /// health check (the manager reconnects by itself); the persistence check runs over it.
    ///
    /// # Errors
    ///
    /// A bad setting, the persistence check failing until the startup timeout, or a volatile
    /// Redis without [`allow_volatile`](Self::allow_volatile).
    pub async fn from_connection_manager(
        self,
        manager: ConnectionManager,
        pubsub: Option<redis::Client>,
    ) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let conn = Conn::Single(manager);
        let persistence = self.read_until_ready(&conn).await?;
        let link = Link::new(conn, Dial::Fixed, self.connect_timeout, None);
        self.finish(link, pubsub.into_iter().collect(), persistence)
            .await
    }

    /// Connects to a Redis Cluster given some of its nodes (the client discovers the rest and
    /// follows slot moves). Completion notices are received from one node at a time (classic
    /// pub/sub messages reach every node of a cluster). The persistence check reads every
    /// primary. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_cluster(self, nodes: &[&str]) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        if nodes.is_empty() {
            return Err(ConnectError::Invalid(
                "connect_cluster needs at least one node",
            ));
        }
        for n in nodes {
            check_url(n)?;
        }
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.command_timeout)
            .retries(2)
            .build()?;
        let pubsub = nodes
            .iter()
            .map(|n| redis::Client::open(*n))
            .collect::<Result<Vec<_>, _>>()?;
        self.connect_cluster_client(client, pubsub).await
    }

    /// As [`connect_cluster`](Self::connect_cluster), with a `ClusterClient` you built yourself
    /// (TLS, credentials, timeouts). `pubsub` are clients of some of the cluster's nodes, tried
    /// in turn for completion notices (without any, waits fall back to polling). The health check
    /// replaces a stalled connection with a fresh one from `client`.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_cluster_client(
        self,
        client: ClusterClient,
        pubsub: Vec<redis::Client>,
    ) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let dial = Dial::Cluster(client);
        let at = (!pubsub.is_empty()).then(|| seeds(&pubsub));
        let (conn, persistence) = self.dial_until_ready(&dial, at.as_deref()).await?;
        let link = Link::new(conn, dial, self.connect_timeout, self.window());
        self.finish(link, pubsub, persistence).await
    }

    /// Dials and reads the persistence settings, again and again while Redis is still starting.
    /// `address` names where the dial goes, for the error that says it could not connect.
    async fn dial_until_ready(
        &self,
        dial: &Dial,
        address: Option<&str>,
    ) -> Result<(Conn, Found), ConnectError> {
        let deadline = Instant::now() + self.startup_timeout;
        let mut backoff = Duration::from_millis(20);
        loop {
            let attempt = async {
                let conn = match tokio::time::timeout(self.connect_timeout, dial.dial()).await {
                    Ok(conn) => conn?,
                    Err(_) => return Err(timed_out()),
                };
                let persistence = read_persistence(&conn, self.command_timeout).await?;
                Ok((conn, persistence))
            };
            match attempt.await {
                Ok(ready) => return Ok(ready),
                Err(e) if is_starting(&e) => {
                    if Instant::now() + backoff >= deadline {
                        return Err(if e.is_timeout() {
                            ConnectError::Timeout(self.startup_timeout)
                        } else {
                            dial_failed(address, e)
                        });
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(ConnectError::Redis(e)),
            }
        }
    }

    /// Reads the persistence settings over a given connection, again while Redis is starting.
    async fn read_until_ready(&self, conn: &Conn) -> Result<Found, ConnectError> {
        let deadline = Instant::now() + self.startup_timeout;
        let mut backoff = Duration::from_millis(20);
        loop {
            match read_persistence(conn, self.command_timeout).await {
                Ok(p) => return Ok(p),
                Err(e) if is_starting(&e) && Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(ConnectError::Redis(e)),
            }
        }
    }

    async fn finish(
        self,
        link: std::sync::Arc<Link>,
        pubsub: Vec<redis::Client>,
        (node, persistence): Found,
    ) -> Result<RedisTier, ConnectError> {
        crate::metrics::describe();
        if persistence.is_volatile() {
            if !self.allow_volatile {
                return Err(ConnectError::Volatile { node, persistence });
            }
            metrics::gauge!(VOLATILE).set(1.0);
            tracing::warn!(
                node = node.as_deref(),
                persistence = %persistence,
                "redis keeps no append-only file: a restart of it loses acknowledged results, so \
                 an intent may run a second time (accepted with allow_volatile)"
            );
        } else {
            metrics::gauge!(VOLATILE).set(0.0);
            match persistence {
                Persistence::Unknown => tracing::warn!(
                    "cannot read redis' persistence settings (CONFIG GET is not allowed): make \
                     sure it keeps an append-only file, or a restart may lose acknowledged results"
                ),
                Persistence::AofAlways => {}
                _ => tracing::info!(
                    node = node.as_deref(),
                    persistence = %persistence,
                    "redis fsyncs its append-only file lazily: a crash of the machine (not of \
                     redis alone) may lose the last acknowledged results"
                ),
            }
        }
        Ok(RedisTier::start(
            link,
            pubsub,
            TierSettings {
                prefix: self.prefix,
                command_timeout: self.command_timeout,
                connect_timeout: self.connect_timeout,
                wait_replicas: self.wait_replicas,
                persistence,
            },
        )
        .await)
    }
}

/// A `rediss://` URL needs the `tls` feature; say so instead of redis-rs' generic error.
pub(crate) fn check_url(url: &str) -> Result<(), ConnectError> {
    let tls = url.len() >= 9 && url[..9].eq_ignore_ascii_case("rediss://");
    if tls && !cfg!(feature = "tls") {
        return Err(ConnectError::Invalid(
            "a rediss:// (TLS) URL needs idem-redis built with its `tls` feature",
        ));
    }
    Ok(())
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
fn seeds(clients: &[redis::Client]) -> String {
    let addrs: Vec<String> = clients
        .iter()
        .map(|c| c.get_connection_info().addr().to_string())
        .collect();
    addrs.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(not(feature = "tls"))]
    fn d3_rediss_url_without_the_tls_feature_is_refused_with_the_reason() {
        let err = check_url("rediss://cache.internal:6380/").unwrap_err();
        assert!(err.to_string().contains("`tls` feature"), "{err}");
        assert!(check_url("redis://cache.internal:6379/").is_ok());
    }

    #[test]
    #[cfg(feature = "tls")]
    fn d3_rediss_url_is_accepted_with_the_tls_feature() {
        assert!(check_url("rediss://cache.internal:6380/").is_ok());
        let client = redis::Client::open("rediss://cache.internal:6380/").expect("a TLS client");
        assert!(matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ));
    }

    #[test]
    fn d5_wait_replicas_must_fit_in_the_call_limit() {
        let b = RedisTierBuilder::new().wait_replicas(1, Duration::from_secs(2));
        assert!(matches!(b.validate(), Err(ConnectError::Invalid(_))));
        let b = RedisTierBuilder::new().wait_replicas(0, Duration::from_millis(10));
        assert!(matches!(b.validate(), Err(ConnectError::Invalid(_))));
        let b = RedisTierBuilder::new().wait_replicas(1, Duration::from_millis(100));
        assert!(b.validate().is_ok());
    }
}
