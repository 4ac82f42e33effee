//! [`LocalCache`]: the settings of the local engine in front of a shared record, one type for
//! every engine that keeps one.

use std::time::Duration;

use crate::EngineBuilder;

/// How long a local copy lives unless told: see [`LocalCache`].
const DEFAULT_TTL: Duration = Duration::from_secs(5 * 60);

/// The local engine of an engine that keeps its records in a shared store: the
/// [`TieredEngine`](crate::tiered::TieredEngine) (in front of any
/// [`RemoteTier`](crate::remote::RemoteTier)) and `idem-postgres`' transactional `PgEngine`.
/// Both builders take it (`.local(LocalCache::new().max_entries(100_000))`), with the same
/// settings and the same defaults.
///
/// The local engine is a cache in front of the shared record: it coalesces this instance's
/// concurrent calls for a scope into one trip to the store, and replays results it holds
/// without one. A copy it no longer holds costs one round trip to replay, never a second run:
/// the shared record decides.
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`ttl`](Self::ttl) | 5 minutes, and never longer than the records' TTL |
/// | [`max_entries`](Self::max_entries) | 1,000,000 |
/// | [`shards`](Self::shards) | available parallelism (1 if unknown) |
/// | [`in_flight_timeout`](Self::in_flight_timeout) | the longest a local run can take, which the engine in front works out from its own settings (its builder's table says how) |
///
/// The copy's TTL is short by default, for both engines, for three reasons. A copy of another
/// instance's result outlives an operator's `forget` of the shared record by up to this long
/// (only the instance that forgets drops its own copy). Copies count against `max_entries`
/// as long as they live: with a copy per new key for the records' whole TTL (24 hours by
/// default), a busy instance would fill the local engine, and then the tiered engine sends calls
/// to the store without local coalescing, and `PgEngine` refuses new scopes until copies expire.
/// And a short copy costs little: a retry after it lapsed is replayed from the store in one
/// round trip. Set a longer TTL where replays are frequent long after the first call.
///
/// The local engine reports under the engine in front's name and scope logging (its metrics
/// `idem_dedup_*{engine="..."}` and its spans), which that engine's builder sets.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use idem_dedup::remote::*;
/// # use idem_core::{Fingerprint, Scope, Status};
/// # use std::future::{ready, Future};
/// # use std::time::Duration;
/// # struct Tier;
/// # impl RemoteTier for Tier {
/// #     fn claim(&self, _: &Scope, _: Fingerprint, _: Duration, _: OwnerId) -> impl Future<Output = Result<ClaimOutcome, Status>> + Send { ready(Ok(ClaimOutcome::Claimed { token: FencingToken::new(1), reclaimed: false })) }
/// #     fn complete(&self, _: Claim<'_>, _: Vec<u8>, _: Duration) -> impl Future<Output = Result<Commit, Status>> + Send { ready(Ok(Commit::Committed)) }
/// #     fn release(&self, _: Claim<'_>) -> impl Future<Output = Result<Commit, Status>> + Send { ready(Ok(Commit::Committed)) }
/// #     fn renew(&self, _: Claim<'_>, _: Duration) -> impl Future<Output = Result<Commit, Status>> + Send { ready(Ok(Commit::Committed)) }
/// #     fn wait(&self, _: &Scope, _: FencingToken, _: Duration) -> impl Future<Output = Result<(), Status>> + Send { ready(Ok(())) }
/// #     fn lookup(&self, _: &Scope) -> impl Future<Output = Result<Option<RemoteRecord>, Status>> + Send { ready(Ok(None)) }
/// #     fn forget(&self, _: &Scope) -> impl Future<Output = Result<bool, Status>> + Send { ready(Ok(false)) }
/// # }
/// # let tier = Tier;
/// use idem_dedup::tiered::TieredEngine;
/// use idem_dedup::LocalCache;
///
/// // `tier`: a RedisTier (idem-redis), a PgTier (idem-postgres), or your own RemoteTier.
/// let engine = TieredEngine::<Vec<u8>, _>::builder(tier)
///     .ttl(Duration::from_secs(24 * 3600))
///     .local(LocalCache::new().ttl(Duration::from_secs(60)).max_entries(100_000).shards(4))
///     .build()?;
/// assert_eq!(engine.local_stats().shards.len(), 4);
///
/// // Never longer than the records themselves live.
/// let day = Duration::from_secs(24 * 3600);
/// assert_eq!(LocalCache::new().ttl_for(day), Duration::from_secs(300));
/// assert_eq!(LocalCache::new().ttl_for(Duration::from_secs(60)), Duration::from_secs(60));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a LocalCache does nothing until it is given to an engine's builder"]
pub struct LocalCache {
    ttl: Option<Duration>,
    max_entries: usize,
    shards: Option<usize>,
    in_flight_timeout: Option<Duration>,
}

impl Default for LocalCache {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalCache {
    /// The settings with every default (see the table above).
    pub const fn new() -> Self {
        LocalCache {
            ttl: None,
            max_entries: 1_000_000,
            shards: None,
            in_flight_timeout: None,
        }
    }

    /// How long this instance keeps its own copy of a result, counted from its completion;
    /// never longer than the records' TTL. A copy of another instance's result may outlive the
    /// shared record by up to this much. Default: 5 minutes.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Cap on the local engine's entries: copies and runs in flight on this instance. What a
    /// full local engine does is the engine in front's: see its builder. Default: 1,000,000.
    pub const fn max_entries(mut self, n: usize) -> Self {
        self.max_entries = n;
        self
    }

    /// Shards of the local engine, each one actor task. Default: available parallelism.
    pub const fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// The local engine's in-flight lease, which bounds a whole local run: the trip to the
    /// shared store, any wait for another instance's run, and the action. A run past it is
    /// ended and its callers get `UNAVAILABLE`. Default: the longest a run can take by the
    /// engine in front's own settings (see its builder).
    pub const fn in_flight_timeout(mut self, timeout: Duration) -> Self {
        self.in_flight_timeout = Some(timeout);
        self
    }
    /// The local run's lease: the one set, else `longest_run`.
    pub(crate) fn in_flight_for(&self, longest_run: Duration) -> Duration {
        self.in_flight_timeout.unwrap_or(longest_run)
    }

    /// The copy's TTL under records that live `record_ttl`: the [`ttl`](Self::ttl) set, or 5
    /// minutes, and at most `record_ttl`.
    pub fn ttl_for(&self, record_ttl: Duration) -> Duration {
        self.ttl.unwrap_or(DEFAULT_TTL).min(record_ttl)
    }

    /// The builder of the local engine, for the engine in front to finish with its own name and
    /// scope logging and build: these settings, under records that live `record_ttl` (see
    /// [`ttl_for`](Self::ttl_for)), with `longest_run` as the in-flight lease unless one was
    /// set.
    ///
    /// The local engine it builds does not make its action the current
    /// [`Run`](idem_core::run::Run): the engine in front runs the action under its claim, with
    /// the claim's fencing token, and sets the run there.
    pub fn engine_builder<V>(
        &self,
        record_ttl: Duration,
        longest_run: Duration,
    ) -> EngineBuilder<V> {
        let mut local = EngineBuilder::new()
            .without_run()
            .ttl(self.ttl_for(record_ttl))
            .max_entries(self.max_entries)
            .in_flight_timeout(self.in_flight_timeout.unwrap_or(longest_run));
        if let Some(n) = self.shards {
            local = local.shards(n);
        }
        local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k7_a_local_cache_builds_an_engine_that_sets_no_run_of_its_own() {
        let day = Duration::from_secs(24 * 3600);
        let run = Duration::from_secs(65);
        let cfg = LocalCache::new().engine_builder::<u32>(day, run).config();
        assert!(
            !cfg.sets_run,
            "the engine in front sets the run, with its claim's token"
        );
        assert_eq!(cfg.ttl, Duration::from_secs(300));
        assert_eq!(cfg.in_flight_timeout, run);
        assert_eq!(cfg.max_entries, 1_000_000);
        assert!(EngineBuilder::<u32>::new().config().sets_run);

        let set = LocalCache::new()
            .ttl(Duration::from_secs(30))
            .max_entries(10)
            .shards(3)
            .in_flight_timeout(Duration::from_secs(7));
        let cfg = set.engine_builder::<u32>(day, run).config();
        assert_eq!(
            (cfg.ttl, cfg.max_entries, cfg.shards, cfg.in_flight_timeout),
            (Duration::from_secs(30), 10, 3, Duration::from_secs(7))
        );
    }
}
