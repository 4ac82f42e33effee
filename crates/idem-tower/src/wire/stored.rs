//! The stored-response record: [`StoredResponse::encode`] and [`StoredResponse::decode`], in the
//! layout the [module](super) gives.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
use idem_core::{Code, Status};
use idem_dedup::{BytesCodec, Codec};

use crate::StoredResponse;

const VERSION_1: u8 = 1;

impl StoredResponse {
    /// The response in idem's wire format (see the [`wire`](crate::wire) layout), for a shared tier.
    ///
    /// ```
    /// use idem_tower::StoredResponse;
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("content-type", "application/json".parse().unwrap());
    /// let stored = StoredResponse::new(http::StatusCode::CREATED, headers, "{\"id\":1}".into(), None);
    /// let bytes = stored.encode();
    /// let back = StoredResponse::decode(&bytes).unwrap();
    /// assert_eq!(back.status(), 201);
    /// assert_eq!(back.headers()["content-type"], "application/json");
    /// assert_eq!(back.body(), "{\"id\":1}");
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.size());
        out.push(VERSION_1);
        out.extend_from_slice(&self.status().as_u16().to_be_bytes());
        out.push(version_code(self.version()));
        put_headers(&mut out, self.headers());
        put_varint(&mut out, self.body().len() as u64);
        out.extend_from_slice(self.body());
        match self.trailers() {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                put_headers(&mut out, t);
            }
        }
        out
    }

    /// A response from [`encode`](Self::encode)'s bytes.
    ///
    /// # Errors
    ///
    /// `DATA_LOSS`, saying what is wrong, when the bytes are not a stored response of a version
    /// this build reads.
    pub fn decode(bytes: &[u8]) -> Result<StoredResponse, Status> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.byte()?;
        if version != VERSION_1 {
            return Err(data_loss(format!(
                "stored response has format version {version}; this build reads version {VERSION_1}"
            )));
        }
        let status = u16::from_be_bytes([r.byte()?, r.byte()?]);
        let status = StatusCode::from_u16(status)
            .map_err(|_| data_loss(format!("stored response has an invalid status {status}")))?;
        let version = code_version(r.byte()?)?;
        let headers = r.headers()?;
        let body_len = r.len()?;
        let body = Bytes::copy_from_slice(r.take(body_len)?);
        let trailers = match r.byte()? {
            0 => None,
            1 => Some(r.headers()?),
            other => {
                return Err(data_loss(format!(
                    "stored response has an invalid trailer marker {other}"
                )))
            }
        };
        if r.at != bytes.len() {
            return Err(data_loss(format!(
                "stored response has {} trailing bytes",
                bytes.len() - r.at
            )));
        }
        Ok(StoredResponse::with_version(
            status, version, headers, body, trailers,
        ))
    }
}

/// Stored responses cross a shared tier in the [`wire`](crate::wire) format: a tiered engine over
/// `StoredResponse` values uses the default codec.
impl Codec<StoredResponse> for BytesCodec {
    fn encode(&self, value: &StoredResponse) -> Result<Vec<u8>, Status> {
        Ok(value.encode())
    }

    fn decode(&self, bytes: &[u8]) -> Result<StoredResponse, Status> {
        StoredResponse::decode(bytes)
    }
}

fn data_loss(message: String) -> Status {
    Status::new(Code::DataLoss, message)
}

fn version_code(v: Version) -> u8 {
    match v {
        Version::HTTP_09 => 0,
        Version::HTTP_10 => 1,
        Version::HTTP_2 => 3,
        Version::HTTP_3 => 4,
        _ => 2,
    }
}

fn code_version(c: u8) -> Result<Version, Status> {
    Ok(match c {
        0 => Version::HTTP_09,
        1 => Version::HTTP_10,
        2 => Version::HTTP_11,
        3 => Version::HTTP_2,
        4 => Version::HTTP_3,
        other => {
            return Err(data_loss(format!(
                "stored response has an unknown HTTP version code {other}"
            )))
        }
    })
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_headers(out: &mut Vec<u8>, headers: &HeaderMap) {
    put_varint(out, headers.len() as u64);
    for (name, value) in headers {
        put_varint(out, name.as_str().len() as u64);
        out.extend_from_slice(name.as_str().as_bytes());
        put_varint(out, value.len() as u64);
        out.extend_from_slice(value.as_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn truncated(&self) -> Status {
        data_loss(format!(
            "stored response is truncated at byte {} of {}",
            self.at,
            self.bytes.len()
        ))
    }

    fn byte(&mut self) -> Result<u8, Status> {
        let b = *self.bytes.get(self.at).ok_or_else(|| self.truncated())?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Status> {
        let end = self.at.checked_add(n).ok_or_else(|| self.truncated())?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| self.truncated())?;
        self.at = end;
        Ok(s)
    }

    fn len(&mut self) -> Result<usize, Status> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                // A length can never exceed what is left; this also bounds allocations.
                return usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= self.bytes.len() - self.at)
                    .ok_or_else(|| self.truncated());
            }
        }
        Err(data_loss(
            "stored response has an overlong length".to_owned(),
        ))
    }

    fn headers(&mut self) -> Result<HeaderMap, Status> {
        let count = self.len()?;
        let mut map = HeaderMap::with_capacity(count);
        for _ in 0..count {
            let n = self.len()?;
            let name = HeaderName::from_bytes(self.take(n)?)
                .map_err(|_| data_loss("stored response has an invalid header name".to_owned()))?;
            let n = self.len()?;
            let value = HeaderValue::from_bytes(self.take(n)?).map_err(|_| {
                data_loss(format!(
                    "stored response has an invalid value for header {name}"
                ))
            })?;
            map.append(name, value);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredResponse {
        let mut h = HeaderMap::new();
        h.insert("content-type", "application/grpc".parse().unwrap());
        h.append("set-cookie", "a=1".parse().unwrap());
        h.append("set-cookie", "b=2".parse().unwrap());
        let mut t = HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        t.insert("grpc-message", "".parse().unwrap());
        StoredResponse::with_version(
            StatusCode::OK,
            Version::HTTP_2,
            h,
            Bytes::from(vec![0u8, 1, 2, 255]),
            Some(t),
        )
    }

    #[test]
    fn t5_stored_response_round_trips_byte_for_byte() {
        let s = sample();
        let back = StoredResponse::decode(&s.encode()).unwrap();
        assert_eq!(back.status(), s.status());
        assert_eq!(back.version(), Version::HTTP_2);
        assert_eq!(back.headers(), s.headers());
        let cookies: Vec<_> = back.headers().get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(back.body(), s.body());
        assert_eq!(back.trailers(), s.trailers());
        assert_eq!(back.encode(), s.encode());
    }

    #[test]
    fn t5_no_trailers_and_empty_body_round_trip() {
        let s = StoredResponse::new(StatusCode::NO_CONTENT, HeaderMap::new(), Bytes::new(), None);
        let bytes = s.encode();
        assert_eq!(bytes, [1, 0, 204, 2, 0, 0, 0]);
        let back = StoredResponse::decode(&bytes).unwrap();
        assert_eq!(back.status(), 204);
        assert!(back.trailers().is_none());
    }

    #[test]
    fn t5_every_truncation_and_corruption_is_data_loss() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            let e = StoredResponse::decode(&bytes[..cut]).unwrap_err();
            assert_eq!(e.code(), Code::DataLoss, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(StoredResponse::decode(&longer)
            .unwrap_err()
            .message()
            .contains("trailing"));
        let mut other = bytes.clone();
        other[0] = 2;
        assert!(StoredResponse::decode(&other)
            .unwrap_err()
            .message()
            .contains("format version 2"));
        // A huge declared length does not allocate: it is refused as truncated.
        let huge = [1, 0, 200, 2, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(
            StoredResponse::decode(&huge).unwrap_err().code(),
            Code::DataLoss
        );
    }
}
