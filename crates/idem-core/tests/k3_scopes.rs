//! K3: scope validation and injective encoding.

use idem_core::{Hex, IdempotencyKey, Scope, ScopeError, MAX_METHOD_LEN, MAX_TENANT_LEN};
use proptest::prelude::*;

fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::parse(s).unwrap()
}

#[test]
fn k3_parts_round_trip() {
    let s = Scope::new(
        "tenant-0042",
        "/shop.v1.Shop/CreateOrder",
        &key("order-0001"),
    )
    .unwrap();
    assert_eq!(s.tenant(), "tenant-0042");
    assert_eq!(s.method(), "/shop.v1.Shop/CreateOrder");
    assert_eq!(s.key(), "order-0001");
    assert_eq!(Scope::from_encoded(s.as_bytes()).unwrap(), s);
}

/// K3: the encoding is the documented layout (tenant length as a big-endian u16, tenant,
/// method length, method, key) at every size: short ones are assembled on the stack, long ones
/// (up to the largest scope the limits allow) on the heap, and both give the same bytes.
#[test]
fn k3_encoding_layout_at_every_size() {
    let k = "k".repeat(64);
    for tenant_len in [1, 20, 57, 58, 59, 60, 128] {
        for method_len in [1, 2, 3, 100, MAX_METHOD_LEN] {
            let (t, m) = ("t".repeat(tenant_len), "m".repeat(method_len));
            let mut want = Vec::new();
            want.extend_from_slice(&(tenant_len as u16).to_be_bytes());
            want.extend_from_slice(t.as_bytes());
            want.extend_from_slice(&(method_len as u16).to_be_bytes());
            want.extend_from_slice(m.as_bytes());
            want.extend_from_slice(k.as_bytes());
            let parsed = Scope::parse(&t, &m, &k).unwrap();
            let built = Scope::new(&t, &m, &key(&k)).unwrap();
            assert_eq!(parsed.as_bytes(), &want[..], "{tenant_len} / {method_len}");
            assert_eq!(built, parsed);
            assert_eq!(
                (parsed.tenant(), parsed.method(), parsed.key()),
                (&*t, &*m, &*k)
            );
            assert_eq!(Scope::from_encoded(&want).unwrap(), parsed);
        }
    }
}

#[test]
fn k3_rejects_bad_tenant_and_method_with_the_rule_named() {
    let k = key("order-0001");
    assert_eq!(Scope::new("", "/m", &k), Err(ScopeError::EmptyTenant));
    assert_eq!(Scope::new("t", "", &k), Err(ScopeError::EmptyMethod));
    assert_eq!(
        Scope::new(&"t".repeat(MAX_TENANT_LEN + 1), "/m", &k),
        Err(ScopeError::TenantTooLong {
            len: MAX_TENANT_LEN + 1
        })
    );
    assert_eq!(
        Scope::new("t", &"m".repeat(MAX_METHOD_LEN + 1), &k),
        Err(ScopeError::MethodTooLong {
            len: MAX_METHOD_LEN + 1
        })
    );
    assert!(Scope::new(&"t".repeat(MAX_TENANT_LEN), &"m".repeat(MAX_METHOD_LEN), &k).is_ok());
    let msg = Scope::new("", "/m", &k).unwrap_err().to_string();
    assert!(msg.contains("tenant") && !msg.contains("K3"), "{msg}");
    assert!(matches!(
        Scope::parse("t", "/m", "bad key!"),
        Err(ScopeError::Key(_))
    ));
}

#[test]
fn k3_same_key_other_tenant_or_method_is_another_scope() {
    let k = key("order-0001");
    let a = Scope::new("t1", "/m", &k).unwrap();
    assert_ne!(a, Scope::new("t2", "/m", &k).unwrap());
    assert_ne!(a, Scope::new("t1", "/n", &k).unwrap());
    assert_eq!(a, Scope::new("t1", "/m", &k).unwrap());
}

#[test]
fn k3_malformed_encodings_are_errors() {
    for bad in [
        &b""[..],
        b"\x00",
        b"\x00\x05ab",
        b"\x00\x01t\x00",
        b"\x00\x01t\x00\x01m",
    ] {
        assert!(Scope::from_encoded(bad).is_err(), "{bad:?}");
    }
    // Valid framing, invalid key.
    assert!(matches!(
        Scope::from_encoded(b"\x00\x01t\x00\x01mshort"),
        Err(ScopeError::Key(_))
    ));
}

/// K3: a scope's digest is SHA-256 over its encoding, pinned: the shared tiers key their records
/// by it, so it may never change between versions (the value is SHA-256 of the documented
/// encoding, computed apart from this crate).
#[test]
fn k3_digest_is_sha256_of_the_encoding() {
    assert_eq!(
        Hex(&Scope::digest_encoded(b"")).to_string(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let s = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001").unwrap();
    assert_eq!(s.digest(), Scope::digest_encoded(s.as_bytes()));
    assert_eq!(
        Hex(&s.digest()).to_string(),
        "7291d80760087dd8033a7ebd2532dfa871a6d20575b77376047d7ee4057a142f"
    );
    let other = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0002").unwrap();
    assert_ne!(other.digest(), s.digest());
}

fn key_strategy() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{8,20}"
}

proptest! {
    /// K3: different (tenant, method, key) triples never share an encoding, whatever the bytes.
    #[test]
    fn k3_encoding_is_injective(
        t1 in "\\PC{1,12}", m1 in "\\PC{1,12}", k1 in key_strategy(),
        t2 in "\\PC{1,12}", m2 in "\\PC{1,12}", k2 in key_strategy(),
    ) {
        let a = Scope::parse(&t1, &m1, &k1).unwrap();
        let b = Scope::parse(&t2, &m2, &k2).unwrap();
        let same_triple = (t1 == t2) && (m1 == m2) && (k1 == k2);
        prop_assert_eq!(a.as_bytes() == b.as_bytes(), same_triple);
        prop_assert_eq!(a == b, same_triple);
    }

    /// Boundary shifting: moving bytes between tenant and method (the classic concatenation bug)
    /// never collides.
    #[test]
    fn k3_shifted_boundaries_never_collide(s in "[a-z:/{}]{2,24}", cut1 in 1usize..24, cut2 in 1usize..24) {
        let cut1 = cut1.min(s.len() - 1);
        let cut2 = cut2.min(s.len() - 1);
        let k = "order-0001";
        let a = Scope::parse(&s[..cut1], &s[cut1..], k).unwrap();
        let b = Scope::parse(&s[..cut2], &s[cut2..], k).unwrap();
        prop_assert_eq!(a == b, cut1 == cut2);
    }

    /// Decoding inverts encoding.
    #[test]
    fn k3_decode_round_trips(t in "\\PC{1,40}", m in "\\PC{1,40}", k in key_strategy()) {
        let a = Scope::parse(&t, &m, &k).unwrap();
        let b = Scope::from_encoded(a.as_bytes()).unwrap();
        prop_assert_eq!(b.tenant(), t.as_str());
        prop_assert_eq!(b.method(), m.as_str());
        prop_assert_eq!(b.key(), k.as_str());
    }

    /// Arbitrary bytes never panic the decoder.
    #[test]
    fn k3_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Scope::from_encoded(&bytes);
    }
}
