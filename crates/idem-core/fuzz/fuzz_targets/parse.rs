//! Fuzzes key and scope parsing (Z2, K1, K3): no input may panic, every accepted key obeys
//! `[A-Za-z0-9_-]{8,64}`, and every decoded scope round-trips byte for byte.
#![no_main]

use idem_core::{IdempotencyKey, Scope, MAX_KEY_LEN, MIN_KEY_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // K1: raw bytes (a header value). Accepted iff the rule holds; the key is the same bytes.
    let rule = (MIN_KEY_LEN..=MAX_KEY_LEN).contains(&data.len())
        && data
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
    match IdempotencyKey::from_bytes(data) {
        Ok(key) => {
            assert!(rule, "accepted a key that breaks K1: {data:?}");
            assert_eq!(key.as_str().as_bytes(), data);
        }
        Err(e) => {
            assert!(!rule, "refused a valid key {data:?}: {e}");
            assert!(!e.to_string().is_empty());
        }
    }

    // K1 from text: same verdict as from bytes.
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = IdempotencyKey::parse(text);
        assert_eq!(
            parsed.is_ok(),
            rule,
            "parse and from_bytes disagree on {text:?}"
        );
        if let Ok(key) = parsed {
            assert_eq!(key.as_str(), text);
        }
    }

    // K3: any bytes as a scope encoding. Whatever decodes re-encodes to exactly the input, and
    // building the scope from its parts gives the same identity.
    if let Ok(scope) = Scope::from_encoded(data) {
        assert_eq!(scope.as_bytes(), data, "decode/encode is not the identity");
        let again = Scope::from_encoded(scope.as_bytes()).expect("a scope's own bytes decode");
        assert_eq!(again, scope);
        let rebuilt = Scope::parse(scope.tenant(), scope.method(), scope.key())
            .expect("the parts of a decoded scope are valid");
        assert_eq!(rebuilt.as_bytes(), data);
        assert_eq!(rebuilt, scope);
    }

    // K3, from parts: the first two bytes give the tenant and method lengths, the rest is
    // tenant ‖ method ‖ key. Whenever `Scope::parse` accepts the parts, its bytes are the
    // documented encoding and decode back to the same parts; whenever it refuses them, the
    // documented encoding of those parts is refused too.
    if let [t_len, m_len, rest @ ..] = data {
        let (t_len, m_len) = (usize::from(*t_len), usize::from(*m_len));
        if rest.len() >= t_len + m_len {
            let (tenant, rest) = rest.split_at(t_len);
            let (method, key) = rest.split_at(m_len);
            let mut encoded = Vec::with_capacity(4 + rest.len());
            encoded.extend_from_slice(&(t_len as u16).to_be_bytes());
            encoded.extend_from_slice(tenant);
            encoded.extend_from_slice(&(m_len as u16).to_be_bytes());
            encoded.extend_from_slice(method);
            encoded.extend_from_slice(key);
            let decoded = Scope::from_encoded(&encoded);
            let parts = (
                std::str::from_utf8(tenant),
                std::str::from_utf8(method),
                std::str::from_utf8(key),
            );
            match parts {
                (Ok(t), Ok(m), Ok(k)) => match Scope::parse(t, m, k) {
                    Ok(scope) => {
                        assert_eq!(scope.as_bytes(), &encoded[..]);
                        assert_eq!((scope.tenant(), scope.method(), scope.key()), (t, m, k));
                        assert_eq!(decoded.as_ref(), Ok(&scope));
                    }
                    Err(e) => assert!(decoded.is_err(), "parse refused ({e}) what decodes"),
                },
                _ => assert!(decoded.is_err(), "decoded a scope from non-UTF-8 parts"),
            }
        }
    }
});
