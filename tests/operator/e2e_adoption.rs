//! Children that exist before the operator creates them: one nobody controls is adopted (the
//! operator's create answers 409, it reads the object and applies its fields and ownerReference),
//! one another controller owns is left alone and reported, with backoff, until it goes away; after a
//! few failed passes the error shows in the cluster's status (`ReconcileSucceeded=False`), and the
//! next success clears it. A Secret of another type under the operator's name cannot be adopted
//! (a Secret's type is immutable): the operator says so the same way, and does not write to it.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

const NAME: &str = "production-postgres";

fn service(owner: Option<&ConfigMap>) -> Service {
    let owners = owner.map(|cm| {
        json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": cm.metadata.name, "uid": cm.metadata.uid,
            "controller": true, "blockOwnerDeletion": true
        }])
    });
    serde_json::from_value(json!({
        "metadata": {"name": NAME, "annotations": {"note": "made by hand"}, "ownerReferences": owners},
        "spec": {"ports": [{"name": "legacy", "port": 5433}]}
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_uncontrolled_child_is_adopted_and_keeps_its_annotation() {
    let cluster = TestCluster::start().await;
    let services = cluster.api::<Service>();
    services.create(&PostParams::default(), &service(None)).await.unwrap();
    let operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();

    let adopted = await_object(&services, NAME, "the Service adopted", |svc| {
        svc.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|o| o.kind == "DatabaseCluster"))
    })
    .await;
    let spec = adopted.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    assert!(spec.ports.unwrap().iter().any(|p| p.name.as_deref() == Some("postgres") && p.port == 5432));
    assert_eq!(adopted.metadata.annotations.unwrap()["note"], "made by hand");
    assert_eq!(adopted.metadata.labels.unwrap()["app.kubernetes.io/managed-by"], "dbcluster-operator");
    let created_events = cluster
        .events_about(NAME)
        .await
        .into_iter()
        .filter(|e| e.note.as_deref() == Some(&format!("Created Service {NAME}")))
        .count();
    assert_eq!(created_events, 0, "an adopted Service was not created by the operator");
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn another_controllers_child_is_not_taken_over() {
    let cluster = TestCluster::start().await;
    let config_maps = cluster.api::<ConfigMap>();
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("someone-else".into());
    let owner = config_maps.create(&PostParams::default(), &owner).await.unwrap();
    let services = cluster.api::<Service>();
    services.create(&PostParams::default(), &service(Some(&owner))).await.unwrap();
    let operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();

    eventually("a ReconcileError Event naming the other controller", WAIT_LIMIT, || async {
        let events = cluster.events_about(NAME).await;
        let named = events.iter().any(|e| {
            e.reason.as_deref() == Some("ReconcileError")
                && e.note.as_deref().is_some_and(|n| n.contains("ConfigMap someone-else"))
        });
        if named { Ok(()) } else { Err(events) }
    })
    .await;
    await_passes(&operator, 4).await;
    assert!(operator.handles.queue.num_requeues(&key(NAME)) >= 2, "retried with backoff");
    assert_eq!(operator.terminal_errors(), 0);
    // After a few failed passes the error shows in the cluster's status, not only in an Event.
    let failing = await_object(&cluster.clusters(), NAME, "ReconcileSucceeded=False", |c| {
        condition(c, "ReconcileSucceeded").is_some_and(|(status, _)| status == "False")
    })
    .await;
    assert!(operator.errors() >= 3, "shown only after three failed passes");
    let shown =
        failing.status.unwrap().conditions.into_iter().find(|c| c.type_ == "ReconcileSucceeded").unwrap();
    assert_eq!(shown.reason, "ReconcileError");
    assert!(shown.message.contains("controlled by ConfigMap someone-else"), "{}", shown.message);
    let untouched = services.get(NAME).await.unwrap();
    assert_eq!(untouched.metadata.owner_references.unwrap()[0].name, "someone-else");
    assert!(untouched.spec.unwrap().cluster_ip.as_deref() != Some("None"));

    // Once the other controller's Service is gone, the operator creates its own.
    config_maps.delete("someone-else", &DeleteParams::default()).await.unwrap();
    await_object(&services, NAME, "the operator's Service", |svc| {
        svc.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|o| o.kind == "DatabaseCluster"))
    })
    .await;
    // The next successful pass clears it.
    await_object(&cluster.clusters(), NAME, "ReconcileSucceeded=True", |c| {
        condition(c, "ReconcileSucceeded") == Some(("True".into(), "Reconciled".into()))
    })
    .await;
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_secret_of_another_type_under_the_operators_name_is_reported_not_changed() {
    let cluster = TestCluster::start().await;
    let secrets = cluster.api::<k8s_openapi::api::core::v1::Secret>();
    let opaque = json!({"metadata": {"name": format!("{NAME}-app")}, "type": "Opaque", "stringData": {"password": "mine"}});
    secrets.create(&PostParams::default(), &serde_json::from_value(opaque).unwrap()).await.unwrap();
    let operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();

    // A Secret's type is immutable (the API server would refuse to change it), so the operator
    // says what is in the way and writes nothing to it.
    let failing = await_object(&cluster.clusters(), NAME, "ReconcileSucceeded=False", |c| {
        condition(c, "ReconcileSucceeded").is_some_and(|(status, _)| status == "False")
    })
    .await;
    let shown =
        failing.status.unwrap().conditions.into_iter().find(|c| c.type_ == "ReconcileSucceeded").unwrap();
    let expected = format!(
        "Secret {NAME}-app already exists with type Opaque, not kubernetes.io/basic-auth, and a Secret's type cannot change"
    );
    assert!(shown.message.contains(&expected), "{}", shown.message);
    assert!(operator.handles.queue.num_requeues(&key(NAME)) >= 2, "retried with backoff");
    let app_secret = format!("{NAME}-app");
    let writes = cluster.writes().into_iter().filter(|r| r.name.as_deref() == Some(app_secret.as_str()));
    assert!(writes.map(|r| r.verb).all(|verb| verb == "create"), "only the operator's first create, refused");
    let kept = secrets.get(&app_secret).await.unwrap();
    assert_eq!(kept.type_.as_deref(), Some("Opaque"));
    operator.stop().await;
}
