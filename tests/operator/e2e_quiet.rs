//! Quiet at rest, end to end: the number of passes from apply to Running is bounded, the pass a
//! status write brings writes nothing, and once Running, no API write at rest, and one pass per
//! `SETTLED_REQUEUE` (the look that keeps the instances' facts fresh: linear, one `/status` per
//! instance per period); a restarted operator writes nothing.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::controller::context::SETTLED_REQUEUE;

const NAME: &str = "production-postgres";

#[tokio::test(start_paused = true)]
async fn a_running_cluster_costs_no_writes_and_one_pass_per_period() {
    let cluster = TestCluster::start().await;
    // Running, and the operator has seen its own Running write and finished the pass it brought.
    let operator = sample_running(&cluster).await;
    let passes = operator.passes();
    // Ten children (StatefulSet, four Services, ConfigMap, three Secrets, PDB) each bring a watch
    // event back to the owner while the pods start; a self-triggered loop would bring many more.
    assert!(passes <= 25, "{passes} passes from apply to Running 3/3 (a self-triggered loop?)");
    let writes = cluster.writes();
    let last = writes.last().unwrap();
    assert_eq!(
        (last.verb.as_str(), last.resource.as_str(), last.subresource.as_deref()),
        ("patch", "databaseclusters", Some("status")),
        "the Running status write is the last write: the passes after it wrote nothing"
    );

    tokio::time::sleep(Duration::from_secs(30)).await;
    let at_rest: Vec<_> = cluster.writes().into_iter().skip(writes.len()).collect();
    assert!(at_rest.is_empty(), "writes at rest: {at_rest:?}");
    // A 10 s requeue asked for while the pods were starting may still fire once (timers are not
    // cancelled by a later pass, as in client-go), beside the first periodic look; neither writes.
    let after_timers = operator.passes();
    assert!(after_timers - passes <= 2, "{} passes in the first 30 s at rest", after_timers - passes);
    // Then one pass per period, each writing nothing.
    tokio::time::sleep(SETTLED_REQUEUE * 3).await;
    let periodic = operator.passes() - after_timers;
    assert!((2..=4).contains(&periodic), "{periodic} passes in three periods at rest");
    assert!(cluster.writes().len() == writes.len(), "no write at rest");
    assert_eq!(operator.errors(), 0);
    operator.stop().await;

    // A restarted operator lists everything again and finds nothing to write.
    let restarted = cluster.start_operator().await;
    reconcile_now(&restarted, &key(NAME)).await;
    assert!(restarted.passes() >= 1);
    let after_restart: Vec<_> = cluster.writes().into_iter().skip(writes.len()).collect();
    assert!(after_restart.is_empty(), "writes after a restart: {after_restart:?}");
    restarted.stop().await;
}
