//! Where a scope lives in Redis: key names, hash tags and the completion channel.
//!
//! For a scope `s` and the configured prefix `P` (default `idem:`):
//!
//! | what | name | type |
//! |---|---|---|
//! | record | `P{T}` | hash: `st` (`run`/`done`), `fp`, `tok`, `own`, `val`, `w` |
//! | fence counter | `P{T}:fence` | integer (INCR) |
//! | completion channel | `P{T}:done` | pub/sub channel |
//!
//! `T` is the first 16 bytes of SHA-256 over [`Scope::as_bytes`], as 32 lower-case hex digits.
//! Redis Cluster hashes only what is between the first `{` and the next `}`, so all three live in
//! one slot, and since `T` is a digest of the injective scope encoding, no `{` or `}` in a
//! client-chosen tenant, method or key can move a key to another slot.

use idem_core::{Hex, Scope};

/// The 16-byte digest that names a scope in Redis.
pub(crate) type Tag = [u8; 16];

/// The digest of a scope's encoding.
pub(crate) fn tag(scope: &Scope) -> Tag {
    let d = scope.digest();
    let mut t = [0u8; 16];
    t.copy_from_slice(&d[..16]);
    t
}

/// The key names of one scope.
#[derive(Debug, Clone)]
pub(crate) struct ScopeKeys {
    pub(crate) tag: Tag,
    pub(crate) record: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
}

impl ScopeKeys {
    pub(crate) fn new(prefix: &str, scope: &Scope) -> Self {
        let tag = tag(scope);
        let record = format!("{prefix}{{{}}}", Hex(&tag));
        ScopeKeys {
            tag,
            fence: format!("{record}:fence"),
            channel: format!("{record}:done"),
            record,
        }
    }
}

/// The pattern every instance subscribes to: all completion channels under `prefix`.
pub(crate) fn channel_pattern(prefix: &str) -> String {
    let mut p = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push_str("{*}:done");
    p
}

/// The tag of a completion channel name, if it is one of ours.
pub(crate) fn tag_of_channel(prefix: &str, channel: &[u8]) -> Option<Tag> {
    let rest = channel.strip_prefix(prefix.as_bytes())?;
    let rest = rest.strip_prefix(b"{")?;
    let hex_part = rest.get(..32)?;
    if rest.get(32..)? != b"}:done" {
        return None;
    }
    let mut t = [0u8; 16];
    for (i, pair) in hex_part.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        t[i] = (hi * 16 + lo) as u8;
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d3_braces_in_scope_do_not_move_the_tag() {
        let s = Scope::parse("ten}{ant", "/a{b}/c", "key-0000-0001").unwrap();
        let k = ScopeKeys::new("idem:", &s);
        assert_eq!(k.record.matches('{').count(), 1);
        assert!(k.fence.starts_with(&k.record) && k.channel.starts_with(&k.record));
        assert_eq!(tag_of_channel("idem:", k.channel.as_bytes()), Some(k.tag));
        assert_eq!(tag_of_channel("other:", k.channel.as_bytes()), None);
    }

    #[test]
    fn d3_pattern_escapes_glob_characters() {
        assert_eq!(channel_pattern("a*b:"), "a\\*b:{*}:done");
    }
}
