//! The simulated volume provisioner, binder and expander (kube-controller-manager's PV controller
//! and a hostPath provisioner).
//!
//! Rules:
//! 1. The cluster starts with two StorageClasses. `standard`, marked default
//!    (`storageclass.kubernetes.io/is-default-class`), `reclaimPolicy: Delete`,
//!    `volumeBindingMode: Immediate`, `allowVolumeExpansion: true`: dynamically provisioned
//!    volumes are deleted with their claim and may grow, as with the default class of kind,
//!    minikube, GKE or EKS. `fixed`, the same without `allowVolumeExpansion`.
//! 2. A claim without `spec.volumeName` whose class exists (its `storageClassName`, or the
//!    default class when it names none) gets a PersistentVolume `pvc-<claim uid>`: the claim's
//!    request as capacity, its access modes, the class's reclaim policy (`Delete` when the class
//!    says none, the API's default), `hostPath` `<node>/volumes/pvc-<claim uid>` (the process
//!    kubelet mounts it), `claimRef` to the claim, phase `Bound`; the claim gets `volumeName` and
//!    phase `Bound`. A claim naming a class that does not exist (or `""`) stays `Pending`.
//! 3. A volume whose claim is gone (no claim with that uid) is reclaimed: `Delete` removes the
//!    PersistentVolume and its directory; `Retain` keeps both, phase `Released`.
//! 4. A bound claim whose storage request grew is expanded at once (`status.capacity.storage`
//!    follows `spec.resources.requests.storage`), and so is its volume.
//! 5. Admission (the apiserver's `PersistentVolumeClaimResize` plugin, [`admit_resize`]): an
//!    update that raises a claim's storage request is refused, 403 Forbidden, unless the claim's
//!    class (rule 2's) has `allowVolumeExpansion: true`.

use std::path::Path;

use serde_json::{Value, json};

use crate::sim::api_error::ApiError;
use crate::sim::controllers::{create_with_status, is_deleting, write, write_status};
use crate::sim::ops::{self, DeleteOptions};
use crate::sim::resources::Kind;
use crate::sim::schema::quantity::Quantity;
use crate::sim::state::State;

/// The default StorageClass's name (rule 1).
pub const DEFAULT_CLASS: &str = "standard";

/// A StorageClass that does not allow volume expansion (rule 1).
pub const FIXED_CLASS: &str = "fixed";

/// The resize admission's refusal (rule 5), worded as the apiserver words it.
pub const RESIZE_REFUSED: &str = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize";

/// The annotation that marks the default StorageClass.
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// Creates the StorageClasses (rule 1); called once when the cluster starts.
pub fn install_default_class(state: &mut State) {
    let class = |name: &str| {
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": "sim.dbcluster-operator/hostpath",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        })
    };
    let mut standard = class(DEFAULT_CLASS);
    standard["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
    standard["allowVolumeExpansion"] = json!(true);
    for class in [standard, class(FIXED_CLASS)] {
        create_with_status(state, "storage.k8s.io", "storageclasses", None, class, None);
    }
}

/// Refuses (403) an update of claim `old` to `new` that raises its storage request when its class
/// does not allow expansion (rule 5). The class is rule 2's: the simulator has no
/// DefaultStorageClass admission writing the default class's name into a new claim.
pub fn admit_resize(state: &State, kind: &Kind, old: &Value, new: &Value) -> Result<(), ApiError> {
    let request = |claim: &Value| {
        claim["spec"]["resources"]["requests"]["storage"].as_str().and_then(|q| q.parse::<Quantity>().ok())
    };
    let grows = match (request(old), request(new)) {
        (Some(before), Some(after)) => after.compare(&before).is_gt(),
        _ => false,
    };
    let expandable = || class_of(state, new).is_some_and(|class| class["allowVolumeExpansion"] == true);
    if grows && !expandable() {
        let name = new["metadata"]["name"].as_str().unwrap_or_default();
        return Err(ApiError::forbidden(kind, name, RESIZE_REFUSED));
    }
    Ok(())
}

/// Binds new claims, reclaims released volumes and expands grown claims (rules 2–4).
pub fn reconcile_all(state: &mut State, volumes_dir: &Path) {
    bind_new_claims(state, volumes_dir);
    reclaim_released(state);
    expand_grown(state);
}

/// The claim's class: its `storageClassName`, or the default class when it names none.
fn class_of(state: &State, claim: &Value) -> Option<Value> {
    match claim["spec"]["storageClassName"].as_str() {
        Some("") => None,
        Some(name) => state.store.get("storageclasses.storage.k8s.io", "", name).cloned(),
        None => state
            .store
            .list("storageclasses.storage.k8s.io", None)
            .find(|c| c["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION] == "true")
            .cloned(),
    }
}

fn bind_new_claims(state: &mut State, volumes_dir: &Path) {
    let claims: Vec<Value> = state
        .store
        .list("persistentvolumeclaims", None)
        .filter(|c| c["spec"]["volumeName"].as_str().is_none_or(str::is_empty) && !is_deleting(c))
        .cloned()
        .collect();
    for claim in claims {
        let Some(class) = class_of(state, &claim) else { continue };
        let uid = claim["metadata"]["uid"].as_str().unwrap_or_default();
        let volume_name = format!("pvc-{uid}");
        let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
        let volume = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": volume_name, "annotations": {"pv.kubernetes.io/provisioned-by": class["provisioner"]}},
            "spec": {
                "capacity": {"storage": storage},
                "accessModes": claim["spec"]["accessModes"],
                "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
                "storageClassName": class["metadata"]["name"],
                "volumeMode": claim["spec"]["volumeMode"].as_str().unwrap_or("Filesystem"),
                "hostPath": {"path": volumes_dir.join(&volume_name).display().to_string(), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"], "uid": uid,
                },
            },
        });
        if state.store.get("persistentvolumes", "", &volume_name).is_none()
            && create_with_status(
                state,
                "",
                "persistentvolumes",
                None,
                volume,
                Some(json!({"phase": "Bound"})),
            )
            .is_none()
        {
            continue;
        }
        let Some(kind) = state.registry.get("", "v1", "persistentvolumeclaims") else { return };
        let mut bound = claim.clone();
        bound["spec"]["volumeName"] = json!(volume_name);
        let Some(bound) = write(state, &kind, bound, None) else { continue };
        let mut status = bound["status"].clone();
        status["phase"] = json!("Bound");
        status["accessModes"] = claim["spec"]["accessModes"].clone();
        if !status["capacity"]["storage"].is_string() {
            status["capacity"] = json!({"storage": storage});
        }
        write_status(state, "", "persistentvolumeclaims", &bound, status);
    }
}

fn reclaim_released(state: &mut State) {
    let released: Vec<Value> = state
        .store
        .list("persistentvolumes", None)
        .filter(|v| {
            v["spec"]["claimRef"]["uid"].as_str().is_some_and(|uid| !state.store.is_live(uid))
                && v["status"]["phase"] != "Released"
        })
        .cloned()
        .collect();
    for volume in released {
        let name = volume["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain" {
            let mut status = volume["status"].clone();
            status["phase"] = json!("Released");
            write_status(state, "", "persistentvolumes", &volume, status);
            continue;
        }
        let Some(kind) = state.registry.get("", "v1", "persistentvolumes") else { return };
        if let Err(e) = ops::delete(state, &kind, None, &name, &DeleteOptions::default()) {
            tracing::debug!(volume = %name, error = %e.message, "simulated provisioner could not delete a volume");
            continue;
        }
        if let Some(dir) = volume["spec"]["hostPath"]["path"].as_str() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn expand_grown(state: &mut State) {
    let claims: Vec<Value> = state
        .store
        .list("persistentvolumeclaims", None)
        .filter(|c| {
            c["status"]["phase"] == "Bound"
                && c["spec"]["resources"]["requests"]["storage"].is_string()
                && c["spec"]["resources"]["requests"]["storage"] != c["status"]["capacity"]["storage"]
        })
        .cloned()
        .collect();
    for claim in claims {
        let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
        if let Some(volume) = claim["spec"]["volumeName"]
            .as_str()
            .and_then(|v| state.store.get("persistentvolumes", "", v))
            .cloned()
            && let Some(kind) = state.registry.get("", "v1", "persistentvolumes")
        {
            let mut grown = volume;
            grown["spec"]["capacity"]["storage"] = storage.clone();
            write(state, &kind, grown, None);
        }
        let mut status = claim["status"].clone();
        status["capacity"]["storage"] = storage;
        write_status(state, "", "persistentvolumeclaims", &claim, status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_class_and_reclaim_policy() {
        let mut state = State::new(100, crate::sim::KubernetesVersion::OLDEST_SUPPORTED);
        install_default_class(&mut state);
        let class = state.store.get("storageclasses.storage.k8s.io", "", DEFAULT_CLASS).unwrap();
        assert_eq!(class["reclaimPolicy"], "Delete");
        assert_eq!(class["allowVolumeExpansion"], true);
        let fixed = state.store.get("storageclasses.storage.k8s.io", "", FIXED_CLASS).unwrap();
        assert!(fixed["allowVolumeExpansion"].is_null());
        let claim = json!({"spec": {}});
        assert_eq!(class_of(&state, &claim).unwrap()["metadata"]["name"], DEFAULT_CLASS);
        assert!(class_of(&state, &json!({"spec": {"storageClassName": ""}})).is_none());
        assert!(class_of(&state, &json!({"spec": {"storageClassName": "fast"}})).is_none());
    }
}
