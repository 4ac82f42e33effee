//! # idem-postgres: the idempotency record in PostgreSQL, committed with the side effect
//!
//! A retried write is safe when the server runs its side effect once per idempotency key and
//! replays the stored result to every duplicate. With one process, `idem_dedup::Engine`
//! does it in memory. With several instances, the record has to be shared — and a record kept
//! in a *different* store than the side effect (Redis beside PostgreSQL) always leaves a window:
//! the order commits, the process dies before the record is written, another instance runs the
//! order again after the lease. This crate closes it by keeping the record in the same database
//! as the work, in the same transaction, as Stripe's and Brandur Leach's Postgres-backed
//! idempotency keys do.
//!
//! It has two modes, on one schema (they may be mixed: a scope's lock keeps them apart):
//!
//! | mode | type | what commits with what | use it when |
//! |---|---|---|---|
//! | transactional | [`PgEngine`] | the side effect and its record, in one transaction | the side effect is a write to this database |
//! | remote tier | [`PgTier`] behind a [`TieredEngine`] | the record alone (claim, lease, fencing, like `idem-redis`) | the side effect lives elsewhere (an API, another store) |
//! | multi-step operation | [`PgEngine::operation`] | each local step's writes with its recovery point; the result at the end | the handler mixes writes here with calls to other services |
//!
//! ## How it fits
//!
//! `idem-core` has the words (keys, scopes, fingerprints, statuses); `idem-dedup` the local
//! engine, the [`RemoteTier`] trait and the tiered engine; `idem-tower` the server layer, which
//! runs over any `Deduplicator`. Both modes here are deduplicators: [`PgEngine`] directly, with
//! the transaction as the action's context; [`PgTier`] through the tiered engine, with the
//! claim's fencing token. Either way each instance keeps a local engine in front, which
//! coalesces its own concurrent callers and replays results it holds with no query.
//!
//! ## Transactional mode
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::{Fingerprint, Scope};
//! use idem_postgres::{sqlx_status, PgEngine};
//!
//! let pool = sqlx::PgPool::connect("postgres://app@127.0.0.1/shop").await?;
//! let engine = PgEngine::<String>::builder(pool).build().await?; // applies the schema
//!
//! let scope = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "3f1c2b7e-9d4a-4c55")?;
//! let out = engine
//!     .execute_in_transaction(&scope, Fingerprint::of(b"sku=book-42&qty=1"), |tx, _token| async move {
//!         let mut conn = tx.lock().await?;
//!         let id: i64 = sqlx::query_scalar("INSERT INTO orders (sku, qty) VALUES ($1, $2) RETURNING id")
//!             .bind("book-42")
//!             .bind(1)
//!             .fetch_one(&mut *conn)
//!             .await
//!             .map_err(sqlx_status)?;
//!         Ok(format!("order {id}"))
//!     })
//!     .await?;
//! // The order row and the record committed together. Any instance, any retry: replayed.
//! println!("{:?}: {}", out.kind(), out.value());
//! # Ok(()) }
//! ```
//!
//! The local leader of a call begins a transaction, takes the scope's transaction-scoped
//! advisory lock (waiting, up to `max_wait`, while another transaction of the scope runs on
//! any instance: duplicates wait for the holder's COMMIT or ROLLBACK and wake at once), reads the
//! record, and then either replays it, answers a conflict, or runs the action with the
//! [`PgTransaction`]; then it writes the record in the same transaction and commits. An action
//! error or panic rolls everything back and stores nothing. Through `idem-tower`'s `IdemLayer`
//! (over a `PgEngine<StoredResponse>`), the inner service finds the `PgTransaction` in the
//! request's extensions, and the stored response commits with its writes; a response that is
//! not stored (a 5xx, say) rolls its writes back too.
//!
//! ## Remote-tier mode
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_postgres::{PgTier, TieredEngine};
//!
//! let pool = sqlx::PgPool::connect("postgres://app@127.0.0.1/shop").await?;
//! let tier = PgTier::builder(pool).build().await?;
//! let engine = TieredEngine::<String>::builder(tier).build()?;
//!
//! let scope = Scope::parse("tenant-0042", "/shop.v1.Shop/Refund", "5d1e0a9c-77f3-4f0b")?;
//! let out = engine
//!     .execute(&scope, Fingerprint::of(b"amount=10"), |token| async move {
//!         // A side effect outside this database; hand it the fencing token.
//!         Ok::<_, Status>(format!("refund accepted (token {token})"))
//!     })
//!     .await?;
//! # let _ = out; Ok(()) }
//! ```
//!
//! Each tier call is one statement (a function of the schema): claim with a lease and a token
//! (`INSERT ... ON CONFLICT (digest) DO UPDATE` when the row is free, expired, lapsed or this
//! owner's orphan), complete, release and the holder's lease renewals guarded by the token,
//! waits woken by `LISTEN/NOTIFY` with bounded polling as the fallback. See the `idem_dedup::remote` docs for what a fencing
//! token protects and what it does not: a side effect outside the database can still happen
//! twice when a lease lapses under a holder that stalled — the reason for the transactional mode.
//!
//! ## Multi-step operations
//!
//! A handler that reserves stock here, charges a payment provider, then confirms the order here
//! is not one transaction. [`PgEngine::operation`] runs it as named steps (see the
//! [`operation`] module): a [`local`](Operation::local) step's writes commit with its recovery
//! point (its name and output), a [`foreign`](Operation::foreign) step calls out with a key
//! derived from the intent and the step's name and records what came back. A re-run — the
//! client's retry, another instance after a crash or a lapsed lease, a [`Completer`] — resumes
//! after the last recovery point: committed local steps never run again, foreign steps are
//! called again only with the same key. Two runs never execute one operation at once (a
//! claim with a renewed lease and a fencing token).
//!
//! ```no_run
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_postgres::{sqlx_status, Completer, Operation, PgEngine};
//!
//! /// The handler: the same function serves requests and the completer.
//! async fn checkout(op: Operation) -> Result<String, Status> {
//!     let sku = String::from_utf8_lossy(op.request()).into_owned();
//!     let reservation: i64 = op
//!         .local("reserve", |tx| async move {
//!             let mut conn = tx.lock().await?;
//!             sqlx::query_scalar("INSERT INTO reservations (sku) VALUES ($1) RETURNING id")
//!                 .bind(&sku)
//!                 .fetch_one(&mut *conn)
//!                 .await
//!                 .map_err(sqlx_status)
//!         })
//!         .await?;
//!     let charge: String = op
//!         .foreign("charge", |key| async move {
//!             // Send `Idempotency-Key: {key}` to the provider; a re-run sends the same key.
//!             Ok(format!("ch_{}", &key.as_str()[..8]))
//!         })
//!         .await?;
//!     op.local("confirm", |tx| async move {
//!         let mut conn = tx.lock().await?;
//!         sqlx::query("UPDATE reservations SET charge = $1 WHERE id = $2")
//!             .bind(&charge)
//!             .bind(reservation)
//!             .execute(&mut *conn)
//!             .await
//!             .map_err(sqlx_status)?;
//!         Ok(())
//!     })
//!     .await?;
//!     Ok(format!("reservation {reservation} paid"))
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://app@127.0.0.1/shop").await?;
//! let engine = PgEngine::<String>::builder(pool).build().await?;
//! // Operations whose client gave up are finished in the background.
//! let _completer = Completer::builder(engine.clone())
//!     .handler("POST /checkout", checkout)
//!     .build()?
//!     .spawn();
//!
//! // In the request handler (axum, tonic, ...):
//! let scope = Scope::parse("tenant-0042", "POST /checkout", "8c0e5a55-1b7d-4e0b")?;
//! let body = b"book-42".to_vec();
//! let out = engine
//!     .operation(&scope, Fingerprint::of(&body), body, checkout)
//!     .await?;
//! println!("{}", out.value());
//! # Ok(()) }
//! ```
//!
//! ## The schema
//!
//! [`migrate`] applies [`SCHEMA_SQL`] (idempotent, safe from every instance at once; the
//! builders call it unless told not to): in schema `idem` (configurable), a `records` table
//! with one row per scope keyed by SHA-256 of the scope's injective encoding, holding the
//! fingerprint, state, fencing token, owner, stored result and `expires_at` (the lease deadline
//! while in flight, completion + TTL once completed); a `fence` sequence for every token (so
//! tokens only grow, across deletes and crashes); and the functions. A sweeper task deletes
//! expired rows in bounded batches on tokio's timer (`FOR UPDATE SKIP LOCKED`, through the
//! `expires_at` index); expired rows are ignored anyway, so under a flood of unique keys the
//! table holds about one TTL (plus one sweep interval) of rows.
//!
//! ## Fail closed
//!
//! Every statement has a time limit (`query_timeout`, default 1 s). A failure or a timeout
//! answers `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE` (retryable), and no action runs without its
//! claim: in transactional mode nothing runs outside a transaction that holds the scope's lock,
//! and a COMMIT whose answer is lost is `UNAVAILABLE` / `UNKNOWN_OUTCOME` with nothing cached
//! locally, so the retry asks the database, which knows. Pools reconnect by themselves: once
//! PostgreSQL is back the same engines serve again.
//!
//! ## Durability: what survives what
//!
//! | event | transactional mode | remote-tier mode |
//! |---|---|---|
//! | process crash, `kill -9`, deploy | the open transaction rolls back: its side effects and its claim vanish together; the next call runs once | the holder's lease renewals stop: its claim lapses about one lease later, then one waiter runs; completed records stay |
//! | action of many leases | no lease while the transaction works | the holder renews its lease while the action runs (the schema's `renew`): it runs once, other instances wait |
//! | holder stalled (GC pause, `SIGSTOP`) | the server ends a transaction idle past the `lease`; the stalled holder's COMMIT fails | after the lease another instance claims with a higher token; the woken holder's next renewal finds its lease lost and its late completion is fenced out (the side effect may happen twice) |
//! | PostgreSQL restart or crash | committed = durable (with the default `fsync` and `synchronous_commit`); open transactions roll back | committed records and claims stay; in-flight completions are retried while the claim is ours |
//! | failover to a replica | record and side effect are in one database: both or neither survive; without synchronous replication the last commits may be lost (both together) | records committed but not replicated may be lost; then a retry runs again; tokens could repeat (the sequence may lag) |
//! | record past its TTL | deleted by the sweeper; the same key then runs again | the same |
//!
//! Needs: PostgreSQL's defaults `fsync = on` and `synchronous_commit = on` (with
//! `synchronous_commit = off` a crash may lose the last commits, each record with its side
//! effect); a synchronous standby for failover without loss.
//!
//! ## Defaults
//!
//! | setting | default | where |
//! |---|---|---|
//! | schema | `idem` | `schema` on both builders |
//! | time limit of every statement | 1 s | `query_timeout` |
//! | sweeper | every 60 s, 1,000 rows per statement | `sweep_every`, `sweep_batch` |
//! | TTL of records | 24 h from completion | [`PgEngineBuilder::ttl`], [`TieredBuilder::ttl`] |
//! | wait for another run of the scope | 30 s | [`PgEngineBuilder::max_wait`], [`TieredBuilder::max_wait`] |
//! | lease | 30 s (transactional: longest idle transaction) | [`PgEngineBuilder::lease`], [`TieredBuilder::lease`] |
//! | lease renewal (remote tier) | every third of the lease while the action runs | [`TieredBuilder::renew_every`] |
//! | local copy (both modes) | 5 min (at most the TTL) | [`PgEngineBuilder::local`], [`TieredBuilder::local`] ([`LocalCache`]) |
//!
//! Pools: both modes take your `sqlx::PgPool`. [`PgTier`] keeps one of its connections for
//! `LISTEN`. sqlx pings a connection before handing it out unless the pool is built with
//! `test_before_acquire(false)`, which saves a round trip per statement.
//!
//! ## Observability
//!
//! [`PgEngine::queries_sent`] and [`PgTier::queries_sent`] count statements (a locally held
//! replay costs none); metric names are in [`metrics`]; the tiered engine adds its own
//! (`TieredEngine::stats`).
//!
//! ## Where things are
//!
//! | file | what |
//! |---|---|
//! | `engine/` | [`PgEngine`] (transactional mode): its builder, a call through the local engine (`call.rs`), the leader's transaction (`run.rs`) |
//! | `transaction.rs` | [`PgTransaction`], [`TxGuard`], [`sqlx_status`] |
//! | `operation/` | multi-step operations: [`PgEngine::operation`] (`mod.rs`), the leader's claim, renewal and finish (`run.rs`), [`Operation`]'s steps (`handle.rs`), [`StepOutput`] (`output.rs`), the [`Completer`] (`completer.rs`) |
//! | `tier.rs`, `notifier.rs` | [`PgTier`] (remote-tier mode) and its `LISTEN` connection |
//! | `schema.rs`, `sql/schema.sql`, `sql/operations.sql` | [`migrate`], [`SCHEMA_SQL`] (version 1, then version 2's operations and steps) |
//! | `db.rs`, `db/` | the statements of a schema, time limits, how a failure reads |
//! | `sweeper.rs` | expired records and operations deleted in bounded batches |
//! | `config.rs`, `digest.rs`, `codes.rs`, [`metrics`] | shared settings, a scope's row key and lock, the schema's answer codes, metric names |
#![cfg_attr(docsrs, feature(doc_cfg))]

mod codes;
mod config;
mod db;
mod digest;
mod engine;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod grpc;
pub mod metrics;
mod notifier;
pub mod operation;
mod schema;
mod sweeper;
mod tier;
mod transaction;

pub use engine::{PgEngine, PgEngineBuilder};
pub use idem_dedup::remote::{ClaimOutcome, Commit, FencingToken, OwnerId, RemoteTier};
pub use idem_dedup::tiered::{OnUnavailable, TierStats, TieredBuilder};
#[cfg(feature = "serde")]
pub use idem_dedup::JsonCodec;
pub use idem_dedup::{BytesCodec, Codec, LocalCache, Outcome, Source};
#[cfg(feature = "serde")]
pub use operation::Json;
pub use operation::{
    Completer, CompleterBuilder, CompleterReport, CompleterTask, Operation, StepOutput,
};
pub use schema::{migrate, schema_sql, SetupError, DEFAULT_SCHEMA, SCHEMA_SQL, SCHEMA_VERSION};
/// The PostgreSQL client this crate is built on, so your pool and queries use the same version.
pub use sqlx;
pub use tier::{PgTier, PgTierBuilder};
pub use transaction::{sqlx_status, PgTransaction, TransactionClosed, TxGuard};

/// The [`TieredEngine`](idem_dedup::tiered::TieredEngine) over a [`PgTier`]: each instance's
/// local engine in front, PostgreSQL arbitrating between instances.
/// `TieredEngine::<V>::builder(tier)` starts one.
pub type TieredEngine<V, C = BytesCodec> = idem_dedup::tiered::TieredEngine<V, PgTier, C>;
