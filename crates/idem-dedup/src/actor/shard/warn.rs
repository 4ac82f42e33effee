//! The warn events of runs that ended badly, which an operator must hear of.

use idem_core::{whole_millis, Scope};

use crate::config::Config;
use crate::trace::{self, warn_scope, ScopeFields};

/// How a run ended that an operator must hear of.
pub(super) enum BadEnd<'a> {
    /// It passed its in-flight lease.
    Lease,
    /// Its action panicked, with this message.
    Panic(&'a str),
}

/// Warns of a run that ended badly, naming its scope as the engine's [`ScopeLogging`] allows.
/// The scope is decoded only when the event is enabled.
///
/// [`ScopeLogging`]: crate::trace::ScopeLogging
pub(super) fn warn_run_end(cfg: &Config, scope: &Scope, why: BadEnd<'_>) {
    if !trace::warn_enabled() {
        return;
    }
    let fields = ScopeFields::new(scope, cfg.scope_logging);
    match why {
        BadEnd::Lease => warn_scope!(
            "idem_dedup.lease_expired",
            &*cfg.name,
            &fields,
            lease_ms = whole_millis(cfg.in_flight_timeout),
            "a run passed its in-flight lease and was ended: its callers get UNAVAILABLE and \
             nothing is stored"
        ),
        BadEnd::Panic(message) => warn_scope!(
            "idem_dedup.panicked",
            &*cfg.name,
            &fields,
            panic = message,
            "the action panicked: its callers get INTERNAL and nothing is stored"
        ),
    }
}
