//! # idem-dedup: the deduplication engine
//!
//! TODO crate docs
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

mod config;
mod engine;
mod entry;
mod error;
mod message;
pub mod metrics;
mod outcome;
mod run;
mod shard;
mod stats;

pub use config::{ConfigError, EngineBuilder, InFlightPolicy};
pub use engine::{Engine, ShutdownReport};
pub use entry::{EntryInfo, EntryState};
pub use error::DedupError;
pub use outcome::{Outcome, OutcomeKind};
pub use stats::{OutcomeCounts, ShardStats, Stats};
