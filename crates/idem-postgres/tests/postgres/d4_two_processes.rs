//! D4 / Z4: two OS processes with two transactional engines each, on one database; every intent
//! sent by all four engines at once: orders rows == intents, exactly.

use std::collections::HashMap;
use std::time::Duration;

use idem_test_support::time::now_ms;

use crate::support::TestDb;
use crate::{from_marker, place_with_retries, worker, worker_role};

const INTENTS: usize = 2_000;
/// Client tasks per engine.
const CLIENTS: usize = 4;
const TEST: &str = "d4_two_processes::d4_two_processes_two_engines_each_orders_equal_intents";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_two_processes_two_engines_each_orders_equal_intents() {
    if let Some(role) = worker_role() {
        return worker_process(role).await;
    }
    let db = TestDb::new("d4procs").await;
    let start_at = now_ms() + 1_500;
    let env = [
        ("IDEM_PG_SCHEMA", db.schema.clone()),
        ("IDEM_PG_START_MS", start_at.to_string()),
    ];
    let children: Vec<_> = ["p1", "p2"]
        .iter()
        .map(|role| worker(TEST, role, &env).output())
        .collect();
    let outputs = futures::future::join_all(children).await;

    let mut results: Vec<HashMap<usize, String>> = Vec::new();
    let mut retries = 0usize;
    for out in outputs {
        let out = out.expect("run a worker process");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker failed: {}\n{stdout}",
            out.status
        );
        let mut mine = HashMap::new();
        for line in stdout.lines() {
            if let Some(l) = from_marker(line, "RESULT ") {
                let mut p = l.splitn(4, ' ');
                let (_, i, tries, v) = (p.next(), p.next(), p.next(), p.next());
                let i: usize = i.unwrap().parse().unwrap();
                retries += tries.unwrap().parse::<usize>().unwrap();
                let v = v.unwrap().to_string();
                if let Some(prev) = mine.insert(i, v.clone()) {
                    assert_eq!(prev, v, "intent {i}: one process got two values");
                }
            }
        }
        assert_eq!(mine.len(), INTENTS, "a worker reported every intent");
        results.push(mine);
    }
    let orders = db.orders().await;
    assert_eq!(orders.len(), INTENTS, "orders rows == intents");
    let mut by_intent: HashMap<String, String> = HashMap::new();
    for (intent, by) in &orders {
        assert!(
            by_intent.insert(intent.clone(), by.clone()).is_none(),
            "{intent}: two orders"
        );
    }
    for i in 0..INTENTS {
        let by = &by_intent[&format!("intent-{i}")];
        assert_eq!(
            results[0][&i], results[1][&i],
            "intent {i}: both processes got one value"
        );
        assert!(
            results[0][&i].starts_with(&format!("intent-{i}-by-{by}-")),
            "intent {i}: the value names the run whose order committed ({by})"
        );
    }
    assert_eq!(db.records().await as usize, INTENTS);
    eprintln!(
        "d4_two_processes: {INTENTS} intents x 4 engines in 2 processes -> {} orders, {retries} \
         client retries",
        orders.len()
    );
    db.drop_schema().await;
}

/// One of the two processes: two engines, each with CLIENTS tasks sending every intent.
async fn worker_process(role: String) {
    let schema = std::env::var("IDEM_PG_SCHEMA").unwrap();
    let start_at: u64 = std::env::var("IDEM_PG_START_MS").unwrap().parse().unwrap();
    let db = TestDb::on(&crate::support::url(), &schema).await;
    let engines = [db.engine(5).await, db.engine(5).await];
    let insert = db.insert_order();
    tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now_ms()))).await;
    let mut tasks = tokio::task::JoinSet::new();
    for (e, engine) in engines.iter().enumerate() {
        for k in 0..CLIENTS {
            let (engine, insert, by) = (engine.clone(), insert.clone(), format!("{role}e{e}"));
            tasks.spawn(async move {
                let mut got = Vec::new();
                for i in (k..INTENTS).step_by(CLIENTS) {
                    let (v, tries) =
                        place_with_retries(&engine, &insert, "d4-procs", i, &by, 20).await;
                    got.push((i, tries, v));
                }
                got
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        for (i, tries, v) in r.expect("client task") {
            println!("RESULT {i} {tries} {v}");
        }
    }
}
