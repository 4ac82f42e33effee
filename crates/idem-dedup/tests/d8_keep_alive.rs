//! D8: the tiered engine renews its claim's lease while the action runs, on tokio's paused
//! clock over the in-memory tier: every third of the lease by default, one renewal in flight at
//! a time; a renewal fenced out marks the run's lease lost; a failed one is tried again at the
//! next tick; a renewed run is bounded by the local in-flight timeout, not by the lease.

mod common;
mod tier;

use std::time::Duration;

use common::{fp, scope};
use idem_core::run::Run;
use idem_core::{Code, Status};
use idem_dedup::tiered::TieredEngine;
use idem_dedup::LocalCache;
use idem_dedup::{ConfigError, DedupError, OutcomeKind};
use tier::MemTier;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(3);

fn engine(tier: &MemTier) -> TieredEngine<String, MemTier> {
    TieredEngine::<String, _>::builder(tier.clone())
        .lease(LEASE)
        .local(LocalCache::new().shards(1))
        .build()
        .unwrap()
}

fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d)
}

/// When each renewal started, counted from `t0`.
fn starts(tier: &MemTier, t0: Instant) -> Vec<Duration> {
    tier.renewals().iter().map(|(s, _)| *s - t0).collect()
}

/// An action that runs `d` and then says whether its run's lease was lost meanwhile.
fn lasting(
    d: Duration,
) -> impl FnOnce(
    idem_dedup::remote::FencingToken,
) -> futures::future::BoxFuture<'static, Result<String, Status>>
       + Send
       + 'static {
    move |_| {
        Box::pin(async move {
            tokio::time::sleep(d).await;
            let lost = Run::current().expect("inside a run").is_lease_lost();
            Ok(format!("lost={lost}"))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn d8_a_running_action_renews_its_lease_every_third_of_the_lease() {
    let tier = MemTier::default();
    let e = engine(&tier);
    let t0 = Instant::now();
    // Ten seconds: more than three leases.
    let out = e
        .execute(&scope("d8-every-third"), fp("x"), lasting(secs(10.0)))
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert!(out.is_recorded());
    assert_eq!(out.value(), "lost=false");
    let want: Vec<_> = (1..=9).map(|s| secs(f64::from(s))).collect();
    assert_eq!(starts(&tier, t0), want, "a renewal each second (lease 3 s)");
    let st = e.stats();
    assert_eq!((st.renewed, st.lease_lost, st.renew_failed), (9, 0, 0));
    assert_eq!(st.executed, 1);
}

#[tokio::test(start_paused = true)]
async fn d8_renew_every_sets_the_interval_and_an_action_shorter_than_it_renews_nothing() {
    let tier = MemTier::default();
    let e = TieredEngine::<String, _>::builder(tier.clone())
        .lease(LEASE)
        .renew_every(Duration::from_millis(500))
        .local(LocalCache::new().shards(1))
        .build()
        .unwrap();
    let t0 = Instant::now();
    let _ = e
        .execute(&scope("d8-interval"), fp("x"), lasting(secs(2.0)))
        .await
        .unwrap();
    // At 2.0 s the action ends as the fourth tick comes: it is not renewed any more.
    assert_eq!(starts(&tier, t0), [secs(0.5), secs(1.0), secs(1.5)]);
    let quick = e
        .execute(&scope("d8-quick-action"), fp("x"), lasting(secs(0.2)))
        .await
        .unwrap();
    assert_eq!(quick.kind(), OutcomeKind::Executed);
    assert_eq!(e.stats().renewed, 3, "a short action costs no renewal");
}

#[tokio::test(start_paused = true)]
async fn d8_one_renewal_in_flight_at_a_time_each_an_interval_after_the_last_began() {
    let tier = MemTier::default();
    // Every call takes 1.5 s: longer than the 1 s interval.
    tier.round_trip(secs(1.5));
    let e = engine(&tier);
    let t0 = Instant::now();
    let _ = e
        .execute(&scope("d8-slow-tier"), fp("x"), lasting(secs(9.0)))
        .await
        .unwrap();
    let renewals = tier.renewals();
    for pair in renewals.windows(2) {
        let ((start_a, end_a), (start_b, _)) = (pair[0], pair[1]);
        assert!(start_b >= end_a, "two renewals overlapped: {renewals:?}");
        assert!(
            start_b - start_a >= Duration::from_secs(1),
            "renewals closer than the interval: {renewals:?}"
        );
    }
    // The claim answered at 1.5 s, the action ran until 10.5 s. The first renewal began at
    // 2.5 s; each later one when the one before answered, the interval having passed; the one
    // out when the action ended (begun at 10 s) was awaited before the completion.
    assert_eq!(
        starts(&tier, t0),
        [
            secs(2.5),
            secs(4.0),
            secs(5.5),
            secs(7.0),
            secs(8.5),
            secs(10.0)
        ]
    );
    let (_, last_answer) = *renewals.last().unwrap();
    assert_eq!(last_answer - t0, secs(11.5));
}

#[tokio::test(start_paused = true)]
async fn d8_a_fenced_out_renewal_marks_the_run_lost_and_renewals_stop() {
    let tier = MemTier::default();
    tier.fence_renewals(true);
    let e = engine(&tier);
    let t0 = Instant::now();
    let err = e
        .execute(&scope("d8-lost-lease"), fp("x"), move |_| async move {
            let run = Run::current().expect("inside a run");
            assert!(!run.is_lease_lost());
            tokio::select! {
                () = run.lease_lost() => Err(Status::new(
                    Code::Aborted,
                    format!("stopped: the lease was lost after {:?}", t0.elapsed()),
                )),
                () = tokio::time::sleep(Duration::from_secs(30)) => Ok("kept".to_string()),
            }
        })
        .await
        .unwrap_err();
    // The first renewal (at 1 s) found the claim gone: the action learned it then.
    match &err {
        DedupError::Action { status, .. } => {
            assert_eq!(status.message(), "stopped: the lease was lost after 1s")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(starts(&tier, t0), [secs(1.0)], "no renewal after the loss");
    let st = e.stats();
    assert_eq!((st.renewed, st.lease_lost, st.failed), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn d8_a_failed_renewal_is_counted_and_tried_again_at_the_next_tick() {
    let tier = MemTier::default();
    tier.fail_renewals(true);
    let e = engine(&tier);
    let t0 = Instant::now();
    let heal = {
        let tier = tier.clone();
        tokio::spawn(async move {
            tokio::time::sleep(secs(2.5)).await;
            tier.fail_renewals(false);
        })
    };
    let out = e
        .execute(&scope("d8-retry-renewal"), fp("x"), lasting(secs(5.0)))
        .await
        .unwrap();
    heal.await.unwrap();
    assert_eq!(out.value(), "lost=false", "a failed renewal loses nothing");
    assert!(out.is_recorded());
    assert_eq!(
        starts(&tier, t0),
        [secs(1.0), secs(2.0), secs(3.0), secs(4.0)]
    );
    let st = e.stats();
    assert_eq!((st.renew_failed, st.renewed, st.lease_lost), (2, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn d8_without_renewal_a_claim_is_never_renewed() {
    let tier = MemTier::default();
    let e = TieredEngine::<String, _>::builder(tier.clone())
        .lease(LEASE)
        .without_renewal()
        .local(LocalCache::new().shards(1))
        .build()
        .unwrap();
    let out = e
        .execute(&scope("d8-renewal-off"), fp("x"), lasting(secs(10.0)))
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert!(tier.renewals().is_empty());
    assert_eq!(e.stats().renewed, 0);
}

#[tokio::test]
async fn d8_renew_every_must_be_shorter_than_the_lease() {
    for every in [Duration::ZERO, LEASE, LEASE * 2] {
        let err = TieredEngine::<String, _>::builder(MemTier::default())
            .lease(LEASE)
            .renew_every(every)
            .build()
            .unwrap_err();
        assert!(matches!(err, ConfigError::Invalid(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("renew_every must be greater than zero and shorter than the lease"),
            "{err}"
        );
    }
}

/// E6, D8: the local engine's in-flight limit no longer ends a renewed run at about one lease
/// (it used to default to `max_wait` + `lease` + 5 s); it bounds it at `max_wait` + 5 min, and
/// the run's renewals stop with it.
#[tokio::test(start_paused = true)]
async fn d8_e6_a_renewed_run_is_bounded_by_the_local_in_flight_timeout_not_the_lease() {
    let tier = MemTier::default();
    let e = TieredEngine::<String, _>::builder(tier.clone())
        .lease(Duration::from_secs(1))
        .max_wait(Duration::from_secs(1))
        .local(LocalCache::new().shards(1))
        .build()
        .unwrap();
    // A minute: far past the old default of 7 s.
    let out = e
        .execute(&scope("d8-long-action"), fp("x"), lasting(secs(60.0)))
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert_eq!(out.value(), "lost=false");

    // A hung action is ended at max_wait + 5 min, and renewing it stops there.
    let t0 = Instant::now();
    let hung = e
        .execute(&scope("d8-hung-action"), fp("x"), |_| async {
            std::future::pending::<Result<String, Status>>().await
        })
        .await
        .unwrap_err();
    assert!(
        matches!(hung, DedupError::LeaseExpired { after } if after == secs(301.0)),
        "{hung:?}"
    );
    let renewed = tier.renewals().len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        tier.renewals().len(),
        renewed,
        "renewals stopped with the run"
    );
    let last = tier.renewals().last().unwrap().0 - t0;
    assert!(last <= secs(301.0), "renewed at {last:?}");
}

/// D6, D8: a call that bypassed a full local engine has no local in-flight limit to end it, but
/// its renewals still stop at that limit, so a hung action's claim lapses a lease later.
#[tokio::test(start_paused = true)]
async fn d8_a_bypassing_run_stops_renewing_at_the_local_in_flight_timeout() {
    let tier = MemTier::default();
    let e = TieredEngine::<String, _>::builder(tier.clone())
        .lease(LEASE)
        .local(
            LocalCache::new()
                .shards(1)
                .max_entries(1)
                .in_flight_timeout(Duration::from_secs(10)),
        )
        .build()
        .unwrap();
    // One call fills the local engine...
    let (release, gate) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let e = e.clone();
        tokio::spawn(async move {
            e.execute(
                &scope("d8-fills-the-engine"),
                fp("x"),
                move |_| async move {
                    let _ = gate.await;
                    Ok::<_, Status>("first".to_string())
                },
            )
            .await
        })
    };
    common::eventually("the local engine full", || e.local_stats().in_flight == 1).await;
    // ...so the next goes to the tier directly, and hangs.
    let t0 = Instant::now();
    let hung = {
        let e = e.clone();
        tokio::spawn(async move {
            e.execute(&scope("d8-bypassing-call"), fp("x"), |_| async {
                std::future::pending::<Result<String, Status>>().await
            })
            .await
        })
    };
    common::eventually("the call bypassed", || e.stats().local_full == 1).await;
    release.send(()).unwrap();
    let _ = first.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!hung.is_finished(), "nothing ends a bypassing call");
    let want: Vec<_> = (1..=9).map(|s| secs(f64::from(s))).collect();
    assert_eq!(
        starts(&tier, t0),
        want,
        "renewed until the 10 s limit, not after"
    );
    hung.abort();
}
