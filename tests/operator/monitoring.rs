//! `manifests/monitoring/`: examples outside the kustomization (they need the Prometheus
//! Operator's CRDs and Grafana), held to what the operator and the instances really do: the
//! PodMonitor selects the labels the instance pods carry (and no backup pod) on their `metrics`
//! port, its relabelings read labels the pods have; the dashboard and the custom queries example
//! use only names the instances serve; the custom queries parse as the instance manager reads them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dbcluster_operator::databasecluster::api::types::{ConfigMapKeyRef, DatabaseCluster, MonitoringSpec};
use dbcluster_operator::databasecluster::api::validation::validate_spec;
use dbcluster_operator::databasecluster::specs::instance_pod::METRICS_PORT_NAME;
use dbcluster_operator::databasecluster::specs::resources::{Owner, build_statefulset};
use dbcluster_operator::databasecluster::specs::services::ROLE_LABEL;
use dbcluster_operator::instance::metrics::{builtin, custom};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join("monitoring")
}

fn read(file: &str) -> String {
    std::fs::read_to_string(dir().join(file)).unwrap()
}

/// The sample cluster, with custom queries, as the operator builds its pod template.
fn pod_template() -> Value {
    let mut cluster: DatabaseCluster =
        serde_saphyr::from_str(include_str!("../../manifests/samples/databasecluster.yaml")).unwrap();
    cluster.metadata.namespace = Some("default".into());
    cluster.metadata.uid = Some("uid".into());
    let reference = ConfigMapKeyRef { name: "dbcluster-custom-queries".into(), key: "queries.yaml".into() };
    cluster.spec.monitoring = Some(MonitoringSpec { custom_queries_config_map: Some(reference) });
    let sts = build_statefulset(&Owner::of(&cluster).unwrap(), &validate_spec(&cluster.spec).unwrap());
    serde_json::to_value(sts.spec.unwrap().template).unwrap()
}

/// A Kubernetes label key as Prometheus' service discovery names it.
fn meta_label(key: &str) -> String {
    let sanitized: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("__meta_kubernetes_pod_label_{sanitized}")
}

#[test]
fn the_pod_monitor_scrapes_the_instances_metrics_port() {
    let monitor: Value = serde_saphyr::from_str(&read("podmonitor.yaml")).unwrap();
    assert_eq!(
        (monitor["apiVersion"].as_str(), monitor["kind"].as_str()),
        (Some("monitoring.coreos.com/v1"), Some("PodMonitor"))
    );
    let template = pod_template();
    let labels = template["metadata"]["labels"].as_object().unwrap();
    let selector = monitor["spec"]["selector"]["matchLabels"].as_object().unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(labels.get(key), Some(value), "the instance pods carry {key}={value}");
    }
    assert_eq!(
        selector.get("app.kubernetes.io/component").and_then(Value::as_str),
        Some("database"),
        "not the backup pods"
    );
    let [endpoint] = monitor["spec"]["podMetricsEndpoints"].as_array().unwrap().as_slice() else {
        panic!("one endpoint")
    };
    assert_eq!(endpoint["port"], METRICS_PORT_NAME);
    assert_eq!(endpoint["path"], "/metrics");
    let container = &template["spec"]["containers"][0];
    let ports: Vec<&str> =
        container["ports"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(ports.contains(&METRICS_PORT_NAME), "{ports:?}");
    let mut known: BTreeSet<String> = labels.keys().map(|k| meta_label(k)).collect();
    known.insert(meta_label(ROLE_LABEL)); // set by the operator on the live pods, not the template
    for relabel in endpoint["relabelings"].as_array().unwrap() {
        for source in relabel["sourceLabels"].as_array().unwrap() {
            assert!(known.contains(source.as_str().unwrap()), "{source} is no pod label");
        }
    }
}

#[test]
fn the_dashboard_uses_only_served_metrics_and_shows_what_matters() {
    let dashboard: Value = serde_json::from_str(&read("grafana-dashboard.json")).unwrap();
    let served: BTreeSet<String> = builtin::names().into_iter().collect();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("pg_"));
            for name in names {
                assert!(served.contains(name), "{name} in {expr:?} is not served");
                used.insert(name.to_owned());
            }
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
    }
    for shown in [
        "pg_up",
        "pg_replication_lag_bytes",
        "pg_backends",
        "pg_xact_commit_total",
        "pg_archiver_archived_total",
        "pg_archiver_failed_total",
        "pg_database_size_bytes",
    ] {
        assert!(used.contains(shown), "the dashboard shows {shown}");
    }
}

#[test]
fn the_custom_queries_example_parses_as_the_manager_reads_it() {
    let config_map: ConfigMap = serde_saphyr::from_str(&read("custom-queries.yaml")).unwrap();
    let text = &config_map.data.unwrap()["queries.yaml"];
    let definitions = custom::parse(text, &builtin::names()).unwrap();
    assert_eq!(definitions.len(), 2);
    for definition in definitions {
        assert!(definition.spec.is_ok(), "{}: {:?}", definition.name, definition.spec);
    }
}

#[test]
fn the_kustomization_leaves_the_examples_out() {
    let kustomization = std::fs::read_to_string(dir().parent().unwrap().join("kustomization.yaml")).unwrap();
    assert!(!kustomization.contains("monitoring"), "{kustomization}");
}
