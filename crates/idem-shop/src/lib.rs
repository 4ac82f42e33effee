//! # idem-shop: the shop behind idem's examples, demo and chaos test (not published)
//!
//! * [`pb`]: the generated protobuf and tonic code of `proto/shop.proto` (`build.rs` compiles it
//!   with `protox`, pure Rust, so nothing but cargo is needed).
//! * [`Shop`]: GetBook (read), CreateOrder and DeductStock (writes; stock is versioned and a stale
//!   version gets `ABORTED` / `STOCK_CONFLICT`). It counts orders per business intent, which is
//!   what the demo and the Z1 test check.
//! * [`grpc`]: starts the shop as a tonic server behind [`idem_tower::IdemLayer`] on a loopback
//!   port; [`http`]: the same shop over axum.
//! * [`faults`]: a server-side layer answering `UNAVAILABLE` or `RESOURCE_EXHAUSTED` with pushback;
//!   [`proxy`]: a TCP proxy that drops connections before or after a request is sent and slows
//!   answers past the deadline.
//! * [`metrics`]: a Prometheus `/metrics` endpoint and a scraper.
//! * [`stock`]: the order service's link to a separate stock service (CreateOrder deducts there
//!   first, through idem's client layer, without a key), which can lose runs after the deduction.
//! * [`redis_server`]: a `redis-server` of the demo's own, for the two-instance mode.
//! * [`args`]: the example servers' command line (`--serve`, `--addr`, `--redis`).
//! * [`auth`]: a toy authentication layer that puts a [`Tenant`](idem_tower::Tenant) in the
//!   request's extensions.

pub mod args;
pub mod auth;
pub mod chaos;
pub mod faults;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod proxy;
pub mod redis_server;
mod rng;
mod shop;
pub mod stock;

pub use shop::{status_with_reason, Shop};

/// The generated protobuf messages and tonic client and server (`shop.v1`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("shop.v1");
}

/// The shop's write methods (gRPC paths).
pub const WRITES: [&str; 2] = ["/shop.v1.Shop/CreateOrder", "/shop.v1.Shop/DeductStock"];
/// The CreateOrder path.
pub const CREATE_ORDER: &str = "/shop.v1.Shop/CreateOrder";
