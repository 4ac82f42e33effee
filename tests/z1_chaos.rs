//! Z1: chaos over real TCP on loopback with the real tonic client. 100 concurrent clients create
//! orders through the client retry layer while 20% of requests fail — connections dropped before
//! the request is sent and after it is sent, answers slowed past the attempt timeout,
//! UNAVAILABLE, RESOURCE_EXHAUSTED with pushback — and 4% of the order runs are lost between
//! their stock deduction (in a separate stock service, keyed by idem's derivation) and their
//! order. Asserted exactly, per intent id: every intent reported successful was created exactly
//! once (with the order id the client was told) and deducted exactly once, none was created or
//! deducted twice; give-ups are counted apart (created and deducted at most once).

use std::sync::atomic::Ordering::Relaxed;

use idem_shop::chaos::{self, ChaosConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z1_chaos_every_success_created_exactly_once_none_twice() {
    let cfg = ChaosConfig::twenty_percent(100, 4, 0x21);
    let report = chaos::run(cfg).await.unwrap();
    println!("{}", report.table());

    assert_eq!(report.results.len(), 400);
    assert_eq!(report.violations(), Vec::<String>::new());
    for r in &report.results {
        let created = report.orders.get(&r.intent).map_or(0, Vec::len);
        let deducted = report.deductions.get(&r.intent).copied().unwrap_or(0);
        assert!(deducted <= 1, "{} deducted {deducted} times", r.intent);
        match r.outcome {
            Ok(id) => {
                assert_eq!(report.orders[&r.intent], vec![id], "{}", r.intent);
                assert_eq!(deducted, 1, "{}", r.intent);
            }
            Err(_) => assert!(
                created <= 1,
                "{} gave up and was created {created} times",
                r.intent
            ),
        }
    }
    assert_eq!(report.succeeded() + report.gave_up(), 400);
    // Every kind of fault was injected at least once.
    let p = &report.proxy;
    for (kind, n) in [
        ("drop before send", p.dropped_before_send.load(Relaxed)),
        ("drop after send", p.dropped_after_send.load(Relaxed)),
        ("slow", p.slowed.load(Relaxed)),
        ("unavailable", report.unavailable),
        ("resource exhausted", report.resource_exhausted),
        ("run lost after its stock call", report.runs_lost),
    ] {
        assert!(n > 0, "no {kind} fault was injected");
    }
    assert!(report.client.retrier.retries > 0);
}
