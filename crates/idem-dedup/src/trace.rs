//! Tracing: a span per deduplicated call, warn events for what an operator must act
//! on, and the short scope digest that names a scope in both without giving its key away.
//!
//! # Why a digest and not the scope
//!
//! A scope is a tenant, a method and an idempotency key. Tenants are customers and keys are
//! client-chosen strings (an order number, an e-mail address, a bearer of meaning), so neither
//! belongs in logs that many people read and that live for months. Operators still need to see
//! that the warning on instance A and the span on instance B are about one request: the
//! [`ScopeDigest`] is the first 8 bytes of SHA-256 over the scope's encoding
//! ([`Scope::as_bytes`]), the same in every process and every version. It is a name for
//! correlating logs, not a secret-keeping hash: a key from a small set (sequential order numbers)
//! can be found by trying them all, while a random key (a UUID) cannot. Where the raw scope is
//! wanted in logs (a test system, a single-tenant service), opt in with
//! [`ScopeLogging::Raw`].
//!
//! # Spans
//!
//! Every span and event of this crate has the target `idem_dedup`. Spans are at `DEBUG`, as
//! tower-http's `TraceLayer` makes its request spans: a subscriber at `INFO` builds none, so a
//! replay costs what it costs without tracing (turn them on with `idem_dedup=debug`).
//!
//! | span | made by | fields |
//! |---|---|---|
//! | `idem_dedup.execute` | [`Engine::execute`](crate::Engine::execute), [`Engine::execute_with_deadline`](crate::Engine::execute_with_deadline) (and the [`Deduplicator`](crate::Deduplicator) impl) | `engine`, `method`, `scope_digest`, `outcome`, `code`; `tenant`, `key` with [`ScopeLogging::Raw`] |
//! | `idem_dedup.tiered.execute` | [`TieredEngine::execute`](crate::tiered::TieredEngine::execute), `execute_with_deadline` (and its `Deduplicator` impl) | as above, plus `source` |
//!
//! - `engine`: the engine's [name](crate::EngineBuilder::name); `method`: [`Scope::method`];
//!   `scope_digest`: the [`ScopeDigest`] in hex, computed only when the span is enabled.
//! - `outcome`, recorded when the call ends: `executed`, `joined` or `replayed`; for an error
//!   its reason ([`DedupError::reason`]: `IDEMPOTENCY_CONFLICT`, `ENGINE_FULL`, `LEASE_EXPIRED`,
//!   the action's own reason, ...) or, without one, its code (`DEADLINE_EXCEEDED`).
//! - `code`: an error's status code (`FAILED_PRECONDITION`, ...); empty on success.
//! - `source` (tiered): `local`, `this_instance`, `other_instance` or `fail_open`
//!   ([`Source`](crate::Source)).
//!
//! A leader's action runs inside its call's span, so what the handler logs is inside it too.
//! A tiered call's span holds its local engine's `idem_dedup.execute` span.
//!
//! # Events
//!
//! All at `WARN`, each with a name (the event's metadata name), the `engine`, `method` and
//! `scope_digest` fields (and `tenant`, `key` with [`ScopeLogging::Raw`]):
//!
//! | name | when | more fields |
//! |---|---|---|
//! | `idem_dedup.lease_expired` | a run passed its in-flight lease and was ended; its waiters get `UNAVAILABLE` | `lease_ms` |
//! | `idem_dedup.completed_after_lease` | a leader's action finished after its run was ended at the lease: its result was not stored, and a retry runs the action again | `lease_ms` |
//! | `idem_dedup.panicked` | an action panicked | `panic` (its message) |
//! | `idem_dedup.tier.fail_open` | the tier failed and the action ran without a claim (opt-in) | `error` |
//! | `idem_dedup.tier.fenced_out` | the action outlived its claim and another run took the scope over; this result was not stored | `token`, `lease_ms` |
//! | `idem_dedup.tier.unrecorded` | the action ran but its completion could not be written; retried in the background | `token`, `error` |
//! | `idem_dedup.tier.record_lost` | that background retry gave up: other instances may run the request again | `token`, `fenced_out` |
//! | `idem_dedup.tier.release_failed` | a failed run's claim could not be released; retried in the background | `token`, `error` |
//! | `idem_dedup.tier.lease_lost` | a lease renewal found another run holding the scope: the run's `Run` is marked lost, its result will not be stored | `token`, `lease_ms` |
//! | `idem_dedup.tier.renew_failed` | a lease renewal was refused by the tier for another reason than being unavailable (a schema without the renewal function, say); tried again at the next tick | `token`, `error` |
//!
//! A call that fails closed because the tier is down is a `DEBUG` event
//! (`idem_dedup.tier.unavailable`): in an outage there is one per call, and the metric
//! `idem_tier_calls_total{result="unavailable"}` is what to alert on. So is a renewal that fails
//! because the tier is unavailable (`idem_dedup.tier.renew_failed` at `DEBUG`;
//! `idem_tier_calls_total{result="renew_failed"}`).
//!
//! ```
//! use idem_core::Scope;
//! use idem_dedup::trace::ScopeDigest;
//!
//! let scope = Scope::parse("tenant-1", "/shop.v1.Shop/CreateOrder", "order-0001")?;
//! let digest = ScopeDigest::of(&scope);
//! assert_eq!(digest.to_string().len(), 16); // 8 bytes in hex
//! assert_eq!(digest, ScopeDigest::of_encoded(scope.as_bytes())); // the same in every process
//! assert!(!digest.to_string().contains("order"));
//! # Ok::<(), idem_core::ScopeError>(())
//! ```

use std::fmt;

use idem_core::{Hex, Scope};
use tracing::field::Empty;
use tracing::Span;

use crate::{DedupError, Outcome};

/// The target of every span and event of this crate.
pub(crate) const TARGET: &str = "idem_dedup";

/// A short, stable name for a scope in logs: the first 8 bytes of SHA-256 over
/// [`Scope::as_bytes`], shown as 16 lowercase hex digits (see the [module docs](self) for why).
///
/// The same scope has the same digest in every process, so the logs of two instances (or of the
/// server layer and the engine) correlate; the digest does not show the tenant or the key. A
/// server layer that logs a scope should log this too.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeDigest([u8; 8]);

impl ScopeDigest {
    /// The digest of `scope`.
    pub fn of(scope: &Scope) -> Self {
        Self::of_encoded(scope.as_bytes())
    }

    /// The digest of a scope's encoding (the bytes of [`Scope::as_bytes`], as a shared tier
    /// stores them).
    pub fn of_encoded(bytes: &[u8]) -> Self {
        let full = Scope::digest_encoded(bytes);
        let mut d = [0; 8];
        d.copy_from_slice(&full[..8]);
        ScopeDigest(d)
    }

    /// The 8 bytes.
    pub const fn to_bytes(self) -> [u8; 8] {
        self.0
    }
}

impl fmt::Display for ScopeDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Hex(&self.0), f)
    }
}

impl fmt::Debug for ScopeDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopeDigest({self})")
    }
}

/// What spans and events show of a scope; see
/// [`EngineBuilder::scope_logging`](crate::EngineBuilder::scope_logging).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScopeLogging {
    /// The method and the [`ScopeDigest`] only; never the tenant or the key. The default.
    #[default]
    Digest,
    /// The method, the digest, and the tenant and the key as they are (fields `tenant`, `key`).
    /// For test systems and services whose keys and tenants are not sensitive.
    Raw,
}

/// Whether any subscriber may want `DEBUG` spans now: the check `debug_span!` makes first, one
/// relaxed load. A replay makes its span only when this holds, so without a subscriber (or at
/// `INFO`) it costs this load and a branch.
#[inline]
pub(crate) fn spans_on() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    tracing::Level::DEBUG <= STATIC_MAX_LEVEL && tracing::Level::DEBUG <= LevelFilter::current()
}

/// The span of one engine call; disabled when no subscriber wants it.
pub(crate) fn call_span(engine: &str, logging: ScopeLogging, scope: &Scope) -> Span {
    let span = tracing::debug_span!(
        target: TARGET,
        "idem_dedup.execute",
        engine,
        method = scope.method(),
        scope_digest = %ScopeDigest::of(scope),
        outcome = Empty,
        code = Empty,
        tenant = Empty,
        key = Empty,
    );
    if logging == ScopeLogging::Raw && !span.is_disabled() {
        record_raw(&span, scope);
    }
    span
}

/// The span of one tiered engine call.
pub(crate) fn tiered_span(engine: &str, logging: ScopeLogging, scope: &Scope) -> Span {
    let span = tracing::debug_span!(
        target: TARGET,
        "idem_dedup.tiered.execute",
        engine,
        method = scope.method(),
        scope_digest = %ScopeDigest::of(scope),
        outcome = Empty,
        code = Empty,
        source = Empty,
        tenant = Empty,
        key = Empty,
    );
    if logging == ScopeLogging::Raw && !span.is_disabled() {
        record_raw(&span, scope);
    }
    span
}

fn record_raw(span: &Span, scope: &Scope) {
    span.record("tenant", scope.tenant());
    span.record("key", scope.key());
}

/// Records how a call ended on its span.
pub(crate) fn record_end<V>(span: &Span, result: &Result<Outcome<V>, DedupError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(out) => {
            span.record("outcome", out.kind().as_str());
        }
        Err(e) => record_error(span, e),
    }
}

/// Records an error's end on a call's span: its reason (or code) as `outcome`, and its code.
pub(crate) fn record_error(span: &Span, e: &DedupError) {
    match e.reason() {
        Some(reason) => span.record("outcome", reason.as_str()),
        None => span.record("outcome", e.code().as_str()),
    };
    span.record("code", e.code().as_str());
}

/// The fields every warn event carries: the engine, and the scope as [`ScopeLogging`] allows.
/// Made only when the event is enabled.
pub(crate) struct ScopeFields<'a> {
    pub(crate) method: &'a str,
    pub(crate) digest: ScopeDigest,
    /// Tenant and key, with [`ScopeLogging::Raw`].
    pub(crate) raw: Option<(&'a str, &'a str)>,
}

impl<'a> ScopeFields<'a> {
    pub(crate) fn new(scope: &'a Scope, logging: ScopeLogging) -> Self {
        ScopeFields {
            method: scope.method(),
            digest: ScopeDigest::of(scope),
            raw: (logging == ScopeLogging::Raw).then(|| (scope.tenant(), scope.key())),
        }
    }

    pub(crate) fn tenant(&self) -> Option<&'a str> {
        self.raw.map(|(t, _)| t)
    }

    pub(crate) fn key(&self) -> Option<&'a str> {
        self.raw.map(|(_, k)| k)
    }
}

/// Whether a warn event of this crate would be recorded (checked before decoding a scope for it).
pub(crate) fn warn_enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::WARN)
}

/// A warn event about one scope, with the common fields (see the module docs). `$name` is the
/// event's name; the remaining tokens are its own fields and message.
macro_rules! warn_scope {
    ($name:literal, $engine:expr, $fields:expr, $($rest:tt)+) => {{
        let f: &$crate::trace::ScopeFields<'_> = $fields;
        tracing::warn!(
            name: $name,
            target: "idem_dedup",
            engine = $engine,
            method = f.method,
            scope_digest = %f.digest,
            tenant = f.tenant(),
            key = f.key(),
            $($rest)+
        )
    }};
}
pub(crate) use warn_scope;

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// The digest is SHA-256's first 8 bytes over the scope's encoding, in hex; fixed
    /// across processes and versions (a change would break log correlation between versions).
    #[test]
    fn e15_scope_digest_is_the_first_8_bytes_of_sha256_of_the_encoding() {
        let scope = Scope::parse("tenant-1", "/shop.v1.Shop/CreateOrder", "order-0001").unwrap();
        let full = Sha256::digest(scope.as_bytes());
        let hex: String = full[..8].iter().map(|b| format!("{b:02x}")).collect();
        let digest = ScopeDigest::of(&scope);
        assert_eq!(digest.to_string(), hex);
        assert_eq!(digest.to_bytes()[..], full[..8]);
        assert_eq!(format!("{digest:?}"), format!("ScopeDigest({hex})"));
        // Pinned: the same digest in every process and version.
        assert_eq!(ScopeDigest::of_encoded(b"").to_string(), "e3b0c44298fc1c14");
        let other = Scope::parse("tenant-2", "/shop.v1.Shop/CreateOrder", "order-0001").unwrap();
        assert_ne!(ScopeDigest::of(&other), digest);
    }
}
