//! # idem-postgres
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![allow(dead_code, unused_macros, unused_imports)] // used by the tier and the transactional engine (next commits)

mod config;
mod db;
mod digest;
pub mod metrics;
mod schema;
mod sweeper;

pub use schema::{migrate, schema_sql, SetupError, DEFAULT_SCHEMA, SCHEMA_SQL, SCHEMA_VERSION};
