//! # idem-dedup: run each keyed action once, replay its result to every duplicate
//!
//! A client retries a write with the same idempotency key; this engine makes sure the write's side
//! effect happens once. The first call for a [`Scope`](idem_core::Scope) runs its action; calls
//! that arrive while it runs wait for it (*joined*); calls that arrive after it finished, within
//! the TTL, get the stored result (*replayed*) and run nothing. A call that reuses the key for a
//! different request (another [`Fingerprint`](idem_core::Fingerprint)) is refused as a conflict.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_dedup::{Engine, OutcomeKind};
//! use std::time::Duration;
//!
//! let engine = Engine::<String>::builder().ttl(Duration::from_secs(3600)).build()?;
//! let scope = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10")?;
//! let body = br#"{"sku":"book-42","qty":1}"#;
//!
//! let create = |_| async { Ok::<_, Status>("order-1001".to_string()) }; // the side effect
//! let first = engine.execute(&scope, Fingerprint::of(body), create).await?;
//! let retry = engine.execute(&scope, Fingerprint::of(body), create).await?;
//! assert_eq!(first.kind(), OutcomeKind::Executed);
//! assert_eq!(retry.kind(), OutcomeKind::Replayed);
//! assert_eq!(retry.value(), "order-1001");
//!
//! // Same key, other payload: refused, nothing runs (K4).
//! let other = engine.execute(&scope, Fingerprint::of(b"qty=2"), create).await;
//! assert_eq!(other.unwrap_err().code(), idem_core::Code::FailedPrecondition);
//! # Ok(()) }
//! ```
//!
//! ## How it fits
//!
//! `idem-core` gives the words (keys, scopes, fingerprints, status codes); this crate is the
//! in-process engine; `idem-tower` puts it in front of tonic and axum services; `idem-retry` is the
//! client half that retries with one stable key; `idem-redis` adds a second tier so several server
//! instances agree.
//!
//! ## Shape
//!
//! A scope is hashed once (SipHash-1-3 with a random key per engine, in one pass over the scope's
//! bytes: clients choose keys, so the hash must not be predictable) and the hash picks one of N
//! shards. Each shard is **one tokio task that
//! alone owns** a `hashbrown` table of entries (in flight, or completed with their result) and an
//! ordered timer queue of leases and expiries (one `tokio` sleep per shard). Callers reach it
//! through a bounded mailbox that the shard drains in batches; a full mailbox makes callers wait
//! asynchronously. Leaders report how their runs ended through a per-shard completion queue that
//! the shard applies before each batch. Only its shard writes a table, no lock is held across an
//! `.await`, and no executor thread ever blocks (sleeping a thread and blocking receives are
//! banned by the workspace's clippy config).
//!
//! Three things reach the shard's state without a message, and none of them decides anything:
//! a replay reads a stored success through the shard's published table (a reader lock sharded by
//! thread, which the shard takes for writing once per batch, never across an `.await`); a
//! duplicate of a run in flight finds, the same way, the broadcast cell the shard made for that
//! run's first duplicate and waits on it; and `stats()` reads counters the shard publishes. Who
//! leads, what conflicts, what is rejected, when a run ends and what its waiters get are decided by
//! the shard alone.
//!
//! The action itself runs in the leader's own call, not in a spawned task: a spawn per action cost
//! ~37% of new-key throughput in a prototype. If the leader's call is dropped mid-run (client
//! disconnect, caller deadline) the half-run future is handed to a new task, so the side effect is
//! never left half done and its result is stored for the retry that follows.
//!
//! ## Guarantees and defaults
//!
//! | | behaviour | default |
//! |---|---|---|
//! | TTL | results expire at completion + TTL, removed by the wheel without any read | 24 h |
//! | failures | not stored; every waiter gets the error; codes you declare are cached | none cached |
//! | panics | a failure with `INTERNAL`; the shard keeps serving | |
//! | lease | a run longer than this is cancelled; waiters get `UNAVAILABLE` | 30 s |
//! | memory | `max_entries` caps in-flight + completed; new scopes get `RESOURCE_EXHAUSTED`; nothing is evicted | 1,000,000 |
//! | shards | one actor each | available parallelism |
//! | in flight | duplicates wait (`Wait`) or get `ABORTED` (`Reject`) | `Wait` |
//!
//! ### Why eviction is refused
//!
//! An LRU cache would drop an unexpired result to make room, and the retry that follows would run
//! the side effect a second time. A full engine therefore refuses *new* scopes with a retry-after
//! hint and keeps replaying the ones it holds.
//!
//! ## Observability
//!
//! [`Engine::stats`] reads per-shard atomics (no message), cheap enough to scrape every second
//! under full load. The same figures go to the [`metrics`](mod@crate::metrics) facade, each
//! described and labelled with the engine's [name](EngineBuilder::name), with latency histograms
//! of calls, joins and tier round trips; the names are listed in that module. Every call is a
//! `tracing` span that names its scope by a short digest, never by its key, and lease expiries,
//! panics and a tier's faults are warn events: see the [`trace`] module.
//!
//! ## Large values
//!
//! Values are cloned to each waiter and replay, so make `V` cheap to clone: an `Arc<T>`,
//! `bytes::Bytes`, or, for large responses, just what a retry needs — an operation id and a status
//! (`Engine<(OrderId, Code)>`) — with the full response kept where it already lives.
//!
//! ## Memory per entry
//!
//! A completed entry costs an 8-byte table slot and a control byte (a hashbrown table keeps 1.14
//! to 2.3 slots per entry), one 72-byte allocation, and a 16-byte timer-queue item: about 108
//! bytes for a `u64` value at 1,000,000 entries (`examples/entry_bytes.rs`). The allocation holds
//! a keyed 128-bit digest of the scope instead of its encoded bytes (a replay compares two words;
//! clients cannot make two scopes share a digest, since they never learn the key), the
//! fingerprint, the expiry and the value: 72 bytes for a `u64` or any `Arc` value, more for a
//! larger `V`. A shard also keeps up to 1,024 emptied allocations of removed entries (about
//! 72 KiB) to reuse for new keys, so a steady stream of new keys and expiries does not go
//! through the allocator twice per key. See the
//! repository's `BENCHMARKS.md` for the comparison with other stores.
//!
//! ## Where things are
//!
//! | file | what |
//! |---|---|
//! | `engine/mod.rs`, `engine/builder.rs` | [`Engine`], [`EngineBuilder`], [`ShutdownReport`] |
//! | `engine/call.rs`, `engine/read_path.rs`, `engine/wait.rs`, `engine/observe.rs` | one call's way: the shard's `Begin`, leading or joining; replays and joins without a message; what a call waits for; its span and timing |
//! | `engine/seed.rs` | [`Engine::seed`]: a result obtained elsewhere, stored as completed |
//! | `deduplicator.rs` | [`Deduplicator`], implemented by [`Engine`] and the [`TieredEngine`](tiered::TieredEngine) |
//! | `tiered/` | the [`tiered`] engine: its builder, a call (`call.rs`), the leader's trip to the tier (`run.rs`), repairs of the tier's faults (`repair.rs`), what the local engine stores (`stored.rs`), [`TierStats`](tiered::TierStats) |
//! | `local.rs` | [`LocalCache`], the local engine's settings of every engine in front of a shared record |
//! | `remote.rs`, `remote/` | the [`remote`] tier's protocol: [`RemoteTier`](remote::RemoteTier), claims and tokens, [`Waiters`](remote::Waiters) |
//! | `outcome.rs`, `error.rs`, `info.rs`, `stats.rs` | what a call gets ([`Outcome`], [`DedupError`]), what a look-up shows ([`EntryInfo`]), the counts ([`Stats`]) |
//! | `config.rs`, `codec.rs` | the settings as built and [`ConfigError`], [`InFlightPolicy`]; [`Codec`] |
//! | [`metrics`], [`trace`] | metric names; spans, events and [`ScopeLogging`](trace::ScopeLogging) |
//! | `actor/` | the shard actors and what they share with the handles (not public): `shard/` (the loop, applying messages and run ends, expiry, seeds), the entry, the timer queue, the mailbox messages, the completion inbox, join cells, the leader's run, tenants' shares, counters |
#![cfg_attr(docsrs, feature(doc_cfg))]

// Where the code is, by idea (the crate doc's table says the same for readers of the docs):
// the public API at the top (`engine`, `tiered`, `deduplicator`, `local`, their settings,
// answers and errors), the shard actors and what they share with the handles under `actor`.
// Imports go one way: `engine` (the handle and one call's way) uses `actor`; `tiered`, `local` and
// `deduplicator` use `engine`; nothing in `actor` uses `engine`, `tiered` or `deduplicator`
// (see `actor/mod.rs` for the order inside it), except a unit test that builds its settings.
// The vocabulary files (`config`, `outcome`, `error`, `info`, `metrics`, `trace`) are used from
// both sides; `stats` reads the actors' counters.
mod actor;
mod codec;
mod config;
mod deduplicator;
mod engine;
mod error;
mod info;
mod local;
pub mod metrics;
mod outcome;
pub mod remote;
mod stats;
pub mod tiered;
pub mod trace;

#[cfg(feature = "serde")]
pub use codec::JsonCodec;
pub use codec::{BytesCodec, Codec};
pub use config::{ConfigError, InFlightPolicy};
pub use deduplicator::Deduplicator;
pub use engine::{Engine, EngineBuilder, ShutdownReport};
pub use error::DedupError;
pub use info::{EntryInfo, EntryState};
pub use local::LocalCache;
pub use outcome::{Outcome, OutcomeKind, Source};
pub use stats::{OutcomeCounts, ShardStats, Stats};
