//! D1: two OS processes (this test binary, re-executed) on one Redis: side effects == intents.

use std::collections::HashMap;
use std::time::Duration;

use idem_core::Status;
use idem_test_support::redis::RedisServer;
use idem_test_support::time::now_ms;

use crate::{engine, fp, scope, tier};

const INTENTS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_two_processes_one_side_effect_per_intent() {
    // The same test, re-executed as a child process, is one of the two workers.
    if let Ok(id) = std::env::var("IDEM_D1_WORKER") {
        return worker_process(id).await;
    }
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let exe = std::env::current_exe().expect("test binary path");
    // Both processes start sending at the same moment (after their start-up).
    let start_at = now_ms() + 700;
    let children: Vec<_> = ["a", "b"]
        .iter()
        .map(|id| {
            tokio::process::Command::new(&exe)
                .args([
                    "d1_two_processes::d1_two_processes_one_side_effect_per_intent",
                    "--exact",
                ])
                .args(["--nocapture", "--test-threads=1"])
                .env("IDEM_D1_WORKER", id)
                .env("IDEM_D1_URL", redis.url())
                .env("IDEM_D1_START_MS", start_at.to_string())
                .kill_on_drop(true)
                .output()
        })
        .collect();
    let outputs = futures::future::join_all(children).await;

    let mut executed: HashMap<usize, u32> = HashMap::new();
    let mut results: Vec<HashMap<usize, String>> = Vec::new();
    for out in outputs {
        let out = out.expect("run a worker process");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut mine = HashMap::new();
        for line in stdout.lines() {
            // libtest prints "test name ... " without a newline before the test's own output.
            let line = ["EXEC ", "RESULT "]
                .iter()
                .find_map(|m| line.find(m).map(|at| &line[at..]))
                .unwrap_or(line);
            let mut parts = line.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("EXEC"), Some(i), _) => *executed.entry(i.parse().unwrap()).or_default() += 1,
                (Some("RESULT"), Some(i), Some(v)) => {
                    mine.insert(i.parse::<usize>().unwrap(), v.to_string());
                }
                _ => {}
            }
        }
        assert_eq!(mine.len(), INTENTS, "a worker reported every intent");
        results.push(mine);
    }
    for i in 0..INTENTS {
        assert_eq!(
            executed.get(&i).copied(),
            Some(1),
            "intent {i}: side effects"
        );
        assert_eq!(
            results[0][&i], results[1][&i],
            "intent {i}: both processes got one value"
        );
    }
    assert_eq!(executed.values().sum::<u32>() as usize, INTENTS);
}

/// One of the two processes: the test above, run again by itself with `IDEM_D1_WORKER` set.
async fn worker_process(id: String) {
    let url = std::env::var("IDEM_D1_URL").unwrap();
    let start_at: u64 = std::env::var("IDEM_D1_START_MS").unwrap().parse().unwrap();
    let e = engine(tier(&url).await);
    tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now_ms()))).await;
    let mut tasks = tokio::task::JoinSet::new();
    for copy in 0..2 {
        for i in 0..INTENTS {
            let e = e.clone();
            let id = id.clone();
            tasks.spawn(async move {
                let out = e
                    .execute(&scope("d1-procs", i), fp(i), move |token| async move {
                        println!("EXEC {i} {token}");
                        tokio::time::sleep(Duration::from_millis((i % 3) as u64)).await;
                        Ok::<_, Status>(format!("intent-{i}-by-{id}-token-{token}"))
                    })
                    .await
                    .unwrap_or_else(|err| panic!("intent {i}: {err}"));
                (copy, i, out.into_value())
            });
        }
    }
    let mut seen = HashMap::new();
    while let Some(r) = tasks.join_next().await {
        let (_copy, i, v) = r.unwrap();
        if let Some(prev) = seen.insert(i, v.clone()) {
            assert_eq!(prev, v);
        }
    }
    for (i, v) in seen {
        println!("RESULT {i} {v}");
    }
}
