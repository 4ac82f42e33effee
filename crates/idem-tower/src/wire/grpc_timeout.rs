//! gRPC's `grpc-timeout` value: how much time a call has left.

use std::time::Duration;

/// Parses `grpc-timeout` (`1-8 digits` + `H`, `M`, `S`, `m`, `u` or `n`).
///
/// ```
/// use idem_tower::wire::{format_grpc_timeout, parse_grpc_timeout};
/// use std::time::Duration;
/// assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
/// assert_eq!(parse_grpc_timeout("2x"), None);
/// assert_eq!(parse_grpc_timeout(&format_grpc_timeout(Duration::from_millis(1500))), Some(Duration::from_millis(1500)));
/// ```
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Formats a duration as `grpc-timeout` (at most 8 digits, the finest unit that fits; rounded up
/// so a deadline is never shortened to zero).
pub fn format_grpc_timeout(d: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let nanos = d.as_nanos().max(1);
    for (unit, per) in [
        ("n", 1u128),
        ("u", 1_000),
        ("m", 1_000_000),
        ("S", 1_000_000_000),
        ("M", 60_000_000_000),
        ("H", 3_600_000_000_000),
    ] {
        let v = nanos.div_ceil(per);
        if v <= MAX {
            return format!("{v}{unit}");
        }
    }
    format!("{MAX}H")
}
