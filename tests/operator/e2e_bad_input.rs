//! Bad input, end to end: the CRD's schema and CEL rules refuse bad specs at the API server, and a
//! spec that bypassed them (stored under an older, looser CRD) ends Failed with a reason, one
//! Warning Event and a bounded number of passes, until the spec is fixed.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::api::types::{self, DatabaseCluster, VERSION_CHANGE_MESSAGE};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

fn refusal(error: kube::Error) -> (u16, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("expected an API refusal, got {other}"),
    }
}

/// Waits until cluster `name` is Failed with `Ready=False, InvalidSpec`; returns the condition's message.
async fn await_invalid_spec(api: &kube::Api<DatabaseCluster>, name: &str) -> String {
    let failed =
        await_object(api, name, "phase Failed", |c: &DatabaseCluster| phase(c) == Some("Failed")).await;
    assert_eq!(condition(&failed, "Ready"), Some(("False".into(), "InvalidSpec".into())));
    let conditions = failed.status.expect("a status").conditions;
    conditions.into_iter().find(|c| c.type_ == "Ready").expect("a Ready condition").message
}

#[tokio::test]
async fn the_schema_refuses_an_unparsable_storage_size_and_negative_replicas() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let mut lots = sample();
    lots.spec.storage_size = "lots".into();
    let (code, message) = refusal(api.create(&PostParams::default(), &lots).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("spec.storageSize"), "{message}");

    // Zero replicas hibernates a cluster; fewer is refused.
    let mut none = sample();
    none.spec.replicas = -1;
    let (code, message) = refusal(api.create(&PostParams::default(), &none).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("spec.replicas"), "{message}");
    assert!(api.get_opt("production-postgres").await.unwrap().is_none());
}

/// The version-change rule at admission, on Kubernetes 1.28: each row starts a cluster at `from`
/// (with `running` as `status.currentVersion`, if any), asks for `to`, and says whether it is admitted.
#[tokio::test]
async fn cel_admits_an_upward_major_and_refuses_a_downgrade_and_a_move_from_before_10() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let rows: [(&str, Option<&str>, &str, bool); 10] = [
        ("15.4", None, "15.5", true),
        ("15.4", None, "16", true),
        ("15.4", None, "17.2", true),
        ("15.4", None, "18", true),
        ("15.4", None, "14.9", false),
        ("18", None, "15", false),
        ("9.6", None, "15", false),
        // After a failed upgrade the spec asks for 18 while 15 runs: going back to 15 gives it up.
        ("18", Some("15.4"), "15.4", true),
        ("18", Some("15.4"), "17", true),
        ("18", Some("15.4"), "14", false),
    ];
    for (from, running, to, admitted) in rows {
        let mut db = sample();
        db.spec.version = from.into();
        api.create(&PostParams::default(), &db).await.unwrap();
        if let Some(running) = running {
            let status = Patch::Merge(json!({"status": {"currentVersion": running}}));
            api.patch_status("production-postgres", &PatchParams::default(), &status).await.unwrap();
        }
        let patch = Patch::Merge(json!({"spec": {"version": to}}));
        let result = api.patch("production-postgres", &PatchParams::default(), &patch).await;
        match (result, admitted) {
            (Ok(patched), true) => assert_eq!(patched.spec.version, to),
            (Err(error), false) => {
                let (code, message) = refusal(error);
                assert_eq!(code, 422, "{from} -> {to}");
                assert!(message.contains(VERSION_CHANGE_MESSAGE), "{from} -> {to}: {message}");
            }
            (result, _) => {
                panic!("{from} (running {running:?}) -> {to}: admitted {admitted} expected, got {result:?}")
            }
        }
        api.delete("production-postgres", &Default::default()).await.unwrap();
        await_absent(&api, "production-postgres", "the deleted cluster").await;
    }
}

#[tokio::test]
async fn the_crd_installs_on_1_28_and_refuses_a_shrink_in_any_notation() {
    // TestCluster's simulator runs as Kubernetes 1.28 (the default), whose apiserver compiles new
    // CEL expressions without the quantity library.
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    let patch = |size: &str| Patch::Merge(json!({"spec": {"storageSize": size}}));
    let resize = |size: &'static str| {
        let api = api.clone();
        async move { api.patch("production-postgres", &PatchParams::default(), &patch(size)).await }
    };
    // From 1Gi: restated in other notations, then grown, then restated again.
    for same_or_more in ["1024Mi", "1073741824", "1048576Ki", "1.5Gi", "1536Mi", "1.7G", "1700M", "1.7G"] {
        resize(same_or_more).await.unwrap_or_else(|e| panic!("{same_or_more}: {e}"));
    }
    for smaller in ["1699999999", "1.5Gi", "1G", "0.001Ti", "1699M"] {
        let (code, message) = refusal(resize(smaller).await.unwrap_err());
        assert_eq!(code, 422, "{smaller}");
        assert!(message.contains(types::STORAGE_SHRINK_MESSAGE), "{smaller}: {message}");
    }
    let stored = api.get("production-postgres").await.unwrap();
    assert_eq!(stored.spec.storage_size, "1.7G");
}

#[tokio::test]
async fn the_crd_refuses_a_name_its_children_could_not_carry() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let named = |name: &str| {
        let mut cluster = sample();
        cluster.metadata.name = Some(name.to_owned());
        cluster
    };
    let longest = "a".repeat(52);
    for bad in ["a".repeat(53), "1db".to_owned(), "db.prod".to_owned()] {
        let (code, message) = refusal(api.create(&PostParams::default(), &named(&bad)).await.unwrap_err());
        assert_eq!(code, 422, "{bad}");
        assert!(message.contains(types::CLUSTER_NAME_MESSAGE), "{bad}: {message}");
    }
    // Not even an object name: refused by the name rule before the CRD's own rule is judged.
    let (code, message) = refusal(api.create(&PostParams::default(), &named("db-")).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("RFC 1123 subdomain"), "{message}");
    api.create(&PostParams::default(), &named(&longest)).await.unwrap();
    api.create(&PostParams::default(), &named("db-2")).await.unwrap();
}

/// The operator's CRD without the storageSize pattern and the version's CEL rule: what an older
/// CRD might have let in.
fn loose_crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(types::crd()).unwrap();
    let root = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let rules = root["x-kubernetes-validations"].as_array_mut().unwrap();
    rules.retain(|rule| rule["message"] != VERSION_CHANGE_MESSAGE);
    root["properties"]["spec"]["properties"]["storageSize"].as_object_mut().unwrap().remove("pattern");
    serde_json::from_value(crd).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_spec_that_bypassed_validation_fails_once_and_waits_for_a_fix() {
    let cluster = TestCluster::start().await;
    install_crd(&cluster.client, loose_crd()).await;
    let api = cluster.clusters();
    let mut bad = sample();
    bad.spec.storage_size = "lots".into();
    api.create(&PostParams::default(), &bad).await.unwrap();

    let operator = cluster.start_operator().await;
    let message = await_invalid_spec(&api, "production-postgres").await;
    assert!(message.contains("spec.storageSize") && message.contains("lots"), "{message}");

    // A minute of simulated time: no retry storm, no child, one Warning.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let passes = operator.passes();
    assert!(passes <= 4, "{passes} passes for an invalid spec");
    assert!(operator.terminal_errors() >= 1);
    assert_eq!(operator.errors(), operator.terminal_errors(), "only terminal errors");
    assert_eq!(operator.handles.queue.num_requeues(&key("production-postgres")), 0, "no backoff retries");
    assert!(cluster.api::<StatefulSet>().get_opt("production-postgres").await.unwrap().is_none());
    assert!(cluster.api::<Service>().get_opt("production-postgres").await.unwrap().is_none());
    assert!(cluster.api::<Secret>().get_opt("production-postgres-app").await.unwrap().is_none());
    let warnings: Vec<_> = cluster
        .events_about("production-postgres")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InvalidSpec"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));

    // Fixing the spec brings the cluster back.
    let fix = Patch::Merge(json!({"spec": {"storageSize": "1Gi"}}));
    api.patch("production-postgres", &PatchParams::default(), &fix).await.unwrap();
    await_object(&api, "production-postgres", "a phase other than Failed", |c: &DatabaseCluster| {
        phase(c).is_some_and(|p| p != "Failed")
    })
    .await;
    await_object(&cluster.api::<StatefulSet>(), "production-postgres", "the StatefulSet", |_| true).await;
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_major_downgrade_that_bypassed_cel_fails_and_leaves_the_pods_alone() {
    let cluster = TestCluster::start().await;
    install_crd(&cluster.client, loose_crd()).await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, "production-postgres", "Running 3/3", |c: &DatabaseCluster| {
        phase(c) == Some("Running") && ready(c) == 3
    })
    .await;

    let major = Patch::Merge(json!({"spec": {"version": "14.1"}}));
    api.patch("production-postgres", &PatchParams::default(), &major).await.unwrap();
    let failed = await_object(&api, "production-postgres", "phase Failed", |c: &DatabaseCluster| {
        phase(c) == Some("Failed")
    })
    .await;
    let status = failed.status.unwrap();
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.reason, "InvalidSpec");
    assert!(ready.message.contains("downgrade"), "{}", ready.message);
    assert_eq!(status.current_version.as_deref(), Some("15.4"));
    let sts = cluster.api::<StatefulSet>().get("production-postgres").await.unwrap();
    let image = sts.spec.unwrap().template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("postgres:15.4"), "the data directory must not meet a new major");
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn synchronous_replicas_stay_below_the_instances_in_the_crd_and_in_the_operator() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let with = |replicas: i32, synchronous: i32| {
        let mut db = sample();
        db.spec.replicas = replicas;
        db.spec.synchronous_replicas = Some(synchronous);
        db
    };
    let (code, message) = refusal(api.create(&PostParams::default(), &with(3, 3)).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains(types::SYNCHRONOUS_REPLICAS_MESSAGE), "{message}");
    let (code, message) = refusal(api.create(&PostParams::default(), &with(3, -1)).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("spec.synchronousReplicas"), "{message}");
    api.create(&PostParams::default(), &with(3, 2)).await.unwrap();
    let hibernate = Patch::Merge(json!({"spec": {"replicas": 0}}));
    api.patch("production-postgres", &PatchParams::default(), &hibernate).await.unwrap();
    let shrink = Patch::Merge(json!({"spec": {"replicas": 2}}));
    let (code, _) =
        refusal(api.patch("production-postgres", &PatchParams::default(), &shrink).await.unwrap_err());
    assert_eq!(code, 422, "2 instances cannot wait for 2 standbys");
    api.delete("production-postgres", &Default::default()).await.unwrap();

    // Past an older CRD without the rule, the operator refuses it: Ready=False, InvalidSpec.
    let mut loose = serde_json::to_value(types::crd()).unwrap();
    loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("x-kubernetes-validations");
    install_crd(&cluster.client, serde_json::from_value(loose).unwrap()).await;
    let mut bad = with(2, 2);
    bad.metadata.name = Some("sync-db".into());
    api.create(&PostParams::default(), &bad).await.unwrap();
    let operator = cluster.start_operator().await;
    let failed =
        await_object(&api, "sync-db", "phase Failed", |c: &DatabaseCluster| phase(c) == Some("Failed")).await;
    assert_eq!(condition(&failed, "Ready"), Some(("False".into(), "InvalidSpec".into())));
    let message =
        &failed.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Ready").unwrap().message;
    assert!(message.contains("spec.synchronousReplicas 2"), "{message}");
    assert!(cluster.api::<StatefulSet>().get_opt("sync-db").await.unwrap().is_none());
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn resources_a_container_cannot_have_fail_the_spec_and_roll_nothing() {
    let cluster = TestCluster::start().await;
    let operator = sample_running(&cluster).await;
    let api = cluster.clusters();
    let statefulsets = cluster.api::<StatefulSet>();
    let before = statefulsets.get("production-postgres").await.unwrap();

    // As on Kubernetes 1.28, a StatefulSet whose pod template asks for more than its limit is
    // stored, and every pod its controller would make from it is refused.
    let mut over = serde_json::to_value(&before).unwrap();
    over["metadata"] = json!({"name": "look-alike"});
    over["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}});
    let over: StatefulSet = serde_json::from_value(over).unwrap();
    statefulsets.create(&PostParams::default(), &over).await.unwrap();
    await_event_reasons(&cluster, "look-alike", &["FailedCreate"]).await;
    let refused = cluster.events_about("look-alike").await;
    let note = refused[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("must be less than or equal to cpu limit of 1"), "{note}");
    assert!(cluster.api::<Pod>().get_opt("look-alike-0").await.unwrap().is_none());
    statefulsets.delete("look-alike", &Default::default()).await.unwrap();

    // So the operator refuses such a spec before it writes anything (a roll would delete pods
    // that cannot come back): the StatefulSet stays as it was, and one Warning says why.
    let resources =
        Patch::Merge(json!({"spec": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}}));
    api.patch("production-postgres", &PatchParams::default(), &resources).await.unwrap();
    let message = await_invalid_spec(&api, "production-postgres").await;
    assert!(message.contains("requests.cpu 2 is more than limits.cpu 1"), "{message}");
    let after = statefulsets.get("production-postgres").await.unwrap();
    assert_eq!(after.metadata.generation, before.metadata.generation, "the StatefulSet was not changed");
    let warnings = cluster.events_about("production-postgres").await;
    let warnings: Vec<_> = warnings.iter().filter(|e| e.reason.as_deref() == Some("InvalidSpec")).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_storage_class_no_claim_could_name_is_refused_by_the_crd_and_by_the_operator() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let with_classes = |data: &str, backups: &str| {
        let mut db = sample();
        db.spec.storage_class_name = Some(data.into());
        db.spec.backup = Some(serde_json::from_value(json!({"storageClassName": backups})).unwrap());
        db
    };
    for (data, backups, field) in [
        ("Fast_SSD", "standard", "spec.storageClassName"),
        ("standard", "also bad", "spec.backup.storageClassName"),
    ] {
        let (code, message) =
            refusal(api.create(&PostParams::default(), &with_classes(data, backups)).await.unwrap_err());
        assert_eq!(code, 422);
        assert!(message.contains(field), "{message}");
    }

    // Past an older CRD without the pattern, the operator refuses it before making a claim.
    let mut loose = serde_json::to_value(types::crd()).unwrap();
    loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["storageClassName"]
        .as_object_mut()
        .unwrap()
        .remove("pattern");
    install_crd(&cluster.client, serde_json::from_value(loose).unwrap()).await;
    api.create(&PostParams::default(), &with_classes("Fast_SSD", "standard")).await.unwrap();
    let operator = cluster.start_operator().await;
    let message = await_invalid_spec(&api, "production-postgres").await;
    assert!(message.contains("spec.storageClassName \"Fast_SSD\" is not a StorageClass name"), "{message}");
    assert!(cluster.api::<StatefulSet>().get_opt("production-postgres").await.unwrap().is_none());
    operator.stop().await;
}

#[tokio::test]
async fn an_instance_no_node_can_take_says_so_in_the_status() {
    // The process kubelet reports a pod whose claim stays unbound as the scheduler would.
    let cluster = common::postgres::process_cluster().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    let mut db = sample();
    db.spec.replicas = 1;
    db.spec.storage_class_name = Some("no-such-class".into());
    api.create(&PostParams::default(), &db).await.unwrap();
    let failing = common::postgres::eventually_some("Ready=False, InstanceFailing", || async {
        let cluster = api.get("production-postgres").await.ok()?;
        let reason = condition(&cluster, "Ready")?.1;
        (reason == "InstanceFailing").then_some(cluster)
    })
    .await;
    let status = failing.status.unwrap();
    let unbound = "not scheduled: 0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims";
    assert!(status.instances[0].message.as_deref().unwrap_or_default().starts_with(unbound), "{status:?}");
    let condition = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert!(
        condition.message.contains(&format!("production-postgres-0: {unbound}")),
        "{}",
        condition.message
    );
    assert_eq!(status.phase.map(|p| format!("{p:?}")).as_deref(), Some("Provisioning"));

    // Once the class exists the claim is bound, the instance starts, and the message goes.
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
        kube::Api::all(cluster.client.clone());
    let class =
        json!({"metadata": {"name": "no-such-class"}, "provisioner": "sim.dbcluster-operator/hostpath"});
    classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    let running = common::postgres::eventually_some("Running 1/1", || async {
        let cluster = api.get("production-postgres").await.ok()?;
        (phase(&cluster) == Some("Running") && ready(&cluster) == 1).then_some(cluster)
    })
    .await;
    assert_eq!(running.status.unwrap().instances[0].message, None);
    operator.stop().await;
}
