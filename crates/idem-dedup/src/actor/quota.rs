//! What a shard may still admit: the byte budget and each tenant's share.
//!
//! # Why a share per tenant
//!
//! `max_entries` and `max_bytes` bound the engine's memory, and a full engine refuses new
//! scopes rather than evict a result (eviction would let a retry run the side effect twice). On
//! their own they let one tenant's flood of new keys fill the engine and lock every other tenant
//! out for a whole TTL. A share caps what any one tenant may hold, so the flood is refused for
//! that tenant alone (`TENANT_QUOTA_EXCEEDED`, with a retry-after hint) while the others go on.
//!
//! # Why per shard
//!
//! Only the shard decides what it admits, so each shard keeps the counts of the
//! tenants whose scopes hash to it, and limits each tenant to the share of *that shard's part*
//! of the budget (`max_entries / shards`, `max_bytes / shards`). No map is shared and no lock is
//! taken. The price is accuracy, in one direction only: a tenant never holds more than its share
//! (plus, per shard, the rounding up to one whole entry, and the last value that took it over
//! its bytes), but since its scopes spread over the shards at random, it is refused on a shard
//! whose part it has used up while it may still hold less than its share on another. A tenant
//! that floods new keys fills every shard's part, and holds its share almost exactly.
//!
//! # Bytes are known at completion
//!
//! A value's weight is known only when its run completes; an in-flight entry weighs nothing. So
//! the byte checks look at what is stored: a new scope is admitted while the stored bytes are
//! below the limit, and the value of a run admitted then is stored whatever it weighs (refusing
//! to store it would let the retry run the side effect again). The stored bytes may therefore
//! pass `max_bytes` by the values of the runs in flight when it was reached; new scopes are then
//! refused until expiries or forgets bring the bytes back under it. Replays are never refused.

use std::collections::HashMap;

use crate::config::Config;

/// Why a shard refuses a new scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The engine holds `max_entries` entries, or `max_bytes` of stored values.
    Full,
    /// The scope's tenant holds its whole share of this shard's part.
    Tenant,
}

/// One tenant's use of a shard.
#[derive(Debug, Default, Clone, Copy)]
struct Use {
    entries: usize,
    bytes: usize,
}

/// A tenant's number in its shard's [`Quota`]: what a completed entry keeps to be counted out
/// of its tenant's use when it goes (4 bytes, in room the entry has anyway). A run in
/// flight has its scope, and finds its tenant's number by the tenant's bytes. Without a share
/// every entry has number 0 and nothing is counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TenantId(u32);

/// A tenant that holds entries in a shard.
struct Tenant {
    name: Box<[u8]>,
    used: Use,
}

/// A shard's per-tenant limits and counts.
pub(crate) struct Quota {
    /// The most entries and bytes one tenant may hold in this shard; `None` without a share.
    limit: Option<Use>,
    /// The numbers of the tenants that hold at least one entry here, by their bytes. Kept only
    /// with a share.
    ids: HashMap<Box<[u8]>, u32>,
    /// By number: the tenant holding it, or `None` for a free number (listed in `free`).
    tenants: Vec<Option<Tenant>>,
    free: Vec<u32>,
    /// Weight of the values this shard stores (with a weigher; 0 without).
    pub(crate) bytes: usize,
}

impl Quota {
    pub(crate) fn new(cfg: &Config) -> Self {
        let limit = cfg.tenant_share.map(|percent| {
            let part = |total: usize| total.div_ceil(cfg.shards);
            let share = |part: usize| {
                let share = part.saturating_mul(usize::from(percent)) / 100;
                share.max(1)
            };
            Use {
                entries: share(part(cfg.max_entries)),
                bytes: share(part(cfg.max_bytes)),
            }
        });
        Quota {
            limit,
            ids: HashMap::new(),
            tenants: Vec::new(),
            free: Vec::new(),
            bytes: 0,
        }
    }

    fn used(&self, id: TenantId) -> Option<&Use> {
        let slot = self.tenants.get(usize::try_from(id.0).ok()?)?;
        slot.as_ref().map(|t| &t.used)
    }

    fn used_mut(&mut self, id: TenantId) -> Option<&mut Use> {
        let slot = self.tenants.get_mut(usize::try_from(id.0).ok()?)?;
        slot.as_mut().map(|t| &mut t.used)
    }

    /// Whether the tenant of the scope encoded as `scope` may have one more entry here.
    pub(crate) fn admits(&self, scope: &[u8]) -> bool {
        let Some(limit) = self.limit else {
            return true;
        };
        self.ids
            .get(tenant(scope))
            .and_then(|&n| self.used(TenantId(n)))
            .is_none_or(|u| u.entries < limit.entries && u.bytes < limit.bytes)
    }

    /// Counts a new entry for the scope's tenant, giving the tenant a number if it has none
    /// here.
    pub(crate) fn add_entry(&mut self, scope: &[u8]) {
        if self.limit.is_none() {
            return;
        }
        let tenant = tenant(scope);
        if let Some(&n) = self.ids.get(tenant) {
            if let Some(u) = self.used_mut(TenantId(n)) {
                u.entries += 1;
                return;
            }
        }
        let used = Use {
            entries: 1,
            bytes: 0,
        };
        let t = Tenant {
            name: tenant.into(),
            used,
        };
        let n = match self.free.pop() {
            Some(n) => {
                if let Some(slot) = usize::try_from(n)
                    .ok()
                    .and_then(|i| self.tenants.get_mut(i))
                {
                    *slot = Some(t);
                }
                n
            }
            None => {
                // A number per tenant that holds entries here: far fewer than 2³² (each holds
                // at least one of the shard's entries).
                let n = u32::try_from(self.tenants.len()).unwrap_or(u32::MAX);
                self.tenants.push(Some(t));
                n
            }
        };
        self.ids.insert(tenant.into(), n);
    }

    /// The number of the scope's tenant, which holds an entry here (0 without a share).
    pub(crate) fn id(&self, scope: &[u8]) -> TenantId {
        if self.limit.is_none() {
            return TenantId(0);
        }
        TenantId(self.ids.get(tenant(scope)).copied().unwrap_or(0))
    }

    /// Counts a stored value's weight for its tenant.
    pub(crate) fn add_bytes(&mut self, tenant: TenantId, weight: usize) {
        self.bytes += weight;
        if self.limit.is_some() {
            if let Some(u) = self.used_mut(tenant) {
                u.bytes += weight;
            }
        }
    }

    /// Counts a removed entry (with its value's weight) out of its tenant's use; a tenant that
    /// holds nothing more here gives its number back.
    pub(crate) fn remove(&mut self, tenant: TenantId, weight: usize) {
        self.bytes -= weight;
        if self.limit.is_none() {
            return;
        }
        let Some(u) = self.used_mut(tenant) else {
            return;
        };
        u.entries -= 1;
        u.bytes -= weight;
        if u.entries == 0 {
            let slot = usize::try_from(tenant.0)
                .ok()
                .and_then(|i| self.tenants.get_mut(i));
            if let Some(Some(t)) = slot.map(Option::take) {
                self.ids.remove(&t.name);
                self.free.push(tenant.0);
            }
        }
    }

    /// Forgets every count (shutdown).
    pub(crate) fn clear(&mut self) {
        self.ids.clear();
        self.tenants.clear();
        self.free.clear();
        self.bytes = 0;
    }
}

/// The tenant's bytes in a scope's encoding (length-prefixed): read straight off the
/// encoding, without the UTF-8 checks of [`Scope::tenant`](idem_core::Scope::tenant).
fn tenant(scope: &[u8]) -> &[u8] {
    match scope {
        [hi, lo, rest @ ..] => {
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            &rest[..len.min(rest.len())]
        }
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::Scope;

    fn cfg(max_entries: usize, max_bytes: usize, shards: usize, share: u8) -> Config {
        let mut c = crate::EngineBuilder::<u32>::new().config();
        c.max_entries = max_entries;
        c.max_bytes = max_bytes;
        c.shards = shards;
        c.tenant_share = Some(share);
        c
    }

    fn enc(tenant: &str, key: &str) -> Vec<u8> {
        Scope::parse(tenant, "/m", key).unwrap().as_bytes().to_vec()
    }

    /// The tenant is read back out of the scope's encoding, whatever it holds.
    #[test]
    fn e16_the_tenant_is_read_from_the_scope_encoding() {
        assert_eq!(tenant(&enc("tenant-0042", "key-0001")), b"tenant-0042");
        assert_eq!(tenant(&enc("a", "key-0001")), b"a");
        assert_ne!(
            tenant(&enc("ab", "key-0001")),
            tenant(&enc("a", "key-0001"))
        );
    }

    /// Each tenant holding entries has its own number, whatever its bytes
    /// (tenants that are prefixes of each other too); a number is given back when its tenant
    /// holds nothing, and reused.
    #[test]
    fn e16_tenants_have_numbers_of_their_own() {
        let mut q = Quota::new(&cfg(100, 1000, 1, 50));
        let (ab_, a_, c_) = (
            enc("ab", "key-0001"),
            enc("a", "key-0001"),
            enc("c", "key-0001"),
        );
        q.add_entry(&ab_);
        q.add_entry(&a_);
        let (ab, a) = (q.id(&ab_), q.id(&a_));
        assert_ne!(ab, a);
        q.add_entry(&ab_);
        assert_eq!(q.id(&ab_), ab);
        q.remove(a, 0);
        assert_eq!(q.ids.len(), 1, "a holds nothing and gave its number back");
        q.add_entry(&c_);
        assert_eq!(q.id(&c_), a, "the number is reused");
        assert_eq!(q.id(&ab_), ab);
        q.remove(ab, 0);
        q.remove(ab, 0);
        q.remove(q.id(&c_), 0);
        assert!(q.ids.is_empty());
        assert!(q.tenants.iter().all(Option::is_none));
    }

    /// A tenant is limited to its share of this shard's part of the budget, in entries and
    /// in bytes; other tenants are not; removals give the room back and drop the tenant's count
    /// once it holds nothing.
    #[test]
    fn e16_a_tenant_is_held_to_its_share_of_the_shards_part() {
        // 100 entries and 1000 bytes over 4 shards: parts of 25 and 250; 20% of them: 5 and 50.
        let mut q = Quota::new(&cfg(100, 1000, 4, 20));
        let a = &enc("a", "key-0001")[..];
        let b = &enc("b", "key-0001")[..];
        for _ in 0..5 {
            assert!(q.admits(a));
            q.add_entry(a);
        }
        assert!(!q.admits(a), "five entries are a's share");
        assert!(q.admits(b));
        q.remove(q.id(a), 0);
        assert!(q.admits(a));
        for _ in 0..4 {
            q.remove(q.id(a), 0);
        }
        assert!(q.ids.is_empty());
        q.add_entry(b);
        q.add_bytes(q.id(b), 60);
        assert!(!q.admits(b), "60 bytes is past b's 50");
        assert_eq!(q.bytes, 60);
        q.remove(q.id(b), 60);
        assert_eq!(q.bytes, 0);
        // A share never rounds down to nothing.
        let q = Quota::new(&cfg(1, 1, 4, 1));
        assert!(q.admits(a));
    }
}
