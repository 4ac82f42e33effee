//! K7: keys a run sends downstream are derived from the inbound intent, not drawn.

use idem_core::run::{self, downstream_key, Run, RunStart, Step};
use idem_core::{IdempotencyKey, Scope};

fn scope(tenant: &str, method: &str, key: &str) -> Scope {
    Scope::parse(tenant, method, key).unwrap()
}

/// Vectors computed outside Rust (Python's `hashlib`, `struct` and `uuid`) from the algorithm
/// as `downstream_key` documents it.
#[test]
fn k7_downstream_key_test_vectors() {
    let cases: [(&str, &str, &str, &str, Step<'_>, &str, &str); 5] = [
        (
            "tenant-0042",
            "/shop.v1.Shop/CreateOrder",
            "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
            "/stock.v1.Stock/Deduct",
            Step::Ordinal(0),
            "266d23291c8a8ced5cbabccdf83a73a822f7fcbaaa98a45c0348802b7421630d",
            "6aa27a68-36cc-8c77-adcd-cca020495d81",
        ),
        (
            "tenant-0042",
            "/shop.v1.Shop/CreateOrder",
            "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
            "/stock.v1.Stock/Deduct",
            Step::Ordinal(1),
            "266d23291c8a8ced5cbabccdf83a73a822f7fcbaaa98a45c0348802b7421630d",
            "30e483c1-769c-82c2-9deb-da19753624c9",
        ),
        (
            "tenant-0043",
            "/shop.v1.Shop/CreateOrder",
            "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
            "/stock.v1.Stock/Deduct",
            Step::Ordinal(0),
            "10018eb098cb95e8161a21a8f5dffe0538215107648fce3ae64e9cca1e3f8369",
            "2a48b7f4-dd5c-8da2-b2dc-dce48c395f19",
        ),
        (
            "tenant-0042",
            "/checkout",
            "a6b1c0de-7f00-4d1e",
            "POST /v1/charges",
            Step::Named("charge"),
            "a40ad7d41e377730ace4d4eb0d093c936aed9c00d91b146016f85f00a2f1f255",
            "4d3d7692-2b64-852a-a799-47f4a9b02334",
        ),
        (
            "tenant-0042",
            "/checkout",
            "a6b1c0de-7f00-4d1e",
            "POST /v1/charges",
            Step::Named(""),
            "a40ad7d41e377730ace4d4eb0d093c936aed9c00d91b146016f85f00a2f1f255",
            "c7f05769-2693-861f-a256-5b294903b891",
        ),
    ];
    for (tenant, method, key, target, step, digest, want) in cases {
        let run = Run::new(&scope(tenant, method, key), None, RunStart::Fresh);
        let hex: String = run.digest().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, digest, "{tenant} {method} {key}");
        assert_eq!(
            downstream_key(run.digest(), target, step).as_str(),
            want,
            "{tenant} {method} {key} {target} {step:?}"
        );
    }
    assert_eq!(
        downstream_key(&[0; 32], "/stock.v1.Stock/Deduct", Step::Ordinal(0)).as_str(),
        "f0f461cb-29c5-8531-8097-26c6cb35c4e9"
    );
}

#[test]
fn k7_derived_keys_pass_the_key_rules() {
    let k = downstream_key(&[7; 32], "POST /v1/charges", Step::Named("charge"));
    assert_eq!(IdempotencyKey::parse(k.as_str()).unwrap(), k);
    assert_eq!(&k.as_str()[14..15], "8", "a UUIDv8: {k}");
}

#[test]
fn k7_two_tenants_with_the_same_inbound_key_derive_different_keys() {
    let key = "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10";
    let a = Run::new(
        &scope("tenant-a", "/shop/CreateOrder", key),
        None,
        RunStart::Fresh,
    );
    let b = Run::new(
        &scope("tenant-b", "/shop/CreateOrder", key),
        None,
        RunStart::Fresh,
    );
    assert_ne!(a.next_key("/stock/Deduct"), b.next_key("/stock/Deduct"));
    assert_ne!(
        a.key_for("/stock/Deduct", "s"),
        b.key_for("/stock/Deduct", "s")
    );
    // And other inbound keys or methods of one tenant, too.
    let c = Run::new(
        &scope("tenant-a", "/shop/CreateOrder", "another-key-0001"),
        None,
        RunStart::Fresh,
    );
    let d = Run::new(
        &scope("tenant-a", "/shop/CancelOrder", key),
        None,
        RunStart::Fresh,
    );
    let first = Run::new(
        &scope("tenant-a", "/shop/CreateOrder", key),
        None,
        RunStart::Fresh,
    );
    let k = first.next_key("/stock/Deduct");
    assert_ne!(k, c.next_key("/stock/Deduct"));
    assert_ne!(k, d.next_key("/stock/Deduct"));
}

#[test]
fn k7_ordinals_count_per_target_and_restart_with_each_run() {
    let s = scope("tenant-1", "/shop/CreateOrder", "order-0001");
    let first = Run::new(&s, Some(1), RunStart::Fresh);
    let keys: Vec<_> = [
        first.next_key("/stock/Deduct"),
        first.next_key("/pay/Charge"),
        first.next_key("/stock/Deduct"),
    ]
    .into();
    let o = first.digest();
    assert_eq!(
        keys[0],
        downstream_key(o, "/stock/Deduct", Step::Ordinal(0))
    );
    assert_eq!(keys[1], downstream_key(o, "/pay/Charge", Step::Ordinal(0)));
    assert_eq!(
        keys[2],
        downstream_key(o, "/stock/Deduct", Step::Ordinal(1))
    );
    // A re-run (another instance, a higher token, a takeover) sends the same keys in order.
    let again = Run::new(&s, Some(9), RunStart::TakeOver);
    assert_eq!(again.next_key("/stock/Deduct"), keys[0]);
    assert_eq!(again.next_key("/pay/Charge"), keys[1]);
    assert_eq!(again.next_key("/stock/Deduct"), keys[2]);
    // Clones share the count: they are the same run.
    let clone = again.clone();
    assert_eq!(
        clone.next_key("/stock/Deduct"),
        downstream_key(o, "/stock/Deduct", Step::Ordinal(2))
    );
}

#[test]
fn k7_a_named_step_overrides_the_ordinal_and_does_not_count() {
    let s = scope("tenant-1", "/checkout", "checkout-0001");
    let run = Run::new(&s, None, RunStart::Fresh);
    let named = run.key_for("POST /v1/charges", "charge");
    assert_eq!(
        named,
        downstream_key(run.digest(), "POST /v1/charges", Step::Named("charge"))
    );
    assert_ne!(named, run.key_for("POST /v1/charges", "refund"));
    assert_ne!(named, run.key_for("POST /v1/other", "charge"));
    // Naming a step takes no ordinal: the first unnamed call is still number 0.
    assert_eq!(
        run.next_key("POST /v1/charges"),
        downstream_key(run.digest(), "POST /v1/charges", Step::Ordinal(0))
    );
}

#[tokio::test]
async fn k7_inside_a_run_outbound_keys_are_derived_outside_they_are_fresh() {
    let s = scope("tenant-1", "/shop/CreateOrder", "order-0002");
    let keys = |start| {
        Run::new(&s, None, start).attach(async {
            (
                run::outbound_key("/stock/Deduct", None),
                run::outbound_key("/stock/Deduct", None),
                run::outbound_key("POST /v1/charges", Some("charge")),
            )
        })
    };
    let first = keys(RunStart::Fresh).await;
    let again = keys(RunStart::TakeOver).await;
    assert_eq!(first, again);
    assert_ne!(first.0, first.1);
    // Outside: nothing is current and every call draws a new key.
    assert!(Run::current().is_none());
    let a = run::outbound_key("/stock/Deduct", None);
    let b = run::outbound_key("/stock/Deduct", None);
    assert_ne!(a, b);
    assert_ne!(a, first.0);
}

#[tokio::test]
async fn k7_the_run_travels_with_its_future_into_a_spawned_task() {
    let s = scope("tenant-1", "/shop/CreateOrder", "order-0003");
    let run = Run::new(&s, Some(4), RunStart::Fresh);
    let want = downstream_key(run.digest(), "/stock/Deduct", Step::Ordinal(0));
    let fut = run.attach(async {
        tokio::task::yield_now().await;
        let run = Run::current().unwrap();
        (
            run.fencing_token(),
            run.is_takeover(),
            run.next_key("/stock/Deduct"),
        )
    });
    let (token, takeover, key) = tokio::spawn(fut).await.unwrap();
    assert_eq!((token, takeover, key), (Some(4), false, want));
}

#[tokio::test(start_paused = true)]
async fn k7_a_lost_lease_wakes_whoever_waits_for_it() {
    let run = Run::new(
        &scope("tenant-1", "/m", "order-0004"),
        Some(2),
        RunStart::Fresh,
    );
    assert!(!run.is_lease_lost());
    let waiter = tokio::spawn({
        let run = run.clone();
        async move { run.lease_lost().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    run.mark_lease_lost();
    waiter.await.unwrap();
    assert!(run.is_lease_lost());
    run.lease_lost().await; // already lost: at once
    assert!(format!("{run:?}").contains("lease_lost: true"));
    assert!(
        !format!("{run:?}").contains("order-0004"),
        "the key stays out of Debug"
    );
}

#[tokio::test]
async fn k7_calls_inside_a_named_step_use_its_name_not_an_ordinal() {
    let s = scope("tenant-1", "/checkout", "checkout-0002");
    let run = Run::new(&s, None, RunStart::Fresh);
    let (in_step, after) = run
        .clone()
        .attach(async {
            let in_step = run::in_step("charge", async {
                run::outbound_key("POST /v1/charges", None)
            })
            .await;
            (in_step, run::outbound_key("POST /v1/charges", None))
        })
        .await;
    assert_eq!(in_step, run.key_for("POST /v1/charges", "charge"));
    // The step took no ordinal: the first call after it is number 0.
    assert_eq!(
        after,
        downstream_key(run.digest(), "POST /v1/charges", Step::Ordinal(0))
    );
    // A name given with the call wins over the step's.
    let explicit = run
        .clone()
        .attach(run::in_step("charge", async {
            run::outbound_key("POST /v1/charges", Some("refund"))
        }))
        .await;
    assert_eq!(explicit, run.key_for("POST /v1/charges", "refund"));
}
