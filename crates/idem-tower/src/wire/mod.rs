//! What idem puts on the wire besides its [`headers`](crate::headers): the record a stored
//! response travels in through a shared tier, the value of `grpc-timeout`, and the error
//! responses the server layer answers with.
//!
//! # The stored-response record
//!
//! A compact, versioned encoding of [`StoredResponse`](crate::StoredResponse), so stored
//! responses travel through a shared tier (Redis, PostgreSQL) and replay byte for byte on
//! another instance.
//!
//! Layout, version 1 (`n` is an unsigned LEB128 varint):
//!
//! | part | bytes |
//! |---|---|
//! | format version | `0x01` |
//! | HTTP status | 2, big-endian |
//! | HTTP version | 1: `0` HTTP/0.9, `1` HTTP/1.0, `2` HTTP/1.1, `3` HTTP/2, `4` HTTP/3 |
//! | headers | `n` count, then per header `n` name length, name, `n` value length, value |
//! | body | `n` length, bytes |
//! | trailers | `0x00` none, or `0x01` then the same layout as the headers |
//!
//! Header names are stored lower-case, as `http` keeps them; repeated headers keep their order.
//! A decoder refuses anything else (another version, a truncated record, trailing bytes, an
//! invalid header) with `DATA_LOSS`, naming what was wrong.
//!
//! # `grpc-timeout`
//!
//! [`parse_grpc_timeout`] and [`format_grpc_timeout`]: the time a call has left, as gRPC sends it
//! (at most 8 digits and a unit).
//!
//! # Error responses
//!
//! [`error_response`]: a refusal as the server layer answers its own, for middleware of your own
//! that must answer like it.

mod grpc_timeout;
mod stored;

pub use crate::reject::error_response;
pub use grpc_timeout::{format_grpc_timeout, parse_grpc_timeout};
