//! Metric names of the Redis tier, in one place.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `idem_redis_reconnects_total` | counter | – | fresh clients swapped in after calls kept failing (a stalled cluster client, a failover) |
//! | `idem_redis_volatile` | gauge | – | 1 when the last tier connected to a Redis that loses acknowledged records on restart (no append-only file), opted in with [`allow_volatile`](crate::RedisTierBuilder::allow_volatile); else 0 |
//! | `idem_redis_unreplicated_total` | counter | – | completions that [`wait_replicas`](crate::RedisTierBuilder::wait_replicas) could not confirm on enough replicas in time |
//!
//! What the claim loop does with each call (executed, replayed, joined, unavailable, fenced out,
//! unrecorded, release failures, orphans reclaimed, ...) is counted by the tiered engine itself
//! in `idem_tier_calls_total{result}` (see `idem_dedup::metrics`); calls served by the local
//! engine alone are in `idem_dedup_calls_total`.

/// Counter: connections replaced by a fresh client.
pub const RECONNECTS_TOTAL: &str = "idem_redis_reconnects_total";
/// Gauge: 1 while connected to a volatile Redis (opted in), else 0.
pub const VOLATILE: &str = "idem_redis_volatile";
/// Counter: completions not confirmed by enough replicas within the wait.
pub const UNREPLICATED_TOTAL: &str = "idem_redis_unreplicated_total";

/// Registers the descriptions of the metrics above (the Prometheus `# HELP` lines) with the
/// installed recorder. Connecting a tier calls it; call it yourself for a recorder installed
/// later.
///
/// ```
/// idem_redis::metrics::describe(); // with no recorder installed, it does nothing
/// ```
pub fn describe() {
    metrics::describe_counter!(
        RECONNECTS_TOTAL,
        "Fresh Redis clients swapped in after the tier's calls kept failing."
    );
    metrics::describe_gauge!(
        VOLATILE,
        "1 when the tier connected to a Redis that loses acknowledged records on restart \
         (no append-only file, accepted with allow_volatile), else 0."
    );
    metrics::describe_counter!(
        UNREPLICATED_TOTAL,
        "Completions that too few replicas confirmed within the wait_replicas timeout."
    );
}
