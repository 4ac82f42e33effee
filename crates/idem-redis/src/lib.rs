//! # idem-redis: one side effect across every instance of a service
//!
//! The [`idem_dedup::Engine`] makes retries safe inside one process. Run the service as several
//! instances behind a load balancer and a client's retry may land on another instance, whose
//! engine has never seen the key: the side effect would run twice. This crate adds a second tier
//! on Redis (or Redis Cluster) that the instances share (SPEC D1–D3).
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_redis::{RedisTier, Source, TieredEngine};
//!
//! // On every instance:
//! let tier = RedisTier::builder().connect("redis://127.0.0.1:6379/").await?;
//! let engine = TieredEngine::<String>::builder(tier).build()?;
//!
//! let scope = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "3f1c2b7e-9d4a-4c55")?;
//! let out = engine
//!     .execute(&scope, Fingerprint::of(br#"{"sku":"book-42"}"#), |token| async move {
//!         // The side effect; hand `token` to its store so a stale holder cannot write.
//!         Ok::<_, Status>(format!("order-1001 (token {token})"))
//!     })
//!     .await?;
//! // On the instance that ran it: Executed, ThisInstance. On any other instance, for the same
//! // scope: Replayed (or Joined), OtherInstance, the same value.
//! println!("{:?} {:?} {}", out.kind(), out.source(), out.value());
//! # Ok(()) }
//! ```
//!
//! `examples/two_instances.rs` in the repository runs two engines on one Redis (starting its own
//! `redis-server` when `REDIS_URL` is not set).
//!
//! ## How it fits with the engine
//!
//! [`TieredEngine`] keeps the local [`Engine`](idem_dedup::Engine) in front. Its shards coalesce
//! the callers of one instance: ten concurrent duplicates on one instance make *one* Redis claim,
//! and a result this instance already holds is replayed without any Redis round trip. Only the
//! local leader talks to Redis, through the [`RemoteTier`] trait
//! (defined in `idem-dedup`, so a relational tier can implement it later, SPEC D4); [`RedisTier`]
//! is its Redis implementation.
//!
//! The local leader's run:
//!
//! 1. **claim** — one Lua script, atomic on the scope's node: if no record exists, take the
//!    scope (`HSET` + `PEXPIRE lease`, `INCR` of the fencing counter) and run the action;
//!    if a record with the same fingerprint is completed, return its value (replayed); if it is
//!    in flight, mark it as awaited and return the holder's token and remaining lease; if the
//!    fingerprint differs, it is a conflict: `FAILED_PRECONDITION` (SPEC K4).
//! 2. **complete** — the holder stores the encoded value with the TTL, *only if its token still
//!    holds the claim*, and publishes on the scope's channel if someone waits. After a failed
//!    action it **releases** instead (same check), so the next call runs again (SPEC E3).
//! 3. **wait** — an instance that met another's claim waits on pub/sub for the completion notice,
//!    with a bounded polling fallback through the [`idem_retry::Scheduler`] (never a busy
//!    loop), then claims again. It gets the value; or, if the holder's lease lapsed (the holder
//!    crashed), exactly one waiter gets the claim and runs the action (SPEC D2). A caller stops
//!    waiting at its own deadline; the wait goes on in the background, so the retry finds the
//!    result here.
//!
//! ## Fencing
//!
//! A lease can lapse while its holder still runs (a GC pause, a stalled disk, a partition).
//! Another instance then claims the scope and gets a larger [`FencingToken`] — the per-scope
//! counter only grows. When the late holder finally completes, the script sees that its token
//! no longer holds the claim: nothing is written, the new holder's result stands, and the late
//! holder's caller gets `ABORTED` / `FENCED_OUT`. The action receives its token, so the store
//! that takes the side effect can refuse writes with a token lower than the highest it has seen
//! — the late holder's write is then refused too. Tokens grow as long as Redis remembers the
//! scope: the counter lives until 24 h (plus twice the lease) past the scope's last claim; each
//! claim is also tagged with the instance that made it, and complete checks both.
//!
//! ## Fail closed, or open
//!
//! Every Redis call has a time limit ([`RedisTierBuilder::command_timeout`], default 1 s). If
//! Redis fails or passes it, the call fails **closed** by default: `UNAVAILABLE` with reason
//! `UPSTREAM_UNAVAILABLE`, retryable (SPEC R2), and **no action runs without a claim**. Failures
//! are never cached, so once Redis is back (the connection manager reconnects by itself) the
//! retry goes through without restarting anything. [`OnUnavailable::FailOpen`] is an explicit
//! opt-in that runs the action without a claim while Redis is down (duplicates across instances
//! become possible); every such run is counted in [`TierStats::fail_open`] and in the
//! `idem_redis_calls_total{result="fail_open"}` metric. If the action ran but its result could
//! not be stored, the caller still gets it (the side effect happened), this instance keeps it,
//! and storing it is retried in the background while the lease lasts.
//!
//! ## Keys, slots and Redis Cluster
//!
//! A scope's record is the hash `P{T}`, its fencing counter `P{T}:fence` and its channel
//! `P{T}:done`, where `P` is the prefix (default `idem:`) and `T` the first 16 bytes of
//! SHA-256 over the scope's injective encoding, in hex. The `{T}` hash tag puts all three in one
//! cluster slot, so every script touches one slot; since `T` is a digest, a `{` or `}` sent by a
//! client in a tenant, method or key cannot move a key to another slot (SPEC D3). Connect to a
//! cluster with [`RedisTierBuilder::connect_cluster`]; the API is the same.
//!
//! ## Values
//!
//! Values cross the wire through a [`Codec`]: [`BytesCodec`] (default) for `Vec<u8>` and
//! `String`, `JsonCodec` for any serde type (feature `serde`), or your own.
//!
//! ## Defaults
//!
//! | setting | default | where |
//! |---|---|---|
//! | key prefix | `idem:` | [`RedisTierBuilder::prefix`] |
//! | time limit of every Redis call | 1 s | [`RedisTierBuilder::command_timeout`] |
//! | connection attempt limit | 1 s | [`RedisTierBuilder::connect_timeout`] |
//! | lease | 30 s | [`TieredBuilder::lease`] |
//! | TTL of results in Redis | 24 h from completion | [`TieredBuilder::ttl`] |
//! | TTL of the local copy | the TTL | [`TieredBuilder::local_ttl`] |
//! | longest wait for another instance | 30 s | [`TieredBuilder::max_wait`] |
//! | polling fallback of waits | 10 ms doubling to 250 ms | [`TieredBuilder::poll_interval`] |
//! | Redis down | fail closed (`UNAVAILABLE`) | [`TieredBuilder::on_unavailable`] |
//! | local shards, entries | available parallelism, 1,000,000 | [`TieredBuilder::local_shards`], [`TieredBuilder::max_local_entries`] |
//! | local in-flight lease | `max_wait` + `lease` + 5 s | [`TieredBuilder::local_in_flight_timeout`] |
//! | codec | [`BytesCodec`] | [`TieredBuilder::codec`] |
//!
//! ## Observability
//!
//! [`TieredEngine::stats`] counts what the claim loop did (executed, remote replays and joins,
//! conflicts, unavailable, fail-open, fenced out, ...); the same figures go to the `metrics`
//! facade (names in [`metrics`]). [`TieredEngine::local_stats`] gives the local engine's counts,
//! and [`RedisTier::commands_sent`] the Redis calls made.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

#[cfg(feature = "tls")]
use rustls as _; // the crypto provider of redis-rs' rustls support

mod config;
mod conn;
mod keys;
mod link;
pub mod metrics;
mod notifier;
mod persistence;
mod scripts;
mod tier;

pub use config::{ConnectError, RedisTierBuilder};
pub use idem_dedup::remote::{ClaimOutcome, Commit, FencingToken, OwnerId, RemoteTier};
pub use idem_dedup::tiered::{OnUnavailable, TierStats, TieredBuilder};
#[cfg(feature = "serde")]
pub use idem_dedup::JsonCodec;
pub use idem_dedup::{BytesCodec, Codec, Outcome, Source};
pub use persistence::Persistence;
pub use tier::RedisTier;

/// The [`TieredEngine`](idem_dedup::tiered::TieredEngine) over a [`RedisTier`]: each instance's
/// local engine in front, Redis arbitrating between instances. `TieredEngine::<V>::builder(tier)`
/// starts one.
pub type TieredEngine<V, C = BytesCodec> = idem_dedup::tiered::TieredEngine<V, RedisTier, C>;
