//! The scopes and fingerprints of a workload of numbered intents, as the shared tiers' tests
//! send them.

use idem_core::{Fingerprint, Scope};

/// The scope of intent `i` of the run `run` (tenant `tenant-1`, the shop's CreateOrder).
///
/// # Panics
///
/// When `run` has characters a key may not have.
pub fn scope(run: &str, i: usize) -> Scope {
    Scope::parse(
        "tenant-1",
        "/shop.v1.Shop/CreateOrder",
        &format!("{run}-{i:06}"),
    )
    .unwrap()
}

/// The fingerprint every copy of intent `i` carries.
pub fn fp(i: usize) -> Fingerprint {
    Fingerprint::of(format!("order {i}").as_bytes())
}
