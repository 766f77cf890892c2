//! Which events bring which passes: every existing object once the informers are synced, an
//! owned child's change to its controller owner, and `Watches` through its mapper.

use super::*;

#[tokio::test]
async fn workers_start_after_every_informer_synced_and_reconcile_every_existing_object() {
    let h = Harness::start().await;
    for name in ["a", "b", "c"] {
        h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    let controller = h.controller();
    // Informers start after the controller is built: it must wait for both first lists.
    h.start_informers();
    let (_stop, _task) = h.run(controller);
    h.recorder.wait_until(|r| r.passes.lock().len() >= 3).await;
    assert_eq!(*h.recorder.synced_at_first_pass.lock(), Some(true));
    let mut keys = h.recorder.keys();
    keys.sort();
    assert_eq!(keys, ["default/a", "default/b", "default/c"]);
}

#[tokio::test]
async fn a_change_to_an_owned_child_reconciles_its_controller_owner_only() {
    let h = Harness::start().await;
    let owner = h.api::<ConfigMap>().create(&PostParams::default(), &config_map("pg")).await.unwrap();
    let other = h.api::<ConfigMap>().create(&PostParams::default(), &config_map("bystander")).await.unwrap();
    h.start_informers();
    let (_stop, _task) = h.run(h.controller());
    h.recorder.wait_until(|r| r.passes.lock().len() >= 2).await;

    // A child whose controller is `pg`: its creation and changes reconcile `pg`.
    let secrets = h.api::<Secret>();
    secrets.create(&PostParams::default(), &secret("pg-app", &owner, true, json!({}))).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("pg").len() >= 2).await;
    // A child that merely references `bystander` without being controlled by it: nothing.
    secrets.create(&PostParams::default(), &secret("loose", &other, false, json!({}))).await.unwrap();
    let patch = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    secrets.patch("pg-app", &PatchParams::default(), &patch).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("pg").len() >= 3).await;
    assert_eq!(h.recorder.passes_of("bystander").len(), 1, "a non-controller reference must not map");
    assert!(h.recorder.passes_of("pg-app").is_empty() && h.recorder.passes_of("loose").is_empty());
}

#[tokio::test]
async fn watches_maps_events_of_any_kind_through_its_mapper() {
    let h = Harness::start().await;
    h.start_informers();
    let mut config = ControllerConfig::named("mapper");
    config.workers = 1;
    let controller = Controller::new(&h.config_maps, config).watches(&h.secrets, |s: &Secret| {
        let target = s.metadata.labels.as_ref()?.get("wake")?.clone();
        Some(ObjectKey::namespaced("default", &target))
    });
    let (_stop, _task) = h.run(controller);
    let pointer: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s", "labels": {"wake": "far-away"}}})).unwrap();
    h.api::<Secret>().create(&PostParams::default(), &pointer).await.unwrap();
    h.recorder.wait_until(|r| r.keys().contains(&"default/far-away".to_string())).await;
}
