//! # idem: effectively-once writes for async Rust servers
//!
//! A client tags one business intent with one idempotency key and retries it with jittered
//! backoff inside its deadline; the server runs the side effect once and replays the stored result
//! to every duplicate. *Effectively-once* = at-least-once delivery + a stable key + server-side
//! deduplication.
//!
//! This facade re-exports the parts, each behind a feature:
//!
//! | module | crate | feature | what |
//! |---|---|---|---|
//! | (root) | `idem-core` | always | keys, scopes, fingerprints, status codes, deadlines |
//! | [`dedup`] | `idem-dedup` | `dedup` (default) | the sharded in-process deduplication engine |
//! | [`retry`] | `idem-retry` | `retry` (default) | backoff, classification, retry budget, retrier |
//! | `tower` | `idem-tower` | `tower`, and `grpc` for tonic | tower layers for axum/tonic servers and clients |
//! | `redis` | `idem-redis` | `redis` | cross-instance deduplication on Redis and Redis Cluster |
//! | `postgres` | `idem-postgres` | `postgres` | the PostgreSQL tier and its transactional mode |
//! | `reqwest` | `idem-reqwest` | `reqwest` | a reqwest-middleware retry middleware: one key per write, derived from the run being served |
//!
//! Two more features switch on parts of those crates: `serde` (`JsonCodec`, serde values across a
//! shared tier as JSON) and `redis-tls` (`rediss://` URLs).
//!
//! The package is `idem-kit` on crates.io (the name `idem` belongs to an unrelated crate); the
//! library keeps the short name:
//!
//! ```toml
//! [dependencies]
//! idem-kit = { version = "0.1", features = ["tower"] } # `use idem::...`
//! ```
//!
//! Requirement IDs in these docs (K1, E5, R8, ...) are defined in the repository's
//! `REQUIREMENTS.md`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem::dedup::{Engine, OutcomeKind};
//! use idem::{Fingerprint, IdempotencyKey, Scope};
//!
//! let engine = Engine::<u64>::builder().build()?;
//! let key = IdempotencyKey::generate(); // once per business intent, reused by every retry
//! let scope = Scope::new("tenant-0042", "/shop.v1.Shop/CreateOrder", &key)?;
//! let fp = Fingerprint::of(br#"{"sku":"book-42","qty":1}"#);
//!
//! let first = engine.execute(&scope, fp, |_| async { Ok(1001) }).await?;
//! let retry = engine.execute(&scope, fp, |_| async { Ok(1002) }).await?;
//! assert_eq!(first.kind(), OutcomeKind::Executed);
//! assert_eq!((retry.kind(), *retry.value()), (OutcomeKind::Replayed, 1001));
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub use idem_core::*;

/// The deduplication engine (E1–E14); see [`idem_dedup`].
#[cfg(feature = "dedup")]
pub use idem_dedup as dedup;

/// Backoff, classification, retry budget and the retrier (R1–R7); see [`idem_retry`].
#[cfg(feature = "retry")]
pub use idem_retry as retry;

/// Tower layers: server-side dedup for tonic and axum, client-side retries (T1–T3); see
/// [`idem_tower`].
#[cfg(feature = "tower")]
pub use idem_tower as tower;

/// Cross-instance deduplication on Redis and Redis Cluster (D1–D3); see [`idem_redis`].
#[cfg(feature = "redis")]
pub use idem_redis as redis;

/// Cross-instance deduplication on PostgreSQL, and the transactional mode whose record commits
/// with the side effect (D4, D5); see [`idem_postgres`].
#[cfg(feature = "postgres")]
pub use idem_postgres as postgres;

/// The retry middleware for reqwest clients: one key per logical write, derived from the intent
/// being served inside a deduplicated run (K7, T3); see [`idem_reqwest`].
#[cfg(feature = "reqwest")]
pub use idem_reqwest as reqwest;

/// The README's examples, compiled and run as doctests so they stay true (its Redis example needs
/// the `redis` feature, "Across services" the `tower`, `grpc` and `reqwest` ones, so this runs
/// under `--all-features`, as CI does).
#[cfg(all(
    doctest,
    feature = "dedup",
    feature = "redis",
    feature = "grpc",
    feature = "reqwest"
))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Each published crate's README, compiled and run as doctests too (in the repository: the
/// facade's package does not hold the other crates' files, and needs them only for this).
#[cfg(all(
    doctest,
    feature = "dedup",
    feature = "retry",
    feature = "tower",
    feature = "redis"
))]
mod crate_readmes {
    #[doc = include_str!("../crates/idem-core/README.md")]
    struct Core;
    #[doc = include_str!("../crates/idem-dedup/README.md")]
    struct Dedup;
    #[doc = include_str!("../crates/idem-retry/README.md")]
    struct Retry;
    #[doc = include_str!("../crates/idem-tower/README.md")]
    struct Tower;
    #[doc = include_str!("../crates/idem-redis/README.md")]
    struct Redis;
}
