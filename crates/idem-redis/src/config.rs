//! [`RedisTierBuilder`]: the settings of a Redis tier, with every default listed, and their checks.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;

use crate::error::ConnectError;
use crate::persistence::Persistence;

/// Connects a [`RedisTier`](crate::RedisTier).
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | [`prefix`](Self::prefix) | `idem:` | keys are `idem:{<digest>}`, `…:fence`, channel `…:done` |
/// | [`command_timeout`](Self::command_timeout) | 1 s | every Redis call; past it: `UNAVAILABLE` |
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
    pub(crate) prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) startup_timeout: Duration,
    pub(crate) allow_volatile: bool,
    pub(crate) health_window: Duration,
    pub(crate) replace_stalled: bool,
    pub(crate) wait_replicas: Option<(u32, Duration)>,
}

impl Default for RedisTierBuilder {
    fn default() -> Self {
        Self::new()
    }
}

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

    /// The time limit of every Redis call; a call that passes it answers `UNAVAILABLE`.
    /// Default: 1 s.
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

    pub(crate) fn validate(&self) -> Result<(), ConnectError> {
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

    pub(crate) fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout))
            // Fail fast while Redis is down: no retry loop inside the manager (its first backoff
            // step is a second); the call answers UNAVAILABLE and the next call reconnects.
            .set_number_of_retries(0)
    }

    pub(crate) fn window(&self) -> Option<Duration> {
        self.replace_stalled.then_some(self.health_window)
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
