//! One Redis server or one Redis Cluster, behind the same calls, each with a time limit (SPEC D3).

use std::future::Future;
use std::time::Duration;

use idem_core::{Code, Reason, Status};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, ScriptInvocation, Value};

/// A reconnecting connection to one server (`ConnectionManager`) or to a cluster
/// (`ClusterConnection`, which follows slot moves itself). Both are cheap to clone and multiplex
/// concurrent calls over one socket per node.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Runs a script, giving up after `limit`.
    pub(crate) async fn invoke(
        &self,
        inv: &ScriptInvocation<'_>,
        limit: Duration,
    ) -> Result<Value, Status> {
        match self {
            Conn::Single(c) => {
                let mut c = c.clone();
                timed(inv.invoke_async::<Value>(&mut c), limit).await
            }
            Conn::Cluster(c) => {
                let mut c = c.clone();
                timed(inv.invoke_async::<Value>(&mut c), limit).await
            }
        }
    }

    /// Loads a script on the server (every primary of a cluster), so the first calls after
    /// connecting do not all miss with `NOSCRIPT` at once. Best effort: a miss later still falls
    /// back to `EVAL`.
    pub(crate) async fn preload(&self, script: &redis::Script, limit: Duration) {
        let inv = script.prepare_invoke();
        let _ = match self {
            Conn::Single(c) => timed(inv.load_async(&mut c.clone()), limit).await,
            Conn::Cluster(c) => timed(inv.load_async(&mut c.clone()), limit).await,
        };
    }

    /// Runs a command, giving up after `limit`.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<T, Status> {
        match self {
            Conn::Single(c) => {
                let mut c = c.clone();
                timed(cmd.query_async::<T>(&mut c), limit).await
            }
            Conn::Cluster(c) => {
                let mut c = c.clone();
                timed(cmd.query_async::<T>(&mut c), limit).await
            }
        }
    }
}

impl Conn {
    /// Runs a pipeline, giving up after `limit`.
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        &self,
        pipe: &Pipeline,
        limit: Duration,
    ) -> Result<T, Status> {
        match self {
            Conn::Single(c) => {
                let mut c = c.clone();
                timed(pipe.query_async::<T>(&mut c), limit).await
            }
            Conn::Cluster(c) => {
                let mut c = c.clone();
                timed(pipe.query_async::<T>(&mut c), limit).await
            }
        }
    }
}

async fn timed<T>(
    fut: impl Future<Output = Result<T, RedisError>>,
    limit: Duration,
) -> Result<T, Status> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(unavailable(format!("redis call failed: {e}")).with_source(e)),
        Err(_) => Err(unavailable(format!(
            "redis did not answer within {} ms",
            limit.as_millis()
        ))),
    }
}

/// `UNAVAILABLE` with [`Reason::UPSTREAM_UNAVAILABLE`]: retryable (SPEC R2, D3).
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
