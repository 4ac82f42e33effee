//! The refresh step of a call whose `ABORTED` failures are retried, or its absence.

use std::future::{self, Future, Ready};

/// A refresh step for `ABORTED` failures, or its absence.
pub(super) trait RefreshStep<E> {
    const AVAILABLE: bool;
    type Future: Future<Output = Result<(), E>>;
    fn refresh(&mut self, error: &E) -> Self::Future;
}

pub(super) struct NoRefresh;

impl<E> RefreshStep<E> for NoRefresh {
    const AVAILABLE: bool = false;
    type Future = Ready<Result<(), E>>;
    fn refresh(&mut self, _: &E) -> Self::Future {
        future::ready(Ok(()))
    }
}

pub(super) struct WithRefresh<R>(pub(super) R);

impl<E, R, RFut> RefreshStep<E> for WithRefresh<R>
where
    R: FnMut(&E) -> RFut,
    RFut: Future<Output = Result<(), E>>,
{
    const AVAILABLE: bool = true;
    type Future = RFut;
    fn refresh(&mut self, error: &E) -> RFut {
        (self.0)(error)
    }
}
