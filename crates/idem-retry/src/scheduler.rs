//! Where retry delays are waited out.
//!
//! # Why the retrier never sleeps
//!
//! A retrier runs on an executor thread shared with hundreds of other tasks. Putting that thread
//! to sleep would freeze all of them for the whole backoff (the clippy config bans it). Instead every
//! wait is a future handed out by a [`Scheduler`]: while it is pending the thread runs other tasks.
//! The indirection also lets tests swap real time for a [`VirtualScheduler`] and run a whole retry
//! sequence instantly while checking each delay.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Hands out the futures that wait between attempts.
///
/// # Examples
///
/// A complete scheduler that waits on tokio's timer but never longer than 100 ms:
///
/// ```
/// use idem_retry::{Call, Retrier, RetryPolicy, Scheduler};
/// use idem_core::Code;
/// use std::time::Duration;
///
/// #[derive(Debug, Clone)]
/// struct Capped;
///
/// impl Scheduler for Capped {
///     type Sleep = tokio::time::Sleep;
///     fn sleep(&self, delay: Duration) -> Self::Sleep {
///         tokio::time::sleep(delay.min(Duration::from_millis(100)))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let retrier = Retrier::new(RetryPolicy::default()).with_scheduler(Capped);
/// let r: Result<(), Code> = retrier.call(&Call::idempotent(), |_| async { Err(Code::Unavailable) }).await;
/// assert_eq!(r, Err(Code::Unavailable));
/// assert_eq!(retrier.stats().attempts, 3);
/// # }
/// ```
pub trait Scheduler {
    /// The future that completes when the delay is over.
    type Sleep: Future<Output = ()>;

    /// A future that completes after `delay`. It must not block the calling thread.
    fn sleep(&self, delay: Duration) -> Self::Sleep;
}

/// The default scheduler: tokio's timer (`tokio::time::sleep`), so paused-clock tests
/// (`#[tokio::test(start_paused = true)]`) control it.
///
/// # Panics
///
/// Its futures panic if polled outside a tokio runtime with the time driver enabled, as
/// `tokio::time::sleep` does.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioScheduler;

impl Scheduler for TokioScheduler {
    type Sleep = tokio::time::Sleep;

    fn sleep(&self, delay: Duration) -> Self::Sleep {
        tokio::time::sleep(delay)
    }
}

/// Whether a [`VirtualScheduler`] completes waits at once or when told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Every wait completes as soon as it is polled.
    Instant,
    /// Waits stay pending until [`VirtualScheduler::release_next`] or
    /// [`VirtualScheduler::release_all`].
    OnDemand,
}

/// A virtual clock for tests: records every requested delay and completes the waits instantly or
/// on demand. No real time passes. Clones share the same clock.
///
/// # Examples
///
/// ```
/// use idem_core::Code;
/// use idem_retry::{Call, FixedRandom, Retrier, RetryPolicy, VirtualScheduler};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
/// let clock = VirtualScheduler::instant();
/// let policy = RetryPolicy::builder().max_attempts(4).random_source(FixedRandom::new(0.5)).build()?;
/// let retrier = Retrier::new(policy).with_scheduler(clock.clone());
///
/// let r: Result<(), Code> = retrier.call(&Call::idempotent(), |_| async { Err(Code::Unavailable) }).await;
/// assert_eq!(r, Err(Code::Unavailable));
/// let ms = Duration::from_millis;
/// assert_eq!(clock.requested(), vec![ms(20), ms(40), ms(80)]);
/// assert_eq!(clock.elapsed(), ms(140));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct VirtualScheduler {
    shared: Arc<Mutex<Virtual>>,
}

#[derive(Debug)]
struct Virtual {
    release: Release,
    requested: Vec<Duration>,
    /// Waits `0..released` are complete; waits complete in the order they were requested.
    released: usize,
    /// Wakers of pending waits, indexed by wait id.
    wakers: Vec<Option<Waker>>,
}

impl VirtualScheduler {
    /// A clock whose waits complete at once.
    pub fn instant() -> Self {
        Self::new(Release::Instant)
    }

    /// A clock whose waits stay pending until released.
    pub fn on_demand() -> Self {
        Self::new(Release::OnDemand)
    }

    /// A clock with the given release mode.
    pub fn new(release: Release) -> Self {
        VirtualScheduler {
            shared: Arc::new(Mutex::new(Virtual {
                release,
                requested: Vec::new(),
                released: 0,
                wakers: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Virtual> {
        // Critical sections are a few instructions and never await; poison carries no meaning here.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every delay requested so far, in order.
    pub fn requested(&self) -> Vec<Duration> {
        self.lock().requested.clone()
    }

    /// Virtual time passed: the sum of the completed waits.
    pub fn elapsed(&self) -> Duration {
        let v = self.lock();
        v.requested[..v.released].iter().sum()
    }

    /// Waits requested but not yet completed.
    pub fn pending(&self) -> usize {
        let v = self.lock();
        v.requested.len() - v.released
    }

    /// Completes the oldest pending wait and returns its delay, or `None` if nothing is pending.
    pub fn release_next(&self) -> Option<Duration> {
        let mut v = self.lock();
        if v.released == v.requested.len() {
            return None;
        }
        let id = v.released;
        v.released += 1;
        let waker = v.wakers[id].take();
        let delay = v.requested[id];
        drop(v);
        if let Some(w) = waker {
            w.wake();
        }
        Some(delay)
    }

    /// Completes every pending wait; returns how many.
    pub fn release_all(&self) -> usize {
        let mut n = 0;
        while self.release_next().is_some() {
            n += 1;
        }
        n
    }
}

impl Default for VirtualScheduler {
    /// [`VirtualScheduler::instant`].
    fn default() -> Self {
        Self::instant()
    }
}

impl Scheduler for VirtualScheduler {
    type Sleep = VirtualSleep;

    fn sleep(&self, delay: Duration) -> VirtualSleep {
        let mut v = self.lock();
        let id = v.requested.len();
        v.requested.push(delay);
        v.wakers.push(None);
        if v.release == Release::Instant && v.released == id {
            v.released += 1;
        }
        VirtualSleep {
            shared: Arc::clone(&self.shared),
            id,
        }
    }
}

/// A wait handed out by a [`VirtualScheduler`].
#[derive(Debug)]
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct VirtualSleep {
    shared: Arc<Mutex<Virtual>>,
    id: usize,
}

impl Future for VirtualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut v = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if self.id < v.released {
            Poll::Ready(())
        } else {
            v.wakers[self.id] = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}
