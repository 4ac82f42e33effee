//! # idem-redis: one side effect across every instance of a service
//!
//! The [`idem_dedup::Engine`] makes retries safe inside one process. Run the service as several
//! instances behind a load balancer and a client's retry may land on another instance, whose
//! engine has never seen the key: the side effect would run twice. This crate adds a second tier
//! on Redis (or Redis Cluster) that the instances share.
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_redis::{RedisTier, Source, TieredEngine};
//!
//! // On every instance:
//! // A Redis with an append-only file (see "Durability" below).
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
//! (defined in `idem-dedup`, so a relational tier can implement it too); [`RedisTier`]
//! is its Redis implementation.
//!
//! The local leader's run:
//!
//! 1. **claim** — one Lua script, atomic on the scope's node: if no record exists, take the
//!    scope with a lease and a new [`FencingToken`] and run the action; if a record with the same
//!    fingerprint is completed, return its value (replayed); if it is held by another instance,
//!    mark it as awaited and return the holder's token and remaining lease; if it is held by
//!    *this* instance (a claim whose reply was lost), take it back at once with a new token; if
//!    the fingerprint differs, it is a conflict: `FAILED_PRECONDITION`.
//! 2. **renew** — while the action runs, the holder extends its lease every third of it (one
//!    script, `PEXPIRE` on Redis' clock, *if no later claim exists*; a record that lapsed while
//!    nobody claimed is taken again). So a live action keeps its claim however long it runs, and
//!    a crashed holder's claim lapses about one lease after its last renewal. A renewal that finds
//!    another claim tells the holder it lost the scope: its `Run` says so
//!    (`idem_core::run::Run::is_lease_lost`), and its completion will be fenced out.
//! 3. **complete** — the holder stores the encoded value with the TTL *if no later claim exists*
//!    (the scope's fence still equals its token, even if its lease ran out), and publishes on the
//!    scope's channel if someone waits. After a failed action it **releases** instead (same
//!    check), so the next call runs again. A completion or release that fails is retried
//!    in the background while the claim is still this run's, and counted.
//! 4. **wait** — an instance that met another's claim waits on pub/sub for the completion notice,
//!    with a bounded polling fallback on tokio's timer (never a busy
//!    loop), then claims again. It gets the value; or, if the holder's lease lapsed (the holder
//!    crashed), exactly one waiter gets the claim and runs the action. A caller stops
//!    waiting at its own deadline; the wait goes on in the background, so the retry finds the
//!    result here.
//!
//! ## Fencing: what it prevents, and what it does not
//!
//! Renewals keep a live holder's lease, but it can still lapse while the holder exists and cannot
//! renew: a stall longer than what is left of its lease (a GC pause, a stalled disk, `SIGSTOP`),
//! or a partition from Redis. Another instance then claims the scope and gets a larger
//! [`FencingToken`]. Then:
//!
//! * **The record is protected.** The late holder's completion finds the scope's fence moved past
//!   its token: nothing is written, the new holder's result stands, and the late holder's caller
//!   gets `ABORTED` / `FENCED_OUT`; its next renewal, sooner, already told its action
//!   (`Run::is_lease_lost`). A holder whose lease merely ran out while *nobody* claimed still
//!   renews and completes: its result is stored and replayed.
//! * **The side effect is protected only partly.** The action receives its token; a store that
//!   remembers the highest token it accepted and refuses lower ones refuses the late holder's
//!   write *when the new holder wrote first*. A late holder that writes first (it stalled just
//!   past its lease, then wrote at once) is accepted, and so is the new holder after it: two side
//!   effects. Tokens order writers; they do not make a lapsed lease safe.
//! * **What does exclude a second run:** a lease longer than the longest stall a holder can
//!   survive (renewals spare it from outlasting the action), or a tier that keeps the record and
//!   the side effect in one transaction.
//!
//! ### The token scheme
//!
//! A token is the larger of the scope's last token + 1 (the fence counter `P{T}:fence`) and
//! Redis' clock in microseconds (`TIME`, read inside the claim script). The fence lives a day
//! (plus twice the lease) past the scope's last claim and survives `forget`, so tokens grow while
//! Redis remembers the scope; and when Redis forgot everything (a restart without persistence,
//! an eviction), the clock has moved on since the lost token was handed out, so a token is still
//! never handed out twice for a scope. Assumptions: the clocks of the Redis servers are roughly
//! synchronised (after a failover the new master's clock must not be behind the old one's by more
//! than the time since the scope's last claim); a clock that steps back *and* a total loss of
//! data at once are not covered.
//!
//! ## Durability: persistence, restarts, failover
//!
//! The record is only as durable as Redis (the full table, with the fault runs' figures, is in
//! `docs/durability.md` in the repository):
//!
//! * **Persistence is checked at connect.** [`RedisTierBuilder::connect`] reads `CONFIG GET
//!   appendonly`, `appendfsync` and `save` (on a cluster, on every primary) and reports the
//!   weakest as [`RedisTier::persistence`]. A Redis without an append-only file loses
//!   acknowledged records when it restarts, so an intent may run a second time: `connect` fails
//!   with [`ConnectError::Volatile`] unless [`allow_volatile`](RedisTierBuilder::allow_volatile)
//!   is set (then a warning, and the `idem_redis_volatile` gauge at 1). With `appendonly yes` a
//!   restart of Redis loses nothing; with `appendfsync always` not even a crash of its machine
//!   does. If `CONFIG` is not allowed (some managed services), a warning says the check could not
//!   run. `connect` also waits while Redis is still starting (connection refused, `LOADING`), up
//!   to [`startup_timeout`](RedisTierBuilder::startup_timeout).
//! * **Replication is asynchronous.** On a failover, the promoted replica may lack the last
//!   records the old master acknowledged. A lost claim lets another instance claim and run the
//!   action too (the first holder's completion is then fenced out, after its caller was told the
//!   result is not recorded); a lost completion lets the intent run again.
//!   [`wait_replicas`](RedisTierBuilder::wait_replicas) runs the action only once `n` replicas
//!   confirmed its claim (`WAIT`; otherwise the claim is given back and the call fails with a
//!   retryable `UNAVAILABLE` before the action), and counts a completion as recorded only once
//!   `n` replicas confirmed it; if they do not in time, the caller's outcome is marked not
//!   recorded and the completion is retried. `WAIT` narrows the window but does not make
//!   replication synchronous. Renewals are not waited for: a failover that loses one leaves the
//!   lease running from the renewal before it (two thirds of a lease, at the default interval).
//! * **Failover is survived.** Scripts are sent by hash and, when a node does not know them (a
//!   fresh or promoted node keeps no script cache), in full. A cluster client can stall after a
//!   failover (every call times out although a fresh client would connect at once); the tier's
//!   health check swaps in a fresh client when calls keep failing (3 failures within
//!   [`health_window`](RedisTierBuilder::health_window)), with a warning and the
//!   `idem_redis_reconnects_total` counter, so each instance serves again within seconds of the
//!   promotion, without a restart.
//!
//! ## Fail closed, or open
//!
//! Every Redis call has a time limit ([`RedisTierBuilder::command_timeout`], default 1 s). If
//! Redis fails or passes it, the call fails **closed** by default: `UNAVAILABLE` with reason
//! `UPSTREAM_UNAVAILABLE`, retryable, and **no action runs without a claim**. Failures
//! are never cached, so once Redis is back (the connection reconnects by itself) the retry goes
//! through without restarting anything. [`OnUnavailable::FailOpen`] is an explicit opt-in that
//! runs the action without a claim while Redis is down (duplicates across instances become
//! possible); every such run is counted in [`TierStats::fail_open`]. If the action ran but its
//! result could not be stored, the caller still gets it (the side effect happened), marked not
//! recorded ([`Outcome::is_recorded`]); this instance keeps it, and storing it is retried in the
//! background while the claim is still this run's.
//!
//! ## Keys, slots and Redis Cluster
//!
//! A scope's record is the hash `P{T}`, its fencing counter `P{T}:fence` and its channel
//! `P{T}:done`, where `P` is the prefix (default `idem:`) and `T` the first 16 bytes of
//! SHA-256 over the scope's injective encoding, in hex. The `{T}` hash tag puts all three in one
//! cluster slot, so every script touches one slot; since `T` is a digest, a `{` or `}` sent by a
//! client in a tenant, method or key cannot move a key to another slot. Connect to a
//! cluster with [`RedisTierBuilder::connect_cluster`]; the API is the same.
//!
//! ## TLS and your own clients
//!
//! `rediss://` URLs work with the crate's `tls` feature (redis-rs' rustls support, the system's
//! root certificates); without it they are refused with a message that names the feature. To
//! configure the client yourself (certificates, credentials, RESP3), build it and hand it in:
//! [`RedisTierBuilder::connect_client`], [`RedisTierBuilder::connect_cluster_client`], or
//! [`RedisTierBuilder::from_connection_manager`] to share a `ConnectionManager` your service
//! already has.
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
//! | waiting for a starting Redis | 10 s | [`RedisTierBuilder::startup_timeout`] |
//! | Redis without an append-only file | refused | [`RedisTierBuilder::allow_volatile`] |
//! | fresh client after failing calls | 3 failures within 3 s | [`RedisTierBuilder::health_window`] |
//! | replicas confirming a claim and a completion | none (`WAIT` off) | [`RedisTierBuilder::wait_replicas`] |
//! | lease | 30 s | [`TieredBuilder::lease`] |
//! | TTL of results in Redis | 24 h from completion | [`TieredBuilder::ttl`] |
//! | TTL of the local copy | 5 min (at most the TTL) | [`TieredBuilder::local`], [`LocalCache::ttl`] |
//! | longest wait for another instance | 30 s | [`TieredBuilder::max_wait`] |
//! | polling fallback of waits | 10 ms doubling to 250 ms | [`TieredBuilder::poll_interval`] |
//! | Redis down | fail closed (`UNAVAILABLE`) | [`TieredBuilder::on_unavailable`] |
//! | local shards, entries | available parallelism, 1,000,000 | [`LocalCache::shards`], [`LocalCache::max_entries`] |
//! | lease renewal while the action runs | every third of the lease | [`TieredBuilder::renew_every`], [`TieredBuilder::without_renewal`] |
//! | local in-flight lease (bounds a renewed run) | `max_wait` + 5 min, or `max_wait` + `lease` + 5 s if longer | [`LocalCache::in_flight_timeout`] |
//! | codec | [`BytesCodec`] | [`TieredBuilder::codec`] |
//!
//! ## Observability
//!
//! [`TieredEngine::stats`] counts what the claim loop did (executed, remote replays and joins,
//! conflicts, unavailable, fail-open, fenced out, unrecorded, release failures, orphans
//! reclaimed, ...); the same figures go to the `metrics` facade as `idem_tier_calls_total`.
//! The tier's own metrics are in [`metrics`]. [`TieredEngine::local_stats`] gives the local
//! engine's counts, [`RedisTier::commands_sent`] the Redis calls made and
//! [`RedisTier::reconnects`] the fresh clients swapped in.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "tls")]
use rustls as _; // the crypto provider of redis-rs' rustls support

mod config;
mod conn;
mod connect;
mod error;
mod keys;
mod link;
pub mod metrics;
mod notifier;
mod persistence;
mod probe;
mod scripts;
mod tier;

pub use config::RedisTierBuilder;
pub use error::ConnectError;
pub use idem_dedup::remote::{ClaimOutcome, Commit, FencingToken, OwnerId, RemoteTier};
pub use idem_dedup::tiered::{OnUnavailable, TierStats, TieredBuilder};
#[cfg(feature = "serde")]
pub use idem_dedup::JsonCodec;
pub use idem_dedup::{BytesCodec, Codec, LocalCache, Outcome, Source};
pub use persistence::Persistence;
pub use tier::RedisTier;

/// The [`TieredEngine`](idem_dedup::tiered::TieredEngine) over a [`RedisTier`]: each instance's
/// local engine in front, Redis arbitrating between instances. `TieredEngine::<V>::builder(tier)`
/// starts one.
pub type TieredEngine<V, C = BytesCodec> = idem_dedup::tiered::TieredEngine<V, RedisTier, C>;
