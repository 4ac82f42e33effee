//! The names of the layers' metrics, documented in one place.
//!
//! The layers report to the [`metrics`](https://docs.rs/metrics) facade; install any recorder
//! (the Prometheus exporter, for one) to collect them. Without a recorder they cost nothing.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | [`REFUSED_TOTAL`] `idem_layer_refused_total` | counter | `reason`, `status` (the HTTP status of the answer) | writes the server layer answered itself without running them |
//! | [`KEYED_PASSTHROUGH_TOTAL`] `idem_layer_keyed_passthrough_total` | counter | `protocol` (`grpc`, `http`), `rule` (`reads`, `safe_method`) | requests with a key the server layer passed through as reads |
//! | [`RETRIES_TOTAL`] `idem_tower_client_retries_total` | counter | [`REASON`](idem_retry::metrics::REASON) = [`Failure::as_str`](idem_retry::Failure::as_str) | retries the client layer made, by the failure that caused them |
//! | [`KEYS_GENERATED_TOTAL`] `idem_tower_client_keys_generated_total` | counter | — | keys the client layer drew at random for writes without one, outside any run |
//! | [`KEYS_DERIVED_TOTAL`] `idem_tower_client_keys_derived_total` | counter | — | keys the client layer derived from the run being served, for writes without one |
//!
//! The client layer's retrier reports its own series too (attempts, retries, give-ups by why):
//! see [`idem_retry::metrics`]. The server layer's engine reports the deduplication's. No key is
//! ever a label.

/// Counter: writes the server layer answered itself without running them (no tenant, no or bad
/// key, body too large, conflict, in flight, full, ...), by `reason` and the HTTP `status` of the
/// answer (a gRPC answer counts under the HTTP status its code maps to).
pub const REFUSED_TOTAL: &str = "idem_layer_refused_total";

/// Counter: requests that carried an idempotency key and that the server layer passed through as
/// reads, not deduplicated, by `protocol` (`grpc`, `http`) and `rule`: `reads` (the layer's
/// declared [`Reads`](crate::Reads)) or `safe_method` (an HTTP `GET`, `HEAD`, `OPTIONS` or
/// `TRACE`). A rise where none is expected is a write missing from the layer's
/// [`Writes`](crate::Writes) and declared a read by mistake.
pub const KEYED_PASSTHROUGH_TOTAL: &str = "idem_layer_keyed_passthrough_total";

/// Counter: the client layer's retries by the failure that caused them, labelled
/// [`REASON`](idem_retry::metrics::REASON) = [`Failure::as_str`](idem_retry::Failure::as_str).
pub const RETRIES_TOTAL: &str = "idem_tower_client_retries_total";

/// Counter: keys the client layer made for writes that had none, outside any run.
pub const KEYS_GENERATED_TOTAL: &str = "idem_tower_client_keys_generated_total";

/// Counter: keys the client layer derived from the run being served, for writes that had none.
pub const KEYS_DERIVED_TOTAL: &str = "idem_tower_client_keys_derived_total";
