//! [`RedisTierBuilder`]: connecting to Redis or Redis Cluster, with every default listed.

use std::fmt;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClientBuilder;

use crate::conn::Conn;
use crate::RedisTier;

/// Why a [`RedisTier`] could not be built.
#[derive(Debug)]
pub enum ConnectError {
    /// A setting is out of range; the message names the rule.
    Invalid(&'static str),
    /// The URL did not parse, or the first connection failed.
    Redis(redis::RedisError),
    /// The first connection did not succeed within the connect timeout.
    Timeout(Duration),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Invalid(rule) => write!(f, "invalid redis tier config: {rule}"),
            ConnectError::Redis(e) => write!(f, "cannot connect to redis: {e}"),
            ConnectError::Timeout(d) => {
                write!(f, "cannot connect to redis within {} ms", d.as_millis())
            }
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for ConnectError {
    fn from(e: redis::RedisError) -> Self {
        ConnectError::Redis(e)
    }
}

/// Connects a [`RedisTier`].
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | [`prefix`](Self::prefix) | `idem:` | keys are `idem:{<digest>}`, `…:fence`, channel `…:done` |
/// | [`command_timeout`](Self::command_timeout) | 1 s | every Redis call; past it: `UNAVAILABLE` (SPEC D3) |
/// | [`connect_timeout`](Self::connect_timeout) | 1 s | each (re)connection attempt |
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
///     .connect_cluster(&["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
///     .await?;
/// # let _ = (single, cluster); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisTierBuilder {
    prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
}

impl Default for RedisTierBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RedisTierBuilder {
    /// A builder with every default (see the table above).
    pub fn new() -> Self {
        RedisTierBuilder {
            prefix: "idem:".to_owned(),
            command_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
        }
    }

    /// The prefix of every key and channel. It must not contain `{` or `}` (the hash tag follows
    /// it). Default: `idem:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The time limit of every Redis call; a call that passes it answers `UNAVAILABLE`
    /// (SPEC D3). Default: 1 s.
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

    fn validate(&self) -> Result<(), ConnectError> {
        if self.prefix.contains(['{', '}']) {
            return Err(ConnectError::Invalid(
                "prefix must not contain '{' or '}' (the hash tag follows it)",
            ));
        }
        if self.command_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(ConnectError::Invalid(
                "command_timeout and connect_timeout must be greater than zero",
            ));
        }
        Ok(())
    }

    /// Connects to one Redis server (`redis://host:port/db`) through a reconnecting
    /// `ConnectionManager`, and starts the pub/sub subscriber. Must be called inside a tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`ConnectError`]: a bad setting or URL, or no first connection within the connect timeout.
    pub async fn connect(self, url: &str) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let client = redis::Client::open(url)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.command_timeout)
            // Fail fast while Redis is down: no retry loop inside the manager (its first backoff
            // step is a second); the call answers UNAVAILABLE and the next call reconnects.
            .set_number_of_retries(0);
        let manager = tokio::time::timeout(
            self.connect_timeout * 3,
            client.get_connection_manager_with_config(cfg),
        )
        .await
        .map_err(|_| ConnectError::Timeout(self.connect_timeout * 3))??;
        Ok(RedisTier::start(
            Conn::Single(manager),
            vec![client],
            self.prefix,
            self.command_timeout,
            self.connect_timeout,
        )
        .await)
    }

    /// Connects to a Redis Cluster given some of its nodes (the client discovers the rest and
    /// follows slot moves). Completion notices are received from one node at a time (classic
    /// pub/sub messages reach every node of a cluster). Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ConnectError`]: a bad setting or URL, or no first connection within the connect timeout.
    pub async fn connect_cluster(self, nodes: &[&str]) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        if nodes.is_empty() {
            return Err(ConnectError::Invalid(
                "connect_cluster needs at least one node",
            ));
        }
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.command_timeout)
            .retries(2)
            .build()?;
        let conn = tokio::time::timeout(self.connect_timeout * 3, client.get_async_connection())
            .await
            .map_err(|_| ConnectError::Timeout(self.connect_timeout * 3))??;
        let pubsub = nodes
            .iter()
            .map(|n| redis::Client::open(*n))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedisTier::start(
            Conn::Cluster(conn),
            pubsub,
            self.prefix,
            self.command_timeout,
            self.connect_timeout,
        )
        .await)
    }
}
