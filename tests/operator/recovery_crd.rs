//! `spec.bootstrap.recovery` at the API server (1.28's CEL, as the simulator compiles it) and in
//! the operator: two targets at once, both `fromBackup` and `recovery`, and a recovery source equal
//! to the cluster's own archive destination are refused with the rule's message; a source inside
//! the cluster's own archive (which CEL cannot compare) is `Ready=False, InvalidSpec` with a
//! Warning Event, and no restore Job is made. A valid recovery makes the restore Job that runs the
//! manager's `instance recover` with the source's credentials mounted by name.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use dbcluster_operator::databasecluster::api::recovery::{
    ONE_BOOTSTRAP_MESSAGE, ONE_TARGET_MESSAGE, OWN_ARCHIVE_MESSAGE,
};
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use serde_json::json;

fn store(destination: &str) -> serde_json::Value {
    json!({"destination": destination, "endpoint": "https://s3.example.com", "credentials": {"name": "source-s3"}})
}

fn recovering(name: &str, bootstrap: serde_json::Value, own: Option<&str>) -> DatabaseCluster {
    let mut value = serde_json::to_value(sample()).unwrap();
    value["metadata"]["name"] = json!(name);
    value["spec"]["bootstrap"] = bootstrap;
    if let Some(own) = own {
        value["spec"]["backup"] = json!({"objectStore": store(own)});
    }
    serde_json::from_value(value).unwrap()
}

#[tokio::test]
async fn impossible_recoveries_are_refused_with_the_rules_messages() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let source = store("s3://bkt/orders");
    let cases = [
        (
            json!({"recovery": {"objectStore": source, "target": {"time": "2026-12-07T10:00:00Z", "lsn": "0/3000000"}}}),
            None,
            ONE_TARGET_MESSAGE,
        ),
        (
            json!({"recovery": {"objectStore": source}, "fromBackup": {"cluster": "other", "backup": "latest"}}),
            None,
            ONE_BOOTSTRAP_MESSAGE,
        ),
        (json!({}), None, ONE_BOOTSTRAP_MESSAGE),
        (json!({"recovery": {"objectStore": source}}), Some("s3://bkt/orders"), OWN_ARCHIVE_MESSAGE),
        (json!({"recovery": {"objectStore": source}}), Some("s3://bkt/orders/"), OWN_ARCHIVE_MESSAGE),
    ];
    for (n, (bootstrap, own, message)) in cases.into_iter().enumerate() {
        let error = api
            .create(&PostParams::default(), &recovering(&format!("bad-{n}"), bootstrap.clone(), own))
            .await;
        let Err(kube::Error::Api(status)) = error else { panic!("{bootstrap} was accepted: {error:?}") };
        assert_eq!(status.code, 422, "{bootstrap}");
        assert!(status.message.contains(message), "{bootstrap}: {}", status.message);
    }
}

#[tokio::test]
async fn a_source_inside_the_own_archive_is_an_invalid_spec_and_a_valid_one_starts_the_recovery_job() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    cluster.track_events(&operator);
    let api = cluster.clusters();
    let nested = json!({"recovery": {"objectStore": store("s3://bkt/orders")}});
    api.create(&PostParams::default(), &recovering("nested", nested, Some("s3://bkt/orders/restored")))
        .await
        .unwrap();
    let refused = await_object(&api, "nested", "InvalidSpec", |c| {
        condition(c, "Ready").is_some_and(|(_, reason)| reason == "InvalidSpec")
    })
    .await;
    let message =
        &refused.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Ready").unwrap().message;
    assert!(message.contains("overlaps this cluster's own archive"), "{message}");
    await_event_reasons(&cluster, "nested", &["InvalidSpec"]).await;
    assert!(cluster.api::<Job>().get_opt("nested-restore").await.unwrap().is_none(), "no restore Job");

    let valid = json!({"recovery": {"objectStore": store("s3://bkt/orders"), "target": {"xid": "742"}}});
    api.create(&PostParams::default(), &recovering("copy", valid, Some("s3://bkt/copy"))).await.unwrap();
    let job = await_object(&cluster.api::<Job>(), "copy-restore", "the recovery Job", |_| true).await;
    let pod = job.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    assert!(container.command.as_ref().unwrap().ends_with(&["instance".into(), "recover".into()]));
    let env = serde_json::to_string(&container.env).unwrap();
    assert!(env.contains("s3://bkt/orders") && env.contains("742"), "{env}");
    let secrets: Vec<String> =
        pod.volumes.iter().flatten().filter_map(|v| v.secret.as_ref()?.secret_name.clone()).collect();
    assert_eq!(secrets, ["source-s3"]);
}
