//! E15: building a tier or an engine describes the crate's metrics (the Prometheus `# HELP`
//! lines), in words: no requirement ID, which means nothing to an operator.

use std::time::Duration;

use idem_postgres::metrics::{FAILURES, QUERIES, SWEPT};
use idem_postgres::PgTier;

use idem_test_support::help::{with_recorder, Descriptions};

use crate::support::{pool, unique_schema, url};

#[test]
fn e15_building_a_tier_describes_its_metrics_in_words() {
    let recorder = Descriptions::default();
    with_recorder(&recorder, async {
        let tier = PgTier::builder(pool(&url(), 2).await)
            .schema(unique_schema("e15help"))
            .query_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("tier");
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA \"{}\" CASCADE", tier.schema()))
            .execute(tier.pool())
            .await;
    });
    recorder.assert_in_words(&[QUERIES, FAILURES, SWEPT]);
}
