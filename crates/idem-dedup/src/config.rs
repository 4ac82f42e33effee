//! The engine's settings as built ([`Config`], read by the handle and the shard actors), their
//! checks, and the error that names a broken rule. The builder is `engine/builder.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, CodeSet};

use crate::trace::ScopeLogging;

/// What a duplicate gets while the first call for its scope is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InFlightPolicy {
    /// Wait for the run and share its result (joined). The default.
    #[default]
    Wait,
    /// Answer at once with [`DedupError::InFlight`](crate::DedupError::InFlight) (`ABORTED`, HTTP
    /// 409) and a retry-after hint, as the IETF Idempotency-Key draft and Stripe do.
    Reject,
}

/// Why an engine configuration was refused; the message names the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting is out of range.
    Invalid(&'static str),
    /// `build()` was called outside a tokio runtime; the shard actors need one.
    NoRuntime,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid(rule) => write!(f, "invalid engine setting: {rule}"),
            ConfigError::NoRuntime => f.write_str(
                "Engine::build must be called inside a tokio runtime (or use build_on(handle))",
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) shards: usize,
    pub(crate) ttl: Duration,
    pub(crate) in_flight_timeout: Duration,
    pub(crate) max_entries: usize,
    pub(crate) mailbox_capacity: usize,
    pub(crate) batch_size: usize,
    pub(crate) in_flight_policy: InFlightPolicy,
    pub(crate) cached_failures: CodeSet,
    pub(crate) failure_ttl: Duration,
    pub(crate) retry_after: Duration,
    /// `usize::MAX`: no byte budget.
    pub(crate) max_bytes: usize,
    /// Percent of each shard's part of the budget one tenant may hold; `None`: no limit.
    pub(crate) tenant_share: Option<u8>,
    /// The `engine` label of the metrics and field of the spans.
    pub(crate) name: Arc<str>,
    /// What spans and events show of a scope.
    pub(crate) scope_logging: ScopeLogging,
    /// Whether the action runs as the current [`Run`](idem_core::run::Run). Off for the
    /// local engine of an engine that runs the action itself under a claim and sets the run
    /// there, with its fencing token.
    pub(crate) sets_run: bool,
}

/// The engine name when none is set.
pub(crate) const DEFAULT_NAME: &str = "default";

/// Checks an engine name (see [`EngineBuilder::name`](crate::EngineBuilder::name)).
pub(crate) fn check_name(name: &str) -> Result<(), ConfigError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid(
            "name must be 1-64 characters of A-Z a-z 0-9 _ - . (it labels the engine's metrics \
             and names it in traces)",
        ))
    }
}

/// Weighs a stored value in bytes; see [`EngineBuilder::weigher`](crate::EngineBuilder::weigher).
pub(crate) type Weigher<V> = Arc<dyn Fn(&V) -> usize + Send + Sync>;

impl Config {
    /// Checks every setting; `weighed`: a weigher was given (it goes with `max_bytes`).
    pub(crate) fn validate(&self, weighed: bool) -> Result<(), ConfigError> {
        let c = self;
        check_name(&c.name)?;
        if c.shards == 0 || c.shards > 4096 {
            return Err(ConfigError::Invalid("shards must be in 1..=4096"));
        }
        if c.ttl.is_zero() {
            return Err(ConfigError::Invalid("ttl must be greater than zero"));
        }
        if c.in_flight_timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "in_flight_timeout must be greater than zero",
            ));
        }
        if c.max_entries == 0 {
            return Err(ConfigError::Invalid("max_entries must be at least 1"));
        }
        if c.mailbox_capacity == 0 {
            return Err(ConfigError::Invalid("mailbox_capacity must be at least 1"));
        }
        if c.batch_size == 0 {
            return Err(ConfigError::Invalid("batch_size must be at least 1"));
        }
        if !c.cached_failures.is_empty() && c.failure_ttl.is_zero() {
            return Err(ConfigError::Invalid(
                "cache_failures needs a ttl greater than zero",
            ));
        }
        if c.cached_failures.contains(Code::Ok) {
            return Err(ConfigError::Invalid(
                "cache_failures must not contain OK: it caches failures, and OK is not one",
            ));
        }
        // The codes a client retries are never cacheable: the retry would get the stored
        // failure back.
        if c.cached_failures.intersects(CodeSet::RETRYABLE) {
            return Err(ConfigError::Invalid(
                "cache_failures must not contain a code that clients retry (UNAVAILABLE, \
                 RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED): the retry would get the \
                 cached failure replayed instead of a new try, so a passing outage would last \
                 the whole failure ttl",
            ));
        }
        if c.max_bytes == 0 {
            return Err(ConfigError::Invalid("max_bytes must be at least 1"));
        }
        match (c.max_bytes != usize::MAX, weighed) {
            (true, false) => {
                return Err(ConfigError::Invalid(
                    "max_bytes needs a weigher: the engine counts the bytes the weigher gives \
                     for each stored value",
                ))
            }
            (false, true) => {
                return Err(ConfigError::Invalid(
                    "weigher needs max_bytes: the weights count against that budget",
                ))
            }
            _ => {}
        }
        if matches!(c.tenant_share, Some(p) if p == 0 || p > 100) {
            return Err(ConfigError::Invalid(
                "tenant_share is a percent of the budget, in 1..=100",
            ));
        }
        // Delays beyond ~2 years overflow tokio's timer wheel.
        let max = Duration::from_secs(60 * 60 * 24 * 365 * 2);
        if c.ttl > max || c.in_flight_timeout > max || c.failure_ttl > max {
            return Err(ConfigError::Invalid(
                "ttl, failure ttl and in_flight_timeout must be at most 2 years",
            ));
        }
        Ok(())
    }
}
