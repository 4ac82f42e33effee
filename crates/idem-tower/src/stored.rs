//! A whole response as the engine stores it: status, headers, body and trailers.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, Version};

use crate::body::ReplayBody;
use crate::headers;

/// A response stored by the server layer, shared (not copied) by every replay.
///
/// It keeps what a client can observe: the HTTP status, the headers, the body bytes and the
/// trailers — gRPC's `grpc-status` lives in the trailers, or in the headers of a trailers-only
/// response. A replay rebuilds the same response, byte for byte, and adds
/// `idempotent-replayed: true` and `idempotent-expires-at`.
///
/// ```
/// use idem_tower::StoredResponse;
/// let stored = StoredResponse::new(http::StatusCode::CREATED, http::HeaderMap::new(), "order-1".into(), None);
/// let replay = stored.to_response();
/// assert_eq!(replay.status(), 201);
/// assert_eq!(stored.body(), "order-1");
/// ```
#[derive(Clone)]
pub struct StoredResponse(Arc<Inner>);

struct Inner {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

impl StoredResponse {
    /// A stored response.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        trailers: Option<HeaderMap>,
    ) -> Self {
        StoredResponse(Arc::new(Inner {
            status,
            version: Version::default(),
            headers,
            body,
            trailers,
        }))
    }

    /// A stored response with its HTTP version (what [`decode`](Self::decode) rebuilds).
    pub(crate) fn with_version(
        status: StatusCode,
        version: Version,
        headers: HeaderMap,
        body: Bytes,
        trailers: Option<HeaderMap>,
    ) -> Self {
        StoredResponse(Arc::new(Inner {
            status,
            version,
            headers,
            body,
            trailers,
        }))
    }

    pub(crate) fn from_parts(
        parts: http::response::Parts,
        body: Bytes,
        trailers: Option<HeaderMap>,
    ) -> Self {
        StoredResponse(Arc::new(Inner {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
            trailers,
        }))
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The HTTP version of the response.
    pub fn version(&self) -> Version {
        self.0.version
    }

    /// The headers, as the inner service sent them.
    pub fn headers(&self) -> &HeaderMap {
        &self.0.headers
    }

    /// The body bytes.
    pub fn body(&self) -> &Bytes {
        &self.0.body
    }

    /// The trailers, if the response had any.
    pub fn trailers(&self) -> Option<&HeaderMap> {
        self.0.trailers.as_ref()
    }

    /// Bytes held: body, header and trailer names and values (what a stored entry costs beyond the
    /// engine's own per-entry bytes).
    pub fn size(&self) -> usize {
        let h = |m: &HeaderMap| {
            m.iter()
                .map(|(k, v)| k.as_str().len() + v.len())
                .sum::<usize>()
        };
        self.0.body.len() + h(&self.0.headers) + self.0.trailers.as_ref().map_or(0, h)
    }

    /// The response, exactly as stored.
    pub fn to_response(&self) -> Response<ReplayBody> {
        self.with_headers(self.0.headers.clone())
    }

    /// The stored status, version, body and trailers, with `headers`.
    fn with_headers(&self, headers: HeaderMap) -> Response<ReplayBody> {
        let mut r = Response::new(ReplayBody::new(
            self.0.body.clone(),
            self.0.trailers.clone(),
        ));
        *r.status_mut() = self.0.status;
        *r.version_mut() = self.0.version;
        *r.headers_mut() = headers;
        r
    }

    /// The response with the layer's marks: `idempotent-expires-at`, and
    /// `idempotent-replayed: true` when `replayed`. The header map is built at its final size
    /// (a clone and two inserts would grow it twice), and the date comes from [`http_date`].
    pub(crate) fn to_marked_response(
        &self,
        replayed: bool,
        expires_at: Option<SystemTime>,
    ) -> Response<ReplayBody> {
        let expires = expires_at.and_then(http_date);
        let stored = &self.0.headers;
        let mut h = HeaderMap::with_capacity(
            stored.len() + usize::from(replayed) + usize::from(expires.is_some()),
        );
        for (name, value) in stored {
            // `iter` yields a name once per value; `append` keeps every value, in order.
            h.append(name.clone(), value.clone());
        }
        if replayed {
            h.insert(headers::REPLAYED, HeaderValue::from_static("true"));
        }
        if let Some(v) = expires {
            h.insert(headers::EXPIRES_AT, v);
        }
        self.with_headers(h)
    }
}

/// `at` as an HTTP date (RFC 9110, one-second resolution). The last value made on this thread is
/// kept and handed out again for the same second: every response stored in one second expires in
/// the same second, and a replay of one entry always shows the same date, so most calls clone a
/// header instead of formatting one.
fn http_date(at: SystemTime) -> Option<HeaderValue> {
    thread_local! {
        static LAST: RefCell<Option<(u64, HeaderValue)>> = const { RefCell::new(None) };
    }
    let format = |at| HeaderValue::from_str(&httpdate::fmt_http_date(at)).ok();
    let Ok(since) = at.duration_since(UNIX_EPOCH) else {
        return format(at);
    };
    let second = since.as_secs();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((s, v)) = &*last {
            if *s == second {
                return Some(v.clone());
            }
        }
        let v = format(at)?;
        *last = Some((second, v.clone()));
        Some(v)
    })
}

impl fmt::Debug for StoredResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredResponse")
            .field("status", &self.0.status)
            .field("headers", &self.0.headers)
            .field("body_len", &self.0.body.len())
            .field("trailers", &self.0.trailers)
            .finish()
    }
}

/// Carries a failed response through the engine's error path (a [`Status`](idem_core::Status)
/// source), so the leader and joined waiters answer with the inner service's own response, not a
/// made-up one.
#[derive(Debug)]
pub(crate) struct FailedResponse(pub(crate) StoredResponse);

impl fmt::Display for FailedResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inner service answered HTTP {}", self.0.status())
    }
}

impl std::error::Error for FailedResponse {}
