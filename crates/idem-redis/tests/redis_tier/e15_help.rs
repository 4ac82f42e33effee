//! E15: connecting a tier describes the crate's metrics (the Prometheus `# HELP` lines), in
//! words: no requirement ID, which means nothing to an operator.

use idem_redis::metrics::{RECONNECTS_TOTAL, UNREPLICATED_TOTAL, VOLATILE};
use idem_test_support::help::{with_recorder, Descriptions};
use idem_test_support::redis::RedisServer;

#[test]
fn e15_connecting_a_tier_describes_its_metrics_in_words() {
    let recorder = Descriptions::default();
    with_recorder(&recorder, async {
        let redis = RedisServer::start().await;
        let _tier = crate::tier(&redis.url()).await;
    });
    recorder.assert_in_words(&[RECONNECTS_TOTAL, VOLATILE, UNREPLICATED_TOTAL]);
}
