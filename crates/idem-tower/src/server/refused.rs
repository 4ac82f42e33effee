//! Counting the layer's own answers that refuse a write.

use http::Response;
use idem_core::Status;

use crate::body::ReplayBody;
use crate::metrics::REFUSED_TOTAL;

/// Counts one refusal (and describes the metric the first time).
pub(crate) fn count(status: &Status, response: &Response<ReplayBody>) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            REFUSED_TOTAL,
            "Writes the idem server layer answered itself without running them, by reason and \
             HTTP status (401 no tenant, 400 no or bad key, 413 body too large, 422 key reused \
             for another request, 409 in flight, 429 full)"
        );
    });
    let http = match crate::Protocol::of(response.headers()) {
        crate::Protocol::Http => response.status().as_u16(),
        crate::Protocol::Grpc => status.code().http_status(),
    };
    let reason = status.reason().map_or_else(
        || status.code().as_str().to_owned(),
        |r| r.as_str().to_owned(),
    );
    metrics::counter!(REFUSED_TOTAL, "reason" => reason, "status" => http.to_string()).increment(1);
}
