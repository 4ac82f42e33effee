//! R1: backoff delays, jitter bounds, overflow safety, validated construction.

use std::time::Duration;

use idem_retry::{FixedRandom, RetryPolicy, DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY};
use idem_test_support::time::ms;

#[test]
fn r1_defaults_are_the_spec_values() {
    let p = RetryPolicy::default();
    assert_eq!(p.max_attempts(), 3);
    assert_eq!(p.base_delay(), ms(20));
    assert_eq!(p.multiplier(), 2.0);
    assert_eq!(p.max_delay(), ms(1000));
    assert_eq!(p.jitter(), 0.2);
    assert_eq!(p.min_attempt_time(), ms(50));
}

#[test]
fn r1_exact_delay_sequence_with_fixed_random_source() {
    let mid = RetryPolicy::builder()
        .random_source(FixedRandom::new(0.5))
        .build()
        .unwrap();
    let got: Vec<_> = (1..=9).map(|n| mid.delay_after(n)).collect();
    let want: Vec<_> = [20, 40, 80, 160, 320, 640, 1000, 1000, 1000]
        .into_iter()
        .map(ms)
        .collect();
    assert_eq!(got, want);

    // Lowest draw: every delay times 0.8.
    let low = RetryPolicy::builder()
        .random_source(FixedRandom::new(0.0))
        .build()
        .unwrap();
    let got: Vec<_> = (1..=8).map(|n| low.delay_after(n)).collect();
    let want: Vec<_> = [16, 32, 64, 128, 256, 512, 800, 800]
        .into_iter()
        .map(ms)
        .collect();
    assert_eq!(got, want);

    // A draw of 0.75: every delay times 1.1 (the cap too: jitter applies after the cap).
    let high = RetryPolicy::builder()
        .random_source(FixedRandom::new(0.75))
        .build()
        .unwrap();
    let got: Vec<_> = (1..=8).map(|n| high.delay_after(n)).collect();
    let want: Vec<_> = [22, 44, 88, 176, 352, 704, 1100, 1100]
        .into_iter()
        .map(ms)
        .collect();
    assert_eq!(got, want);

    // A custom policy: 5 ms, x3, 100 ms cap, no jitter.
    let custom = RetryPolicy::builder()
        .base_delay(ms(5))
        .multiplier(3.0)
        .max_delay(ms(100))
        .jitter(0.0)
        .build()
        .unwrap();
    let got: Vec<_> = (1..=5).map(|n| custom.delay_after(n)).collect();
    assert_eq!(got, vec![ms(5), ms(15), ms(45), ms(100), ms(100)]);
}

#[test]
fn r1_jitter_stays_within_20_percent_over_100k_samples() {
    let p = RetryPolicy::default();
    for n in [1u32, 3, 7] {
        let center = p.capped_delay(n).as_secs_f64();
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for _ in 0..100_000 {
            let f = p.delay_after(n).as_secs_f64() / center;
            assert!((0.8..=1.2).contains(&f), "n={n}: factor {f} outside ±20%");
            lo = lo.min(f);
            hi = hi.max(f);
        }
        // The draws really spread over the band (not stuck at one value).
        assert!(lo < 0.81 && hi > 1.19, "n={n}: spread [{lo}, {hi}]");
    }
}

#[test]
fn r1_delay_after_u32_max_is_the_cap() {
    let mid = RetryPolicy::builder()
        .random_source(FixedRandom::new(0.5))
        .build()
        .unwrap();
    assert_eq!(mid.delay_after(u32::MAX), DEFAULT_MAX_DELAY);
    assert_eq!(mid.capped_delay(u32::MAX), DEFAULT_MAX_DELAY);
    // n = 0 is treated as the first failure.
    assert_eq!(mid.delay_after(0), DEFAULT_BASE_DELAY);
    // With jitter, still the cap times a factor in [0.8, 1.2].
    let d = RetryPolicy::default().delay_after(u32::MAX);
    assert!(d >= ms(800) && d <= ms(1200), "{d:?}");
    // A huge cap and a huge multiplier: saturates, never panics.
    let big = RetryPolicy::builder()
        .multiplier(1e300)
        .max_delay(Duration::MAX)
        .jitter(0.0)
        .build()
        .unwrap();
    for n in [1, 2, 3, 64, u32::MAX] {
        let _ = big.delay_after(n);
    }
    assert_eq!(big.delay_after(u32::MAX), Duration::MAX);
}

#[test]
fn r1_invalid_policy_names_the_rule() {
    let cases = [
        (RetryPolicy::builder().max_attempts(0), "max_attempts"),
        (
            RetryPolicy::builder().base_delay(Duration::ZERO),
            "base_delay",
        ),
        (
            RetryPolicy::builder().base_delay(ms(10)).max_delay(ms(5)),
            "max_delay",
        ),
        (RetryPolicy::builder().multiplier(0.5), "multiplier"),
        (RetryPolicy::builder().multiplier(f64::NAN), "multiplier"),
        (RetryPolicy::builder().jitter(1.0), "jitter"),
        (RetryPolicy::builder().jitter(-0.1), "jitter"),
    ];
    for (builder, rule) in cases {
        let err = builder.build().unwrap_err();
        assert!(err.to_string().contains(rule), "{err} should name {rule}");
    }
}
