//! The scope hash: SipHash-1-3 under a random 128-bit key, computed in one pass over the scope's
//! encoded bytes, in its 128-bit form: one half picks the shard and the table bucket, and
//! both halves together are what an entry keeps to know its scope by ([`ScopeId`]; not the
//! [`trace::ScopeDigest`](crate::trace::ScopeDigest) of logs, which is unkeyed and stable).
//!
//! # Why a digest identifies a scope
//!
//! An entry used to keep the scope's encoded bytes (~76 for a typical scope, 88 with their
//! framing) and compare them on every replay. Under a key that clients never see, SipHash is a
//! pseudo-random function: nobody can choose two scopes with the same output, and two scopes
//! of an engine share a 128-bit digest by chance with a probability of about n² / 2¹²⁹ for n
//! entries (for a billion entries, below 10⁻²⁰). A digest thus tells scopes apart as surely as
//! their bytes, in 16 bytes and two word compares.
//!
//! # Why our own loop
//!
//! The algorithm is the one `std`'s `RandomState` uses (SipHash-1-3, a keyed pseudo-random
//! function: clients choose keys, and without the key they cannot make scopes collide). What
//! differs is the shape: `std`'s hasher is a streaming `Hasher` that buffers partial words across
//! `write` calls and hashes a slice's length as a separate write. A scope is always hashed whole,
//! so this function reads it as whole little-endian words and folds the tail in once. On a
//! replay `std`'s took ~370 of ~890 instructions per call (callgrind), this loop ~270 for the same
//! ~80-byte scope: SipHash's rounds themselves, 20 instructions per word, are most of it.
//! The output is tested against `std`'s SipHash-1-3, the round function against the SipHash
//! paper's SipHash-2-4 test vector, and the 128-bit form against the reference
//! implementation's SipHash-2-4-128 vectors. The 128-bit form costs three rounds more than the
//! 64-bit one (about 50 instructions); a replay no longer compares ~76 bytes for it.

use std::hash::BuildHasher;

/// SipHash keyed once per engine with 128 random bits.
#[derive(Clone)]
pub(crate) struct ScopeHasher {
    k0: u64,
    k1: u64,
}

impl ScopeHasher {
    /// A hasher with a fresh random key. The key bits come from `std`'s `RandomState` (seeded
    /// from the operating system's randomness per process): two of its hashes of distinct
    /// constants are outputs of a keyed pseudo-random function, as unpredictable as its key.
    pub(crate) fn random() -> Self {
        let seed = std::hash::RandomState::new();
        ScopeHasher {
            k0: seed.hash_one(0x6964_656d_u64),
            k1: seed.hash_one(0x7363_6f70_6573_u64),
        }
    }

    /// The 128-bit digest of a scope's encoded bytes (SipHash-1-3-128).
    #[inline]
    pub(crate) fn id(&self, bytes: &[u8]) -> ScopeId {
        let [lo, hi] = sip128::<1, 3>(self.k0, self.k1, bytes);
        ScopeId { lo, hi }
    }
}

/// A scope's keyed 128-bit digest: what an entry keeps instead of the scope's bytes (see the
/// module docs). The first half, [`hash`](Self::hash), picks the shard and the table bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScopeId {
    lo: u64,
    hi: u64,
}

impl ScopeId {
    /// The 64 bits the shard and its table hash by.
    #[inline]
    pub(crate) fn hash(self) -> u64 {
        self.lo
    }
}

impl std::fmt::Debug for ScopeHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs: with it, a client could make scopes collide.
        f.write_str("ScopeHasher { .. }")
    }
}

/// SipHash-`C`-`D` of `bytes` under the key `(k0, k1)` (Aumasson and Bernstein, 2012), 64-bit
/// output. The engine uses the 128-bit form ([`sip128`]); this one is kept to check the shared
/// compression against `std`'s SipHash.
#[cfg(test)]
fn sip<const C: usize, const D: usize>(k0: u64, k1: u64, bytes: &[u8]) -> u64 {
    let mut v = init(k0, k1);
    absorb::<C>(&mut v, bytes);
    v[2] ^= 0xff;
    for _ in 0..D {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// SipHash-`C`-`D`-128 of `bytes` under the key `(k0, k1)`: the two 64-bit halves, in the order
/// the reference implementation writes them out (each little-endian).
#[inline]
fn sip128<const C: usize, const D: usize>(k0: u64, k1: u64, bytes: &[u8]) -> [u64; 2] {
    let mut v = init(k0, k1);
    v[1] ^= 0xee;
    absorb::<C>(&mut v, bytes);
    v[2] ^= 0xee;
    for _ in 0..D {
        round(&mut v);
    }
    let first = v[0] ^ v[1] ^ v[2] ^ v[3];
    v[1] ^= 0xdd;
    for _ in 0..D {
        round(&mut v);
    }
    [first, v[0] ^ v[1] ^ v[2] ^ v[3]]
}

/// The initial state under the key.
#[inline(always)]
fn init(k0: u64, k1: u64) -> [u64; 4] {
    [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ]
}

/// Compresses every word of `bytes`, the last one with the length's low byte on top.
#[inline(always)]
fn absorb<const C: usize>(v: &mut [u64; 4], bytes: &[u8]) {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        compress::<C>(v, word(w));
    }
    // The last word: the remaining bytes, little-endian, with the length's low byte on top.
    let tail = words.remainder().len();
    let rest = if tail == 0 {
        0
    } else if bytes.len() >= 8 {
        // The input's last 8 bytes, shifted so only the tail's bytes remain: one load, no copy.
        word(&bytes[bytes.len() - 8..]) >> (8 * (8 - tail))
    } else {
        bytes
            .iter()
            .rev()
            .fold(0, |acc, &b| (acc << 8) | u64::from(b))
    };
    compress::<C>(v, rest | (u64::from(bytes.len() as u8) << 56));
}

/// Eight bytes as a little-endian word (`w` is exactly 8 long).
#[inline(always)]
fn word(w: &[u8]) -> u64 {
    let mut m = [0; 8];
    m.copy_from_slice(w);
    u64::from_le_bytes(m)
}

#[inline(always)]
fn compress<const C: usize>(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    for _ in 0..C {
        round(v);
    }
    v[0] ^= m;
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hasher;

    /// The SipHash paper's test vector (Appendix A): SipHash-2-4, key 00..0f, message 00..0e.
    #[test]
    fn e8_round_function_matches_the_siphash_paper_vector() {
        let key: Vec<u8> = (0..16).collect();
        let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
        let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(sip::<2, 4>(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    /// `std`'s `DefaultHasher::new()` is SipHash-1-3 with a zero key; one `write` of the bytes
    /// and `finish` must give what our one-pass loop gives, at every length around the word and
    /// inline-scope boundaries.
    #[test]
    fn e8_one_pass_siphash13_equals_std_streaming_siphash13() {
        let reference = |bytes: &[u8]| {
            let mut h = std::hash::DefaultHasher::new();
            h.write(bytes);
            h.finish()
        };
        let data: Vec<u8> = (0..300u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(
                sip::<1, 3>(0, 0, &data[..len]),
                reference(&data[..len]),
                "length {len}"
            );
        }
    }

    /// With a non-zero key too: `std`'s (deprecated, still shipped) SipHash-2-4 with explicit
    /// keys against the same loop at 2-4 rounds.
    #[test]
    fn e8_keyed_siphash24_equals_std_siphash24() {
        let (k0, k1) = (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        let data: Vec<u8> = (0..100u32).map(|i| (i * 17 + 3) as u8).collect();
        for len in 0..data.len() {
            #[allow(deprecated)]
            let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
            h.write(&data[..len]);
            assert_eq!(
                sip::<2, 4>(k0, k1, &data[..len]),
                h.finish(),
                "length {len}"
            );
        }
    }

    /// The 128-bit form against the SipHash reference implementation's `vectors_sip128`
    /// (SipHash-2-4-128, key 00..0f, message 00, 01, .. of each length), around the word
    /// boundaries and at the table's longest message.
    #[test]
    fn e8_siphash128_matches_the_reference_vectors() {
        let key: Vec<u8> = (0..16).collect();
        let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
        let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
        let vectors: [(usize, [u8; 16]); 6] = [
            (0, hex("a3817f04ba25a8e66df67214c7550293")),
            (1, hex("da87c1d86b99af44347659119b22fc45")),
            (7, hex("a1f1ebbed8dbc153c0b84aa61ff08239")),
            (8, hex("3b62a9ba6258f5610f83e264f31497b4")),
            (15, hex("5493e99933b0a8117e08ec0f97cfc3d9")),
            (63, hex("5150d1772f50834a503e069a973fbd7c")),
        ];
        let msg: Vec<u8> = (0..64).collect();
        for (len, want) in vectors {
            let [h0, h1] = sip128::<2, 4>(k0, k1, &msg[..len]);
            let mut got = [0; 16];
            got[..8].copy_from_slice(&h0.to_le_bytes());
            got[8..].copy_from_slice(&h1.to_le_bytes());
            assert_eq!(got, want, "length {len}");
        }
    }

    fn hex(s: &str) -> [u8; 16] {
        let mut out = [0; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    /// Distinct random hashers disagree, and one hasher is a function of the bytes; both
    /// halves of a digest depend on the key.
    #[test]
    fn e8_keys_are_random_per_hasher() {
        let (a, b) = (ScopeHasher::random(), ScopeHasher::random());
        let s = b"tenant-1\0/shop.v1.Shop/CreateOrder\0k";
        assert_eq!(a.id(s), a.id(s));
        let (da, db) = (a.id(s), b.id(s));
        assert_ne!(da.lo, db.lo);
        assert_ne!(da.hi, db.hi);
        assert_eq!(da.hash(), da.lo);
        assert_ne!(a.id(s), a.id(b"tenant-1\0/shop.v1.Shop/CreateOrder\0l"));
        assert_eq!(format!("{a:?}"), "ScopeHasher { .. }");
    }
}
