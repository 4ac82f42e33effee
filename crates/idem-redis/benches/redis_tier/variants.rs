//! The variants the redis_tier bench pairs: what one operation of each is, and a batch of them
//! run with a fixed number in flight.

use std::time::{Duration, Instant};

use futures::StreamExt;
use idem_core::{Fingerprint, Status};
use idem_dedup::remote::Claim;
use idem_redis::{ClaimOutcome, RemoteTier};
use redis::aio::ConnectionManager;

use crate::{Env, IN_FLIGHT};

pub(crate) fn fp() -> Fingerprint {
    Fingerprint::of(b"bench body")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    Tier,
    TierDirect,
    Floor,
    SetGet,
    LuaMin,
    LuaString,
    LuaBatch,
    SetNx,
}

pub(crate) const VARIANTS: [Variant; 8] = [
    Variant::Tier,
    Variant::TierDirect,
    Variant::Floor,
    Variant::SetGet,
    Variant::LuaMin,
    Variant::LuaString,
    Variant::LuaBatch,
    Variant::SetNx,
];

/// Scopes per script call in `lua_batch`.
pub(crate) const BATCHED: usize = 16;

impl Variant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Tier => "tier",
            Variant::TierDirect => "tier_direct",
            Variant::Floor => "floor",
            Variant::SetGet => "set_get",
            Variant::LuaMin => "lua_min",
            Variant::LuaString => "lua_string",
            Variant::LuaBatch => "lua_batch",
            Variant::SetNx => "set_nx",
        }
    }
}

pub(crate) async fn set(
    mgr: &ConnectionManager,
    key: &str,
    value: &str,
    mode: &str,
    px: u64,
    get: bool,
) {
    let mut c = redis::cmd("SET");
    c.arg(key).arg(value).arg(mode).arg("PX").arg(px);
    if get {
        c.arg("GET");
    }
    let _: Option<String> = c.query_async(&mut mgr.clone()).await.unwrap();
}

pub(crate) const LUA_SET: &str =
    "return redis.call('SET', KEYS[1], ARGV[1], ARGV[2], 'PX', ARGV[3])";

pub(crate) async fn lua_set(mgr: &ConnectionManager, key: &str, value: &str, mode: &str, px: u64) {
    let _: Option<String> = redis::Script::new(LUA_SET)
        .key(key)
        .arg(value)
        .arg(mode)
        .arg(px)
        .invoke_async(&mut mgr.clone())
        .await
        .unwrap();
}

/// A sketch of a cheaper record: one string per scope (`r|token|fp|owner`, then
/// `d|token|fp|owner|value`), the token from `TIME`; claim = GET + TIME + SET, complete = GET +
/// SET. Loops over every key given, so one call can carry many scopes (`lua_batch`).
pub(crate) const STRING_CLAIM: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i, k in ipairs(KEYS) do
  local r = redis.call('GET', k)
  if r then
    out[i] = 0
  else
    local tok = string.format('%.0f', now + i)
    redis.call('SET', k, 'r|' .. tok .. '|' .. ARGV[1] .. '|' .. ARGV[3], 'PX', ARGV[2])
    out[i] = tok
  end
end
return out
"#;

pub(crate) const STRING_COMPLETE: &str = r#"
local out = {}
for i, k in ipairs(KEYS) do
  local tok = ARGV[2 + i]
  local r = redis.call('GET', k)
  local head = 'r|' .. tok .. '|'
  if r and string.sub(r, 1, #head) == head then
    redis.call('SET', k, 'd|' .. tok .. '|' .. string.sub(r, #head + 1) .. '|' .. ARGV[1], 'PX', ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"#;

pub(crate) async fn string_scripts(env: &Env, keys: &[String]) {
    let owner = env.owner.to_string();
    let fpx = fp().to_string();
    let (claim_script, complete_script) = (
        redis::Script::new(STRING_CLAIM),
        redis::Script::new(STRING_COMPLETE),
    );
    let mut claim = claim_script.prepare_invoke();
    for k in keys {
        claim.key(k);
    }
    claim.arg(&fpx).arg(30_000).arg(&owner);
    let tokens: Vec<String> = claim.invoke_async(&mut env.mgr.clone()).await.unwrap();
    let mut complete = complete_script.prepare_invoke();
    for k in keys {
        complete.key(k);
    }
    complete.arg("order-1001").arg(86_400_000);
    for t in &tokens {
        complete.arg(t);
    }
    let done: Vec<i64> = complete.invoke_async(&mut env.mgr.clone()).await.unwrap();
    assert!(done.iter().all(|d| *d == 1));
}

pub(crate) async fn one(env: &Env, v: Variant) {
    match v {
        Variant::Tier => {
            let _ = env
                .a
                .execute(&env.scope(), fp(), |_| async {
                    Ok::<_, Status>("order-1001".to_string())
                })
                .await
                .unwrap();
        }
        Variant::TierDirect => {
            let s = env.scope();
            let lease = Duration::from_secs(30);
            let ClaimOutcome::Claimed { token, .. } =
                env.tier.claim(&s, fp(), lease, env.owner).await.unwrap()
            else {
                panic!("a new scope is claimed")
            };
            let claim = Claim {
                scope: &s,
                fingerprint: fp(),
                token,
                owner: env.owner,
            };
            env.tier
                .complete(claim, b"order-1001".to_vec(), Duration::from_secs(86_400))
                .await
                .unwrap();
        }
        Variant::Floor | Variant::SetGet => {
            let key = format!("floor:{}", env.n());
            set(&env.mgr, &key, "run", "NX", 30_000, v == Variant::SetGet).await;
            set(&env.mgr, &key, "order-1001", "XX", 86_400_000, false).await;
        }
        Variant::LuaMin => {
            let key = format!("lua:{}", env.n());
            lua_set(&env.mgr, &key, "run", "NX", 30_000).await;
            lua_set(&env.mgr, &key, "order-1001", "XX", 86_400_000).await;
        }
        Variant::LuaString => {
            string_scripts(env, &[format!("s{{{}}}", env.n())]).await;
        }
        Variant::LuaBatch => {
            // One call carries BATCHED scopes: `batch` runs IN_FLIGHT / BATCHED of these at once.
            let keys: Vec<String> = (0..BATCHED).map(|_| format!("b{{{}}}", env.n())).collect();
            string_scripts(env, &keys).await;
        }
        Variant::SetNx => {
            let key = format!("nx:{}", env.n());
            set(&env.mgr, &key, "order-1001", "NX", 30_000, false).await;
        }
    }
}

/// `n` operations of `v`, `IN_FLIGHT` at a time.
pub(crate) async fn batch(env: &Env, v: Variant, n: usize) -> Duration {
    let (calls, in_flight) = if v == Variant::LuaBatch {
        (n / BATCHED, IN_FLIGHT / BATCHED)
    } else {
        (n, IN_FLIGHT)
    };
    let t = Instant::now();
    futures::stream::iter(0..calls)
        .for_each_concurrent(in_flight, |_| one(env, v))
        .await;
    t.elapsed()
}
