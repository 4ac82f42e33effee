//! How values cross a shared tier: a small [`Codec`] trait, bytes by default, JSON behind `serde`.

use idem_core::{Code, Status};

/// Turns a value into the bytes a shared tier stores and back.
///
/// The stored bytes are what another instance replays, so a codec must be stable across the
/// versions of your service that run side by side.
///
/// # Examples
///
/// A codec for `u64` order ids, as 8 big-endian bytes:
///
/// ```
/// use idem_core::{Code, Status};
/// use idem_dedup::Codec;
///
/// #[derive(Debug, Clone, Copy)]
/// struct OrderIdCodec;
///
/// impl Codec<u64> for OrderIdCodec {
///     fn encode(&self, v: &u64) -> Result<Vec<u8>, Status> {
///         Ok(v.to_be_bytes().to_vec())
///     }
///     fn decode(&self, b: &[u8]) -> Result<u64, Status> {
///         let b: [u8; 8] = b.try_into().map_err(|_| Status::new(Code::DataLoss, "not 8 bytes"))?;
///         Ok(u64::from_be_bytes(b))
///     }
/// }
///
/// let c = OrderIdCodec;
/// assert_eq!(c.decode(&c.encode(&1001)?)?, 1001);
/// # Ok::<(), Status>(())
/// ```
pub trait Codec<V>: Send + Sync + 'static {
    /// The bytes to store.
    ///
    /// # Errors
    ///
    /// The value cannot be encoded; the claim is released and the caller gets this status.
    fn encode(&self, value: &V) -> Result<Vec<u8>, Status>;

    /// The value from stored bytes.
    ///
    /// # Errors
    ///
    /// The bytes are not a value of this codec (normally `DATA_LOSS`).
    fn decode(&self, bytes: &[u8]) -> Result<V, Status>;
}

/// The default codec: values that are bytes already (`Vec<u8>`) or UTF-8 text (`String`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesCodec;

impl Codec<Vec<u8>> for BytesCodec {
    fn encode(&self, value: &Vec<u8>) -> Result<Vec<u8>, Status> {
        Ok(value.clone())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, Status> {
        Ok(bytes.to_vec())
    }
}

impl Codec<String> for BytesCodec {
    fn encode(&self, value: &String) -> Result<Vec<u8>, Status> {
        Ok(value.as_bytes().to_vec())
    }

    fn decode(&self, bytes: &[u8]) -> Result<String, Status> {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| Status::new(Code::DataLoss, "stored value is not UTF-8"))
    }
}

/// Any `serde` value as JSON (feature `serde`).
///
/// ```
/// use idem_dedup::{Codec, JsonCodec};
/// let c = JsonCodec;
/// let bytes = Codec::<(u64, String)>::encode(&c, &(1001, "created".to_string()))?;
/// assert_eq!(bytes, br#"[1001,"created"]"#);
/// assert_eq!(Codec::<(u64, String)>::decode(&c, &bytes)?, (1001, "created".to_string()));
/// # Ok::<(), idem_core::Status>(())
/// ```
#[cfg(feature = "serde")]
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonCodec;

#[cfg(feature = "serde")]
impl<V> Codec<V> for JsonCodec
where
    V: serde::Serialize + serde::de::DeserializeOwned,
{
    fn encode(&self, value: &V) -> Result<Vec<u8>, Status> {
        serde_json::to_vec(value)
            .map_err(|e| Status::new(Code::Internal, format!("cannot encode value: {e}")))
    }

    fn decode(&self, bytes: &[u8]) -> Result<V, Status> {
        serde_json::from_slice(bytes)
            .map_err(|e| Status::new(Code::DataLoss, format!("cannot decode stored value: {e}")))
    }
}
