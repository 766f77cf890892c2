//! Quiet at rest, end to end: the number of passes from apply to Running is bounded, the pass a
//! status write brings writes nothing, and once Running, 30 simulated seconds pass with no API
//! write (and, after a leftover requeue timer, no pass at all); a restarted operator writes nothing.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use common::*;

const NAME: &str = "production-postgres";

#[tokio::test(start_paused = true)]
async fn a_running_cluster_costs_no_writes_and_no_passes() {
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
    // cancelled by a later Done, as in client-go); it writes nothing, and nothing follows it.
    let after_timers = operator.passes();
    assert!(after_timers - passes <= 1, "{} passes at rest", after_timers - passes);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(operator.passes(), after_timers, "no periodic pass at rest");
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
