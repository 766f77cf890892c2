//! A cluster re-created over its kept volumes, and an instance that cannot start.

use super::*;

/// The password rule: a cluster deleted and re-created over its kept volumes gets new
/// Secrets, and the database (initialised with the old passwords) accepts the new ones, since each
/// instance applies its mounted Secrets at start. Then the same for a Secret of the user's own
/// (`spec.appSecretName`), its rotation, and a name that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_recreated_over_its_kept_volumes_accepts_its_new_secrets() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 1, &[]).await;
    await_streaming(&cluster, NAME, 1, None).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    psql(&rw, "CREATE TABLE kept (id int); INSERT INTO kept SELECT generate_series(1, 100)").unwrap();
    let secrets: Api<Secret> = cluster.api();
    let old = secret_value(&secrets.get("production-postgres-app").await.unwrap(), "password");

    cluster.clusters().delete(NAME, &DeleteParams::default()).await.unwrap();
    eventually_some("the cluster, its pods and Secrets gone", || async {
        let gone = cluster.clusters().get_opt(NAME).await.ok()?.is_none()
            && pods(&cluster).await.is_empty()
            && secrets.get_opt("production-postgres-app").await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    let pvcs: Api<PersistentVolumeClaim> = cluster.api();
    assert!(pvcs.get("data-production-postgres-0").await.is_ok(), "the volume is kept (Retain)");

    create(&cluster, 1, &[]).await;
    await_streaming(&cluster, NAME, 1, None).await;
    let renewed = secrets.get("production-postgres-app").await.unwrap();
    assert_ne!(secret_value(&renewed, "password"), old, "a new Secret, a new password");
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    let count = eventually_some("the new app password logs in", || async {
        psql(&rw, "SELECT count(*) FROM kept").ok()
    })
    .await;
    assert_eq!(count, "100", "the data is the kept volume's");

    // The user's own app Secret (spec.appSecretName): the database accepts its password; the
    // operator labels it and changes nothing else; the user's rotation reaches the database.
    let team = "team-db-credentials";
    let team_secret = |password: &str| Secret {
        metadata: kube::api::ObjectMeta { name: Some(team.into()), ..Default::default() },
        string_data: Some(BTreeMap::from([
            ("username".to_owned(), "app".to_owned()),
            ("password".to_owned(), password.to_owned()),
        ])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &team_secret("chosen-by-the-team-1")).await.unwrap();
    patch_spec(&cluster, serde_json::json!({"appSecretName": team})).await;
    let team_uri = |password: &str| {
        host_uri(&cluster, NS, &format!("postgresql://app:{password}@{NAME}-rw.{NS}.svc:5432/app"))
    };
    let logs_in = |password: &'static str| {
        let uri = team_uri(password);
        move || {
            let uri = uri.clone();
            async move { (psql(&uri, "SELECT count(*) FROM kept").ok()? == "100").then_some(()) }
        }
    };
    eventually_some("the team's password logs in", logs_in("chosen-by-the-team-1")).await;
    let labelled = secrets.get(team).await.unwrap();
    let labels = labelled.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(APP_SECRET_OF).map(String::as_str), Some(NAME), "{labels:?}");
    assert_eq!(labels.len(), 1, "only the operator's label is added: {labels:?}");
    assert_eq!(secret_value(&labelled, "password"), "chosen-by-the-team-1", "the data is the user's");
    assert!(labelled.metadata.owner_references.is_none(), "the operator does not own the user's Secret");

    let rotated = serde_json::json!({"stringData": {"password": "chosen-by-the-team-2"}});
    secrets.patch(team, &PatchParams::default(), &Patch::Merge(&rotated)).await.unwrap();
    eventually_some("the rotated password logs in", logs_in("chosen-by-the-team-2")).await;
    let refused = psql(&team_uri("chosen-by-the-team-1"), "SELECT 1").unwrap_err();
    assert!(refused.contains("password authentication failed"), "{refused}");

    // A Secret that does not exist: the pass fails saying so, as a Warning Event; the data stays.
    patch_spec(&cluster, serde_json::json!({"appSecretName": "no-such-secret"})).await;
    eventually_some("a Warning naming the missing Secret", || async {
        let events = cluster.events_about(NAME).await;
        events
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains("Secret no-such-secret does not exist"))
            })
            .then_some(())
    })
    .await;
    assert_eq!(psql(&team_uri("chosen-by-the-team-2"), "SELECT count(*) FROM kept"), Ok("100".into()));
}

/// An instance that cannot start (a parameter value the server refuses) shows in the
/// cluster's status with the reason from its container's state, not just `Provisioning`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_cannot_start_says_why_in_the_status() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 1, &[("work_mem", "lots")]).await;
    let api = cluster.clusters();
    let (reason, message, instance) = eventually_some("Ready=False, InstanceFailing", || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
        let instance = status.instances.first()?.message.clone()?;
        (ready.reason == "InstanceFailing").then_some((ready.reason, ready.message, instance))
    })
    .await;
    assert_eq!(reason, "InstanceFailing");
    assert!(message.contains("production-postgres-0: container "), "{message}");
    assert!(
        ["CrashLoopBackOff", "Error"].iter().any(|r| instance.contains(r)),
        "the container's state: {instance}"
    );
    let phase = api.get(NAME).await.unwrap().status.unwrap().phase.map(|p| p.as_str());
    assert_ne!(phase, Some("Running"));
}
