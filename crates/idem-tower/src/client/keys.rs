//! The key a keyless write gets inside a run being served: derived from the run, its target and
//! its step, so a re-run of the inbound intent sends the same keys.

use http::Request;
use idem_core::run::{self, Run, StepName};
use idem_core::IdempotencyKey;

use crate::client::{MissingKey, RetryLayer};
use crate::Protocol;

/// Inside a run, the key a write without one gets: derived from the run by its target (the gRPC
/// method, or the HTTP method and path) and its step name, if the request names one.
/// `None` outside a run, for reads, and for writes that carry a key (kept as they are).
pub(super) fn derived_key<B>(layer: &RetryLayer, req: &Request<B>) -> Option<IdempotencyKey> {
    let cfg = &layer.cfg;
    if cfg.missing_key != MissingKey::Generate || Run::current().is_none() {
        return None;
    }
    let protocol = Protocol::of(req.headers());
    if !cfg
        .writes
        .is_write(req.method(), req.uri().path(), protocol)
    {
        return None;
    }
    let key_header = match protocol {
        Protocol::Grpc => &cfg.grpc_key,
        Protocol::Http => &cfg.http_key,
    };
    if req.headers().contains_key(key_header) {
        return None;
    }
    let step = req.extensions().get::<StepName>().map(StepName::as_str);
    Some(match protocol {
        Protocol::Grpc => run::outbound_key(req.uri().path(), step),
        Protocol::Http => {
            run::outbound_key(&format!("{} {}", req.method(), req.uri().path()), step)
        }
    })
}
