//! [`ConnectError`]: why a [`RedisTier`](crate::RedisTier) could not be built.

use std::fmt;
use std::time::Duration;

use redis::RedisError;

use crate::persistence::Persistence;

/// Why a [`RedisTier`](crate::RedisTier) could not be built.
///
/// Each variant's message says everything it knows once: an error inside (a [`RedisError`]) is
/// a field to match on, not also a [`source`](std::error::Error::source), so a report that
/// prints the chain does not repeat it.
///
/// ```
/// use idem_redis::ConnectError;
///
/// let e = ConnectError::Unreachable {
///     address: Some("127.0.0.1:6390".into()),
///     reason: "connection refused".into(),
/// };
/// assert_eq!(e.to_string(), "cannot connect to redis at 127.0.0.1:6390: connection refused");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// A setting is out of range; the message names the rule.
    Invalid(&'static str),
    /// The URL did not parse, or Redis refused the connection for a reason retrying cannot
    /// fix (authentication, a bad database number, ...), or it kept answering that it is not
    /// ready (`LOADING`, `CLUSTERDOWN`) until the
    /// [`startup_timeout`](crate::RedisTierBuilder::startup_timeout).
    Redis(RedisError),
    /// No connection opened until the
    /// [`startup_timeout`](crate::RedisTierBuilder::startup_timeout): nothing listens at the
    /// address (the connection was refused), or the network failed.
    Unreachable {
        /// Where the tier dialled: the server's `host:port` (or socket path), or the seed nodes
        /// of a cluster; `None` for a cluster client handed in without any pub/sub client.
        address: Option<String>,
        /// What the last attempt met, in words: `connection refused`, ...
        reason: String,
    },
    /// No connection succeeded within the startup timeout: every attempt timed out (Redis not
    /// reachable, or still loading its data).
    Timeout(Duration),
    /// Redis keeps no append-only file: a restart of it loses acknowledged records, so an intent
    /// recorded there may run a second time. Refused unless
    /// [`allow_volatile`](crate::RedisTierBuilder::allow_volatile) is set.
    Volatile {
        /// The node that keeps too little: `host:port` of the server or of the cluster's
        /// primary; `None` when the tier was given a connection whose address it cannot read
        /// ([`from_connection_manager`](crate::RedisTierBuilder::from_connection_manager)).
        node: Option<String>,
        /// What the node keeps.
        persistence: Persistence,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Invalid(rule) => write!(f, "invalid redis tier setting: {rule}"),
            ConnectError::Redis(e) => write!(f, "cannot connect to redis: {e}"),
            ConnectError::Unreachable { address, reason } => match address {
                Some(at) => write!(f, "cannot connect to redis at {at}: {reason}"),
                None => write!(f, "cannot connect to redis: {reason}"),
            },
            ConnectError::Timeout(d) => {
                write!(f, "cannot connect to redis within {} ms", d.as_millis())
            }
            ConnectError::Volatile { node, persistence } => {
                f.write_str("redis")?;
                if let Some(node) = node {
                    write!(f, " at {node}")?;
                }
                write!(
                    f,
                    " keeps {persistence}: a restart of it loses results it has \
                     acknowledged, so an intent recorded there may run a second time. Turn on \
                     the append-only file (appendonly yes; with appendfsync always nothing \
                     acknowledged is lost even when the machine crashes), or accept the risk \
                     with RedisTierBuilder::allow_volatile(true)"
                )
            }
        }
    }
}

/// No source: the message already holds the inner error's text (see the type's docs).
impl std::error::Error for ConnectError {}

impl From<RedisError> for ConnectError {
    fn from(e: RedisError) -> Self {
        ConnectError::Redis(e)
    }
}

/// The error of a dial that kept failing: no connection opened ([`ConnectError::Unreachable`]),
/// or Redis answered it is not ready ([`ConnectError::Redis`]).
pub(crate) fn dial_failed(address: Option<&str>, e: RedisError) -> ConnectError {
    if e.code().is_some() {
        // Redis answered (LOADING, CLUSTERDOWN, ...): it is reachable.
        return ConnectError::Redis(e);
    }
    ConnectError::Unreachable {
        address: address.map(str::to_owned),
        reason: cause(&e),
    }
}

/// What a failed Redis call or dial met, in words, once (a refused connection's I/O error
/// says "Connection refused (os error 111)" at two levels of its chain).
pub(crate) fn cause(e: &RedisError) -> String {
    if e.is_connection_refusal() {
        "connection refused".to_owned()
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> RedisError {
        RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    #[test]
    fn d5_unreachable_names_the_address_and_says_refused_once() {
        let e = dial_failed(Some("127.0.0.1:6390"), refused());
        let text = e.to_string();
        assert_eq!(
            text,
            "cannot connect to redis at 127.0.0.1:6390: connection refused"
        );
        assert!(std::error::Error::source(&e).is_none(), "{e:?}");
        let e = dial_failed(None, refused());
        assert_eq!(e.to_string(), "cannot connect to redis: connection refused");
    }

    #[test]
    fn d5_volatile_error_explains_the_risk_and_the_way_out() {
        let e = ConnectError::Volatile {
            node: Some("10.0.0.1:7000".into()),
            persistence: Persistence::None,
        };
        let text = e.to_string();
        assert!(text.contains("10.0.0.1:7000"), "{text}");
        assert!(text.contains("run a second time"), "{text}");
        assert!(text.contains("appendonly yes"), "{text}");
        assert!(text.contains("allow_volatile(true)"), "{text}");
    }

    #[test]
    fn d5_volatile_debug_names_the_node_or_none() {
        let cluster = ConnectError::Volatile {
            node: Some("10.0.0.1:7000".into()),
            persistence: Persistence::None,
        };
        let debug = format!("{cluster:?}");
        assert!(debug.contains(r#"node: Some("10.0.0.1:7000")"#), "{debug}");
        let unknown = ConnectError::Volatile {
            node: None,
            persistence: Persistence::Snapshots,
        };
        let debug = format!("{unknown:?}");
        assert!(debug.contains("node: None"), "{debug}");
        assert!(!debug.contains(r#""""#), "no empty string: {debug}");
        assert!(unknown.to_string().starts_with("redis keeps "), "{unknown}");
    }
}
