//! Reading a response body up to the stored-bytes budget, frame by frame.

use std::pin::Pin;

use bytes::Bytes;
use http_body::{Body, Frame};

use crate::body::Joined;

/// A response body read up to the stored-bytes budget.
pub(super) struct Read {
    pub(super) data: Joined,
    pub(super) trailers: Option<http::HeaderMap>,
    /// The frame that went over the budget, if one did (the body is then not all read).
    pub(super) over: Option<Frame<Bytes>>,
}

impl Read {
    /// The frames read so far, as the caller is to get them: the data, then `next`.
    pub(super) fn into_frames(self, next: Frame<Bytes>) -> Vec<Frame<Bytes>> {
        let mut frames = Vec::with_capacity(3);
        if self.data.len() > 0 {
            frames.push(Frame::data(self.data.into_bytes()));
        }
        // (Trailers end a body, so a frame after them is not expected; kept in order if one is.)
        frames.extend(self.trailers.map(Frame::trailers));
        frames.push(next);
        frames
    }
}

/// Reads `body` until it ends or a frame would take it over `budget` bytes (data, or a trailer
/// block's names and values).
pub(super) async fn read_stored<B: Body<Data = Bytes>>(
    mut body: Pin<&mut B>,
    mut budget: usize,
) -> Result<Read, B::Error> {
    let mut read = Read {
        data: Joined::default(),
        trailers: None,
        over: None,
    };
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame?;
        let size = match (frame.data_ref(), frame.trailers_ref()) {
            (Some(d), _) => d.len(),
            (None, Some(t)) => t.iter().map(|(k, v)| k.as_str().len() + v.len()).sum(),
            _ => 0,
        };
        if size > budget {
            read.over = Some(frame);
            break;
        }
        budget -= size;
        match frame.into_data() {
            Ok(data) => read.data.push(data),
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    read.trailers = Some(t);
                }
            }
        }
    }
    Ok(read)
}
