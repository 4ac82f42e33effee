//! A scripted HTTP/1 server on a loopback port, and the client the tests drive it with: a real
//! reqwest client through the middleware. The server answers its n-th request with the n-th step
//! of its script (the last step repeats) and keeps what each request carried.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use idem_reqwest::{RetryMiddleware, RetryMiddlewareBuilder};
use idem_retry::{FixedRandom, RetryBudget, RetryPolicy, VirtualScheduler};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// How the server answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// This status, these headers and a problem document as the body.
    Status(u16, Vec<(&'static str, String)>),
    /// Reads the request, then closes the connection without an answer (the reply is lost).
    Drop,
    /// Answers 200 after this long (longer than the client waits).
    Slow(Duration),
}

impl Reply {
    pub(crate) fn ok() -> Reply {
        Reply::Status(200, vec![])
    }
    pub(crate) fn status(code: u16) -> Reply {
        Reply::Status(code, vec![])
    }
    pub(crate) fn with(code: u16, name: &'static str, value: impl Into<String>) -> Reply {
        Reply::Status(code, vec![(name, value.into())])
    }
}

/// What one request carried.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Seen {
    /// The raw `idempotency-key` header, if any.
    pub(crate) fn key(&self) -> Option<String> {
        self.headers
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

pub(crate) struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// A server on a free loopback port, answering by `script`.
    pub(crate) async fn start(script: Vec<Reply>) -> Server {
        assert!(!script.is_empty());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script = Arc::new(script);
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (log, script) = (log.clone(), script.clone());
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (log, script) = (log.clone(), script.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map_err(std::io::Error::other)?
                            .to_bytes();
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push(Seen {
                                method: parts.method.to_string(),
                                path: parts.uri.path().to_owned(),
                                headers: parts.headers,
                                body,
                            });
                            log.len()
                        };
                        match script[(n - 1).min(script.len() - 1)].clone() {
                            Reply::Status(code, headers) => {
                                Ok::<_, std::io::Error>(answer(code, &headers))
                            }
                            Reply::Drop => Err(std::io::Error::other(
                                "the scripted server drops this connection",
                            )),
                            Reply::Slow(after) => {
                                tokio::time::sleep(after).await;
                                Ok(answer(200, &[]))
                            }
                        }
                    }
                });
                tokio::spawn(async move {
                    // A dropped connection ends in an error here; that is the point.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Server { addr, seen }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request the server got, in order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The `idempotency-key` header of every request, in order.
    pub(crate) fn keys(&self) -> Vec<Option<String>> {
        self.seen().iter().map(Seen::key).collect()
    }
}

fn answer(code: u16, headers: &[(&'static str, String)]) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(code).unwrap();
    let body = if status.is_success() {
        Bytes::from_static(b"done")
    } else {
        Bytes::from(format!(
            r#"{{"type":"about:blank","title":"scripted failure","status":{code}}}"#
        ))
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    if !status.is_success() {
        r.headers_mut()
            .insert("content-type", "application/problem+json".parse().unwrap());
    }
    for (name, value) in headers {
        r.headers_mut().append(*name, value.parse().unwrap());
    }
    r
}

/// A middleware builder for tests: `max_attempts` attempts, no jitter (20, 40, 80, ... ms), a
/// budget that allows every retry, and a virtual clock that records each wait and makes none.
pub(crate) fn builder(
    max_attempts: u32,
) -> (RetryMiddlewareBuilder<VirtualScheduler>, VirtualScheduler) {
    let clock = VirtualScheduler::instant();
    let b = RetryMiddleware::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(max_attempts)
                .random_source(FixedRandom::new(0.5))
                .build()
                .unwrap(),
        )
        .budget(RetryBudget::builder().ratio(1.0).build().unwrap())
        .scheduler(clock.clone());
    (b, clock)
}

/// A real reqwest client (no proxy, plain HTTP) through `middleware`.
pub(crate) fn client(middleware: RetryMiddleware<VirtualScheduler>) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().unwrap();
    ClientBuilder::new(inner).with(middleware).build()
}

/// `key` as an RFC 8941 sf-string, the form the middleware sends.
pub(crate) fn sf(key: &idem_core::IdempotencyKey) -> String {
    format!("\"{}\"", key.as_str())
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
