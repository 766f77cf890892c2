//! The operator's DatabaseCluster on the process kubelet, with real PostgreSQL 15: the seed's
//! walkthrough reaches Running with readiness from real `pg_isready` probes and the app Secret's
//! `uri` logs in.

mod common;

use common::postgres::*;
use common::*;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};

const NAME: &str = "production-postgres";

fn secret_value(secret: &Secret, key: &str) -> String {
    let bytes = &secret.data.as_ref().expect("data")[key].0;
    String::from_utf8(bytes.clone()).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_runs_real_postgres() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.spec.replicas = 1;
    let api = cluster.clusters();
    api.patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    let pods: Api<Pod> = cluster.api();
    let pod = eventually("pod 0 ready", || async {
        let pod = pods.get_opt(&format!("{NAME}-0")).await.unwrap()?;
        let ready = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(pod)
    })
    .await;
    let ip = pod.status.unwrap().pod_ip.unwrap();
    assert!(ip.starts_with("127.10."), "{ip}");
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-app")).await.unwrap();
    let uri = host_uri(&cluster, "default", &secret_value(&secret, "uri"));
    assert_eq!(psql(&uri, "select 1"), Ok("1".into()));
}
