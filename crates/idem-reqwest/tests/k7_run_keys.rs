//! K7: inside a deduplicated run, a write the middleware sends without a key the caller chose
//! carries the key derived from the inbound intent: `Run::next_key("POST /path")` for the n-th
//! such call, `Run::key_for` for a named step, the same on every run of the intent (so the
//! downstream service replays instead of acting twice), the caller's own key kept, and a fresh
//! key per call outside a run.

mod support;

use idem_core::run::{downstream_key, Run, RunStart, Step, StepName};
use idem_core::{IdempotencyKey, Scope};
use idem_reqwest::{CallReport, KeySource, RetryMiddleware};
use idem_retry::VirtualScheduler;
use reqwest_middleware::ClientWithMiddleware;
use support::{builder, client, sf, Reply, Server};

fn inbound() -> Scope {
    Scope::parse(
        "tenant-0042",
        "/shop.v1.Shop/CreateOrder",
        "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
    )
    .unwrap()
}

fn setup() -> (ClientWithMiddleware, RetryMiddleware<VirtualScheduler>) {
    let (b, _) = builder(3);
    let mw = b.build().unwrap();
    (client(mw.clone()), mw)
}

/// The key the middleware reported for a POST to `url`, with `step` named if given.
async fn post(c: &ClientWithMiddleware, url: &str, step: Option<&'static str>) -> CallReport {
    let mut req = c.post(url).body("{}");
    if let Some(s) = step {
        req = req.with_extension(StepName::new(s));
    }
    let response = req.send().await.unwrap();
    assert!(response.status().is_success());
    CallReport::of(&response).cloned().unwrap()
}

/// K7: the n-th keyless write to `POST /v1/charges` in a run carries `Run::next_key` of that
/// target, on every attempt; other targets count on their own.
#[tokio::test]
async fn k7_write_in_a_run_carries_the_runs_next_key() {
    let server = Server::start(vec![Reply::status(503), Reply::ok()]).await;
    let (c, mw) = setup();
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let (charges, refund) = run
        .clone()
        .attach(async {
            let first = post(&c, &server.url("/v1/charges"), None).await;
            let second = post(&c, &server.url("/v1/charges"), None).await;
            let refund = post(&c, &server.url("/v1/refunds"), None).await;
            ([first, second], refund)
        })
        .await;
    // What `Run::next_key` gives a fresh run of the same intent, call by call.
    let reference = Run::new(&inbound(), None, RunStart::Fresh);
    let want = [
        reference.next_key("POST /v1/charges"),
        reference.next_key("POST /v1/charges"),
    ];
    for (report, want) in charges.iter().zip(&want) {
        assert_eq!(report.key.as_ref(), Some(want));
        assert_eq!(report.key_source, Some(KeySource::Run));
    }
    assert_eq!(charges[0].attempts, 2); // the 503, then the retry with the same key
    assert_eq!(
        refund.key,
        Some(downstream_key(
            run.digest(),
            "POST /v1/refunds",
            Step::Ordinal(0)
        ))
    );
    // On the wire: the first call's two attempts, then one attempt each.
    let sent = server.keys();
    assert_eq!(
        sent,
        vec![
            Some(sf(&want[0])),
            Some(sf(&want[0])),
            Some(sf(&want[1])),
            Some(sf(refund.key.as_ref().unwrap())),
        ]
    );
    assert_eq!((mw.stats().keys_derived, mw.stats().keys_generated), (3, 0));
}

/// K7: a re-run of the intent (another instance took it over after the first run died) sends
/// the same keys in the same order; another inbound intent sends other keys.
#[tokio::test]
async fn k7_rerun_of_the_intent_sends_the_same_keys() {
    let server = Server::start(vec![Reply::ok()]).await;
    let (c, _) = setup();
    let url = server.url("/v1/charges");
    let handler = |c: ClientWithMiddleware, url: String| async move {
        let mut keys = Vec::new();
        for step in [None, Some("charge"), None] {
            keys.push(post(&c, &url, step).await.key.unwrap());
        }
        keys
    };
    let first = Run::new(&inbound(), None, RunStart::Fresh)
        .attach(handler(c.clone(), url.clone()))
        .await;
    // The second run uses another client (another instance): the keys depend on the intent only.
    let (other_client, _) = setup();
    let again = Run::new(&inbound(), Some(7), RunStart::TakeOver)
        .attach(handler(other_client, url.clone()))
        .await;
    assert_eq!(first, again);
    let elsewhere = Scope::parse(
        "tenant-0043",
        "/shop.v1.Shop/CreateOrder",
        "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10",
    )
    .unwrap();
    let theirs = Run::new(&elsewhere, None, RunStart::Fresh)
        .attach(handler(c.clone(), url))
        .await;
    assert!(theirs.iter().all(|k| !first.contains(k)));
    // The downstream service saw each of the first run's keys twice: once per run.
    let sent = server.keys();
    for k in &first {
        assert_eq!(
            sent.iter()
                .filter(|s| s.as_deref() == Some(&*sf(k)))
                .count(),
            2
        );
    }
}

/// K7: a `StepName` in the request's extensions gives `Run::key_for` of the target and the name,
/// whatever the run called before, and takes no ordinal.
#[tokio::test]
async fn k7_step_name_extension_gives_the_named_key() {
    let server = Server::start(vec![Reply::ok()]).await;
    let (c, _) = setup();
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let url = server.url("/v1/charges");
    let (named, ordinal) = run
        .clone()
        .attach(async {
            let named = post(&c, &url, Some("charge")).await;
            let ordinal = post(&c, &url, None).await;
            (named, ordinal)
        })
        .await;
    assert_eq!(named.key, Some(run.key_for("POST /v1/charges", "charge")));
    assert_eq!(named.key_source, Some(KeySource::Run));
    // The named step took no place among the ordinals: the next keyless call is the first.
    assert_eq!(
        ordinal.key,
        Some(downstream_key(
            run.digest(),
            "POST /v1/charges",
            Step::Ordinal(0)
        ))
    );
}

/// K7: inside a run, a key the caller set is kept and takes no place among the run's calls.
#[tokio::test]
async fn k7_callers_key_is_kept_inside_a_run() {
    let server = Server::start(vec![Reply::ok()]).await;
    let (c, mw) = setup();
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let url = server.url("/v1/charges");
    let (mine, next) = run
        .clone()
        .attach(async {
            let response = c
                .post(&url)
                .header("Idempotency-Key", "order-1001-charge")
                .send()
                .await
                .unwrap();
            let mine = CallReport::of(&response).cloned().unwrap();
            (mine, post(&c, &url, None).await)
        })
        .await;
    assert_eq!(
        mine.key,
        Some(IdempotencyKey::parse("order-1001-charge").unwrap())
    );
    assert_eq!(mine.key_source, Some(KeySource::Caller));
    assert_eq!(
        next.key,
        Some(downstream_key(
            run.digest(),
            "POST /v1/charges",
            Step::Ordinal(0)
        ))
    );
    assert_eq!(server.keys()[0].as_deref(), Some("\"order-1001-charge\""));
    assert_eq!(mw.stats().keys_derived, 1);
}

/// K7: outside a run each logical call gets a fresh random key (one per call, not per attempt),
/// a step name or not.
#[tokio::test]
async fn k7_outside_a_run_each_call_gets_a_fresh_key() {
    let server = Server::start(vec![Reply::ok()]).await;
    let (c, mw) = setup();
    let url = server.url("/v1/charges");
    assert!(Run::current().is_none());
    let a = post(&c, &url, None).await;
    let b = post(&c, &url, None).await;
    let s1 = post(&c, &url, Some("charge")).await;
    let s2 = post(&c, &url, Some("charge")).await;
    let keys: Vec<_> = [&a, &b, &s1, &s2]
        .iter()
        .map(|r| {
            assert_eq!(r.key_source, Some(KeySource::Random));
            r.key.clone().unwrap()
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        assert!(keys[i + 1..].iter().all(|o| o != k));
        assert_eq!(k.as_str().as_bytes()[14], b'4', "a random (v4) key: {k}");
    }
    assert_eq!((mw.stats().keys_derived, mw.stats().keys_generated), (0, 4));
}

/// K7: a read inside a run gets no key and takes no place among the run's calls.
#[tokio::test]
async fn k7_reads_in_a_run_get_no_key() {
    let server = Server::start(vec![Reply::ok()]).await;
    let (c, _) = setup();
    let run = Run::new(&inbound(), None, RunStart::Fresh);
    let report = run
        .clone()
        .attach(async {
            let response = c.get(server.url("/v1/charges/ch_1")).send().await.unwrap();
            assert_eq!(CallReport::of(&response).unwrap().key, None);
            post(&c, &server.url("/v1/charges"), None).await
        })
        .await;
    assert_eq!(
        report.key,
        Some(downstream_key(
            run.digest(),
            "POST /v1/charges",
            Step::Ordinal(0)
        ))
    );
    assert_eq!(server.keys()[0], None);
}
