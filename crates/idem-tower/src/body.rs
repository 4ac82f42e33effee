//! Bodies: a whole response held in memory (data + trailers), and the body types of the layers.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};

/// A body held in memory: one data frame, then the trailers, if any. Replays, errors made by the
/// layers and the client layer's buffered responses use it.
///
/// ```
/// use http_body_util::BodyExt;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut trailers = http::HeaderMap::new();
/// trailers.insert("grpc-status", "0".parse().unwrap());
/// let body = idem_tower::ReplayBody::new(bytes::Bytes::from_static(b"hello"), Some(trailers));
/// let collected = body.collect().await.unwrap();
/// assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
/// assert_eq!(collected.to_bytes(), "hello");
/// # }
/// ```
#[derive(Debug, Default, Clone)]
pub struct ReplayBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl ReplayBody {
    /// A body of `data` followed by `trailers`.
    pub fn new(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        ReplayBody {
            data: (!data.is_empty()).then_some(data),
            trailers,
        }
    }

    /// The data and the trailers.
    pub(crate) fn into_parts(self) -> (Bytes, Option<HeaderMap>) {
        (self.data.unwrap_or_default(), self.trailers)
    }

    /// An empty body without trailers.
    pub fn empty() -> Self {
        ReplayBody::default()
    }
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

/// The body the server layer hands its inner service: the original (streaming) body of a request
/// that is not a write, or the buffered body of a write (fingerprinted before it ran).
pub type RequestBody<B> = Either<B, Full<Bytes>>;

/// The body of the server layer's responses: the inner service's own body for requests that are not
/// writes; for writes a [`ReplayBody`] (stored, replayed, or an error the layer made), or, for a
/// response too large to store, a [`StreamedBody`] carrying it on to the caller that ran it.
pub type ResponseBody<B> = Either<B, Either<ReplayBody, StreamedBody<B>>>;

/// A response body the server layer read part of (up to its stored-bytes limit) and then
/// passes on as the inner service sends it: the frames read so far, then the rest of the body.
#[derive(Debug)]
pub struct StreamedBody<B> {
    read: std::collections::VecDeque<Frame<Bytes>>,
    /// `None` once the whole body was read (one that sent more than its size hint promised).
    rest: Option<Pin<Box<B>>>,
}

impl<B> StreamedBody<B> {
    pub(crate) fn new(read: Vec<Frame<Bytes>>, rest: Option<Pin<Box<B>>>) -> Self {
        StreamedBody {
            read: read.into(),
            rest,
        }
    }
}

impl<B> Body for StreamedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<crate::BoxError>,
{
    type Data = Bytes;
    type Error = crate::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.read.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match self.rest.as_mut() {
            Some(rest) => rest
                .as_mut()
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Into::into))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }
}

/// Data frames joined into one `Bytes`: a lone frame (the common case: hyper hands a small body
/// over in one piece, a handler's `String` is one) is kept as it came, without a copy; more are
/// copied into one buffer.
#[derive(Debug, Default)]
pub(crate) struct Joined {
    one: Option<Bytes>,
    many: Option<BytesMut>,
    len: usize,
}

impl Joined {
    /// Adds the next data frame.
    pub(crate) fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.len += data.len();
        if let Some(many) = &mut self.many {
            many.extend_from_slice(&data);
        } else if let Some(one) = self.one.take() {
            let mut many = BytesMut::with_capacity(self.len);
            many.extend_from_slice(&one);
            many.extend_from_slice(&data);
            self.many = Some(many);
        } else {
            self.one = Some(data);
        }
    }

    /// Bytes pushed so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Everything pushed, as one `Bytes`.
    pub(crate) fn into_bytes(self) -> Bytes {
        match (self.one, self.many) {
            (_, Some(many)) => many.freeze(),
            (Some(one), None) => one,
            (None, None) => Bytes::new(),
        }
    }
}

/// Why [`read_limited`] stopped.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// More than the limit arrived.
    TooLarge,
    /// The body failed.
    Failed(crate::BoxError),
}

/// Reads a request body up to `limit` bytes into one `Bytes` (a lone frame without a copy);
/// trailers are dropped. What `Limited::new(body, limit).collect()` does, without its frame
/// list.
pub(crate) async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes, ReadError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<crate::BoxError>,
{
    let mut body = std::pin::pin!(body);
    let mut data = Joined::default();
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| ReadError::Failed(e.into()))?;
        if let Ok(chunk) = frame.into_data() {
            if data.len() + chunk.len() > limit {
                return Err(ReadError::TooLarge);
            }
            data.push(chunk);
        }
    }
    Ok(data.into_bytes())
}

/// A request body the client layer can rebuild for each attempt from the bytes it buffered once.
///
/// ```
/// use idem_tower::ResendableBody;
/// let body = <http_body_util::Full<bytes::Bytes> as ResendableBody>::from_bytes("qty=1".into());
/// # let _ = body;
/// ```
pub trait ResendableBody: Body<Data = Bytes> + Sized {
    /// A body of exactly these bytes.
    fn from_bytes(bytes: Bytes) -> Self;
}

impl ResendableBody for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
impl ResendableBody for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        tonic::body::Body::new(Full::new(bytes))
    }
}
