//! Metric names and labels, in one place.
//!
//! The engine reports through the [`metrics`] facade; install any recorder (for example
//! `metrics-exporter-prometheus`) **before** building an engine: an engine resolves its metric
//! handles when it is built. Building an engine also [describes](describe) every metric below
//! (the Prometheus `# HELP` lines); that happens at each build, a few map inserts, so a recorder
//! installed between two builds gets them as well. Gauges are set and counters advanced once per
//! mailbox drain, so their cost is per batch, not per call.
//!
//! Every metric carries the `engine` label: the engine's [name](crate::EngineBuilder::name)
//! (default `"default"`), so two engines in one process do not add up or overwrite each other's
//! figures. Give each engine of a process its own name; two engines with one name share their
//! series.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `idem_dedup_in_flight` | gauge | `engine`, `shard` | runs in flight in the shard |
//! | `idem_dedup_completed` | gauge | `engine`, `shard` | completed results stored in the shard |
//! | `idem_dedup_calls_total` | counter | `engine`, `outcome` | calls by outcome (below) |
//! | `idem_dedup_expired_total` | counter | `engine`, `shard` | stored results removed by TTL expiry |
//! | `idem_dedup_execute_seconds` | histogram | `engine`, `outcome` | duration of calls that reached the shard (below), by outcome |
//! | `idem_dedup_join_wait_seconds` | histogram | `engine` | how long joined calls waited for the run they joined |
//!
//! `outcome` of `idem_dedup_calls_total` is one of `executed`, `joined`, `replayed`,
//! `conflict`, `failed`, `panicked`, `overloaded` (full, or the tenant at its share),
//! `rejected_in_flight`, `lease_expired`, `abandoned`. `idem_dedup_execute_seconds` uses the
//! same values, plus `deadline_exceeded` (the caller's own deadline) and `shutting_down`.
//!
//! ## What the execute histogram times
//!
//! A replay served from the shard's published table (the read path, the common case) is not
//! timed: it takes well under a microsecond, and two clock reads would be a large part of its
//! cost. Every other call is: new scopes (the whole call, the action included), duplicates that
//! join a run, refusals (conflict, full, in flight under `Reject`) and the replays the read path
//! left to the shard. The time counts from the moment the call takes that path (after the read
//! path, a few hundred nanoseconds into the call) until it has its answer. Read-path replays are
//! counted in `idem_dedup_calls_total{outcome="replayed"}`.
//!
//! A [`TieredEngine`](crate::tiered::TieredEngine) adds, with its own name as `engine` (its local
//! engine's metrics above carry the same name):
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `idem_tier_calls_total` | counter | `engine`, `result` | what the claim loop did, by result (below) |
//! | `idem_tier_round_trip_seconds` | histogram | `engine`, `op` | one call to the shared tier, by operation: `claim`, `complete`, `release`, `renew`, `wait`, `lookup`, `forget` |
//!
//! `result` is one of `executed` (claimed and ran here), `remote_replayed` (another instance's
//! stored result), `remote_joined` (waited for another instance), `conflict`, `unavailable` (the
//! tier failed; failed closed), `fail_open` (the tier failed; ran without a claim, opt-in),
//! `fenced_out` (a later claim took over before completion), `wait_timeout` (another instance
//! still held the scope after `max_wait`), `failed` (the action failed; claim released),
//! `unrecorded` (the action ran but its completion could not be written at once),
//! `recorded_late` (written later by the background retry), `record_lost` (never written),
//! `release_failed`, `reclaimed` (an orphaned claim of this engine taken back), `local_full`
//! (the local engine was full; the call went to the tier directly), and for the lease
//! renewals of running actions `renewed`, `lease_lost` (a renewal found another run holding
//! the scope) and `renew_failed` (the tier failed; tried again at the next tick). Calls served by the local
//! engine alone (local joins and replays) never reach the tier; `idem_dedup_calls_total` counts
//! them. A `wait` round trip lasts until the other instance's run ends or the wait's poll
//! interval passes, so its figures are waits, not network latency.

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
/// Label naming the engine ([`EngineBuilder::name`](crate::EngineBuilder::name)), on every
/// metric of this module.
pub const LABEL_ENGINE: &str = "engine";
/// Histogram: seconds a call took, by outcome, for calls that reached the shard (see above).
pub const EXECUTE_SECONDS: &str = "idem_dedup_execute_seconds";
/// Histogram: seconds a joined call waited for the run it joined.
pub const JOIN_WAIT_SECONDS: &str = "idem_dedup_join_wait_seconds";
/// Histogram: seconds one call to the shared tier took, by operation.
pub const TIER_ROUND_TRIP_SECONDS: &str = "idem_tier_round_trip_seconds";
/// Label naming a tier operation: `claim`, `complete`, `release`, `wait`, `lookup`, `forget`.
pub const LABEL_OP: &str = "op";

/// Registers the description (and unit) of every metric above with the installed recorder:
/// the Prometheus exporter prints them as `# HELP` lines. Engines call it when they are built;
/// call it yourself only to describe the metrics before any engine exists.
///
/// ```
/// idem_dedup::metrics::describe(); // with no recorder installed, it does nothing
/// ```
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(IN_FLIGHT, "Runs in flight in the shard.");
    describe_gauge!(
        COMPLETED,
        "Completed results (successes and cached failures) stored in the shard."
    );
    describe_counter!(
        CALLS_TOTAL,
        "Deduplicated calls by outcome: executed, joined, replayed, or why none of them."
    );
    describe_counter!(EXPIRED_TOTAL, "Stored results removed by TTL expiry.");
    describe_histogram!(
        EXECUTE_SECONDS,
        Unit::Seconds,
        "Duration of calls that reached the shard (all but read-path replays), by outcome."
    );
    describe_histogram!(
        JOIN_WAIT_SECONDS,
        Unit::Seconds,
        "How long joined calls waited for the run they joined."
    );
    describe_counter!(
        TIER_CALLS_TOTAL,
        "What a tiered engine's claim loop did, by result."
    );
    describe_histogram!(
        TIER_ROUND_TRIP_SECONDS,
        Unit::Seconds,
        "Duration of one call to the shared tier, by operation."
    );
}

/// The values of the `outcome` label of [`EXECUTE_SECONDS`], in the order of
/// [`CallLatency::execute`].
const EXECUTE_OUTCOMES: [&str; 12] = [
    "executed",
    "joined",
    "replayed",
    "conflict",
    "failed",
    "panicked",
    "overloaded",
    "rejected_in_flight",
    "lease_expired",
    "abandoned",
    "deadline_exceeded",
    "shutting_down",
];

/// An engine's latency histograms, resolved once when it is built.
pub(crate) struct CallLatency {
    execute: [metrics::Histogram; 12],
    join_wait: metrics::Histogram,
}

impl CallLatency {
    pub(crate) fn new(engine: &std::sync::Arc<str>) -> Self {
        let engine = metrics::SharedString::from(engine.clone());
        CallLatency {
            execute: EXECUTE_OUTCOMES.map(|o| {
                metrics::histogram!(EXECUTE_SECONDS, LABEL_ENGINE => engine.clone(), LABEL_OUTCOME => o)
            }),
            join_wait: metrics::histogram!(JOIN_WAIT_SECONDS, LABEL_ENGINE => engine),
        }
    }

    /// Records a call that reached the shard and took `took`; a joined call's wait as well.
    pub(crate) fn record<V>(
        &self,
        took: std::time::Duration,
        result: &Result<crate::Outcome<V>, crate::DedupError>,
    ) {
        let (index, joined) = execute_index(result);
        self.execute[index].record(took.as_secs_f64());
        if joined {
            self.join_wait.record(took.as_secs_f64());
        }
    }

    /// Records a call that joined a run on the read path and waited `took` for it.
    pub(crate) fn record_join<V>(
        &self,
        took: std::time::Duration,
        result: &Result<crate::Outcome<V>, crate::DedupError>,
    ) {
        let (index, _) = execute_index(result);
        self.execute[index].record(took.as_secs_f64());
        self.join_wait.record(took.as_secs_f64());
    }
}

/// The `outcome` of a call's result (an index into [`EXECUTE_OUTCOMES`]), and whether the call
/// joined a run.
fn execute_index<V>(result: &Result<crate::Outcome<V>, crate::DedupError>) -> (usize, bool) {
    use crate::{DedupError as E, OutcomeKind as K};
    match result {
        Ok(out) => match out.kind() {
            K::Executed => (0, false),
            K::Joined => (1, true),
            K::Replayed => (2, false),
        },
        Err(E::Action { outcome, .. }) => (4, *outcome == K::Joined),
        Err(E::Conflict) => (3, false),
        Err(E::Panicked { .. }) => (5, false),
        Err(E::Overloaded { .. } | E::TenantQuotaExceeded { .. }) => (6, false),
        Err(E::InFlight { .. }) => (7, false),
        Err(E::LeaseExpired { .. }) => (8, false),
        Err(E::Abandoned) => (9, false),
        Err(E::DeadlineExceeded) => (10, false),
        Err(E::ShuttingDown) => (11, false),
    }
}
