//! D5 at connect time: the persistence check (a volatile Redis is refused unless the user opts
//! in) and waiting for a Redis that is still starting (connection refused, `LOADING`).

use std::time::Duration;

use idem_redis::{ConnectError, Persistence, RedisTier};
use idem_test_support::redis::{raw, Options, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_volatile_redis_is_refused_unless_allowed() {
    let volatile = RedisServer::start().await;
    let err = RedisTier::builder()
        .connect(&volatile.url())
        .await
        .unwrap_err();
    match &err {
        ConnectError::Volatile { persistence, .. } => assert_eq!(*persistence, Persistence::None),
        other => panic!("expected Volatile, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("run a second time") && text.contains("allow_volatile"),
        "{text}"
    );

    let allowed = RedisTier::builder()
        .allow_volatile(true)
        .connect(&volatile.url())
        .await
        .expect("opted in");
    assert_eq!(allowed.persistence(), Persistence::None);

    // Snapshots alone lose what was written since the last one: volatile too.
    let snapshots = RedisServer::start_with(Options {
        aof: false,
        extra: vec![("save", "3600 1".into())],
    })
    .await;
    let err = RedisTier::builder()
        .connect(&snapshots.url())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::Volatile {
                persistence: Persistence::Snapshots,
                ..
            }
        ),
        "{err}"
    );

    // An append-only file: accepted as is.
    let aof = RedisServer::start_with(Options::aof_always()).await;
    let t = RedisTier::builder().connect(&aof.url()).await.unwrap();
    assert_eq!(t.persistence(), Persistence::AofAlways);
    let everysec = RedisServer::start_with(Options {
        aof: true,
        extra: vec![("appendfsync", "everysec".into())],
    })
    .await;
    let t = RedisTier::builder().connect(&everysec.url()).await.unwrap();
    assert_eq!(t.persistence(), Persistence::AofEverySec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_connect_waits_for_a_redis_that_is_still_starting() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    // Refused: nothing listens yet; the server starts 300 ms after connect began.
    let mut redis = RedisServer::start().await;
    redis.kill();
    let url = redis.url();
    let connecting = tokio::spawn(async move {
        RedisTier::builder()
            .allow_volatile(true)
            .startup_timeout(Duration::from_secs(20))
            .connect(&url)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart().await;
    connecting
        .await
        .unwrap()
        .expect("connect retried until the server listened");

    // LOADING: a server reading a large append-only file back answers LOADING for a while.
    let mut redis = RedisServer::start_with(Options::aof_always()).await;
    let port = redis.port();
    assert!(raw(port, "DEBUG POPULATE 20000 k 16")
        .await
        .unwrap()
        .starts_with("+OK"));
    assert!(raw(port, "BGREWRITEAOF").await.unwrap().starts_with('+'));
    for _ in 0..1000 {
        let info = raw(port, "INFO persistence").await.unwrap();
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    redis.set_options(Options {
        aof: true,
        extra: vec![
            // Redis' own test knobs: 100 µs per key loaded (2 s in all), answering clients
            // (with LOADING) while it loads.
            ("key-load-delay", "100".into()),
            ("loading-process-events-interval-bytes", "1024".into()),
        ],
    });
    redis.restart_nowait();
    let mut loading = false;
    for _ in 0..500 {
        if let Ok(r) = raw(port, "PING").await {
            if r.starts_with("-LOADING") {
                loading = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        loading,
        "the server never answered LOADING: the test did not exercise it"
    );
    let t = RedisTier::builder()
        .startup_timeout(Duration::from_secs(30))
        .connect(&redis.url())
        .await
        .expect("connect retried while redis loaded its data");
    assert_eq!(t.persistence(), Persistence::AofAlways);
    let still = raw(port, "PING").await.unwrap();
    assert!(
        still.starts_with("+PONG"),
        "connected before loading ended: {still}"
    );
}
