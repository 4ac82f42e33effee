//! Z5: effectively-once across services, under a crash between a downstream call and the
//! caller's own record.
//!
//! The chain: client → order service (behind `IdemLayer`, two instances on one shared tier) →
//! stock service (behind `IdemLayer`, an engine of its own), and in one variant a payment
//! provider too (an axum service that honours `Idempotency-Key`, reached through
//! `idem-reqwest`). The order handler sets no downstream key, as the docs say: idem derives it
//! from the inbound intent.
//!
//! The fault: instance A is a process of its own (this test binary, run again as a worker). Its
//! handler makes its downstream calls, then stops before recording the order; the test then
//! `kill -9`s it. The clients' retries (same key) and duplicate callers land on instance B, which
//! takes the intent over (Redis: A's lease lapses once A stops renewing it; PostgreSQL: A's
//! transaction dies with its connection, its order row with it) and runs the handler again. The
//! re-run sends the same derived keys, so the stock service and the payment provider replay what
//! A's run caused instead of doing it again.
//!
//! Asserted per intent: exactly one deduction, one order (and one charge); every caller got a
//! success, and all of an intent's callers got the same answer. The control row runs the same
//! fault with a fresh key drawn by hand for each downstream call, as a user would without
//! idem's derivation: every faulted intent is deducted twice. Each test prints its table.
//!
//! Needs `redis-server` on the PATH and PostgreSQL at 127.0.0.1:5432 (database `test`, trust
//! auth; `IDEM_PG_URL` overrides); each run uses a Redis of its own and a schema of its own.

#[path = "z5_chain/services.rs"]
mod services;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use idem_test_support::redis::{Options, RedisServer};
use idem_test_support::worker::{self, Worker};
use services::{downstream, order_instance, Keys, OrderConfig, Tier};

/// Intents the killed instance A holds (the first caller of each goes to A).
const FAULTED: usize = 6;
/// Intents whose first caller goes to B, which runs them without a fault.
const CLEAN: usize = 6;
/// The order service's lease on the Redis tier: renewed every third while a handler runs; a
/// killed holder's claim lapses within about one lease.
const LEASE: Duration = Duration::from_secs(1);

const REDIS_TEST: &str =
    "z5_redis_kill_9_between_the_downstream_calls_and_the_order_deducts_and_orders_once";
const PAYMENT_TEST: &str =
    "z5_redis_with_a_payment_step_through_reqwest_kill_9_charges_and_deducts_once_per_intent";
const PG_TEST: &str =
    "z5_postgres_kill_9_between_the_downstream_calls_and_the_order_deducts_and_orders_once";

/// A name no other run uses.
fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

/// One row of the table: what one chain run did.
struct Row {
    tier: &'static str,
    keys: Keys,
    intents: usize,
    faulted: usize,
    deductions: u32,
    /// Requests that reached the stock service, replays included.
    stock_calls: u32,
    orders: u32,
    charges: Option<u32>,
    callers: usize,
    callers_ok: usize,
    /// Per intent: (deductions, orders, charges).
    per_intent: Vec<(String, u32, u32, u32)>,
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| tier                       | fault                                    | downstream keys | intents | stock calls | deductions | orders | charges | callers ok |"
    );
    let _ = writeln!(
        out,
        "|----------------------------|------------------------------------------|-----------------|--------:|------------:|-----------:|-------:|--------:|-----------:|"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {:<26} | {:<40} | {:<15} | {:>7} | {:>11} | {:>10} | {:>6} | {:>7} | {:>10} |",
            r.tier,
            format!(
                "kill -9 after {} ({} intents)",
                if r.charges.is_some() {
                    "stock + charge"
                } else {
                    "stock"
                },
                r.faulted
            ),
            match r.keys {
                Keys::Derived => "derived (K7)",
                Keys::DrawnByHand => "drawn by hand",
            },
            r.intents,
            r.stock_calls,
            r.deductions,
            r.orders,
            r.charges.map_or("-".to_owned(), |c| c.to_string()),
            format!("{}/{}", r.callers_ok, r.callers),
        );
    }
    out
}

/// A client's call of CreateOrder for `intent` with `key`: to the first address, moving on to
/// the next when the connection fails (a killed instance), retrying (same key) on a
/// retryable answer, as a client behind a load balancer would.
async fn place(addrs: &[SocketAddr], intent: &str, key: &str) -> (StatusCode, String) {
    let client = services::http_client();
    let mut at = 0;
    for _ in 0..400 {
        let req = http::Request::post(format!("http://{}/orders", addrs[at]))
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from(intent.to_owned())))
            .unwrap();
        match client.request(req).await {
            Err(_) => at = (at + 1).min(addrs.len() - 1),
            Ok(resp) if resp.status().is_server_error() => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok(resp) => {
                let status = resp.status();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                return (status, String::from_utf8_lossy(&body).into_owned());
            }
        }
    }
    panic!("{intent}: no answer after 400 attempts");
}

/// One chain run on `tier`: stock service (and payment provider), instance A in a worker process
/// that holds every intent it gets after its downstream calls, instance B here; the first caller
/// of each faulted intent goes to A, a duplicate to B; A is killed; every caller's answer and
/// every service's count is collected.
async fn chain(test: &str, tier: Tier, keys: Keys, payment: bool) -> Row {
    let (stock_addr, stock) = downstream("/stock/deduct", "deduction").await;
    let (payment_addr, charges) = if payment {
        let (a, l) = downstream("/v1/charges", "charge").await;
        (Some(a), Some(l))
    } else {
        (None, None)
    };
    let cfg = OrderConfig {
        tier: tier.clone(),
        lease: LEASE,
        stock: stock_addr,
        payment: payment_addr,
        keys,
        hold_after_calls: true,
    };
    let mut a = Worker::spawn(test, "order-instance", &cfg.to_env());
    let a_addr: SocketAddr = a.next("LISTENING ").await.parse().unwrap();
    let b_addr = order_instance(OrderConfig {
        hold_after_calls: false,
        ..cfg
    })
    .await;

    let intents: Vec<String> = (0..FAULTED + CLEAN)
        .map(|i| format!("intent-{i:04}"))
        .collect();
    let key = |intent: &str| format!("z5-{intent}");
    let mut callers = tokio::task::JoinSet::new();
    for (i, intent) in intents.iter().enumerate() {
        let route = if i < FAULTED {
            vec![a_addr, b_addr]
        } else {
            vec![b_addr]
        };
        let (intent, key) = (intent.clone(), key(intent));
        callers.spawn(async move { (intent.clone(), place(&route, &intent, &key).await) });
    }
    // A made its downstream calls for every intent it got, and holds them before its orders.
    for _ in 0..FAULTED {
        a.next("CALLED ").await;
    }
    assert!(
        stock.total() as usize >= FAULTED,
        "A deducted before it was killed"
    );
    // Duplicates of every intent reach B while A still holds its runs.
    for intent in &intents {
        let (intent, key) = (intent.clone(), key(intent));
        callers.spawn(async move { (intent.clone(), place(&[b_addr], &intent, &key).await) });
    }
    a.kill_9().await;

    let mut answers: HashMap<String, Vec<(StatusCode, String)>> = HashMap::new();
    while let Some(r) = callers.join_next().await {
        let (intent, answer) = r.unwrap();
        answers.entry(intent).or_default().push(answer);
    }
    // A late caller of every intent: B replays what the intent's one run answered.
    for intent in &intents {
        let answer = place(&[b_addr], intent, &key(intent)).await;
        answers.get_mut(intent).unwrap().push(answer);
    }

    let mut row = Row {
        tier: tier.name(),
        keys,
        intents: intents.len(),
        faulted: FAULTED,
        deductions: stock.total(),
        stock_calls: stock.requests(),
        orders: 0,
        charges: charges.as_ref().map(services::Ledger::total),
        callers: 0,
        callers_ok: 0,
        per_intent: Vec::new(),
    };
    for intent in &intents {
        let got = &answers[intent];
        row.callers += got.len();
        row.callers_ok += got
            .iter()
            .filter(|(s, _)| *s == StatusCode::CREATED)
            .count();
        assert!(
            got.iter().all(|a| a == &got[0]),
            "{intent}: every caller gets the same answer: {got:?}"
        );
        let orders = tier.orders(intent).await;
        row.orders += orders;
        row.per_intent.push((
            intent.clone(),
            stock.of(intent),
            orders,
            charges.as_ref().map_or(1, |c| c.of(intent)),
        ));
    }
    row
}

/// What a worker does: serve as order-service instance A until killed.
async fn order_worker() {
    let addr = order_instance(OrderConfig::from_env()).await;
    println!("LISTENING {addr}");
    std::future::pending::<()>().await;
}

/// The K7 row: one deduction, one order (and one charge) per intent, every caller answered the
/// same; then the control row with hand-drawn keys: the faulted intents deducted twice.
fn check(rows: &[Row]) {
    let [k7, control] = rows else { unreachable!() };
    assert_eq!(k7.callers_ok, k7.callers, "every caller succeeded");
    // Each faulted intent's stock call was made twice (by A, then by B's re-run) and done once.
    assert_eq!(k7.stock_calls as usize, 2 * FAULTED + CLEAN);
    assert_eq!(control.stock_calls as usize, 2 * FAULTED + CLEAN);
    for (intent, deductions, orders, charges) in &k7.per_intent {
        assert_eq!(
            (*deductions, *orders, *charges),
            (1, 1, 1),
            "{intent}: (deductions, orders, charges)"
        );
    }
    assert_eq!(control.callers_ok, control.callers);
    for (i, (intent, deductions, orders, charges)) in control.per_intent.iter().enumerate() {
        let twice = if i < FAULTED { 2 } else { 1 };
        assert_eq!(
            (*deductions, *orders, *charges),
            (twice, 1, if control.charges.is_some() { twice } else { 1 }),
            "{intent} with hand-drawn keys: (deductions, orders, charges)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z5_redis_kill_9_between_the_downstream_calls_and_the_order_deducts_and_orders_once() {
    if worker::role().is_some() {
        return order_worker().await;
    }
    let redis = RedisServer::start_with(Options::aof_always()).await;
    let tier = |run: &str| Tier::Redis {
        url: redis.url(),
        prefix: format!("{}:", unique(run)),
    };
    let rows = vec![
        chain(REDIS_TEST, tier("z5k7"), Keys::Derived, false).await,
        chain(REDIS_TEST, tier("z5control"), Keys::DrawnByHand, false).await,
    ];
    println!("{}", table(&rows));
    check(&rows);
}

/// The variant with a payment step: the handler deducts through `RetryLayer`, then charges an
/// axum payment provider (behind `IdemLayer`: it honours `Idempotency-Key`) through
/// `idem-reqwest`, then is killed before its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z5_redis_with_a_payment_step_through_reqwest_kill_9_charges_and_deducts_once_per_intent() {
    if worker::role().is_some() {
        return order_worker().await;
    }
    let redis = RedisServer::start_with(Options::aof_always()).await;
    let tier = |run: &str| Tier::Redis {
        url: redis.url(),
        prefix: format!("{}:", unique(run)),
    };
    let rows = vec![
        chain(PAYMENT_TEST, tier("z5pay"), Keys::Derived, true).await,
        chain(PAYMENT_TEST, tier("z5paycontrol"), Keys::DrawnByHand, true).await,
    ];
    println!("{}", table(&rows));
    check(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z5_postgres_kill_9_between_the_downstream_calls_and_the_order_deducts_and_orders_once() {
    if worker::role().is_some() {
        return order_worker().await;
    }
    let url = std::env::var("IDEM_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = services::pg_pool(&url, 2).await;
    let mut schemas = Vec::new();
    let mut rows = Vec::new();
    for (run, keys) in [("z5k7", Keys::Derived), ("z5control", Keys::DrawnByHand)] {
        let schema = unique(run);
        idem_postgres::migrate(&pool, &schema).await.unwrap();
        idem_postgres::sqlx::raw_sql(&format!(
            "CREATE TABLE \"{schema}\".orders (id bigserial PRIMARY KEY, intent text NOT NULL)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let tier = Tier::Postgres {
            url: url.clone(),
            schema: schema.clone(),
        };
        rows.push(chain(PG_TEST, tier, keys, false).await);
        schemas.push(schema);
    }
    println!("{}", table(&rows));
    check(&rows);
    for schema in schemas {
        let _ = idem_postgres::sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(&pool)
            .await;
    }
}
