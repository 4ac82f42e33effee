//! A response over the stored-bytes limit: handed on, streamed, to the caller that ran it, with a
//! compact record stored in its place.

use std::pin::Pin;

use bytes::Bytes;
use http::StatusCode;
use http_body::Frame;
use idem_core::{Code, Reason, Status};
use tokio::sync::oneshot;

use crate::protocol::response_status;
use crate::server::write::RunConfig;
use crate::{reject, Protocol, StoredResponse};

/// A response over the stored-bytes limit, handed to the caller that ran it.
pub(super) struct Large<B> {
    pub(super) parts: http::response::Parts,
    pub(super) read: Vec<Frame<Bytes>>,
    pub(super) rest: Option<Pin<Box<B>>>,
}

/// A response over the stored-bytes limit: handed on to the caller that ran it; in its place a
/// compact record is stored if the response counts as a success (HTTP: its status; gRPC: its
/// status comes after the body, so a response that far along counts as one), else nothing.
pub(super) fn large_response<B>(
    parts: http::response::Parts,
    read: Vec<Frame<Bytes>>,
    rest: Option<Pin<Box<B>>>,
    run: RunConfig,
    large: Option<oneshot::Sender<Large<B>>>,
) -> Result<StoredResponse, Status> {
    let status = response_status(run.protocol, parts.status.as_u16(), &parts.headers, None);
    let storable = match run.protocol {
        Protocol::Grpc => parts.status == StatusCode::OK,
        Protocol::Http => status.code() == Code::Ok || run.store_codes.contains(status.code()),
    };
    let original = parts.status;
    let location: Vec<_> = [http::header::LOCATION, http::header::CONTENT_LOCATION]
        .into_iter()
        .filter_map(|h| parts.headers.get(&h).map(|v| (h, v.clone())))
        .collect();
    // The caller may be gone (its run was handed off): then nobody reads the rest.
    if let Some(large) = large {
        let _ = large.send(Large { parts, read, rest });
    }
    if !storable {
        return Err(status);
    }
    let note = Status::new(
        Code::AlreadyExists,
        format!(
            "this request already ran (its answer was {} {}), but its response was over the \
             {} bytes this server stores, so it cannot be replayed; look the result up{}",
            original.as_u16(),
            original.canonical_reason().unwrap_or(""),
            run.max_stored,
            if location.is_empty() {
                ""
            } else {
                " at the Location header"
            }
        ),
    )
    .with_reason(Reason::RESPONSE_NOT_STORED);
    let (mut head, body) = reject::render(run.protocol, &note, None).into_parts();
    for (name, value) in location {
        head.headers.insert(name, value);
    }
    let (data, trailers) = body.into_parts();
    Ok(StoredResponse::from_parts(head, data, trailers))
}
