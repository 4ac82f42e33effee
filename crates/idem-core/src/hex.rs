//! Bytes as lower-case hex: how a scope's digest is written wherever it names the scope.

use std::fmt;

/// Bytes shown as lower-case hex, two digits a byte, written without an allocation: the form a
/// [scope digest](crate::Scope::digest) takes in a Redis key, a PostgreSQL notice or a log
/// field. `to_string()` gives the text.
///
/// # Examples
///
/// ```
/// use idem_core::{Hex, Scope};
///
/// assert_eq!(Hex(&[0x0f, 0xa0, 0x01]).to_string(), "0fa001");
///
/// let scope = Scope::parse("tenant-1", "/shop.v1.Shop/CreateOrder", "order-0001")?;
/// let short = Hex(&scope.digest()[..8]).to_string();
/// assert_eq!(short.len(), 16);
/// # Ok::<(), idem_core::ScopeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        // Up to 32 bytes at a time, written as one string.
        let mut buf = [0u8; 64];
        for chunk in self.0.chunks(32) {
            for (i, b) in chunk.iter().enumerate() {
                buf[2 * i] = DIGITS[usize::from(b >> 4)];
                buf[2 * i + 1] = DIGITS[usize::from(b & 15)];
            }
            // Only ASCII digits were written, so this is always valid UTF-8.
            f.write_str(std::str::from_utf8(&buf[..2 * chunk.len()]).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k3_hex_is_two_lower_case_digits_a_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(Hex(&all).to_string(), expected);
        assert_eq!(Hex(&[]).to_string(), "");
    }
}
