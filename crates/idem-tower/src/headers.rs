//! Header names idem reads and writes, in one place, as `http::HeaderName`s (the names shared
//! with idem's other crates are [`idem_core::headers`]'s).
//!
//! | name | direction | meaning |
//! |---|---|---|
//! | [`GRPC_KEY`] `x-idempotency-key` | request | the key on gRPC routes |
//! | [`HTTP_KEY`] `idempotency-key` | request | the key on HTTP routes (sf-string or token) |
//! | [`TENANT`] `x-tenant-id` | request | the tenant, **only** when opted in ([`TenantSource::Header`](crate::TenantSource::Header)) |
//! | [`REPLAYED`] `idempotent-replayed` | response | `true` on a joined or replayed result |
//! | [`EXPIRES_AT`] `idempotent-expires-at` | response | HTTP-date when the stored result expires (left out for another instance's result, whose expiry this instance does not know) |
//! | [`REASON`] `idem-reason` | response | machine-readable reason of an error (`ENGINE_FULL`, ...) |
//! | [`GRPC_PUSHBACK_MS`] `grpc-retry-pushback-ms` | response | gRPC retry-after in milliseconds (gRFC A6) |
//! | [`RETRY_AFTER`] `retry-after` | response | HTTP retry-after in seconds |
//! | [`GRPC_PREVIOUS_ATTEMPTS`] `grpc-previous-rpc-attempts` | request | attempts made before this one |
//! | [`GRPC_TIMEOUT`] `grpc-timeout` | request | the call's remaining deadline |

use http::HeaderName;

/// The idempotency-key header on gRPC routes: `x-idempotency-key`.
pub const GRPC_KEY: HeaderName = HeaderName::from_static(idem_core::headers::GRPC_KEY);
/// The idempotency-key header on HTTP routes: `idempotency-key` (the IETF draft's name;
/// header names are case-insensitive, so `Idempotency-Key` is the same header).
pub const HTTP_KEY: HeaderName = HeaderName::from_static(idem_core::headers::HTTP_KEY);
/// The conventional tenant header, read only when opted in: `x-tenant-id`.
pub const TENANT: HeaderName = HeaderName::from_static("x-tenant-id");
/// Marks a response that was not produced by this request's own run: `idempotent-replayed: true`.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// When the stored result expires, as an HTTP-date: `idempotent-expires-at`.
pub const EXPIRES_AT: HeaderName = HeaderName::from_static("idempotent-expires-at");
/// The machine-readable reason of an error (`STOCK_CONFLICT`, `ENGINE_FULL`, ...): `idem-reason`.
pub const REASON: HeaderName = HeaderName::from_static(idem_core::headers::REASON);
/// gRPC's server pushback, in milliseconds: `grpc-retry-pushback-ms`.
pub const GRPC_PUSHBACK_MS: HeaderName =
    HeaderName::from_static(idem_core::headers::GRPC_PUSHBACK_MS);
/// HTTP's retry-after, in seconds (or an HTTP-date): `retry-after`.
pub const RETRY_AFTER: HeaderName = http::header::RETRY_AFTER;
/// Attempts made before this one: `grpc-previous-rpc-attempts`.
pub const GRPC_PREVIOUS_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
/// The call's remaining time budget: `grpc-timeout`.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// gRPC's status code: `grpc-status` (in trailers, or in headers for trailers-only responses).
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
