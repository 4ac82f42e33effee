//! # idem-postgres
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

mod config;
mod db;
mod digest;
mod engine;
pub mod metrics;
mod notifier;
mod schema;
mod sweeper;
mod tier;
mod transaction;

pub use engine::{PgEngine, PgEngineBuilder};
pub use idem_dedup::remote::{ClaimOutcome, Commit, FencingToken, OwnerId, RemoteTier};
pub use idem_dedup::tiered::{OnUnavailable, TierStats, TieredBuilder};
#[cfg(feature = "serde")]
pub use idem_dedup::JsonCodec;
pub use idem_dedup::{BytesCodec, Codec, Outcome, Source};
pub use schema::{migrate, schema_sql, SetupError, DEFAULT_SCHEMA, SCHEMA_SQL, SCHEMA_VERSION};
pub use tier::{PgTier, PgTierBuilder};
pub use transaction::{sqlx_status, PgTransaction, TransactionClosed, TxGuard};

/// The [`TieredEngine`](idem_dedup::tiered::TieredEngine) over a [`PgTier`]: each instance's
/// local engine in front, PostgreSQL arbitrating between instances.
/// `TieredEngine::<V>::builder(tier)` starts one.
pub type TieredEngine<V, C = BytesCodec> = idem_dedup::tiered::TieredEngine<V, PgTier, C>;
