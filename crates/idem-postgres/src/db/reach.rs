//! Why no connection opened. sqlx's pool retries a refused connection silently until its
//! `acquire_timeout` and then says only "pool timed out while waiting for an open connection";
//! a statement's own time limit may pass first and say less. So when a call to the pool times
//! out, one direct connection attempt to the pool's address finds the cause ("connection
//! refused") to put in the error. Calls that fail together share one attempt: at most one runs
//! at a time, and its finding serves the others for a second.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering::AcqRel, Ordering::Release};
use std::time::Duration;

use parking_lot::Mutex;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::time::Instant;

/// How long a finding serves the calls that fail after it.
const FRESH: Duration = Duration::from_secs(1);

/// The longest a connection attempt of the diagnosis may take.
const MAX_ATTEMPT: Duration = Duration::from_secs(1);

/// No connection to PostgreSQL opened: where the pool connects, and what an attempt met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreachable {
    /// `host:port`, or the Unix socket's path.
    pub(crate) address: String,
    /// In words: "connection refused", ...
    pub(crate) reason: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot connect to PostgreSQL at {}: {}",
            self.address, self.reason
        )
    }
}

/// Where `opts` connect: `host:port` (`[v6]:port`), or the Unix socket's path.
pub(crate) fn address(opts: &PgConnectOptions) -> String {
    let port = opts.get_port();
    match opts.get_socket() {
        Some(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
        None => {
            let host = opts.get_host();
            if host.starts_with('/') {
                format!("{host}/.s.PGSQL.{port}")
            } else if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
    }
}

/// What a failed connection attempt met, in words, once.
fn reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused".to_owned()
        }
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::Tls(tls) => format!("TLS failed: {tls}"),
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!(
                "the server refused the connection: {} (SQLSTATE {code})",
                db.message()
            ),
            None => format!("the server refused the connection: {}", db.message()),
        },
        other => other.to_string(),
    }
}

/// One connection attempt to the pool's address, of at most `limit`: `None` when it opened
/// (the server is reachable; the connection is closed at once).
pub(crate) async fn probe(pool: &PgPool, limit: Duration) -> Option<Unreachable> {
    let opts = pool.connect_options();
    let limit = limit.min(MAX_ATTEMPT);
    let address = address(&opts);
    match tokio::time::timeout(limit, PgConnection::connect_with(&opts)).await {
        Ok(Ok(conn)) => {
            let _ = tokio::time::timeout(limit, conn.close()).await;
            None
        }
        Ok(Err(e)) => Some(Unreachable {
            address,
            reason: reason(&e),
        }),
        Err(_) => Some(Unreachable {
            address,
            reason: format!("no connection opened within {} ms", limit.as_millis()),
        }),
    }
}

/// The probes of one database handle: one at a time, each finding kept for [`FRESH`].
#[derive(Debug, Default)]
pub(crate) struct Reach {
    last: Mutex<Option<(Instant, Option<Unreachable>)>>,
    probing: AtomicBool,
}

impl Reach {
    /// Why the pool cannot connect, if it cannot: the last finding while it is fresh; else a
    /// new probe, unless another call runs one (then the last finding, however old).
    pub(crate) async fn check(&self, pool: &PgPool, limit: Duration) -> Option<Unreachable> {
        let last = self.last.lock().clone();
        if let Some((at, found)) = &last {
            if at.elapsed() < FRESH {
                return found.clone();
            }
        }
        if self.probing.swap(true, AcqRel) {
            return last.and_then(|(_, found)| found);
        }
        // Lets the next call probe even if this one is dropped mid-attempt.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(false, Release);
            }
        }
        let _done = Done(&self.probing);
        let found = probe(pool, limit).await;
        *self.last.lock() = Some((Instant::now(), found.clone()));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(url: &str) -> String {
        address(&url.parse::<PgConnectOptions>().unwrap())
    }

    #[test]
    fn d4_the_address_is_host_and_port_or_the_socket() {
        assert_eq!(addr("postgres://app@127.0.0.1:5999/shop"), "127.0.0.1:5999");
        assert_eq!(addr("postgres://app@db.internal/shop"), "db.internal:5432");
        assert_eq!(addr("postgres://app@[::1]:6000/shop"), "[::1]:6000");
        assert_eq!(
            addr("postgres://app@%2Fvar%2Frun%2Fpostgresql/shop"),
            "/var/run/postgresql/.s.PGSQL.5432"
        );
    }

    #[test]
    fn d4_unreachable_says_where_and_why_once() {
        let u = Unreachable {
            address: "127.0.0.1:5999".into(),
            reason: reason(&sqlx::Error::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))),
        };
        assert_eq!(
            u.to_string(),
            "cannot connect to PostgreSQL at 127.0.0.1:5999: connection refused"
        );
    }
}
