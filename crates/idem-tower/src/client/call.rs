//! One logical call: its key and deadline decided once, then its attempts through the retrier.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use idem_core::{Deadline, IdempotencyKey};
use idem_retry::{Attempt, Call, Failure};
use tower::Service;

use crate::body::{ReplayBody, ResendableBody};
use crate::client::attempt::one_attempt;
use crate::client::{CallFailed, CallReport, MissingKey, RetryLayer};
use crate::{headers, key_from_headers, wire, BoxError, Protocol};

/// Sends `req` as one logical call (see [`RetryService`](crate::RetryService)): `derived` is the
/// key the run being served gives it, if it is a keyless write inside one.
pub(super) async fn call<S, B, ResB>(
    inner: S,
    layer: RetryLayer,
    req: Request<B>,
    derived: Option<IdempotencyKey>,
) -> Result<Response<ReplayBody>, BoxError>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ResendableBody + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let cfg = &layer.cfg;
    let protocol = Protocol::of(req.headers());
    let (mut parts, body) = req.into_parts();
    let bytes = body.collect().await.map_err(Into::into)?.to_bytes();

    let budget = parts
        .headers
        .get(headers::GRPC_TIMEOUT)
        .and_then(|v| v.to_str().ok())
        .and_then(wire::parse_grpc_timeout)
        .unwrap_or(cfg.call_timeout);
    let deadline = Deadline::after(budget);
    let key_header = match protocol {
        Protocol::Grpc => cfg.grpc_key.clone(),
        Protocol::Http => cfg.http_key.clone(),
    };
    let call = if cfg
        .writes
        .is_write(&parts.method, parts.uri.path(), protocol)
    {
        match key_from_headers(&parts.headers, &key_header) {
            Ok(Some(key)) => Call::keyed(key),
            Ok(None) if cfg.missing_key == MissingKey::Generate => match derived {
                Some(key) => {
                    layer.counters.key_derived();
                    Call::keyed(key)
                }
                None => {
                    layer.counters.key_generated();
                    Call::keyed(IdempotencyKey::generate())
                }
            },
            // No key, or one the server will refuse: at most once (S2).
            Ok(None) | Err(_) => Call::non_idempotent(),
        }
    } else {
        Call::idempotent()
    }
    .with_deadline(deadline);
    if let Some(key) = call.key() {
        parts.headers.remove(&key_header);
        let value = match protocol {
            Protocol::Grpc => key.as_str().to_owned(),
            Protocol::Http => key.to_header_value(), // an RFC 8941 sf-string
        };
        parts
            .headers
            .insert(&key_header, HeaderValue::from_str(&value)?);
    }

    // What the attempt before this one failed of (the retry it causes is counted by it).
    let last_failure: Mutex<Option<Failure>> = Mutex::new(None);
    let attempts = AtomicUsize::new(0);
    let attempt_timeout = cfg.attempt_timeout;
    // R9/R10: attempts are timed per target, so the target is named when latencies are kept.
    let call = match layer.retrier.latencies() {
        Some(_) => {
            let target = match protocol {
                Protocol::Grpc => parts.uri.path().to_owned(),
                Protocol::Http => format!("{} {}", parts.method, parts.uri.path()),
            };
            call.with_target(target)
        }
        None => call,
    };
    let hedging = cfg.hedging.as_ref();
    let op = |attempt: Attempt| {
        attempts.fetch_add(1, Relaxed);
        // A hedged copy is not a retry: the retrier counts it as a hedge.
        if attempt.is_retry() && hedging.is_none() {
            let why = last_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .unwrap_or(Failure::Other);
            layer.counters.retry(why);
        }
        let time = attempt_timeout.map_or(deadline.remaining(), |t| t.min(deadline.remaining()));
        let mut req = Request::from_parts(parts.clone(), B::from_bytes(bytes.clone()));
        if protocol == Protocol::Grpc {
            let h = req.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&wire::format_grpc_timeout(time)) {
                h.insert(headers::GRPC_TIMEOUT, v);
            }
            if attempt.is_retry() {
                h.insert(
                    headers::GRPC_PREVIOUS_ATTEMPTS,
                    HeaderValue::from(attempt.previous_attempts()),
                );
            }
        }
        let svc = inner.clone();
        let last_failure = &last_failure;
        async move {
            let r = one_attempt(svc, req, protocol, time).await;
            if let Err(e) = &r {
                *last_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.kind);
            }
            r
        }
    };
    let result = match hedging {
        Some(h) => layer.retrier.call_hedged(&call, h, op).await,
        None => layer.retrier.call_reporting(&call, op).await,
    };
    let report = CallReport {
        attempts: u32::try_from(attempts.load(Relaxed)).unwrap_or(u32::MAX),
        key: call.key().cloned(),
    };
    match result {
        Ok(mut response) => {
            response.extensions_mut().insert(report);
            Ok(response)
        }
        Err(gave_up) => Err(Box::new(CallFailed::from_give_up(
            protocol, report, gave_up,
        ))),
    }
}
