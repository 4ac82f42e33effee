//! # idem-test-support: what idem's tests share
//!
//! The tests of idem's crates check what they promise against real things: a `tracing`
//! subscriber that keeps every span and event, `redis-server` processes and PostgreSQL clusters
//! of a test's own on free loopback ports, and the same fencing race for every shared tier. One
//! copy of each lives here, so a fix reaches every test that uses it.
//!
//! Not published: the crates take it as a path dev-dependency without a version, which
//! `cargo publish` strips from the manifests it uploads.
//!
//! A helper that cannot do its job (no `redis-server` on the PATH, `initdb` refusing to run)
//! panics with the reason: a test that cannot run fails loudly, it never passes silently.
//!
//! # Where things are
//!
//! | module | what | used by |
//! |---|---|---|
//! | [`capture`] | a per-thread `tracing` subscriber that keeps every span and event, to assert on what was traced | the engine's, the retrier's and the layers' tracing tests |
//! | [`redis`] | [`RedisServer`](redis::RedisServer) and [`RedisCluster`](redis::RedisCluster): `redis-server` processes in temp dirs, killed on drop | idem-redis' tests and bench |
//! | [`postgres`] | [`PgCluster`](postgres::PgCluster): `initdb` + `pg_ctl` in a temp dir, stopped on drop | idem-postgres' tests that stop or restart the server |
//! | [`fencing`] | a holder stalled past its lease, the instances that take over, and what everyone sees after | the shared tiers' fencing tests |
//! | [`help`] | a metrics recorder that keeps every description, and the check that each is in words | every crate's `# HELP` tests |
//! | [`intents`] | the scope and fingerprint of numbered intents | the shared tiers' tests |
//! | [`signal`] | `SIGSTOP` and `SIGCONT` for a worker process | the shared tiers' lease-renewal tests |
//! | [`time`] | `ms(n)`, the wall clock in milliseconds, waiting until a condition holds | tests that count time |
//! | [`worker`] | the test binary re-run as a second process, its output's markers, `kill -9` | the root Z5 chain test |
//! | [`free_port`] | a free loopback port | the servers above |

pub mod capture;
pub mod fencing;
pub mod help;
pub mod intents;
pub mod postgres;
pub mod redis;
pub mod signal;
pub mod time;
pub mod worker;

/// A loopback port that was free a moment ago (the OS picked it for a listener that is closed
/// again), for a server a test starts.
///
/// # Panics
///
/// When no loopback port can be bound.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().unwrap().port()
}
