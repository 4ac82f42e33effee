//! Metric names of the Redis tier, in one place (SPEC D3, E9).
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `idem_redis_calls_total` | counter | `result` | calls that reached the tier's claim loop, by result |
//!
//! `result` is one of `executed` (claimed and ran here), `remote_replayed` (another instance's
//! stored result), `remote_joined` (waited for another instance), `conflict`, `unavailable`
//! (Redis failed; failed closed), `fail_open` (Redis failed; ran without a claim, opt-in),
//! `fenced_out` (the lease lapsed before completion), `wait_timeout` (another instance still held
//! the scope after `max_wait`), `failed` (the action failed; claim released),
//! `complete_failed` (the action ran but its result could not be stored in Redis).
//!
//! Calls served by the local engine (local joins and replays) never reach the tier; they are
//! counted by `idem_dedup_calls_total`.

/// Counter: tier results.
pub const CALLS_TOTAL: &str = "idem_redis_calls_total";
/// Label naming the result.
pub const LABEL_RESULT: &str = "result";
