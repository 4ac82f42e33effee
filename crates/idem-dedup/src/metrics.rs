//! Metric names and labels, in one place (SPEC E9).
//!
//! The engine reports through the [`metrics`] facade; install any recorder (for example
//! `metrics-exporter-prometheus`) to collect them. Gauges are set and counters advanced once per
//! mailbox drain, so the cost is per batch, not per call.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `idem_dedup_in_flight` | gauge | `shard` | runs in flight in the shard |
//! | `idem_dedup_completed` | gauge | `shard` | completed results stored in the shard |
//! | `idem_dedup_calls_total` | counter | `outcome` | calls by outcome (below) |
//!
//! `outcome` is one of `executed`, `joined`, `replayed`, `conflict`, `failed`, `panicked`,
//! `overloaded`, `rejected_in_flight`, `lease_expired`, `abandoned`.
//! Expired results are counted in `idem_dedup_expired_total` (label `shard`).

/// Gauge: runs in flight, per shard.
pub const IN_FLIGHT: &str = "idem_dedup_in_flight";
/// Gauge: completed results stored, per shard.
pub const COMPLETED: &str = "idem_dedup_completed";
/// Counter: calls by outcome.
pub const CALLS_TOTAL: &str = "idem_dedup_calls_total";
/// Counter: results removed by TTL expiry, per shard.
pub const EXPIRED_TOTAL: &str = "idem_dedup_expired_total";
/// Label naming the shard (its index, `"0"`, `"1"`, ...).
pub const LABEL_SHARD: &str = "shard";
/// Label naming the outcome.
pub const LABEL_OUTCOME: &str = "outcome";
