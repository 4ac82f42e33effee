//! One attempt: its exchange with the inner service within its time, and its failure as the
//! retrier classifies it (status, pushback, the kind counted for retries, what came back).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use idem_core::{Code, Reason, Status};
use idem_retry::{Classify, Failure};
use tower::{Service, ServiceExt};

use crate::body::ReplayBody;
use crate::client::error::{tonic_status, GrpcStatus};
use crate::client::pushback::Pushback;
use crate::protocol::response_status;
use crate::{BoxError, Protocol};

/// One attempt's failure, as the retrier classifies it.
pub(super) struct AttemptError {
    pub(super) status: Status,
    /// The server's pushback: for gRPC read by [`Pushback::of_grpc`], for HTTP `Retry-After`.
    pub(super) pushback: Pushback,
    pub(super) kind: Failure,
    pub(super) outcome: Failed,
}

pub(super) enum Failed {
    /// The server answered; for gRPC, with the `tonic::Status` its trailers hold.
    Response(Box<Response<ReplayBody>>, Option<GrpcStatus>),
    Transport(BoxError),
    Timeout(Duration),
}

impl Classify for AttemptError {
    fn code(&self) -> Code {
        self.status.code()
    }
    fn reason(&self) -> Option<&Reason> {
        self.status.reason()
    }
    fn retry_after(&self) -> Option<Duration> {
        match self.pushback {
            Pushback::After(d) => Some(d),
            Pushback::None | Pushback::Stop => None,
        }
    }
    fn forbids_retry(&self) -> bool {
        self.pushback == Pushback::Stop
    }
}

/// One attempt: `req` sent to `svc`, its whole response read within `time`.
pub(super) async fn one_attempt<S, B, ResB>(
    svc: S,
    req: Request<B>,
    protocol: Protocol,
    time: Duration,
) -> Result<Response<ReplayBody>, AttemptError>
where
    S: Service<Request<B>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let exchange = async {
        let response = svc.oneshot(req).await.map_err(|e| transport(e, time))?;
        let (parts, body) = response.into_parts();
        let collected = body.collect().await.map_err(|e| transport(e, time))?;
        let trailers = collected.trailers().cloned();
        Ok::<_, AttemptError>((parts, collected.to_bytes(), trailers))
    };
    let (parts, bytes, trailers) = match tokio::time::timeout(time, exchange).await {
        Ok(r) => r?,
        Err(_) => return Err(timed_out(time)),
    };
    let status = response_status(
        protocol,
        parts.status.as_u16(),
        &parts.headers,
        trailers.as_ref(),
    );
    if status.code() == Code::Ok {
        return Ok(Response::from_parts(
            parts,
            ReplayBody::new(bytes, trailers),
        ));
    }
    let (status, pushback, grpc) = match protocol {
        Protocol::Grpc => {
            let pushback = Pushback::of_grpc(&parts.headers, trailers.as_ref());
            let grpc = tonic_status(&parts.headers, trailers.as_ref(), &status);
            (pushback.apply_to(status), pushback, Some(grpc))
        }
        Protocol::Http => {
            let pushback = status.retry_after().map_or(Pushback::None, Pushback::After);
            (status, pushback, None)
        }
    };
    let response = Response::from_parts(parts, ReplayBody::new(bytes, trailers));
    Err(AttemptError {
        kind: Failure::from_code(status.code()),
        status,
        pushback,
        outcome: Failed::Response(Box::new(response), grpc),
    })
}

/// The attempt's own time (`time`) ran out.
fn timed_out(time: Duration) -> AttemptError {
    AttemptError {
        status: Status::new(
            Code::DeadlineExceeded,
            format!(
                "attempt timed out after {} ms (client deadline)",
                time.as_millis()
            ),
        ),
        pushback: Pushback::None,
        kind: Failure::Timeout,
        outcome: Failed::Timeout(time),
    }
}

/// Whether `e` is tonic's own timeout: its channel enforces the `grpc-timeout` each attempt
/// carries (the attempt's time), and within the same timer tick that error can come back before
/// the layer's own timer fires.
#[cfg(feature = "grpc")]
fn is_tonic_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<tonic::TimeoutExpired>() {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(not(feature = "grpc"))]
fn is_tonic_timeout(_: &(dyn std::error::Error + 'static)) -> bool {
    false
}

/// An error of the exchange with the inner service. tonic's own attempt timeout is the attempt
/// timing out (`time`), not a lost connection. Any other is a transport error: the request may
/// or may not have reached the server, so it is `UNAVAILABLE` with reason
/// `UNKNOWN_OUTCOME` — retried only for keyed or idempotent calls.
fn transport<E: Into<BoxError>>(e: E, time: Duration) -> AttemptError {
    let e: BoxError = e.into();
    if is_tonic_timeout(&*e) {
        return timed_out(time);
    }
    AttemptError {
        status: Status::new(
            Code::Unavailable,
            format!(
                "the connection failed, so whether the server ran the request is not known: \
                 retry with the same idempotency key to run it at most once and get its result \
                 ({})",
                chain(&*e)
            ),
        )
        .with_reason(Reason::UNKNOWN_OUTCOME),
        pushback: Pushback::None,
        kind: Failure::Transport,
        outcome: Failed::Transport(e),
    }
}

/// An error and its sources as one text, each said once: a source whose text the chain already
/// holds (a wrapper that repeats it, or prints it in its own message) is left out.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(source) = next {
        let part = source.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = source.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn t3_transport_error_chain_says_each_message_once() {
        let e = E(
            "transport error",
            Some(Box::new(E(
                "transport error",
                Some(Box::new(E(
                    "error trying to connect: connection refused",
                    Some(Box::new(E("connection refused", None))),
                ))),
            ))),
        );
        assert_eq!(
            chain(&e),
            "transport error: error trying to connect: connection refused"
        );
    }
}
