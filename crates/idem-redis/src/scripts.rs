//! The three Lua scripts (claim, complete, release) and how their replies are read (SPEC D1).
//!
//! Each runs atomically on the Redis node that owns the scope's slot; every key it touches carries
//! the scope's hash tag, so it is a single-slot script on Redis Cluster too.

use redis::{Script, Value};

/// `KEYS`: record, fence. `ARGV`: fingerprint, lease ms, fence ttl ms, owner.
/// Replies `{0, token}` claimed, `{1, holder, pttl}` in flight, `{2, value}` completed,
/// `{3}` conflict.
const CLAIM: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'fp', 'tok', 'val')
if not r[1] then
  local tok = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[1], 'st', 'run', 'fp', ARGV[1], 'tok', tok, 'own', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {0, tok}
end
if r[2] ~= ARGV[1] then return {3} end
if r[1] == 'done' then return {2, r[4]} end
redis.call('HSET', KEYS[1], 'w', '1')
return {1, tonumber(r[3]), redis.call('PTTL', KEYS[1])}
"#;

/// `KEYS`: record. `ARGV`: token, owner, value, ttl ms, channel. (Three server calls: the
/// completion is on every new key's path, so it stays lean; the fence counter's lifetime is set
/// by the claim.)
/// Replies `{1}` stored, `{0, current token or 0}` fenced out. Publishes on the channel when a
/// waiter marked the record.
const COMPLETE: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'own', 'w')
if r[1] ~= 'run' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then
  return {0, tonumber(r[2]) or 0}
end
redis.call('HSET', KEYS[1], 'st', 'done', 'val', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if r[4] then redis.call('PUBLISH', ARGV[5], 'done') end
return {1}
"#;

/// `KEYS`: record. `ARGV`: token, owner, channel. Replies 1 released, 0 fenced out.
const RELEASE: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'own', 'w')
if r[1] ~= 'run' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
if r[4] then redis.call('PUBLISH', ARGV[3], 'released') end
return 1
"#;

/// The scripts, hashed once (EVALSHA, with EVAL when a node does not know them yet).
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) claim: Script,
    pub(crate) complete: Script,
    pub(crate) release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            claim: Script::new(CLAIM),
            complete: Script::new(COMPLETE),
            release: Script::new(RELEASE),
        }
    }
}

/// A claim script's reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClaimReply {
    Claimed(u64),
    InFlight { holder: u64, pttl_ms: i64 },
    Completed(Vec<u8>),
    Conflict,
}

/// Reads the claim script's reply; `None` if it is not one (a bug or a foreign script).
pub(crate) fn claim_reply(v: Value) -> Option<ClaimReply> {
    let Value::Array(items) = v else { return None };
    let mut it = items.into_iter();
    match int(it.next()?)? {
        0 => Some(ClaimReply::Claimed(u64::try_from(int(it.next()?)?).ok()?)),
        1 => Some(ClaimReply::InFlight {
            holder: u64::try_from(int(it.next()?)?).ok()?,
            pttl_ms: int(it.next()?)?,
        }),
        2 => match it.next()? {
            Value::BulkString(b) => Some(ClaimReply::Completed(b)),
            _ => None,
        },
        3 => Some(ClaimReply::Conflict),
        _ => None,
    }
}

/// Reads the complete script's reply: `Ok(())` stored, `Err(current token)` fenced out.
pub(crate) fn complete_reply(v: Value) -> Option<Result<(), u64>> {
    let Value::Array(items) = v else { return None };
    let mut it = items.into_iter();
    match int(it.next()?)? {
        1 => Some(Ok(())),
        0 => Some(Err(u64::try_from(int(it.next()?)?).unwrap_or(0))),
        _ => None,
    }
}

fn int(v: Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(i),
        Value::BulkString(b) => std::str::from_utf8(&b).ok()?.parse().ok(),
        _ => None,
    }
}
