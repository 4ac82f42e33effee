//! D5 at connect time: the persistence check (a volatile Redis is refused unless the user opts
//! in) and waiting for a Redis that is still starting (connection refused, `LOADING`).

use std::time::Duration;

use idem_core::{Code, Fingerprint};
use idem_redis::{ConnectError, Persistence, RedisTier};

use idem_test_support::redis::{raw, Options, RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_volatile_redis_is_refused_unless_allowed() {
    let volatile = RedisServer::start().await;
    let err = RedisTier::builder()
        .connect(&volatile.url())
        .await
        .unwrap_err();
    let address = format!("127.0.0.1:{}", volatile.port());
    match &err {
        ConnectError::Volatile { persistence, node } => {
            assert_eq!(*persistence, Persistence::None);
            assert_eq!(
                node.as_deref(),
                Some(address.as_str()),
                "the server's address"
            );
        }
        other => panic!("expected Volatile, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("run a second time") && text.contains("allow_volatile"),
        "{text}"
    );
    assert!(
        text.starts_with(&format!("redis at {address} keeps")),
        "{text}"
    );
    let debug = format!("{err:?}");
    assert!(
        debug.contains(&format!("node: Some({address:?})")) && !debug.contains(r#""""#),
        "{debug}"
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

/// The words of a chain of errors, each level's message once, as a report prints them.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().unwrap().port()
}

/// A wrong port says the connection was refused and where, once, for one server and for a
/// cluster's seed nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_a_closed_port_says_the_connection_was_refused_and_where_once() {
    let port = closed_port();
    let err = RedisTier::builder()
        .startup_timeout(Duration::from_millis(200))
        .connect(&format!("redis://127.0.0.1:{port}/"))
        .await
        .unwrap_err();
    let ConnectError::Unreachable { address, .. } = &err else {
        panic!("expected Unreachable, got {err:?}");
    };
    assert_eq!(
        address.as_deref(),
        Some(format!("127.0.0.1:{port}").as_str())
    );
    assert_eq!(
        chain(&err),
        format!("cannot connect to redis at 127.0.0.1:{port}: connection refused")
    );

    let (a, b) = (closed_port(), closed_port());
    let err = RedisTier::builder()
        .startup_timeout(Duration::from_millis(200))
        .connect_cluster(&[
            &format!("redis://127.0.0.1:{a}/"),
            &format!("redis://127.0.0.1:{b}/"),
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::Unreachable { .. }), "{err:?}");
    let text = chain(&err);
    assert!(
        text.starts_with(&format!(
            "cannot connect to redis at 127.0.0.1:{a}, 127.0.0.1:{b}: "
        )),
        "{text}"
    );
    assert_eq!(text.to_lowercase().matches("refused").count(), 1, "{text}");
}

/// A tier whose server went away: the call's error is the store's, says why once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_a_call_to_a_stopped_redis_is_the_stores_failure_said_once() {
    let mut redis = RedisServer::start().await;
    let engine = crate::engine(crate::tier(&redis.url()).await);
    redis.kill();
    let err = engine
        .execute(
            &crate::scope("d5-gone", 1),
            Fingerprint::of(b"x"),
            |_| async { Ok("ran".to_owned()) },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    let status = err.to_status();
    assert!(
        status
            .message()
            .starts_with("the idempotency store (redis) "),
        "labelled as the store's: {status}"
    );
    assert!(std::error::Error::source(&status).is_none(), "{status:?}");
    let text = chain(&status);
    assert_eq!(text.matches("connection refused").count(), 1, "{text}");
}

/// A cluster that keeps no append-only file is refused with the primary that keeps too little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_volatile_cluster_names_the_node() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let cluster = RedisCluster::start().await;
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let err = RedisTier::builder()
        .connect_cluster(&nodes)
        .await
        .unwrap_err();
    let ConnectError::Volatile { node, persistence } = &err else {
        panic!("expected Volatile, got {err:?}");
    };
    assert_eq!(*persistence, Persistence::None);
    let node = node.as_deref().expect("a cluster names its node");
    assert!(
        urls.iter().any(|u| u.contains(node)),
        "{node} is one of {urls:?}"
    );
    let debug = format!("{err:?}");
    assert!(debug.contains(&format!("node: Some({node:?})")), "{debug}");
    assert!(
        err.to_string()
            .starts_with(&format!("redis at {node} keeps")),
        "{err}"
    );
}
