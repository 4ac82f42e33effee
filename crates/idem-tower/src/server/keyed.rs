//! Keyed requests the write rule does not list: a key is a declaration of intent, so they
//! are deduplicated, unless declared reads; the ones let through are counted and logged.

use http::Request;

use crate::metrics::KEYED_PASSTHROUGH_TOTAL;
use crate::server::ServerConfig;
use crate::Protocol;

/// Whether a request that the write rule does not list is a write all the same: it carries its
/// protocol's key header and is neither an HTTP safe method nor a declared read. A keyed request
/// let through as a read is counted and logged here.
pub(crate) fn is_keyed_write<B>(cfg: &ServerConfig, protocol: Protocol, req: &Request<B>) -> bool {
    if !req.headers().contains_key(cfg.key_header(protocol)) {
        return false;
    }
    let rule = if protocol == Protocol::Http && req.method().is_safe() {
        "safe_method"
    } else if cfg.reads.is_read(req.method(), req.uri().path(), protocol) {
        "reads"
    } else {
        return true;
    };
    passed_through(protocol, rule, req);
    false
}

/// Counts (and logs) one keyed request passed through as a read.
fn passed_through<B>(protocol: Protocol, rule: &'static str, req: &Request<B>) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            KEYED_PASSTHROUGH_TOTAL,
            "Requests with an idempotency key that the idem server layer passed through as reads, \
             not deduplicated, by protocol and by the rule that made them reads (reads: declared \
             by the layer's settings; safe_method: an HTTP GET, HEAD, OPTIONS or TRACE)"
        );
    });
    let protocol = match protocol {
        Protocol::Grpc => "grpc",
        Protocol::Http => "http",
    };
    metrics::counter!(KEYED_PASSTHROUGH_TOTAL, "protocol" => protocol, "rule" => rule).increment(1);
    tracing::debug!(
        target: "idem_tower",
        protocol,
        method = %req.method(),
        path = req.uri().path(),
        rule,
        "a request with an idempotency key was passed through as a read, not deduplicated"
    );
}
