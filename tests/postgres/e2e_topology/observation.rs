//! How the operator observes its instances: each instance manager's `/status`, never a database
//! session of the operator's own.

use super::*;

use kube::api::LogParams;

/// The postgres container's log of pod `name` (the server's lines and the manager's).
async fn server_log(cluster: &TestCluster, name: &str) -> String {
    let params = LogParams { container: Some("postgres".into()), ..LogParams::default() };
    cluster.api::<Pod>().logs(name, &params).await.unwrap_or_default()
}

/// The `connection authorized` messages (`log_connections = on`) of superuser sessions that came
/// over the network, not over the server's own socket (the instance manager's sessions), from the
/// container's log: one JSON object a line, PostgreSQL's messages with `"logger": "postgres"` and
/// the backend's `pid`.
fn superuser_network_sessions(log: &str) -> Vec<String> {
    let messages: Vec<(String, String)> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|entry| entry["logger"] == "postgres")
        .filter_map(|entry| Some((entry["pid"].to_string(), entry["message"].as_str()?.to_owned())))
        .collect();
    let networked: Vec<&str> = messages
        .iter()
        .filter(|(_, m)| m.starts_with("connection received: host=") && !m.contains("host=[local]"))
        .map(|(pid, _)| pid.as_str())
        .collect();
    messages
        .iter()
        .filter(|(pid, m)| {
            m.starts_with("connection authorized: user=postgres ") && networked.contains(&pid.as_str())
        })
        .map(|(_, m)| m.clone())
        .collect()
}

/// Several passes over a settled cluster whose servers log every connection: no superuser session
/// reaches an instance over the network, while the status stays current; a superuser session of
/// the test's own shows that the log would say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_passes_open_no_database_session() {
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    create(&cluster, 2, &[("log_connections", "on")]).await;
    await_streaming(&cluster, NAME, 2, None).await;
    let names = ["production-postgres-0", "production-postgres-1"];
    let mut marks = BTreeMap::new();
    for name in names {
        let log = eventually_some("the server logs connections", || async {
            let log = server_log(&cluster, name).await;
            log.contains("connection authorized").then_some(log)
        })
        .await;
        marks.insert(name, log.len());
    }
    let passes = operator.passes();
    for _ in 0..3 {
        reconcile_now(&operator, &key(NAME)).await;
    }
    assert!(operator.passes() >= passes + 3, "three passes over the settled cluster");
    await_streaming(&cluster, NAME, 2, Some("production-postgres-0")).await;
    for name in names {
        let log = server_log(&cluster, name).await;
        let since = log.get(marks[name]..).unwrap_or_default();
        let sessions = superuser_network_sessions(since);
        assert!(sessions.is_empty(), "{name}: superuser sessions over the network: {sessions:?}");
    }

    // The test's own superuser session over the network is seen.
    let primary =
        pods(&cluster).await.into_iter().find(|p| p.metadata.name.as_deref() == Some(names[0])).unwrap();
    psql(&pod_uri(&cluster, &pod_ip(&primary), "postgres").await, "SELECT 1").unwrap();
    eventually_some("the log shows the test's superuser session", || async {
        let log = server_log(&cluster, names[0]).await;
        let since = log.get(marks[names[0]]..).unwrap_or_default().to_owned();
        (superuser_network_sessions(&since).len() == 1).then_some(())
    })
    .await;
}

/// The superuser Secret deleted: it comes back with a new password, which the primary's manager
/// applies over its own socket once the kubelet refreshes the mounted files (no restart, as the
/// operator needs no login); the status records the new version and Event `PasswordApplied` says
/// so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regenerated_superuser_secret_is_applied_without_a_restart() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 1, &[]).await;
    await_streaming(&cluster, NAME, 1, None).await;
    let api = cluster.clusters();
    let recorded = eventually_some("the primary's Secret versions recorded", || async {
        let versions = api.get(NAME).await.ok()?.status?.applied_secret_versions;
        (versions.len() == 2).then_some(versions)
    })
    .await;
    let logins: Vec<&str> = recorded.keys().map(String::as_str).collect();
    assert_eq!(logins, ["app", "superuser"], "the replication login has no password, so no version");
    let started = start_time(&pods(&cluster).await[0]);
    let secrets: Api<Secret> = cluster.api();
    let name = format!("{NAME}-superuser");
    let old = secrets.get(&name).await.unwrap();
    secrets.delete(&name, &DeleteParams::default()).await.unwrap();
    let renewed = eventually_some("the superuser Secret is back with a new password", || async {
        let secret = secrets.get_opt(&name).await.ok().flatten()?;
        (secret_value(&secret, "password") != secret_value(&old, "password")).then_some(secret)
    })
    .await;
    let ip = pod_ip(&pods(&cluster).await[0]);
    let uri = format!("postgresql://postgres:{}@{ip}:5432/postgres", secret_value(&renewed, "password"));
    eventually_some("the new superuser password logs in", || async { psql(&uri, "SELECT 1").ok() }).await;
    eventually_some("the new version recorded", || async {
        let versions = api.get(NAME).await.ok()?.status?.applied_secret_versions;
        (versions.get("superuser") != recorded.get("superuser") && versions.get("app") == recorded.get("app"))
            .then_some(())
    })
    .await;
    await_event_reasons(&cluster, NAME, &["PasswordApplied"]).await;
    let applied = cluster.events_about(NAME).await;
    let notes: Vec<_> = applied.iter().filter(|e| e.reason.as_deref() == Some("PasswordApplied")).collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].note.as_deref().is_some_and(|n| n.contains("user postgres")), "{notes:?}");
    assert_eq!(start_time(&pods(&cluster).await[0]), started, "the primary was not restarted");
}
