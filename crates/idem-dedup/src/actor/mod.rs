//! The shard actors and what they share with the engine's handles: nothing here is public.
//!
//! A shard ([`shard`]) is one tokio task that alone writes its table of entries ([`entry`]) and
//! its timer queue ([`wheel`]). Callers reach it with messages ([`message`]) through a bounded
//! mailbox, leaders report how their runs ended through a completion queue ([`inbox`]), and a
//! leader drives its action inline, handing it to a task if its call is dropped ([`run`]).
//! Duplicates of a run in flight wait on its broadcast cell ([`join`]). A scope is addressed by
//! a keyed digest ([`hash`]); tenants' shares of the budget are kept per shard ([`quota`]); the
//! shard's counts ([`tally`]) are published to atomics ([`counters`]) that `stats()` reads, and
//! the engine-wide ones and each shard's published table live in [`shared`].
//!
//! Imports go one way: the engine's handle (`crate::engine`) and the engines built on it use
//! this module, and nothing here uses them. Inside it, `shard` uses the others but `run` and
//! `counters`; `shared` uses `entry`, `counters` and `wheel`; `entry` uses `join`, `hash`,
//! `quota` and `wheel`; `run` uses `inbox`, `message` and `wheel`; `inbox` uses `message` and
//! `wheel`; `join` uses `message`; `message` uses `hash` and `wheel`; `tally` uses `counters`.
//! Besides one another, these files use only the crate's vocabulary: the settings (`config`),
//! the answers (`outcome`, `error`, `info`), and the names of metrics and spans (`metrics`,
//! `trace`).

pub(crate) mod counters;
pub(crate) mod entry;
pub(crate) mod hash;
pub(crate) mod inbox;
pub(crate) mod join;
pub(crate) mod message;
pub(crate) mod quota;
pub(crate) mod run;
pub(crate) mod shard;
pub(crate) mod shared;
pub(crate) mod tally;
pub(crate) mod wheel;
