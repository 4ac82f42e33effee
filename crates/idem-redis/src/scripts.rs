//! The Lua scripts (claim, complete, release, renew, forget) and how their replies are read.
//!
//! Each runs atomically on the Redis node that owns the scope's slot; every key it touches carries
//! the scope's hash tag, so it is a single-slot script on Redis Cluster too.

use redis::Value;

use crate::conn::Lua;

/// `KEYS`: record, fence. `ARGV`: fingerprint, lease ms, fence ttl ms, owner.
/// Replies `{0, token, reclaimed}` claimed, `{1, holder, pttl}` in flight, `{2, value}` completed,
/// `{3}` conflict.
///
/// A token is the larger of the scope's last token + 1 and the server's clock in microseconds, so
/// it grows even when Redis lost the scope's fence (a restart without persistence): the clock has
/// moved on since the lost token was handed out. A record held by the caller's own owner is an
/// orphan (the owner runs one claim per scope at a time) and is taken back with a new token.
const CLAIM: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'fp', 'tok', 'own', 'val')
local reclaimed = 0
if r[1] then
  if r[2] ~= ARGV[1] then return {3} end
  if r[1] == 'done' then return {2, r[5]} end
  if r[4] ~= ARGV[4] then
    redis.call('HSET', KEYS[1], 'w', '1')
    return {1, tonumber(r[3]), redis.call('PTTL', KEYS[1])}
  end
  reclaimed = 1
end
local t = redis.call('TIME')
local tok = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now > tok then tok = now end
tok = string.format('%.0f', tok)
redis.call('SET', KEYS[2], tok, 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'st', 'run', 'fp', ARGV[1], 'tok', tok, 'own', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, tok, reclaimed}
"#;

/// `KEYS`: record, fence. `ARGV`: token, owner, value, ttl ms, channel, fingerprint.
/// Replies `{1}` stored (now, or already by this claim), `{0, current token or 0}` fenced out.
/// Publishes on the channel when a waiter marked the record.
///
/// The claim still holds while the fence equals its token, even if the record's lease ran out
/// (the record is then written again); a fence that is gone means Redis lost the scope's data and
/// nobody claimed since, so the result is written too.
const COMPLETE: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'w')
if r[1] == 'done' then
  if r[2] == ARGV[1] then return {1} end
  return {0, tonumber(r[2]) or 0}
end
if r[1] == 'run' and r[2] ~= ARGV[1] then return {0, tonumber(r[2]) or 0} end
local f = redis.call('GET', KEYS[2])
if f and f ~= ARGV[1] then return {0, tonumber(f) or 0} end
redis.call('HSET', KEYS[1], 'st', 'done', 'fp', ARGV[6], 'tok', ARGV[1], 'own', ARGV[2], 'val', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if r[3] then redis.call('PUBLISH', ARGV[5], 'done') end
return {1}
"#;

/// `KEYS`: record. `ARGV`: token, channel. Replies 1 released, 0 fenced out (the record is
/// gone, completed or held by a later claim).
const RELEASE: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'w')
if r[1] ~= 'run' or r[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if r[3] then redis.call('PUBLISH', ARGV[2], 'released') end
return 1
"#;

/// `KEYS`: record, fence. `ARGV`: token, lease ms, fingerprint, owner, fence ttl ms. Replies 1
/// renewed, 0 fenced out (completed, or held by a later claim).
///
/// Extends the record's lease while the claim holds it, on Redis' clock. A record that is gone
/// (its lease lapsed, or it was forgotten) is taken again, as a completion would write it, while
/// the fence still equals the token (nobody claimed since) or is gone too (Redis lost the
/// scope's data; the fence is put back, so later tokens stay higher).
const RENEW: &str = r#"
local r = redis.call('HMGET', KEYS[1], 'st', 'tok')
if r[1] then
  if r[1] ~= 'run' or r[2] ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local f = redis.call('GET', KEYS[2])
if f and f ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'st', 'run', 'fp', ARGV[3], 'tok', ARGV[1], 'own', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if not f then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[5]) end
return 1
"#;

/// `KEYS`: record. `ARGV`: channel. Removes the record (the fence stays, so later tokens stay
/// higher) and wakes waiters. Replies 1 if there was one.
const FORGET: &str = r#"
local w = redis.call('HGET', KEYS[1], 'w')
local n = redis.call('DEL', KEYS[1])
if w then redis.call('PUBLISH', ARGV[1], 'forgotten') end
return n
"#;

/// The scripts, hashed once (EVALSHA, with EVAL when a node does not know them yet).
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) claim: Lua,
    pub(crate) complete: Lua,
    pub(crate) release: Lua,
    pub(crate) renew: Lua,
    pub(crate) forget: Lua,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            claim: Lua::new(CLAIM),
            complete: Lua::new(COMPLETE),
            release: Lua::new(RELEASE),
            renew: Lua::new(RENEW),
            forget: Lua::new(FORGET),
        }
    }
}

/// A claim script's reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClaimReply {
    Claimed { token: u64, reclaimed: bool },
    InFlight { holder: u64, pttl_ms: i64 },
    Completed(Vec<u8>),
    Conflict,
}

/// Reads the claim script's reply; `None` if it is not one (a bug or a foreign script).
pub(crate) fn claim_reply(v: Value) -> Option<ClaimReply> {
    let Value::Array(items) = v else { return None };
    let mut it = items.into_iter();
    match int(it.next()?)? {
        0 => Some(ClaimReply::Claimed {
            token: u64::try_from(int(it.next()?)?).ok()?,
            reclaimed: int(it.next()?)? == 1,
        }),
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
