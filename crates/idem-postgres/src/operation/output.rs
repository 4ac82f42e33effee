//! [`StepOutput`]: what a step of an operation hands to the steps after it, stored with its
//! recovery point so that a resumed run gets it back without running the step again.

use idem_core::{Code, Status};

/// A value a step of an [`Operation`](super::Operation) returns: stored, encoded, with the step's
/// recovery point, and decoded for a run that resumes after it.
///
/// Implemented for `()`, `String`, `Vec<u8>`, `bool` and the integer types (stored as decimal
/// text, readable in `psql`); with the `serde` feature, [`Json`] stores any serde value as JSON.
/// For a type of your own, implement the two methods (a decoding error is `DATA_LOSS`):
///
/// ```
/// use idem_core::{Code, Status};
/// use idem_postgres::StepOutput;
///
/// struct OrderId(i64);
///
/// impl StepOutput for OrderId {
///     fn encode(&self) -> Result<Vec<u8>, Status> {
///         self.0.encode()
///     }
///     fn decode(bytes: &[u8]) -> Result<Self, Status> {
///         i64::decode(bytes).map(OrderId)
///     }
/// }
///
/// let bytes = OrderId(42).encode()?;
/// assert_eq!(OrderId::decode(&bytes)?.0, 42);
/// # Ok::<(), Status>(())
/// ```
pub trait StepOutput: Sized + Send + 'static {
    /// The bytes to store with the recovery point.
    ///
    /// # Errors
    ///
    /// The value cannot be encoded: the step's transaction rolls back and the step fails.
    fn encode(&self) -> Result<Vec<u8>, Status>;

    /// The value from the stored bytes.
    ///
    /// # Errors
    ///
    /// The bytes are not a value of this type (`DATA_LOSS`).
    fn decode(bytes: &[u8]) -> Result<Self, Status>;
}

fn undecodable(what: &str) -> Status {
    Status::new(
        Code::DataLoss,
        format!("the stored output of a step is not {what}"),
    )
}

impl StepOutput for () {
    fn encode(&self) -> Result<Vec<u8>, Status> {
        Ok(Vec::new())
    }

    fn decode(bytes: &[u8]) -> Result<Self, Status> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(undecodable("empty"))
        }
    }
}

impl StepOutput for Vec<u8> {
    fn encode(&self) -> Result<Vec<u8>, Status> {
        Ok(self.clone())
    }

    fn decode(bytes: &[u8]) -> Result<Self, Status> {
        Ok(bytes.to_vec())
    }
}

impl StepOutput for String {
    fn encode(&self) -> Result<Vec<u8>, Status> {
        Ok(self.as_bytes().to_vec())
    }

    fn decode(bytes: &[u8]) -> Result<Self, Status> {
        String::from_utf8(bytes.to_vec()).map_err(|_| undecodable("UTF-8 text"))
    }
}

/// Decimal text, so a recovery point reads in `psql`.
macro_rules! as_text {
    ($($t:ty),*) => {$(
        impl StepOutput for $t {
            fn encode(&self) -> Result<Vec<u8>, Status> {
                Ok(self.to_string().into_bytes())
            }

            fn decode(bytes: &[u8]) -> Result<Self, Status> {
                std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| undecodable(concat!("a ", stringify!($t))))
            }
        }
    )*};
}

as_text!(bool, i16, i32, i64, u16, u32, u64);

/// A serde value stored as JSON with its step's recovery point.
///
/// ```
/// use idem_postgres::{Json, StepOutput};
///
/// let out = Json((1001_i64, "reserved".to_string()));
/// let bytes = out.encode()?;
/// assert_eq!(bytes, br#"[1001,"reserved"]"#);
/// assert_eq!(Json::<(i64, String)>::decode(&bytes)?.0 .0, 1001);
/// # Ok::<(), idem_core::Status>(())
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json<T>(pub T);

#[cfg(feature = "serde")]
impl<T> StepOutput for Json<T>
where
    idem_dedup::JsonCodec: idem_dedup::Codec<T>,
    T: Send + 'static,
{
    fn encode(&self) -> Result<Vec<u8>, Status> {
        idem_dedup::Codec::<T>::encode(&idem_dedup::JsonCodec, &self.0)
    }

    fn decode(bytes: &[u8]) -> Result<Self, Status> {
        idem_dedup::Codec::<T>::decode(&idem_dedup::JsonCodec, bytes).map(Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d7_outputs_round_trip_and_refuse_foreign_bytes() {
        assert_eq!(i64::decode(&(-42_i64).encode().unwrap()).unwrap(), -42);
        assert_eq!(u64::decode(b"7").unwrap(), 7);
        assert_eq!(i64::decode(b"x").unwrap_err().code(), Code::DataLoss);
        assert_eq!(String::decode(b"ok").unwrap(), "ok");
        assert!(String::decode(&[0xff]).is_err());
        assert!(<()>::decode(b"").is_ok());
        assert!(<()>::decode(b"1").is_err());
        assert!(bool::decode(&true.encode().unwrap()).unwrap());
    }
}
