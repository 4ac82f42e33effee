//! What a Redis server keeps across a restart, read at connect time (`CONFIG GET appendonly`,
//! `appendfsync`, `save`; on a cluster, on every primary).

use std::fmt;

use redis::Value;

/// How a Redis server (the weakest primary of a cluster) keeps its data across a restart, as
/// [`RedisTier::persistence`](crate::RedisTier::persistence) reports it.
///
/// What each means for idem is in the crate docs' durability section:
/// a server without an append-only file loses acknowledged records when it restarts, so an
/// intent recorded there may run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Persistence {
    /// Neither an append-only file nor snapshots (`appendonly no`, `save ""`): a restart loses
    /// everything. Volatile.
    None,
    /// Snapshots only (`appendonly no`, `save` set): a restart loses every record written since
    /// the last snapshot. Volatile.
    Snapshots,
    /// The server's configuration could not be read (`CONFIG` disabled or renamed, as on some
    /// managed services): idem cannot tell, and says so in a warning.
    Unknown,
    /// An append-only file flushed by the operating system when it likes (`appendfsync no`): a
    /// Redis process crash loses nothing, a crash of the machine loses the last seconds.
    AofNoFsync,
    /// An append-only file flushed every second (`appendfsync everysec`, Redis' default): a
    /// Redis process crash loses nothing, a crash of the machine up to about two seconds.
    AofEverySec,
    /// An append-only file flushed before every reply (`appendfsync always`): nothing
    /// acknowledged is lost, even when the machine crashes.
    AofAlways,
}

impl Persistence {
    /// Whether a restart of the Redis process loses acknowledged records ([`None`](Self::None),
    /// [`Snapshots`](Self::Snapshots)).
    pub const fn is_volatile(self) -> bool {
        matches!(self, Persistence::None | Persistence::Snapshots)
    }

    /// Reads the three settings of one server.
    pub(crate) fn from_config(appendonly: &str, appendfsync: &str, save: &str) -> Self {
        if appendonly.eq_ignore_ascii_case("yes") {
            match appendfsync.to_ascii_lowercase().as_str() {
                "always" => Persistence::AofAlways,
                "no" => Persistence::AofNoFsync,
                _ => Persistence::AofEverySec,
            }
        } else if save.trim().is_empty() {
            Persistence::None
        } else {
            Persistence::Snapshots
        }
    }

    /// The settings' words, for messages.
    pub(crate) const fn describe(self) -> &'static str {
        match self {
            Persistence::None => "no append-only file and no snapshots (appendonly no, save \"\")",
            Persistence::Snapshots => "snapshots only (appendonly no)",
            Persistence::Unknown => "unknown (CONFIG GET is not allowed)",
            Persistence::AofNoFsync => "an append-only file without fsync (appendfsync no)",
            Persistence::AofEverySec => {
                "an append-only file fsynced every second (appendfsync everysec)"
            }
            Persistence::AofAlways => {
                "an append-only file fsynced before every reply (appendfsync always)"
            }
        }
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The value of a `CONFIG GET name` reply (RESP2: `[name, value]`; RESP3: a map).
pub(crate) fn config_value(v: &Value) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match v {
        Value::Array(items) if items.len() >= 2 => text(&items[1]),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d5_settings_map_to_persistence_levels() {
        use Persistence::*;
        assert_eq!(Persistence::from_config("no", "everysec", ""), None);
        assert_eq!(
            Persistence::from_config("no", "always", "3600 1 300 100"),
            Snapshots
        );
        assert_eq!(Persistence::from_config("yes", "always", ""), AofAlways);
        assert_eq!(Persistence::from_config("yes", "everysec", ""), AofEverySec);
        assert_eq!(Persistence::from_config("yes", "no", "60 1"), AofNoFsync);
        assert!(None.is_volatile() && Snapshots.is_volatile());
        assert!(!AofEverySec.is_volatile() && !Unknown.is_volatile());
        // The weakest of a cluster's primaries is the smallest.
        assert_eq!(
            [AofAlways, Snapshots, AofEverySec].iter().min(),
            Some(&Snapshots)
        );
    }

    #[test]
    fn d5_config_replies_of_both_protocols_are_read() {
        let resp2 = Value::Array(vec![
            Value::BulkString(b"appendonly".to_vec()),
            Value::BulkString(b"yes".to_vec()),
        ]);
        assert_eq!(config_value(&resp2).as_deref(), Some("yes"));
        let resp3 = Value::Map(vec![(
            Value::BulkString(b"save".to_vec()),
            Value::BulkString(b"".to_vec()),
        )]);
        assert_eq!(config_value(&resp3).as_deref(), Some(""));
        assert_eq!(config_value(&Value::Nil), Option::None);
    }
}
