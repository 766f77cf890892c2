//! The operator's DatabaseCluster on the process kubelet, with real PostgreSQL 15: the seed's
//! walkthrough (`production-postgres`, 3 instances, 15.4, 1Gi) reaches Running with readiness
//! from real `pg_isready` probes, the app Secret's `uri` (its host resolved as a pod resolves it)
//! logs in, and the upgrade to 15.5 restarts every instance with the data kept.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::HashMap;

use common::postgres::*;
use common::*;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const NAME: &str = "production-postgres";

async fn pod_uids(pods: &Api<Pod>) -> HashMap<String, String> {
    let list = pods.list(&ListParams::default()).await.unwrap();
    list.items.into_iter().map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_walkthrough_runs_real_postgres_and_upgrades_keeping_the_data() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let api = cluster.clusters();
    let started = std::time::Instant::now();
    api.patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&sample())).await.unwrap();
    eventually_some("Running 3/3", || async {
        let c = api.get(NAME).await.ok()?;
        (phase(&c) == Some("Running") && ready(&c) == 3).then_some(())
    })
    .await;
    // The README's figure (run with --nocapture).
    eprintln!("Running 3/3 after {:.1?}", started.elapsed());
    let pods: Api<Pod> = cluster.api();
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        let ip = pod.status.and_then(|s| s.pod_ip).unwrap_or_default();
        assert!(ip.starts_with("127.10."), "every instance has its own loopback address: {ip}");
    }
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-app")).await.unwrap();
    let uri = host_uri(&cluster, "default", &secret_value(&secret, "uri"));
    assert_eq!(psql(&uri, "select 1"), Ok("1".into()));
    psql(&uri, "create table kept (n int); insert into kept values (1), (2), (3)").unwrap();

    let before = pod_uids(&pods).await;
    let upgrade = json!({"spec": {"version": "15.5"}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&upgrade)).await.unwrap();
    eventually_some("Running 3/3 on 15.5", || async {
        let c = api.get(NAME).await.ok()?;
        let status = c.status.clone()?;
        (phase(&c) == Some("Running") && ready(&c) == 3 && status.current_version.as_deref() == Some("15.5"))
            .then_some(())
    })
    .await;
    let after = pod_uids(&pods).await;
    for (name, uid) in &before {
        assert_ne!(after.get(name), Some(uid), "{name} was restarted");
    }
    let uri = host_uri(
        &cluster,
        "default",
        &secret_value(&secrets.get(&format!("{NAME}-app")).await.unwrap(), "uri"),
    );
    assert_eq!(psql(&uri, "select sum(n) from kept"), Ok("6".into()), "the data written before is kept");
}
