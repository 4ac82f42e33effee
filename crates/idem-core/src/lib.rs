//! # idem-core: the vocabulary of idem
//!
//! `idem` makes retried writes safe: a client tags one business intent with one
//! [`IdempotencyKey`], retries it with backoff inside its [`Deadline`], and the server runs the side
//! effect once and replays the stored result to every duplicate. *Effectively-once* =
//! at-least-once delivery + a stable key + server-side deduplication.
//!
//! This crate holds the words every other idem crate speaks, with no runtime and no I/O:
//!
//! | type | what it is |
//! |---|---|
//! | [`IdempotencyKey`] | a validated client key, random ([`IdempotencyKey::generate`]) or derived ([`IdempotencyKey::derive`]) |
//! | [`headers`], [`KeyHeaderError`] | the header names idem speaks, and reading a key header's value ([`IdempotencyKey::from_header_value`]) |
//! | [`Scope`] | tenant + method + key, injectively encoded, and its SHA-256 [digest](Scope::digest) |
//! | [`Hex`] | bytes as lower-case hex, as a scope digest is written in keys, notices and logs |
//! | [`Fingerprint`] | XXH3-128 of the request's canonical bytes; a key reused for another payload is a conflict |
//! | [`Code`], [`CodeSet`] | the 17 gRPC status codes and their HTTP mapping; the codes a client retries ([`CodeSet::RETRYABLE`]) |
//! | [`Reason`] | machine-readable reasons (`RATE_LIMITED`, `STOCK_CONFLICT`, ...) |
//! | [`Status`] | code + reason + message + retry-after: the error actions return |
//! | [`Deadline`] | the whole call's time budget on tokio's clock |
//! | `From<Status> for tonic::Status` and back (feature `tonic`) | `?` in a tonic handler; the reason as `ErrorInfo`, the retry-after as `RetryInfo` |
//! | [`whole_millis`] | a duration as a count of milliseconds, for event fields and store expiries |
//! | [`run::Run`] | the deduplicated run in progress, and the keys it sends downstream |
//!
//! How it fits: `idem-dedup` (the engine) files results under a [`Scope`] and compares
//! [`Fingerprint`]s; `idem-retry` classifies [`Status`] codes and checks the [`Deadline`];
//! `idem-tower` reads keys from headers and maps [`Code`]s to gRPC and HTTP.
//!
//! # Why keys are made by the client, once per intent
//!
//! A key made per HTTP request (or by the server) changes on every retry, and the server sees three
//! operations where the user meant one. The right grain is one key per business intent: made when
//! the user clicks "pay", reused by every retry. A client that may restart mid-retry derives the key
//! from the business id instead, so it comes out the same in every process.
//!
//! # Example
//!
//! ```
//! use idem_core::{Code, Fingerprint, IdempotencyKey, Scope, Status};
//!
//! let key = IdempotencyKey::derive("order-1001", "CreateOrder");
//! let scope = Scope::new("tenant-0042", "/shop.v1.Shop/CreateOrder", &key)?;
//! let fp = Fingerprint::of(br#"{"sku":"book-42","qty":1}"#);
//! assert_eq!(scope.key(), key.as_str());
//! assert_ne!(fp, Fingerprint::of(br#"{"sku":"book-42","qty":2}"#));
//!
//! // Bad input gets an error that names the rule it broke.
//! let err = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "no spaces allowed").unwrap_err();
//! assert!(err.to_string().contains("A-Z a-z 0-9 _ -"));
//! assert_eq!(Status::from(err).code(), Code::InvalidArgument);
//! # Ok::<(), idem_core::ScopeError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod code;
mod deadline;
mod fingerprint;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod grpc;
pub mod headers;
mod hex;
mod key;
mod millis;
mod reason;
pub mod run;
mod scope;
mod status;

pub use code::{Code, CodeSet};
pub use deadline::Deadline;
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use headers::KeyHeaderError;
pub use hex::Hex;
pub use key::{IdempotencyKey, KeyError, MAX_KEY_LEN, MIN_KEY_LEN};
pub use millis::whole_millis;
pub use reason::{Reason, ERROR_DOMAIN};
pub use scope::{Scope, ScopeError, MAX_METHOD_LEN, MAX_TENANT_LEN};
pub use status::Status;
