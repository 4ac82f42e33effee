//! Server-side faults in front of the idem layer: `UNAVAILABLE`, and `RESOURCE_EXHAUSTED` with a
//! pushback, as a load shedder or rate limiter would answer. The request never reaches the shop.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Either;
use idem_tower::ReplayBody;
use tower::{Layer, Service};

use crate::rng::Rng;

/// How often each server-side fault is injected (probabilities per request, 0 to 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusFaults {
    /// `UNAVAILABLE` (no pushback: the client backs off).
    pub unavailable: f64,
    /// `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms`.
    pub resource_exhausted: f64,
    /// The pushback sent with `RESOURCE_EXHAUSTED`.
    pub pushback: Duration,
    /// Seed of the fault dice.
    pub seed: u64,
}

/// Counts of injected server-side faults.
#[derive(Debug, Default)]
pub struct StatusFaultCounts {
    /// `UNAVAILABLE` answers.
    pub unavailable: AtomicU64,
    /// `RESOURCE_EXHAUSTED` answers.
    pub resource_exhausted: AtomicU64,
}

/// The layer; clones share the dice and the counts.
#[derive(Debug, Clone)]
pub struct StatusFaultLayer {
    faults: StatusFaults,
    rng: Arc<Rng>,
    counts: Arc<StatusFaultCounts>,
}

impl StatusFaultLayer {
    /// A layer injecting `faults`.
    pub fn new(faults: StatusFaults) -> Self {
        StatusFaultLayer {
            faults,
            rng: Arc::new(Rng::new(faults.seed)),
            counts: Arc::default(),
        }
    }

    /// What it injected so far.
    pub fn counts(&self) -> Arc<StatusFaultCounts> {
        self.counts.clone()
    }
}

impl<S> Layer<S> for StatusFaultLayer {
    type Service = StatusFault<S>;
    fn layer(&self, inner: S) -> StatusFault<S> {
        StatusFault {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`StatusFaultLayer`].
#[derive(Debug, Clone)]
pub struct StatusFault<S> {
    inner: S,
    layer: StatusFaultLayer,
}

type BoxFut<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, ResB> Service<http::Request<B>> for StatusFault<S>
where
    S: Service<http::Request<B>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Either<ResB, ReplayBody>>;
    type Error = S::Error;
    type Future = BoxFut<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let f = &self.layer.faults;
        let roll = self.layer.rng.next_f64();
        if roll < f.unavailable {
            self.layer.counts.unavailable.fetch_add(1, Relaxed);
            let s = tonic::Status::unavailable("injected fault: server unavailable");
            return Box::pin(async move { Ok(s.into_http::<ReplayBody>().map(Either::Right)) });
        }
        if roll < f.unavailable + f.resource_exhausted {
            self.layer.counts.resource_exhausted.fetch_add(1, Relaxed);
            let mut md = tonic::metadata::MetadataMap::new();
            if let Ok(v) = f.pushback.as_millis().to_string().parse() {
                md.insert("grpc-retry-pushback-ms", v);
            }
            if let Ok(v) = "RATE_LIMITED".parse() {
                md.insert("idem-reason", v);
            }
            let s = tonic::Status::with_metadata(
                tonic::Code::ResourceExhausted,
                "injected fault: rate limited",
                md,
            );
            return Box::pin(async move { Ok(s.into_http::<ReplayBody>().map(Either::Right)) });
        }
        let fut = self.inner.call(req);
        Box::pin(async move { Ok(fut.await?.map(Either::Left)) })
    }
}
