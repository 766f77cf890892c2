//! What a pass logs at INFO: a line for each change it made (`child reconciled … result=created`)
//! and one line that ends it (`reconciled DatabaseCluster`, its phase, readiness and primary), in
//! the span that says why it ran; a child it left alone is logged at DEBUG only. So a pass that
//! changes nothing logs exactly one line. The log capture is per thread ([`common::Captured`], which
//! keeps tracing's per-callsite cache exact while other tests run).
#![cfg(feature = "sim")]

use crate::common;

use common::*;

const NAME: &str = "production-postgres";

#[tokio::test(start_paused = true)]
async fn a_pass_logs_its_changes_and_one_line_that_ends_it() {
    let logs = Captured::default();
    let _capture = logs.start("dbcluster_operator=info");
    let cluster = TestCluster::start().await;
    let operator = sample_running(&cluster).await;

    // The bring-up: each child created once, at INFO; nothing left alone shows at INFO.
    let text = logs.text();
    for child in ["kind=StatefulSet name=production-postgres", "kind=Service name=production-postgres-rw"] {
        assert_eq!(text.matches(&format!("child reconciled {child} result=created")).count(), 1, "{text}");
    }
    assert_eq!(text.matches("result=none").count(), 0, "unchanged children are DEBUG: {text}");
    // The timer kubelet runs no PostgreSQL, so no primary is observed (the field is then left out).
    let done = "reconciled DatabaseCluster: in its desired state phase=\"Running\" ready=3 desired=3";
    assert!(text.contains(done), "{text}");

    // One more pass over a settled cluster: one line, in its span.
    let before = text.lines().count();
    reconcile_now(&operator, &key(NAME)).await;
    let text = logs.text();
    let pass: Vec<&str> = text.lines().skip(before).filter(|l| l.contains("reconcile{")).collect();
    assert_eq!(pass.len(), 1, "{pass:#?}");
    assert!(pass[0].contains("key=default/production-postgres"), "{}", pass[0]);
    assert!(pass[0].contains("reconciled DatabaseCluster: in its desired state"), "{}", pass[0]);
}
