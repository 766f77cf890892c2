//! `kubectl dbc …` against the simulated cluster: each command's effect on the DatabaseCluster,
//! its refusals in words a user acts on, the support bundle's contents (and no Secret's data in
//! it), and the binary answering to the plugin's name.
#![cfg(feature = "sim")]

use std::io::Read;

use crate::common::*;
use dbcluster_operator::cli::plugin::actions::{
    self, HIBERNATED_REPLICAS_ANNOTATION, PluginError, RESTARTED_AT_ANNOTATION,
};
use dbcluster_operator::cli::plugin::report;
use dbcluster_operator::cli::snapshot::Operator;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};

const NAME: &str = "production-postgres";
const NS: &str = "default";

fn now() -> jiff::Timestamp {
    "2026-12-07T12:00:00Z".parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn promote_backup_restart_and_hibernate_change_what_they_say() {
    let cluster = TestCluster::start().await;
    let _operator = sample_running(&cluster).await;
    let client = &cluster.client;

    let said = actions::promote(client, NS, NAME, "1").await.unwrap();
    assert!(said.contains("switchover to production-postgres-1"), "{said}");
    let db = cluster.clusters().get(NAME).await.unwrap();
    assert_eq!(db.spec.primary.as_deref(), Some("production-postgres-1"));
    let refused = actions::promote(client, NS, NAME, "7").await.unwrap_err().to_string();
    assert!(refused.contains("is not an instance of default/production-postgres"), "{refused}");

    let without = actions::backup(client, NS, NAME, now()).await;
    let mut db = cluster.clusters().get(NAME).await.unwrap();
    if db.spec.backup.is_none() {
        let message = without.unwrap_err().to_string();
        assert!(message.contains("has no spec.backup: add one"), "{message}");
    }
    let patch = serde_json::json!({"spec": {"backup": {"schedule": "0 3 * * *"}}});
    cluster.clusters().patch(NAME, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    actions::backup(client, NS, NAME, now()).await.unwrap();
    db = cluster.clusters().get(NAME).await.unwrap();
    let annotations = db.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("databases.madmmas.dev/backup-now").map(String::as_str),
        Some(format!("kubectl-dbc-{}", now().as_second()).as_str())
    );

    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = cluster.api();
    let uids = |list: Vec<k8s_openapi::api::core::v1::Pod>| -> Vec<String> {
        list.into_iter().filter_map(|p| p.metadata.uid).collect()
    };
    let before = uids(pods.list(&Default::default()).await.unwrap().items);
    actions::restart(client, NS, NAME, now()).await.unwrap();
    let annotations = cluster.clusters().get(NAME).await.unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get(RESTARTED_AT_ANNOTATION).map(String::as_str), Some("2026-12-07T12:00:00Z"));
    // The operator rolls every instance onto the template that carries the new value.
    eventually("every instance restarted and the cluster Running 3/3", WAIT_LIMIT, || async {
        let now = uids(pods.list(&Default::default()).await.unwrap().items);
        let db = cluster.clusters().get(NAME).await.unwrap();
        let restarted = now.len() == 3 && now.iter().all(|uid| !before.contains(uid));
        if restarted && phase(&db) == Some("Running") && ready(&db) == 3 { Ok(()) } else { Err(now) }
    })
    .await;

    let said = actions::hibernate(client, NS, NAME, true).await.unwrap();
    assert!(said.contains("hibernating (its 3 instances stop"), "{said}");
    let db = cluster.clusters().get(NAME).await.unwrap();
    assert_eq!(db.spec.replicas, 0);
    assert_eq!(db.metadata.annotations.unwrap()[HIBERNATED_REPLICAS_ANNOTATION], "3");
    let again = actions::hibernate(client, NS, NAME, true).await.unwrap();
    assert!(again.contains("already hibernated"), "{again}");
    actions::hibernate(client, NS, NAME, false).await.unwrap();
    let db = cluster.clusters().get(NAME).await.unwrap();
    assert_eq!(db.spec.replicas, 3);
    assert!(!db.metadata.annotations.unwrap_or_default().contains_key(HIBERNATED_REPLICAS_ANNOTATION));

    let missing = actions::restart(client, NS, "nope", now()).await.unwrap_err();
    assert!(matches!(missing, PluginError::NotFound { .. }), "{missing}");
}

#[tokio::test(start_paused = true)]
async fn the_report_holds_the_cluster_its_children_events_and_logs_but_no_secret_data() {
    let cluster = TestCluster::start().await;
    let _operator = sample_running(&cluster).await;
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("bundle.tar.gz");
    let operator = Operator::at("http://127.0.0.1:9");
    let said = report::write(&cluster.client, NS, NAME, &operator, &output).await.unwrap();
    assert!(said.contains("files written to"), "{said}");

    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&output).unwrap()));
    let mut files = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        files.insert(path, text);
    }
    let prefix = "report-default-production-postgres/";
    for name in [
        "databasecluster.json",
        "statefulsets.json",
        "pods.json",
        "services.json",
        "events.json",
        "secrets.txt",
        "operator-view.json",
    ] {
        assert!(files.contains_key(&format!("{prefix}{name}")), "{name} in {:?}", files.keys());
    }
    assert!(files[&format!("{prefix}pods.json")].contains("production-postgres-0"));
    assert!(files[&format!("{prefix}secrets.txt")].contains("production-postgres-app"));
    assert!(files[&format!("{prefix}operator-view.json")].contains("unreachable"));
    assert!(
        files.keys().any(|p| p.starts_with(&format!("{prefix}logs/production-postgres-0/"))),
        "{:?}",
        files.keys()
    );
    let secrets: kube::Api<Secret> = cluster.api();
    for secret in secrets.list(&Default::default()).await.unwrap() {
        for value in secret.data.unwrap_or_default().values() {
            let value = String::from_utf8_lossy(&value.0).into_owned();
            if value.len() >= 12 {
                assert!(
                    files.values().all(|text| !text.contains(&value)),
                    "a Secret's value is in the bundle"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_binary_answers_to_the_plugins_name() {
    let dir = tempfile::tempdir().unwrap();
    let install = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["install-plugin", "--dir", dir.path().to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(install.status.success(), "{}", String::from_utf8_lossy(&install.stderr));
    let plugin = dir.path().join("kubectl-dbc");
    let help = tokio::process::Command::new(&plugin).arg("--help").output().await.unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for command in ["status", "promote", "backup", "psql", "restart", "hibernate", "report"] {
        assert!(help.contains(command), "{command} in\n{help}");
    }
    let refused = tokio::process::Command::new(&plugin)
        .args(["--kubeconfig", "/nonexistent", "backup", "pg"])
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).starts_with("error: "), "one error line");
}
