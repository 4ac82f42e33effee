//! The budget's state: a sliding window of request and retry counts, and the floor's token
//! bucket.

/// The window is kept as this many slots; the oldest slot drops out as time moves on.
pub(super) const SLOTS: usize = 10;

/// One floor token, in the bucket's unit: the bucket refills `min_per_sec` units per nanosecond,
/// so integer arithmetic is exact (no float drift between refills).
const TOKEN: u128 = 1_000_000_000;

#[derive(Debug)]
pub(super) struct Window {
    /// Which slot-length period each slot holds; `u64::MAX` for never used.
    epochs: [u64; SLOTS],
    pub(super) requests: [u64; SLOTS],
    pub(super) retries: [u64; SLOTS],
    /// The floor's bucket, in units of [`TOKEN`] per token, as of `floor_at`.
    floor: u128,
    /// When `floor` was last refilled (nanoseconds since the budget's origin).
    floor_at: u128,
}

impl Window {
    /// An empty window, with the floor's bucket full: `min_per_sec` tokens.
    pub(super) fn new(min_per_sec: u32) -> Self {
        Window {
            epochs: [u64::MAX; SLOTS],
            requests: [0; SLOTS],
            retries: [0; SLOTS],
            floor: u128::from(min_per_sec) * TOKEN,
            floor_at: 0,
        }
    }

    /// Refills the floor's bucket up to `now` (nanoseconds since the origin), capped at `rate`
    /// tokens, and takes one token if there is one; returns whether it took one.
    pub(super) fn take_floor_token(&mut self, now: u128, rate: u128) -> bool {
        let elapsed = now.saturating_sub(self.floor_at);
        self.floor_at = self.floor_at.max(now);
        let cap = rate.saturating_mul(TOKEN);
        self.floor = self
            .floor
            .saturating_add(elapsed.saturating_mul(rate))
            .min(cap);
        if self.floor >= TOKEN {
            self.floor -= TOKEN;
            true
        } else {
            false
        }
    }

    /// Makes `epoch`'s slot current (clearing what it held before) and returns its index.
    pub(super) fn slot(&mut self, epoch: u64) -> usize {
        let i = (epoch % SLOTS as u64) as usize;
        if self.epochs[i] != epoch {
            self.epochs[i] = epoch;
            self.requests[i] = 0;
            self.retries[i] = 0;
        }
        i
    }

    /// Requests and retries in the `SLOTS` periods ending with `epoch`.
    pub(super) fn totals(&self, epoch: u64) -> (u64, u64) {
        let mut req = 0;
        let mut ret = 0;
        for i in 0..SLOTS {
            let e = self.epochs[i];
            if e <= epoch && epoch - e < SLOTS as u64 {
                req += self.requests[i];
                ret += self.retries[i];
            }
        }
        (req, ret)
    }
}
