//! Metric names (the `metrics` facade). The tiered engine in front of a
//! [`PgTier`](crate::PgTier) reports its own (`idem_tier_*`, see `idem_dedup::metrics`).
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `idem_postgres_queries_total` | counter | `op` | statements sent (`claim`, `complete`, `release`, `renew`, `wait`, `lookup`, `forget`, `begin`, `tx_claim`, `tx_finish` (the record and COMMIT), `rollback`, `sweep`) |
//! | `idem_postgres_query_failures_total` | counter | `op` | statements that failed or passed their time limit |
//! | `idem_postgres_swept_total` | counter | | expired rows deleted by the sweeper |

/// Statements sent, by `op`.
pub const QUERIES: &str = "idem_postgres_queries_total";
/// Statements that failed or passed their time limit, by `op`.
pub const FAILURES: &str = "idem_postgres_query_failures_total";
/// Expired rows deleted by the sweeper.
pub const SWEPT: &str = "idem_postgres_swept_total";

/// Registers the descriptions (HELP text) of the metrics above with the installed recorder.
/// Building a tier or an engine calls it; call it yourself for a recorder installed later.
pub fn describe() {
    ::metrics::describe_counter!(
        QUERIES,
        "Statements idem-postgres sent to PostgreSQL, by op."
    );
    ::metrics::describe_counter!(
        FAILURES,
        "idem-postgres statements that failed or passed their time limit, by op."
    );
    ::metrics::describe_counter!(SWEPT, "Expired idempotency records deleted by the sweeper.");
}
