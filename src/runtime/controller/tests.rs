//! Unit tests of the controller: pass histories and the ownership mapping.
use std::collections::VecDeque;

use tokio::time::{Duration, Instant};

use super::worker::keep_last;
use super::*;
use crate::runtime::controller::causes::CauseLog;
use crate::runtime::observe::introspection::PassRecord;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

fn pass_of(took_ms: u64) -> PassRecord {
    PassRecord {
        causes: CauseLog::default(),
        started: Instant::now(),
        result: PassResult::Success,
        error: None,
        took: Duration::from_millis(took_ms),
        writes: Box::new([]),
        stale_cache_wait: None,
        hot_loop: false,
    }
}

#[test]
fn a_history_keeps_its_last_passes_with_no_spare_room() {
    let mut history = VecDeque::new();
    for took in 0..3 {
        keep_last(&mut history, pass_of(took), 10);
        assert_eq!(history.capacity(), history.len(), "no room beyond the records");
    }
    for took in 3..12 {
        keep_last(&mut history, pass_of(took), 10);
    }
    let kept: Vec<u128> = history.iter().map(|pass| pass.took.as_millis()).collect();
    assert_eq!(kept, (2..12).collect::<Vec<_>>(), "the last ten, oldest first");
    assert_eq!(history.capacity(), 10);
    let pass = pass_of(5);
    assert_eq!(pass.finished(), pass.started + Duration::from_millis(5));
}

fn pod_owned_by(kind: &str, api_version: &str, controller: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some("prod".into()),
            name: Some("pg-0".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "pg".into(),
                uid: "u1".into(),
                controller: Some(controller),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

#[test]
fn owns_maps_only_a_controller_reference_of_the_owner_kind_and_group() {
    let key = ObjectKey::namespaced("prod", "pg");
    assert_eq!(
        controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "apps/v1", true)),
        Some(key)
    );
    // Another version of the same group and kind still maps.
    assert!(controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "apps/v2", true)).is_some());
    assert_eq!(controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "apps/v1", false)), None);
    assert_eq!(controller_owner_key::<StatefulSet, _>(&pod_owned_by("ReplicaSet", "apps/v1", true)), None);
    assert_eq!(controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "other/v1", true)), None);
    assert_eq!(controller_owner_key::<StatefulSet, _>(&Pod::default()), None);
}
