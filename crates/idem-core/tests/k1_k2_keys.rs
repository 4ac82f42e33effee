//! K1, K2: key validation and derivation.

use idem_core::{IdempotencyKey, KeyError, KeyHeaderError};

#[test]
fn k1_accepts_the_alphabet_and_length_bounds() {
    for ok in [
        "abcdefgh",
        "ABCDEFGH",
        "01234567",
        "a-b_c-d_",
        "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
        &"x".repeat(64),
    ] {
        let k = IdempotencyKey::parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        assert_eq!(k.as_str(), ok);
    }
}

#[test]
fn k1_rejects_with_the_rule_named() {
    assert_eq!(
        IdempotencyKey::parse("abcdefg"),
        Err(KeyError::TooShort { len: 7 })
    );
    assert_eq!(
        IdempotencyKey::parse(&"x".repeat(65)),
        Err(KeyError::TooLong { len: 65 })
    );
    assert_eq!(
        IdempotencyKey::parse("abcd efgh"),
        Err(KeyError::InvalidChar {
            index: 4,
            byte: b' '
        })
    );
    assert!(matches!(
        IdempotencyKey::parse("abcdéfgh"),
        Err(KeyError::InvalidChar { index: 4, .. })
    ));
    assert!(matches!(
        IdempotencyKey::parse("\"abcdefgh\""),
        Err(KeyError::InvalidChar { index: 0, .. })
    ));
    assert_eq!(
        IdempotencyKey::parse(""),
        Err(KeyError::TooShort { len: 0 })
    );
    // The message explains the rule in words, without internal requirement IDs (T6).
    let msg = IdempotencyKey::parse("abc{defgh").unwrap_err().to_string();
    assert!(
        msg.contains("8-64 characters of A-Z a-z 0-9 _ -") && msg.contains("position 3"),
        "{msg}"
    );
    assert!(!msg.contains("K1"), "{msg}");
    let msg = IdempotencyKey::parse("abc").unwrap_err().to_string();
    assert!(
        msg.contains("8-64 characters") && msg.contains("too short"),
        "{msg}"
    );
}

/// K1: every one of the 256 byte values is judged by the rule `[A-Za-z0-9_-]`, and a key with
/// several bad bytes names the first.
#[test]
fn k1_every_byte_value_is_judged_by_the_rule() {
    for c in 0..=255u8 {
        let mut bytes = b"abcdefg".to_vec();
        bytes.push(c);
        let allowed = c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
        match IdempotencyKey::from_bytes(&bytes) {
            Ok(k) => assert!(allowed, "byte {c:#04x} was accepted: {k}"),
            Err(e) => {
                assert!(!allowed, "byte {c:#04x} was refused: {e}");
                assert_eq!(e, KeyError::InvalidChar { index: 7, byte: c });
            }
        }
    }
    assert_eq!(
        IdempotencyKey::from_bytes(b"ab.cd efgh"),
        Err(KeyError::InvalidChar {
            index: 2,
            byte: b'.'
        })
    );
}

#[test]
fn k1_from_bytes_matches_parse() {
    assert_eq!(
        IdempotencyKey::from_bytes(b"order-0001").unwrap(),
        IdempotencyKey::parse("order-0001").unwrap()
    );
    assert!(IdempotencyKey::from_bytes(&[0xff; 10]).is_err());
}

#[test]
fn k2_generate_is_a_valid_v4_uuid_and_unique() {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        let k = IdempotencyKey::generate();
        let s = k.as_str();
        assert_eq!(s.len(), 36);
        assert_eq!(&s[14..15], "4", "version nibble of {s}");
        assert!(IdempotencyKey::parse(s).is_ok());
        assert!(seen.insert(k));
    }
}

/// Vectors computed with Python's `uuid` module (an independent implementation of RFC 9562 v5) over
/// the documented name layout.
#[test]
fn k2_derive_test_vectors() {
    let vectors = [
        (
            "order-1001",
            "CreateOrder",
            "595adbff-8b2b-59ac-badd-f55cab0b478f",
        ),
        ("ab", "c", "8bf46fb6-60d7-5292-9e75-4b0398beea8f"),
        ("a", "bc", "a4b6dfc3-838e-5d12-ba84-aea0878cb5a0"),
        ("", "x", "7a8cd436-cf5b-59b0-a0c9-8723cd341863"),
        (
            "订单-7",
            "DeductStock",
            "5f9a2583-a55d-5f4c-9d32-a7f30b95a1e0",
        ),
    ];
    for (id, op, want) in vectors {
        let k = IdempotencyKey::derive(id, op);
        assert_eq!(k.as_str(), want, "derive({id:?}, {op:?})");
        assert!(IdempotencyKey::parse(k.as_str()).is_ok());
    }
}

#[test]
fn k2_derive_is_injective_over_the_split() {
    assert_ne!(
        IdempotencyKey::derive("ab", "c"),
        IdempotencyKey::derive("a", "bc")
    );
}

/// T2: a key header's value is an sf-string without escapes or a bare token, read exactly as
/// sent; the key inside passes K1. The server layer and both clients read it with this one
/// function.
#[test]
fn t2_key_header_value_forms() {
    for (value, key) in [
        (&b"\"order-0001\""[..], "order-0001"),
        (b"order-0001", "order-0001"),
        (
            b"\"3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10\"",
            "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
        ),
    ] {
        assert_eq!(
            IdempotencyKey::from_header_value(value).unwrap().as_str(),
            key
        );
    }
    for value in [
        &b"\"order-0001"[..],
        b"\"",
        b"\"order\\\"0001\"",
        b"\"order\\\\0001\"",
    ] {
        assert_eq!(
            IdempotencyKey::from_header_value(value),
            Err(KeyHeaderError::BadQuoting),
            "{}",
            String::from_utf8_lossy(value)
        );
    }
    for value in [
        &b"order-\x000001"[..],
        b"order-\x7f0001",
        "ord\u{e9}r-0001".as_bytes(),
    ] {
        assert_eq!(
            IdempotencyKey::from_header_value(value),
            Err(KeyHeaderError::NotAscii)
        );
    }
    // Whitespace is kept, so it is the key's fault; so are a quote at the end only and an empty
    // quoted string.
    assert_eq!(
        IdempotencyKey::from_header_value(b"order-0001\""),
        Err(KeyHeaderError::Key(KeyError::InvalidChar {
            index: 10,
            byte: b'"'
        }))
    );
    assert_eq!(
        IdempotencyKey::from_header_value(b" order-0001"),
        Err(KeyHeaderError::Key(KeyError::InvalidChar {
            index: 0,
            byte: b' '
        }))
    );
    assert_eq!(
        IdempotencyKey::from_header_value(b"order-0001\t"),
        Err(KeyHeaderError::Key(KeyError::InvalidChar {
            index: 10,
            byte: b'\t'
        }))
    );
    assert_eq!(
        IdempotencyKey::from_header_value(b"\"\""),
        Err(KeyHeaderError::Key(KeyError::TooShort { len: 0 }))
    );
    assert_eq!(
        KeyHeaderError::BadQuoting.to_string(),
        "the idempotency key header must be a quoted string (\"...\", RFC 8941) or a bare key"
    );
}
