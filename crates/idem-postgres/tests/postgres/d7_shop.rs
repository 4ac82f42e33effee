//! D7: the checkout the multi-step tests run — reserve (local), charge (foreign, over TCP to a
//! charge service that replays by key), confirm (local) — with a crash point after each step, and
//! the charge service itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Status};
use idem_postgres::{sqlx_status, LocalCache, Operation, PgEngine};
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{pool, TestDb};

/// Where a run may die: right after each step, and between the charge call and its record.
pub(crate) const CRASH_POINTS: [&str; 4] = ["reserve", "charge-call", "charge", "confirm"];

/// The charge service: one charge per key; a call with a key it saw replays that charge.
#[derive(Clone)]
pub(crate) struct ChargeService {
    pub(crate) addr: String,
    /// key -> (charge id, calls)
    ledger: Arc<Mutex<HashMap<String, (u32, u32)>>>,
}

impl ChargeService {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap().to_string();
        let ledger: Arc<Mutex<HashMap<String, (u32, u32)>>> = Arc::default();
        let l = ledger.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let l = l.clone();
                tokio::spawn(async move {
                    let (read, mut write) = sock.into_split();
                    let mut lines = BufReader::new(read).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let key = line.strip_prefix("CHARGE ").unwrap_or("").to_owned();
                        let id = {
                            let mut l = l.lock();
                            let next = l.len() as u32 + 1;
                            let e = l.entry(key).or_insert((next, 0));
                            e.1 += 1;
                            e.0
                        };
                        if write
                            .write_all(format!("ch-{id}\n").as_bytes())
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        ChargeService { addr, ledger }
    }

    /// Calls the service received for `key`.
    pub(crate) fn calls(&self, key: &str) -> u32 {
        self.ledger.lock().get(key).map_or(0, |e| e.1)
    }

    /// The charge id of `key`.
    pub(crate) fn charge_of(&self, key: &str) -> Option<String> {
        self.ledger.lock().get(key).map(|e| format!("ch-{}", e.0))
    }

    /// Charges made (distinct keys).
    pub(crate) fn charges(&self) -> usize {
        self.ledger.lock().len()
    }
}

/// One charge call: `CHARGE <key>`, answered with the charge id.
pub(crate) async fn charge(addr: &str, key: &str) -> Result<String, Status> {
    let unavailable = |e: std::io::Error| Status::new(Code::Unavailable, e.to_string());
    let mut sock = TcpStream::connect(addr).await.map_err(unavailable)?;
    sock.write_all(format!("CHARGE {key}\n").as_bytes())
        .await
        .map_err(unavailable)?;
    let mut line = String::new();
    BufReader::new(sock)
        .read_line(&mut line)
        .await
        .map_err(unavailable)?;
    Ok(line.trim().to_owned())
}

/// What ran in this process: step bodies and charge calls.
#[derive(Default)]
pub(crate) struct Ran {
    pub(crate) reserve: AtomicU32,
    pub(crate) charge: AtomicU32,
    pub(crate) confirm: AtomicU32,
    pub(crate) handler: AtomicU32,
}

/// The checkout of the intent in the request; `crash` names the point where this run stops
/// (printing `CRASHPOINT <name>`) until it is killed — or, with `then_go_on`, until its lease
/// is lost, then it goes on.
#[derive(Clone)]
pub(crate) struct Checkout {
    pub(crate) schema: String,
    pub(crate) charge_addr: String,
    pub(crate) crash: Option<String>,
    pub(crate) then_go_on: bool,
    pub(crate) ran: Arc<Ran>,
}

impl Checkout {
    async fn point(&self, op: &Operation, name: &str) {
        if self.crash.as_deref() != Some(name) {
            return;
        }
        println!("CRASHPOINT {name}");
        if self.then_go_on {
            tokio::time::timeout(Duration::from_secs(60), op.run().lease_lost())
                .await
                .expect("the stalled run learns that its lease was lost");
            println!("LEASE-LOST");
        } else {
            std::future::pending::<()>().await;
        }
    }

    pub(crate) async fn run(self, op: Operation) -> Result<String, Status> {
        self.ran.handler.fetch_add(1, Ordering::SeqCst);
        let intent = String::from_utf8(op.request().to_vec()).unwrap();
        let s = self.schema.clone();
        let (i, ran) = (intent.clone(), self.ran.clone());
        let reservation: i64 = op
            .local("reserve", |tx| async move {
                ran.reserve.fetch_add(1, Ordering::SeqCst);
                let mut conn = tx.lock().await?;
                sqlx::query_scalar(&format!(
                    "INSERT INTO \"{s}\".reservations (intent) VALUES ($1) RETURNING id"
                ))
                .bind(&i)
                .fetch_one(&mut *conn)
                .await
                .map_err(sqlx_status)
            })
            .await?;
        self.point(&op, "reserve").await;
        let (me, op2) = (self.clone(), op.clone());
        let charged: String = op
            .foreign("charge", |key| async move {
                me.ran.charge.fetch_add(1, Ordering::SeqCst);
                let id = charge(&me.charge_addr, key.as_str()).await?;
                me.point(&op2, "charge-call").await;
                Ok(id)
            })
            .await?;
        self.point(&op, "charge").await;
        let (s, i, ran, ch) = (
            self.schema.clone(),
            intent.clone(),
            self.ran.clone(),
            charged.clone(),
        );
        let order: i64 = op
            .local("confirm", |tx| async move {
                ran.confirm.fetch_add(1, Ordering::SeqCst);
                let mut conn = tx.lock().await?;
                sqlx::query_scalar(&format!(
                    "INSERT INTO \"{s}\".confirmations (intent, reservation, charge) \
                     VALUES ($1, $2, $3) RETURNING id"
                ))
                .bind(&i)
                .bind(reservation)
                .bind(&ch)
                .fetch_one(&mut *conn)
                .await
                .map_err(sqlx_status)
            })
            .await?;
        self.point(&op, "confirm").await;
        Ok(receipt(&intent, reservation, &charged, order))
    }
}

/// The checkout's result, from what its steps produced.
pub(crate) fn receipt(intent: &str, reservation: i64, charge: &str, order: i64) -> String {
    format!("{intent}: reservation {reservation}, {charge}, order {order}")
}

/// The shop's tables beside idem's.
pub(crate) async fn shop_tables(db: &TestDb) {
    let s = &db.schema;
    sqlx::raw_sql(&format!(
        "CREATE TABLE IF NOT EXISTS \"{s}\".reservations (id bigserial PRIMARY KEY, intent text NOT NULL); \
         CREATE TABLE IF NOT EXISTS \"{s}\".confirmations (id bigserial PRIMARY KEY, intent text NOT NULL, \
           reservation bigint NOT NULL, charge text NOT NULL)"
    ))
    .execute(&db.pool)
    .await
    .expect("create the shop's tables");
}

/// The receipt the rows of `intent` make, asserting there is exactly one reservation and one
/// confirmation, and one charge for the operation's key, called `calls` times.
pub(crate) async fn state_of(
    db: &TestDb,
    svc: &ChargeService,
    intent: &str,
    key: &str,
    calls: u32,
) -> String {
    let s = &db.schema;
    let res: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM \"{s}\".reservations WHERE intent = $1"
    ))
    .bind(intent)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        res.len(),
        1,
        "{intent}: one reservation, never repeated: {res:?}"
    );
    let conf: Vec<(i64, i64, String)> = sqlx::query_as(&format!(
        "SELECT id, reservation, charge FROM \"{s}\".confirmations WHERE intent = $1"
    ))
    .bind(intent)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        conf.len(),
        1,
        "{intent}: one confirmation, never repeated: {conf:?}"
    );
    assert_eq!(
        conf[0].1, res[0],
        "{intent}: the confirmation names the one reservation"
    );
    let charge = svc
        .charge_of(key)
        .expect("a charge under the operation's key");
    assert_eq!(
        conf[0].2, charge,
        "{intent}: the confirmation names the one charge"
    );
    assert_eq!(
        svc.calls(key),
        calls,
        "{intent}: charge calls under the one key"
    );
    receipt(intent, res[0], &charge, conf[0].0)
}

/// An engine for operations on `db`'s schema with a short lease (renewed while a run lives).
pub(crate) async fn op_engine(db: &TestDb, lease: Duration) -> PgEngine<String> {
    PgEngine::<String>::builder(pool(&db.url, 6).await)
        .schema(&db.schema)
        .query_timeout(Duration::from_secs(5))
        .apply_schema(false)
        .lease(lease)
        .max_wait(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .local(LocalCache::new().shards(2))
        .build()
        .await
        .expect("engine")
}
