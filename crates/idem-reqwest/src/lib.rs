//! # idem-reqwest: retried writes from reqwest clients that cannot happen twice
//!
//! A [`reqwest_middleware`] middleware, [`RetryMiddleware`], that gives each logical write one
//! idempotency key, sends it on every attempt, and retries by idem-retry's rules: the HTTP
//! status's code, the server's `Retry-After`, the call's deadline and a retry budget shared with
//! your other clients.
//!
//! # Why
//!
//! A write whose answer was lost may or may not have happened. Retrying it without a key risks
//! doing it twice; not retrying turns every network blip into a failure. With one key per intent,
//! sent on every attempt, the server deduplicates and a retry is safe: *effectively-once*.
//!
//! One more case breaks that, and it is the one this crate is for. A service that deduplicates
//! its own writes (idem's server layers do) often calls another service from its handler: the
//! order service charges a payment provider. When the handler's run dies after that call and
//! before its own result is recorded (a crash, a stall past its lease), the intent runs again, on
//! this instance or another. A client that draws a fresh key then sends a *new* intent
//! downstream, and the customer is charged twice although both services deduplicate. Inside a
//! deduplicated run this middleware therefore derives the key from the inbound intent
//! ([`idem_core::run`]): every run of the intent sends the same keys in the same order, and the
//! payment provider replays the first charge.
//!
//! # Examples
//!
//! A handler's downstream write, inside the run an idem deduplicator gives it, against a server
//! that fails the first attempt:
//!
//! ```
//! use idem_core::run::{Run, RunStart};
//! use idem_core::Scope;
//! use idem_reqwest::{CallReport, RetryMiddleware};
//!
//! # use std::sync::atomic::{AtomicU32, Ordering};
//! # use std::sync::Arc;
//! # async fn serve() -> std::net::SocketAddr {
//! #     // A payment provider that is unavailable the first time, then echoes the key it got.
//! #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! #     let addr = listener.local_addr().unwrap();
//! #     let calls = Arc::new(AtomicU32::new(0));
//! #     tokio::spawn(async move {
//! #         loop {
//! #             let (tcp, _) = listener.accept().await.unwrap();
//! #             let calls = calls.clone();
//! #             let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
//! #                 let n = calls.fetch_add(1, Ordering::SeqCst);
//! #                 let key = req.headers().get("idempotency-key").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
//! #                 async move {
//! #                     let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(key)));
//! #                     if n % 2 == 0 { *r.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE; }
//! #                     Ok::<_, std::convert::Infallible>(r)
//! #                 }
//! #             });
//! #             tokio::spawn(hyper::server::conn::http1::Builder::new()
//! #                 .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc));
//! #         }
//! #     });
//! #     addr
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let addr = serve().await;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new())
//!     .build();
//! let charge = || async {
//!     let response = client
//!         .post(format!("http://{addr}/v1/charges"))
//!         .body(r#"{"amount":1200}"#)
//!         .send()
//!         .await?;
//!     let report = CallReport::of(&response).cloned().unwrap();
//!     let key_seen = response.text().await?;
//!     Ok::<_, reqwest_middleware::Error>((report, key_seen))
//! };
//!
//! let inbound = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "3f1c2b7e-9d4a-4c55")?;
//! let (report, key_seen) = Run::new(&inbound, None, RunStart::Fresh).attach(charge()).await?;
//! assert_eq!(report.attempts, 2); // 503, then retried with the same key
//! let key = report.key.unwrap();
//! assert_eq!(key_seen, format!("\"{key}\"")); // an RFC 8941 sf-string
//!
//! // The run died before recording its result; another instance runs the intent again.
//! let (again, _) = Run::new(&inbound, Some(2), RunStart::TakeOver).attach(charge()).await?;
//! assert_eq!(again.key.unwrap(), key); // the same key: the provider replays the charge
//! # Ok(()) }
//! ```
//!
//! Outside a run a write gets a fresh random key per logical call, as before; a key you set
//! yourself (`.header("Idempotency-Key", ..)`) is kept. Name a call's step when the order of a
//! run's calls can change between runs:
//! `client.post(url).with_extension(StepName::new("charge"))` ([`StepName`](idem_core::run::StepName)).
//!
//! # How it fits
//!
//! | crate | role |
//! |---|---|
//! | `idem-core` | keys, the run being served and the keys it derives ([`idem_core::run`]), status codes and their HTTP mapping |
//! | `idem-retry` | the policy, classification, budget, deadline checks, `Retry-After` parsing and the [`Retrier`](idem_retry::Retrier) this middleware drives |
//! | `idem-tower` | the same client rules as a tower layer (tonic, hyper clients), and the server layers that deduplicate what this middleware sends |
//! | `idem-reqwest` | the wire of reqwest: key header, statuses, `Retry-After`, extensions, responses handed back |
//!
//! Retry in one place only: a retrying middleware in front of a retrying server multiplies
//! attempts (3 × 3 × 3 = 27 at three layers). Put this middleware outermost in the client and
//! let the server report failures at once.
//!
//! # Where things are
//!
//! | file | what |
//! |---|---|
//! | `middleware.rs` | [`RetryMiddleware`]: keys, attempts, answers, the span |
//! | `builder.rs` | [`RetryMiddlewareBuilder`], [`MissingKey`], the defaults |
//! | `error.rs` | [`ConfigError`]: settings the builder refused |
//! | `writes.rs` | [`Writes`]: which requests are writes |
//! | `key.rs` | reading the caller's key; the sf-string every attempt sends |
//! | `attempt.rs` | one attempt's outcome as the retrier classifies it (status, reason, pushback) |
//! | `report.rs` | [`CallReport`], [`CallFailed`], [`AttemptTimedOut`] |
//! | `stats.rs` | [`ClientStats`], [`KeySource`], metric names |
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
mod builder;
mod error;
mod key;
mod middleware;
mod report;
pub mod stats;
mod writes;

pub use builder::{MissingKey, RetryMiddlewareBuilder, DEFAULT_CALL_TIMEOUT, IDEMPOTENCY_KEY};
pub use error::ConfigError;
pub use middleware::RetryMiddleware;
pub use report::{AttemptTimedOut, CallFailed, CallReport};
pub use stats::{ClientStats, KeySource};
pub use writes::Writes;
