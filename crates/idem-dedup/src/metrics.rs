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
//!
//! A [`TieredEngine`](crate::tiered::TieredEngine) adds:
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `idem_tier_calls_total` | counter | `result` | what the claim loop did, by result (below) |
//!
//! `result` is one of `executed` (claimed and ran here), `remote_replayed` (another instance's
//! stored result), `remote_joined` (waited for another instance), `conflict`, `unavailable` (the
//! tier failed; failed closed), `fail_open` (the tier failed; ran without a claim, opt-in),
//! `fenced_out` (a later claim took over before completion), `wait_timeout` (another instance
//! still held the scope after `max_wait`), `failed` (the action failed; claim released),
//! `unrecorded` (the action ran but its completion could not be written at once),
//! `recorded_late` (written later by the background retry), `record_lost` (never written),
//! `release_failed`, `reclaimed` (an orphaned claim of this engine taken back) and `local_full`
//! (the local engine was full; the call went to the tier directly, D6). Calls served by the local
//! engine alone (local joins and replays) never reach the tier; `idem_dedup_calls_total` counts
//! them.

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
/// Counter: what a tiered engine's claim loop did, by result.
pub const TIER_CALLS_TOTAL: &str = "idem_tier_calls_total";
/// Label naming a tier result.
pub const LABEL_RESULT: &str = "result";
