//! `spec.monitoring.customQueriesConfigMap` end to end on the process kubelet, with real
//! PostgreSQL 15: a reference to a ConfigMap that does not exist yet does not keep the instance
//! from starting (the volume is optional); once the ConfigMap is created its query is served by
//! the running instance, without a restart.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeMap;

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::{ConfigMapKeyRef, MonitoringSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};

const NAME: &str = "monitored";

async fn metrics(pod: &Pod) -> Option<String> {
    let (code, _, body) = try_http_get(format!("{}:9187", pod_ip(pod)).parse().ok()?, "/metrics").await?;
    (code == 200).then_some(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_queries_reach_a_running_instance_when_their_config_map_appears() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.metadata.name = Some(NAME.into());
    db.spec.replicas = 1;
    db.spec.backup_schedule = None;
    let reference = ConfigMapKeyRef { name: "queries".into(), key: "custom.yaml".into() };
    db.spec.monitoring = Some(MonitoringSpec { custom_queries_config_map: Some(reference) });
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    await_streaming(&cluster, NAME, 1, None).await;

    let pods: Api<Pod> = cluster.api();
    let pod = pods.get(&format!("{NAME}-0")).await.unwrap();
    let started = pod.metadata.uid.clone();
    let text = metrics(&pod).await.expect("the metrics are served");
    assert!(text.contains("pg_custom_queries_file_loaded 0") && text.contains("pg_up 1"), "{text}");

    let config_maps: Api<ConfigMap> = cluster.api();
    let queries = "pg_test:\n  query: SELECT 42 AS answer\n  metrics:\n    - answer: {usage: GAUGE, description: The answer}\n";
    let config_map = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some("queries".into()), ..Default::default() },
        data: Some(BTreeMap::from([("custom.yaml".to_owned(), queries.to_owned())])),
        ..ConfigMap::default()
    };
    config_maps.create(&PostParams::default(), &config_map).await.unwrap();
    eventually_some("the custom query is served", || async {
        metrics(&pod)
            .await
            .filter(|t| t.contains("pg_test_answer 42") && t.contains("pg_custom_queries_file_loaded 1"))
    })
    .await;
    let now = pods.get(&format!("{NAME}-0")).await.unwrap();
    assert_eq!(now.metadata.uid, started, "no restart");
    let restarts = now.status.and_then(|s| s.container_statuses).unwrap_or_default();
    assert!(restarts.iter().all(|c| c.restart_count == 0), "{restarts:?}");
}
