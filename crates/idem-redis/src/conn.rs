//! One Redis server or one Redis Cluster, behind the same calls, each with a time limit.

use std::future::Future;
use std::time::Duration;

use idem_core::{Code, Reason, Status};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, Value};

use crate::error::cause;

/// A reconnecting connection to one server (`ConnectionManager`) or to a cluster
/// (`ClusterConnection`, which follows slot moves itself). Both are cheap to clone and multiplex
/// concurrent calls over one socket per node.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A Lua script: its SHA-1 (for `EVALSHA`) and its body (for `EVAL` when a node does not know it:
/// a fresh server, a restarted one, or a replica just promoted by a failover, since Redis neither
/// persists nor replicates its script cache).
#[derive(Debug)]
pub(crate) struct Lua {
    pub(crate) hash: String,
    pub(crate) body: &'static str,
}

impl Lua {
    pub(crate) fn new(body: &'static str) -> Self {
        Lua {
            hash: redis::Script::new(body).get_hash().to_owned(),
            body,
        }
    }

    /// `EVALSHA hash numkeys keys... args...`, or with `EVAL body` when `by_body`.
    fn cmd(&self, by_body: bool, keys: &[&str], args: &[&[u8]]) -> Cmd {
        let mut c = if by_body {
            let mut c = redis::cmd("EVAL");
            c.arg(self.body);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&self.hash);
            c
        };
        c.arg(keys.len()).arg(keys);
        for a in args {
            c.arg(*a);
        }
        c
    }
}

impl Conn {
    /// Runs a script (`EVALSHA`, then `EVAL` on `NOSCRIPT`), giving up after `limit` in all.
    pub(crate) async fn eval(
        &self,
        script: &Lua,
        keys: &[&str],
        args: &[&[u8]],
        limit: Duration,
    ) -> Result<Value, Status> {
        timed(
            async {
                match self.query_raw(&script.cmd(false, keys, args)).await {
                    Err(e) if e.code() == Some("NOSCRIPT") => {
                        self.query_raw(&script.cmd(true, keys, args)).await
                    }
                    other => other,
                }
            },
            limit,
        )
        .await
    }

    /// Runs a script and then `WAIT replicas timeout` on the same connection (one pipeline), so
    /// the reply says how many replicas have the script's writes. Returns the script's reply and
    /// the replica count.
    pub(crate) async fn eval_and_wait(
        &self,
        script: &Lua,
        keys: &[&str],
        args: &[&[u8]],
        replicas: u32,
        wait: Duration,
        limit: Duration,
    ) -> Result<(Value, i64), Status> {
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let pipe = |by_body: bool| {
            let mut p = redis::pipe();
            p.add_command(script.cmd(by_body, keys, args));
            p.cmd("WAIT").arg(replicas).arg(wait_ms);
            p
        };
        timed(
            async {
                match self.pipe_raw::<(Value, i64)>(&pipe(false)).await {
                    Err(e) if e.code() == Some("NOSCRIPT") => self.pipe_raw(&pipe(true)).await,
                    other => other,
                }
            },
            limit,
        )
        .await
    }

    /// Loads a script on the server (every primary of a cluster), so the first calls after
    /// connecting do not all miss with `NOSCRIPT` at once. Best effort: a miss later still falls
    /// back to `EVAL`.
    pub(crate) async fn preload(&self, script: &Lua, limit: Duration) {
        let mut c = redis::cmd("SCRIPT");
        c.arg("LOAD").arg(script.body);
        let _ = timed(self.query_raw(&c), limit).await;
    }

    /// Runs a command, giving up after `limit`.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<T, Status> {
        let v = timed(self.query_raw(cmd), limit).await?;
        T::from_redis_value(v)
            .map_err(|e| Status::new(Code::Internal, format!("unexpected reply from redis: {e}")))
    }

    /// Runs a pipeline, giving up after `limit`.
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        &self,
        pipe: &Pipeline,
        limit: Duration,
    ) -> Result<T, Status> {
        timed(self.pipe_raw(pipe), limit).await
    }

    /// Runs a command on every primary (one server: on it), with each primary's reply and its
    /// address (`"host:port"`; for one server, the address is empty).
    pub(crate) async fn on_every_primary(
        &self,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Vec<(String, Value)>, RedisError> {
        let run = async {
            match self {
                Conn::Single(c) => {
                    let v: Value = cmd.query_async(&mut c.clone()).await?;
                    Ok(vec![(String::new(), v)])
                }
                Conn::Cluster(c) => {
                    let routing =
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                    match c.clone().route_command(cmd.clone(), routing).await? {
                        Value::Map(pairs) => Ok(pairs
                            .into_iter()
                            .map(|(addr, v)| {
                                let addr = String::from_redis_value(addr).unwrap_or_default();
                                (addr, v)
                            })
                            .collect()),
                        other => Ok(vec![(String::new(), other)]),
                    }
                }
            }
        };
        match tokio::time::timeout(limit, run).await {
            Ok(r) => r,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "redis did not answer in time",
            ))),
        }
    }

    /// Sends a command; once more at once if the connection turned out to be broken (Redis
    /// restarted since the last call): every command the tier sends is a read or a script that
    /// is safe to run twice (a claim sent twice is taken back by its own owner, a completion or
    /// release sent twice answers as the first did).
    async fn query_raw(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let once = || async {
            match self {
                Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
                Conn::Cluster(c) => cmd.query_async(&mut c.clone()).await,
            }
        };
        match once().await {
            Err(e) if is_broken(&e) => once().await,
            other => other,
        }
    }

    /// As [`query_raw`](Self::query_raw), for a pipeline.
    async fn pipe_raw<T: FromRedisValue>(&self, pipe: &Pipeline) -> Result<T, RedisError> {
        let once = || async {
            match self {
                Conn::Single(c) => pipe.query_async(&mut c.clone()).await,
                Conn::Cluster(c) => pipe.query_async(&mut c.clone()).await,
            }
        };
        match once().await {
            Err(e) if is_broken(&e) => once().await,
            other => other,
        }
    }
}

/// A connection found broken when used (not a time limit, not a reply from Redis).
fn is_broken(e: &RedisError) -> bool {
    !e.is_timeout() && (e.is_connection_dropped() || e.is_io_error())
}

async fn timed<T>(
    fut: impl Future<Output = Result<T, RedisError>>,
    limit: Duration,
) -> Result<T, Status> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        // The message says the cause once; the error is not attached as well.
        Ok(Err(e)) => Err(unavailable(format!(
            "the idempotency store (redis) failed: {}",
            cause(&e)
        ))),
        Err(_) => Err(unavailable(format!(
            "the idempotency store (redis) did not answer within {} ms",
            limit.as_millis()
        ))),
    }
}

/// `UNAVAILABLE` with [`Reason::UPSTREAM_UNAVAILABLE`]: retryable.
pub(crate) fn unavailable(message: String) -> Status {
    Status::new(Code::Unavailable, message).with_reason(Reason::UPSTREAM_UNAVAILABLE)
}

/// A Redis reply that none of our scripts gives.
pub(crate) fn protocol(what: &'static str) -> Status {
    Status::new(
        Code::Internal,
        format!("unexpected reply from redis: {what}"),
    )
}
