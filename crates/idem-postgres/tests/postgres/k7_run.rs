//! K7: actions of both PostgreSQL modes run as the current `Run`, with their claim's token.

use idem_core::run::{self, Run, RunStart};
use idem_core::Status;

use crate::support::TestDb;
use crate::{fp, scope};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k7_transactional_and_tier_actions_run_as_the_current_run() {
    let db = TestDb::new("k7run").await;
    let engine = db.engine(3).await;
    let s = scope("k7-tx", 1);
    let out = engine
        .execute(&s, fp(1), |tx| async move {
            let run = Run::current().expect("inside the run");
            assert_eq!(run.fencing_token(), Some(tx.token().get()));
            assert_eq!(run.scope(), tx.scope());
            Ok::<_, Status>(run::outbound_key("/stock.v1.Stock/Deduct", None).to_string())
        })
        .await
        .unwrap();
    let want = Run::new(&s, None, RunStart::Fresh).next_key("/stock.v1.Stock/Deduct");
    assert_eq!(out.value(), want.as_str());

    let tiered = db.tiered(3, std::time::Duration::from_secs(5)).await;
    let s = scope("k7-tier", 1);
    let out = tiered
        .execute(&s, fp(1), |token| async move {
            let run = Run::current().expect("inside the run");
            assert_eq!(run.fencing_token(), Some(token.get()));
            Ok::<_, Status>(run::outbound_key("/stock.v1.Stock/Deduct", None).to_string())
        })
        .await
        .unwrap();
    let want = Run::new(&s, None, RunStart::Fresh).next_key("/stock.v1.Stock/Deduct");
    assert_eq!(out.value(), want.as_str());
    db.drop_schema().await;
}
