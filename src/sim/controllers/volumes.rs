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
//!    Binding is 1.28's `pv_controller.go` `bind` (`bindVolumeToClaim`, `bindClaimToVolume`,
//!    `updateClaimStatus`) after a provisioner's `Provision`: the claim gets the annotations
//!    `pv.kubernetes.io/bind-completed: "yes"` and `pv.kubernetes.io/bound-by-controller: "yes"`
//!    (the controller set its `volumeName`) and `volume.kubernetes.io/storage-provisioner` (and the
//!    beta key), `status.accessModes` and `status.capacity` from the volume; the volume, whose
//!    `claimRef` the provisioner set (with the claim's `resourceVersion`), gets no
//!    `bound-by-controller`. Neither gets the `kubernetes.io/pvc-protection` /
//!    `kubernetes.io/pv-protection` finalizers (the simulator has no protection controllers).
//! 3. A volume whose claim is gone (no claim with that uid) is reclaimed: `Delete` removes the
//!    PersistentVolume and its directory; `Retain` keeps both, phase `Released`.
//! 4. A bound claim whose storage request grew is expanded in the steps of 1.28's resize path,
//!    each `volume_expand_delay` apart: the claim's annotation `volume.kubernetes.io/storage-resizer`
//!    (the expand controller hands it to the CSI resizer) and condition `Resizing` (the resizer's
//!    `markPVCResizeInProgress`); then the volume's `spec.capacity` grows and the condition becomes
//!    `FileSystemResizePending` with the resizer's message (`markPVCAsFSResizeRequired`); then
//!    the kubelet's `NodeExpand` is done: `status.capacity` becomes the request and the resize
//!    conditions go (`MarkFSResizeFinished`). `status.capacity` never changes before that, and
//!    `allocatedResources`/`resizeStatus` are never written (RecoverVolumeExpansionFailure is
//!    alpha and off in 1.28). Unlike a real kubelet, the last step does not wait for a running pod
//!    to mount the claim.
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

/// The PV controller's annotations of a claim it bound (`AnnBindCompleted`, `AnnBoundByController`).
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The claim's provisioner, as the PV controller's `setClaimProvisioner` writes it.
const PROVISIONER_ANNOTATIONS: [&str; 2] =
    ["volume.beta.kubernetes.io/storage-provisioner", "volume.kubernetes.io/storage-provisioner"];
/// The claim's resizer, as the expand controller writes it for a CSI volume.
const RESIZER_ANNOTATION: &str = "volume.kubernetes.io/storage-resizer";
/// The resizer's message while the kubelet has the filesystem to grow.
const FS_RESIZE_PENDING: &str =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

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
    let Some(current) = claim(state).filter(needs_expansion) else { return false };
    if resize_condition(&current).is_none() {
        mark_resizing(state, &current);
    }
    true
}

/// The claim's resize condition (`Resizing` or `FileSystemResizePending`), if any.
fn resize_condition(claim: &Value) -> Option<&str> {
    claim["status"]["conditions"]
        .as_array()?
        .iter()
        .filter_map(|c| c["type"].as_str())
        .find(|t| matches!(*t, "Resizing" | "FileSystemResizePending"))
}

/// The resize conditions replaced by `condition` (1.28 `MergeResizeConditionsOfPVC`: other
/// conditions stay), or removed when it is `None`.
fn with_resize_condition(claim: &Value, condition: Option<Value>) -> Value {
    let mut status = claim["status"].clone();
    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !matches!(c["type"].as_str(), Some("Resizing" | "FileSystemResizePending")))
        .cloned()
        .collect();
    conditions.extend(condition);
    match status.as_object_mut() {
        Some(fields) if conditions.is_empty() => {
            fields.remove("conditions");
        }
        _ => status["conditions"] = json!(conditions),
    }
    status
}

/// The expand controller's `volume.kubernetes.io/storage-resizer` and the CSI resizer's
/// `markPVCResizeInProgress` (`Resizing=True`, no `lastProbeTime`).
fn mark_resizing(state: &mut State, claim: &Value) {
    let Some(kind) = state.registry.get("", "v1", "persistentvolumeclaims") else { return };
    let mut annotated = claim.clone();
    if annotated["metadata"]["annotations"][RESIZER_ANNOTATION].is_null() {
        let resizer = class_of(state, claim).map(|class| class["provisioner"].clone()).unwrap_or_default();
        if !annotated["metadata"]["annotations"].is_object() {
            annotated["metadata"]["annotations"] = json!({});
        }
        annotated["metadata"]["annotations"][RESIZER_ANNOTATION] = resizer;
        let Some(written) = write(state, &kind, annotated, None) else { return };
        annotated = written;
    }
    let resizing =
        json!({"type": "Resizing", "status": "True", "lastTransitionTime": crate::sim::meta::now()});
    let status = with_resize_condition(&annotated, Some(resizing));
    write_status(state, "", "persistentvolumeclaims", &annotated, status);
}

/// The next step of the expansion of the claim `(namespace, name)`, if it still asks for more
/// than its capacity (rule 4); returns whether a step is left (the kubelet's, once the volume
/// grew).
pub fn expand_claim(state: &mut State, (ns, name): &ObjectName) -> bool {
    let Some(grown) =
        state.store.get("persistentvolumeclaims", ns, name).filter(|c| needs_expansion(c)).cloned()
    else {
        return false;
    };
    if resize_condition(&grown) == Some("FileSystemResizePending") {
        finish_expansion(state, &grown);
        return false;
    }
    expand_volume(state, &grown);
    true
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
                "resourceVersion": claim["metadata"]["resourceVersion"],
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
    if !bound["metadata"]["annotations"].is_object() {
        bound["metadata"]["annotations"] = json!({});
    }
    let annotations = &mut bound["metadata"]["annotations"];
    for key in [BIND_COMPLETED, BOUND_BY_CONTROLLER] {
        annotations[key] = json!("yes");
    }
    for key in PROVISIONER_ANNOTATIONS {
        annotations[key] = class["provisioner"].clone();
    }
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
        crate::sim::kubelet::sized::unmount_below(Path::new(dir));
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A quantity's whole bytes (`1Gi` → 1 073 741 824), for sizing a volume.
pub fn quantity_bytes(quantity: &Value) -> Option<u64> {
    let quantity: Quantity = quantity.as_str()?.parse().ok()?;
    u64::try_from(quantity.as_integer()?).ok()
}

fn needs_expansion(claim: &Value) -> bool {
    claim["status"]["phase"] == "Bound"
        && claim["spec"]["resources"]["requests"]["storage"].is_string()
        && claim["spec"]["resources"]["requests"]["storage"] != claim["status"]["capacity"]["storage"]
}

/// The CSI resizer's `ControllerExpandVolume` and `markPVCAsFSResizeRequired`: the volume grows,
/// the claim's condition becomes `FileSystemResizePending`, its capacity stays.
fn expand_volume(state: &mut State, claim: &Value) {
    let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
    if let Some(volume) = claim["spec"]["volumeName"]
        .as_str()
        .and_then(|v| state.store.get("persistentvolumes", "", v))
        .cloned()
        && let Some(kind) = state.registry.get("", "v1", "persistentvolumes")
    {
        let mut grown = volume;
        grown["spec"]["capacity"]["storage"] = storage;
        write(state, &kind, grown, None);
    }
    let pending = json!({
        "type": "FileSystemResizePending", "status": "True",
        "lastTransitionTime": crate::sim::meta::now(), "message": FS_RESIZE_PENDING,
    });
    let status = with_resize_condition(claim, Some(pending));
    write_status(state, "", "persistentvolumeclaims", claim, status);
}

/// The kubelet's `NodeExpand` done (`MarkFSResizeFinished`): the capacity is the request, the
/// resize conditions go.
fn finish_expansion(state: &mut State, claim: &Value) {
    // A volume with a real size grows mounted, as an online filesystem resize does.
    let volume =
        claim["spec"]["volumeName"].as_str().and_then(|v| state.store.get("persistentvolumes", "", v));
    let dir = volume.and_then(|v| v["spec"]["hostPath"]["path"].as_str()).map(std::path::PathBuf::from);
    let bytes = quantity_bytes(&claim["spec"]["resources"]["requests"]["storage"]);
    if let (Some(dir), Some(bytes)) = (dir, bytes)
        && let Err(error) = crate::sim::kubelet::sized::resize(&dir, bytes)
    {
        tracing::warn!(%error, "growing a sized volume failed");
    }
    let mut status = with_resize_condition(claim, None);
    status["capacity"]["storage"] = claim["spec"]["resources"]["requests"]["storage"].clone();
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

    fn claim_named(state: &State, name: &str) -> Value {
        state.store.get("persistentvolumeclaims", "default", name).cloned().expect("the claim")
    }

    // mirrors pkg/controller/volume/persistentvolume/pv_controller.go (1.28): `syncUnboundClaim`
    // then `bind` (`bindVolumeToClaim`, `bindClaimToVolume`, `updateClaimStatus`) for a
    // dynamically provisioned volume; and the 1.28 resize path: the expand controller's
    // `volume.kubernetes.io/storage-resizer`, external-resizer's `markPVCResizeInProgress` and
    // `markPVCAsFSResizeRequired`, the kubelet's `NodeExpand` / `MarkFSResizeFinished`.
    #[test]
    fn a_claim_is_bound_and_resized_in_the_steps_of_1_28() {
        let mut state = State::new(100, crate::sim::KubernetesVersion::OLDEST_SUPPORTED);
        install_default_class(&mut state);
        create_with_status(
            &mut state,
            "",
            "namespaces",
            None,
            json!({"metadata": {"name": "default"}}),
            None,
        );
        let claim = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        create_with_status(&mut state, "", "persistentvolumeclaims", Some("default"), claim, None).unwrap();
        let name: ObjectName = ("default".into(), "data".into());
        let dir = std::env::temp_dir();
        assert!(!reconcile_claim(&mut state, &dir, &name));

        let bound = claim_named(&state, "data");
        let annotations = &bound["metadata"]["annotations"];
        assert_eq!(
            (annotations[BIND_COMPLETED].as_str(), annotations[BOUND_BY_CONTROLLER].as_str()),
            (Some("yes"), Some("yes"))
        );
        assert_eq!(
            annotations["volume.kubernetes.io/storage-provisioner"],
            "sim.dbcluster-operator/hostpath"
        );
        assert_eq!(bound["status"]["phase"], "Bound");
        assert_eq!(bound["status"]["capacity"], json!({"storage": "1Gi"}));
        let volume_name = bound["spec"]["volumeName"].as_str().unwrap();
        let volume = state.store.get("persistentvolumes", "", volume_name).unwrap().clone();
        assert_eq!(volume["spec"]["claimRef"]["uid"], bound["metadata"]["uid"]);
        assert_eq!(volume["spec"]["claimRef"]["name"], "data");
        assert!(
            volume["metadata"]["annotations"][BOUND_BY_CONTROLLER].is_null(),
            "the provisioner set the claimRef"
        );
        assert_eq!(volume["status"]["phase"], "Bound");

        // The request grows: Resizing, then FileSystemResizePending, then the capacity.
        let kind = state.registry.get("", "v1", "persistentvolumeclaims").unwrap();
        let mut grown = bound.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        write(&mut state, &kind, grown, None).unwrap();
        assert!(reconcile_claim(&mut state, &dir, &name), "the expansion waits its delay");
        let resizing = claim_named(&state, "data");
        assert_eq!(
            resizing["metadata"]["annotations"][RESIZER_ANNOTATION],
            "sim.dbcluster-operator/hostpath"
        );
        let conditions = resizing["status"]["conditions"].as_array().unwrap();
        assert_eq!(
            (conditions.len(), conditions[0]["type"].as_str(), conditions[0]["status"].as_str()),
            (1, Some("Resizing"), Some("True"))
        );
        assert!(conditions[0]["lastProbeTime"].is_null());
        assert_eq!(
            resizing["status"]["capacity"],
            json!({"storage": "1Gi"}),
            "not before the filesystem grew"
        );

        assert!(expand_claim(&mut state, &name), "the kubelet's step is left");
        let pending = claim_named(&state, "data");
        let conditions = pending["status"]["conditions"].as_array().unwrap();
        assert_eq!((conditions.len(), conditions[0]["type"].as_str()), (1, Some("FileSystemResizePending")));
        assert_eq!(conditions[0]["message"], FS_RESIZE_PENDING);
        assert_eq!(pending["status"]["capacity"], json!({"storage": "1Gi"}));
        assert_eq!(
            state.store.get("persistentvolumes", "", volume_name).unwrap()["spec"]["capacity"]["storage"],
            "2Gi"
        );

        assert!(!expand_claim(&mut state, &name));
        let done = claim_named(&state, "data");
        assert_eq!(done["status"]["capacity"], json!({"storage": "2Gi"}));
        assert!(done["status"]["conditions"].is_null(), "{}", done["status"]);
        for absent in ["allocatedResources", "resizeStatus"] {
            assert!(done["status"][absent].is_null(), "RecoverVolumeExpansionFailure is off in 1.28");
        }
        assert!(!reconcile_claim(&mut state, &dir, &name), "nothing left to expand");
    }
}
