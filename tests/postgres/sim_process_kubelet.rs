//! The simulator's process kubelet over real HTTP: pods run as real processes (the `postgres:15`
//! image maps to the host's PostgreSQL 15 binaries and gives `bash`, `python3`, `sleep`… of the host
//! through its `PATH`). Each test states the kubelet rule it proves.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::postgres::*;
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

mod containers;
mod exec;
mod lifecycle;
mod nodes;
mod sized;
mod workloads;

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}}, "spec": spec}))
        .expect("a valid pod")
}

async fn create_pod(cluster: &TestCluster, name: &str, spec: Value) -> Api<Pod> {
    let pods: Api<Pod> = cluster.api();
    pods.create(&PostParams::default(), &pod(name, spec)).await.expect("the pod is accepted");
    pods
}

async fn await_pod(pods: &Api<Pod>, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually_some(what, || async {
        let pod = pods.get_opt(name).await.ok()??;
        let value = serde_json::to_value(&pod).ok()?;
        done(&value).then_some(value)
    })
    .await
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |p| p["status"]["phase"] == phase
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `kubectl logs` against the cluster; stdout, or stderr on failure.
fn kubectl_logs(cluster: &TestCluster, args: &[&str]) -> Result<String, String> {
    kubectl(cluster, &[&["logs"], args].concat())
}
