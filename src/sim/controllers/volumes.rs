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
//! 4. A bound claim whose storage request grew is expanded `volume_expand_delay` later
//!    (`status.capacity.storage` follows `spec.resources.requests.storage`), and so is its volume:
//!    a real resize (the CSI resizer, then the kubelet's filesystem resize) takes seconds, so a
//!    client sees the request above the capacity for a while, as it would on a real cluster.
//! 5. Admission (the apiserver's `PersistentVolumeClaimResize` plugin, [`admit_resize`]): an
//!    update that raises a claim's storage request is refused, 403 Forbidden, unless the claim's
//!    class (rule 2's) has `allowVolumeExpansion: true`.
//!
//! Rules 2 and 4 are applied to each claim that changed (rule 4's expansion once its delay is
//! over, [`expand_claim`]), rule 3 to each volume that changed and to the volume of each claim
//! deleted ([`reconcile_claim`], [`reconcile_volume`]), so the work per change does not grow with
//! the number of claims stored.

use std::path::Path;

use serde_json::{Value, json};

use crate::sim::api_error::ApiError;
use crate::sim::controllers::{create_with_status, is_deleting, write, write_status};
use crate::sim::ops::{self, DeleteOptions};
use crate::sim::resources::Kind;
use crate::sim::schema::quantity::Quantity;
use crate::sim::state::State;
use crate::sim::store::ObjectName;

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

/// Binds the claim `(namespace, name)` if it is new (rule 2); returns whether it grew and waits
/// for its expansion (rule 4, [`expand_claim`] once the delay is over). The controllers call it for
/// each claim that changed.
pub fn reconcile_claim(state: &mut State, volumes_dir: &Path, (ns, name): &ObjectName) -> bool {
    let claim = |state: &State| state.store.get("persistentvolumeclaims", ns, name).cloned();
    let Some(new) = claim(state) else { return false };
    if new["spec"]["volumeName"].as_str().is_none_or(str::is_empty) && !is_deleting(&new) {
        bind(state, volumes_dir, &new);
    }
    claim(state).is_some_and(|claim| needs_expansion(&claim))
}

/// Expands the claim `(namespace, name)` and its volume to the claim's request, if it still asks
/// for more than its capacity (rule 4).
pub fn expand_claim(state: &mut State, (ns, name): &ObjectName) {
    if let Some(grown) =
        state.store.get("persistentvolumeclaims", ns, name).filter(|c| needs_expansion(c)).cloned()
    {
        expand(state, &grown);
    }
}

/// Reclaims the volume `name` if its claim is gone (rule 3). The controllers call it for each
/// volume that changed and for the volume of each claim deleted.
pub fn reconcile_volume(state: &mut State, name: &str) {
    let Some(volume) = state.store.get("persistentvolumes", "", name).cloned() else { return };
    let released = volume["spec"]["claimRef"]["uid"].as_str().is_some_and(|uid| !state.store.is_live(uid));
    if released && volume["status"]["phase"] != "Released" {
        reclaim(state, &volume);
    }
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

fn bind(state: &mut State, volumes_dir: &Path, claim: &Value) {
    let Some(class) = class_of(state, claim) else { return };
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
        && create_with_status(state, "", "persistentvolumes", None, volume, Some(json!({"phase": "Bound"})))
            .is_none()
    {
        return;
    }
    let Some(kind) = state.registry.get("", "v1", "persistentvolumeclaims") else { return };
    let mut bound = claim.clone();
    bound["spec"]["volumeName"] = json!(volume_name);
    let Some(bound) = write(state, &kind, bound, None) else { return };
    let mut status = bound["status"].clone();
    status["phase"] = json!("Bound");
    status["accessModes"] = claim["spec"]["accessModes"].clone();
    if !status["capacity"]["storage"].is_string() {
        status["capacity"] = json!({"storage": storage});
    }
    write_status(state, "", "persistentvolumeclaims", &bound, status);
}

fn reclaim(state: &mut State, volume: &Value) {
    let name = volume["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    if volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain" {
        let mut status = volume["status"].clone();
        status["phase"] = json!("Released");
        write_status(state, "", "persistentvolumes", volume, status);
        return;
    }
    let Some(kind) = state.registry.get("", "v1", "persistentvolumes") else { return };
    if let Err(e) = ops::delete(state, &kind, None, &name, &DeleteOptions::default()) {
        tracing::debug!(volume = %name, error = %e.message, "simulated provisioner could not delete a volume");
        return;
    }
    if let Some(dir) = volume["spec"]["hostPath"]["path"].as_str() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn needs_expansion(claim: &Value) -> bool {
    claim["status"]["phase"] == "Bound"
        && claim["spec"]["resources"]["requests"]["storage"].is_string()
        && claim["spec"]["resources"]["requests"]["storage"] != claim["status"]["capacity"]["storage"]
}

fn expand(state: &mut State, claim: &Value) {
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
    write_status(state, "", "persistentvolumeclaims", claim, status);
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
