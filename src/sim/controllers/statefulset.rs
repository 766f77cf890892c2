//! The simulated StatefulSet controller (there is no kubelet): pods `<name>-0 … <name>-(n-1)`
//! created in order, each waiting for the previous to be Running and Ready (OrderedReady; all at
//! once with `Parallel`), PVCs from `volumeClaimTemplates`, scale down from the highest ordinal,
//! rolling updates from the highest ordinal down to `partition`, the claims' retention policy
//! (`persistentVolumeClaimRetentionPolicy`, as owner references the garbage collector follows),
//! and a status that stays true.
//!
//! A StatefulSet is reconciled when it or one of its pods changed ([`reconcile_named`]); its pods
//! are found through the store's owner index, so a pass costs that StatefulSet's pods only.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use crate::sim::controllers::{MANAGER, is_deleting, owned_by, write_status};
use crate::sim::ops::{self, DeleteOptions, WriteContext};
use crate::sim::state::State;
use crate::sim::store::ObjectName;

/// The label holding a pod's revision, as the real controller sets it.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// Pod templates by revision name, so pods below the partition can be recreated at the
/// current revision (the real controller keeps them in ControllerRevisions), and each
/// StatefulSet's update revision by uid with the generation it was computed at: the template
/// changes only with the generation, so it is hashed (and kept) once per generation, not on
/// every pass.
#[derive(Debug, Default)]
pub struct Revisions {
    templates: HashMap<String, Value>,
    by_uid: HashMap<String, (i64, String)>,
}

impl Revisions {
    /// The update revision of the StatefulSet `uid` at `generation`, whose template is `template`.
    fn update_revision(&mut self, uid: &str, generation: i64, sts_name: &str, template: &Value) -> String {
        if let Some((seen, revision)) = self.by_uid.get(uid)
            && *seen == generation
        {
            return revision.clone();
        }
        let revision = revision_name(sts_name, template);
        self.templates.entry(revision.clone()).or_insert_with(|| template.clone());
        self.by_uid.insert(uid.to_owned(), (generation, revision.clone()));
        revision
    }
}

/// The revision name of a pod template: `<statefulset>-<hash of the template>`.
pub fn revision_name(sts_name: &str, template: &Value) -> String {
    // FNV-1a over the canonical JSON (serde_json sorts object keys).
    let hash = template
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{sts_name}-{:x}", hash & 0xff_ffff_ffff)
}

/// Whether a pod is Running with a true Ready condition.
pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn ordinal_of(pod_name: &str, sts_name: &str) -> Option<i64> {
    pod_name.strip_prefix(sts_name)?.strip_prefix('-')?.parse().ok()
}

/// Reconciles the StatefulSet `(namespace, name)`, if it exists and is not being deleted.
pub fn reconcile_named(state: &mut State, revisions: &mut Revisions, (ns, name): &ObjectName) {
    let Some(sts) = state.store.get("statefulsets.apps", ns, name).filter(|s| !is_deleting(s)).cloned()
    else {
        return;
    };
    reconcile(state, revisions, &sts);
}

/// The pods a StatefulSet controls, by ordinal (pods whose names are not `<name>-<n>` are not).
fn pods_of<'a>(
    state: &'a State,
    sts_name: &'a str,
    uid: &'a str,
) -> impl Iterator<Item = (i64, &'a Value)> + 'a {
    state
        .store
        .dependents(uid)
        .filter(move |(key, p)| *key == "pods" && owned_by(p, uid))
        .filter_map(move |(_, p)| Some((ordinal_of(p["metadata"]["name"].as_str()?, sts_name)?, p)))
}

fn reconcile(state: &mut State, revisions: &mut Revisions, sts: &Value) {
    let name = sts["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let uid = sts["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let spec = &sts["spec"];
    let replicas = spec["replicas"].as_i64().unwrap_or(1).max(0);
    let rolling = spec["updateStrategy"]["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate";
    let partition = spec["updateStrategy"]["rollingUpdate"]["partition"].as_i64().unwrap_or(0);
    let parallel = spec["podManagementPolicy"] == "Parallel";
    let generation = sts["metadata"]["generation"].as_i64().unwrap_or_default();
    let update_revision = revisions.update_revision(&uid, generation, &name, &spec["template"]);
    let current_revision = sts["status"]["currentRevision"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| update_revision.clone());

    let pods: BTreeMap<i64, Value> = pods_of(state, &name, &uid).map(|(o, p)| (o, p.clone())).collect();

    for (ordinal, pod) in &pods {
        keep_claim_owners(state, sts, pod, *ordinal >= replicas);
    }

    // Create missing pods in order, waiting for each to be ready unless the policy is Parallel.
    let mut all_ready = true;
    for ordinal in 0..replicas {
        match pods.get(&ordinal) {
            None => {
                let revision = if ordinal < partition { &current_revision } else { &update_revision };
                let template = revisions.templates.get(revision).unwrap_or(&spec["template"]).clone();
                create_pod(state, sts, ordinal, revision, &template);
                all_ready = false;
                if !parallel {
                    break;
                }
            }
            Some(p) if is_deleting(p) || !is_ready(p) => {
                all_ready = false;
                if !parallel {
                    break;
                }
            }
            Some(_) => {}
        }
    }
    if all_ready {
        let condemned = pods.range(replicas..).next_back().map(|(_, p)| p.clone());
        if let Some(pod) = condemned {
            delete_pod(state, &pod);
        } else if rolling {
            let stale = (partition.max(0)..replicas)
                .rev()
                .filter_map(|o| pods.get(&o))
                .find(|p| p["metadata"]["labels"][REVISION_LABEL] != update_revision.as_str());
            if let Some(pod) = stale {
                delete_pod(state, pod);
            }
        }
    }
    update_status(state, sts, &update_revision, &current_revision);
}

fn create_pod(state: &mut State, sts: &Value, ordinal: i64, revision: &str, template: &Value) {
    let name = sts["metadata"]["name"].as_str().unwrap_or_default();
    let ns = sts["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = format!("{name}-{ordinal}");
    let mut meta = template["metadata"].as_object().cloned().unwrap_or_default();
    let mut labels = meta.get("labels").and_then(Value::as_object).cloned().unwrap_or_default();
    labels.insert(REVISION_LABEL.into(), json!(revision));
    labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(pod_name));
    labels.insert("apps.kubernetes.io/pod-index".into(), json!(ordinal.to_string()));
    meta.insert("labels".into(), Value::Object(labels));
    meta.insert("name".into(), json!(pod_name));
    meta.insert("namespace".into(), json!(ns));
    meta.insert("ownerReferences".into(), json!([controller_ref(sts)]));
    let mut pod_spec = template["spec"].clone();
    pod_spec["hostname"] = json!(pod_name);
    if let Some(service) = sts["spec"]["serviceName"].as_str() {
        pod_spec["subdomain"] = json!(service);
    }
    for claim in sts["spec"]["volumeClaimTemplates"].as_array().into_iter().flatten() {
        let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default();
        let pvc_name = format!("{claim_name}-{pod_name}");
        if let Err(refused) = ensure_pvc(state, sts, claim, &pvc_name) {
            // As the real controller: no pod without its claims.
            let message = format!(
                "create Claim {pvc_name} for Pod {pod_name} in StatefulSet {name} failed error: {refused}"
            );
            record_failed_create(state, sts, &message);
            return;
        }
        if let Some(volumes) = pod_spec["volumes"].as_array_mut() {
            volumes.push(json!({"name": claim_name, "persistentVolumeClaim": {"claimName": pvc_name}}));
        } else {
            pod_spec["volumes"] =
                json!([{"name": claim_name, "persistentVolumeClaim": {"claimName": pvc_name}}]);
        }
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec});
    let Some(kind) = state.registry.get("", "v1", "pods") else { return };
    if let Err(e) = ops::create(state, &kind, Some(ns), pod, &WriteContext::controller(MANAGER)) {
        let message = format!("create Pod {pod_name} in StatefulSet {name} failed error: {}", e.message);
        record_failed_create(state, sts, &message);
    }
}

/// A `FailedCreate` Warning Event about `sts`, as the real controller records a refused pod:
/// one Event per distinct message, its `count` raised on each repeat.
fn record_failed_create(state: &mut State, sts: &Value, message: &str) {
    let (name, ns) = (
        sts["metadata"]["name"].as_str().unwrap_or_default(),
        sts["metadata"]["namespace"].as_str().unwrap_or_default(),
    );
    let hash = message
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    let event_name = format!("{name}.{hash:x}");
    let now = crate::sim::meta::now();
    let Some(kind) = state.registry.get("", "v1", "events") else { return };
    if let Some(existing) = state.store.get("events", ns, &event_name).cloned() {
        let mut repeated = existing;
        repeated["count"] = json!(repeated["count"].as_i64().unwrap_or(1) + 1);
        repeated["lastTimestamp"] = json!(now);
        let _ = ops::update(
            state,
            &kind,
            Some(ns),
            &event_name,
            repeated,
            None,
            &WriteContext::controller(MANAGER),
        );
        return;
    }
    let event = json!({
        "metadata": {"name": event_name, "namespace": ns},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "namespace": ns, "uid": sts["metadata"]["uid"]},
        "type": "Warning", "reason": "FailedCreate", "message": message,
        "source": {"component": "statefulset-controller"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    });
    if let Err(e) = ops::create(state, &kind, Some(ns), event, &WriteContext::controller(MANAGER)) {
        tracing::debug!(error = %e.message, "simulated StatefulSet controller could not record an event");
    }
}

/// Creates the claim `pvc_name` from the template `claim` unless it exists; the API server's
/// message when it refuses it.
fn ensure_pvc(state: &mut State, sts: &Value, claim: &Value, pvc_name: &str) -> Result<(), String> {
    let ns = sts["metadata"]["namespace"].as_str().unwrap_or_default();
    if state.store.get("persistentvolumeclaims", ns, pvc_name).is_some() {
        return Ok(());
    }
    let mut labels = sts["spec"]["selector"]["matchLabels"].as_object().cloned().unwrap_or_default();
    if let Some(own) = claim["metadata"]["labels"].as_object() {
        labels.extend(own.clone());
    }
    let mut pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc_name, "namespace": ns, "labels": labels},
        "spec": claim["spec"],
    });
    if claim_retention(sts).0 {
        pvc["metadata"]["ownerReferences"] = json!([plain_ref(sts, "apps/v1", "StatefulSet")]);
    }
    // Pending until the volume controller binds it, as a real claim is.
    let Some(kind) = state.registry.get("", "v1", "persistentvolumeclaims") else { return Ok(()) };
    ops::create(state, &kind, Some(ns), pvc, &WriteContext::controller(MANAGER))
        .map(drop)
        .map_err(|e| e.message)
}

/// The set's `persistentVolumeClaimRetentionPolicy` (StatefulSetAutoDeletePVC, beta and on by
/// default in 1.28): whether claims go with the set (`whenDeleted`), and with the pods a scale
/// down removes (`whenScaled`). `Retain` when unset.
fn claim_retention(sts: &Value) -> (bool, bool) {
    let policy = &sts["spec"]["persistentVolumeClaimRetentionPolicy"];
    (policy["whenDeleted"] == "Delete", policy["whenScaled"] == "Delete")
}

/// A plain (non-controller) ownerReference to `owner`, as the controller puts on claims.
fn plain_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]})
}

/// The retention policy as owner references on `pod`'s claims, which the garbage collector then
/// follows: a claim of a pod the scale down removes (`condemned`) is owned by that pod when
/// `whenScaled: Delete`; any other claim is owned by the set when `whenDeleted: Delete`. Only
/// references to this set and this pod are added or removed.
fn keep_claim_owners(state: &mut State, sts: &Value, pod: &Value, condemned: bool) {
    let (when_deleted, when_scaled) = claim_retention(sts);
    let ns = sts["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let by_pod = condemned && when_scaled;
    let wanted = [(&sts["metadata"]["uid"], when_deleted && !by_pod), (&pod["metadata"]["uid"], by_pod)];
    for template in sts["spec"]["volumeClaimTemplates"].as_array().into_iter().flatten() {
        let claim_name = format!("{}-{pod_name}", template["metadata"]["name"].as_str().unwrap_or_default());
        let Some(claim) = state.store.get("persistentvolumeclaims", &ns, &claim_name).cloned() else {
            continue;
        };
        let mut refs = claim["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
        let before = refs.len();
        let had = |refs: &[Value], uid: &Value| refs.iter().any(|r| &r["uid"] == uid);
        let mut changed = false;
        for (uid, want) in wanted {
            if want && !had(&refs, uid) {
                let owner = if uid == &sts["metadata"]["uid"] {
                    plain_ref(sts, "apps/v1", "StatefulSet")
                } else {
                    plain_ref(pod, "v1", "Pod")
                };
                refs.push(owner);
                changed = true;
            } else if !want && had(&refs, uid) {
                refs.retain(|r| &r["uid"] != uid);
                changed = true;
            }
        }
        if !changed {
            continue;
        }
        let mut updated = claim;
        updated["metadata"]["ownerReferences"] = Value::Array(refs);
        let Some(kind) = state.registry.get("", "v1", "persistentvolumeclaims") else { return };
        if let Err(e) = ops::update(
            state,
            &kind,
            Some(&ns),
            &claim_name,
            updated,
            None,
            &WriteContext::controller(MANAGER),
        ) {
            tracing::debug!(claim = %claim_name, before, error = %e.message, "simulated StatefulSet controller could not set a claim's owners");
        }
    }
}

fn controller_ref(sts: &Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": sts["metadata"]["name"], "uid": sts["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    })
}

fn delete_pod(state: &mut State, pod: &Value) {
    if is_deleting(pod) {
        return;
    }
    let Some(kind) = state.registry.get("", "v1", "pods") else { return };
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if let Err(e) = ops::delete(state, &kind, Some(&ns), &name, &DeleteOptions::default()) {
        tracing::debug!(pod = %name, error = %e.message, "simulated StatefulSet controller could not delete a pod");
    }
}

/// The status a pass writes, as 1.28's `updateStatefulSet` computes it: the counts of
/// `computeReplicaStatus` (pkg/controller/statefulset/stateful_set_control.go) over every pod the
/// set owns, then `completeRollingUpdate` (stateful_set_utils.go).
fn update_status(state: &mut State, sts: &Value, update_revision: &str, current_revision: &str) {
    let uid = sts["metadata"]["uid"].as_str().unwrap_or_default();
    let name = sts["metadata"]["name"].as_str().unwrap_or_default();
    let pods: Vec<&Value> = pods_of(state, name, uid).map(|(_, p)| p).collect();
    let counts = replica_status(&pods, current_revision, update_revision);
    let strategy = sts["spec"]["updateStrategy"]["type"].as_str().unwrap_or("RollingUpdate");
    let desired = sts["spec"]["replicas"].as_i64().unwrap_or(1);
    let (current_revision, current) =
        complete_rolling_update(strategy, desired, &counts, current_revision, update_revision);
    let status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": counts.replicas,
        "readyReplicas": counts.ready,
        "availableReplicas": counts.ready,
        "currentReplicas": current,
        "updatedReplicas": counts.updated,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    });
    write_status(state, "apps", "statefulsets", sts, status);
}

/// The counts of a StatefulSet's status (`replicaStatus` in 1.28).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaCounts {
    /// Pods created (a phase set), terminating or not.
    pub replicas: i64,
    /// Pods Running and Ready, terminating or not (`availableReplicas` too: no `minReadySeconds`).
    pub ready: i64,
    /// Created, not terminating pods at the current revision.
    pub current: i64,
    /// Created, not terminating pods at the update revision.
    pub updated: i64,
}

/// `computeReplicaStatus` (pkg/controller/statefulset/stateful_set_control.go, v1.28) over `pods`.
pub fn replica_status(pods: &[&Value], current_revision: &str, update_revision: &str) -> ReplicaCounts {
    let mut counts = ReplicaCounts::default();
    for pod in pods {
        // `isCreated`: the pod has a phase.
        let created = pod["status"]["phase"].as_str().is_some_and(|phase| !phase.is_empty());
        counts.replicas += i64::from(created);
        counts.ready += i64::from(is_ready(pod));
        if created && !is_deleting(pod) {
            let revision = pod["metadata"]["labels"][REVISION_LABEL].as_str().unwrap_or_default();
            counts.current += i64::from(revision == current_revision);
            counts.updated += i64::from(revision == update_revision);
        }
    }
    counts
}

/// `completeRollingUpdate` (pkg/controller/statefulset/stateful_set_utils.go, v1.28): the current
/// revision (and its count) become the update revision's only for the `RollingUpdate` strategy,
/// once every desired replica is created, updated and ready. With `OnDelete` the current revision
/// stays what it was when the set was created, however the pods are replaced: a client must judge
/// a roll from the pods.
pub fn complete_rolling_update<'a>(
    strategy: &str,
    desired: i64,
    counts: &ReplicaCounts,
    current_revision: &'a str,
    update_revision: &'a str,
) -> (&'a str, i64) {
    let done = counts.updated == desired && counts.ready == desired && counts.replicas == desired;
    if strategy == "RollingUpdate" && done {
        (update_revision, counts.updated)
    } else {
        (current_revision, counts.current)
    }
}

/// The range of the timer kubelet's pod IPs, `127.12.0.0/16`: loopback, where no simulator
/// listens (the process kubelet's pods are in `127.10/16`, its Services in `127.11/16`), so a
/// connection to a pod is refused at once, as a real pod whose container serves nothing answers.
/// A routable-looking range such as `10.244/16` would instead reach whatever the host's default
/// route leads to: nothing (a client's whole connect timeout) or a proxy (its round trip).
pub const TIMER_POD_NETWORK: [u8; 2] = [127, 12];

/// The status a simulated kubelet reports for a started pod: Running, Ready, containers running,
/// and an IP in [`TIMER_POD_NETWORK`] drawn from the low 16 bits of `ordinal_ip`.
pub fn running_status(pod: &Value, ordinal_ip: u32, now: &str) -> Value {
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "", "ready": true, "started": true,
                "restartCount": 0, "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    json!({
        "phase": "Running",
        "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "podIP": format!(
            "{}.{}.{}.{}",
            TIMER_POD_NETWORK[0],
            TIMER_POD_NETWORK[1],
            (ordinal_ip >> 8) & 0xff,
            ordinal_ip & 0xff
        ),
        "hostIP": "10.0.0.1",
        "startTime": now,
        "containerStatuses": containers,
        "qosClass": "BestEffort",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_change_with_the_template_only() {
        let a = json!({"spec": {"containers": [{"image": "postgres:15.4"}]}});
        let b = json!({"spec": {"containers": [{"image": "postgres:15.6"}]}});
        assert_eq!(revision_name("db", &a), revision_name("db", &a.clone()));
        assert_ne!(revision_name("db", &a), revision_name("db", &b));
        assert!(revision_name("db", &a).starts_with("db-"));
    }

    fn pod(phase: &str, revision: &str, ready: bool, deleting: bool) -> Value {
        let mut pod = json!({
            "metadata": {"labels": {REVISION_LABEL: revision}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        });
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        pod
    }

    /// Mirrors `computeReplicaStatus` (pkg/controller/statefulset/stateful_set_control.go, v1.28):
    /// every created pod counts in `replicas` and, when Running and Ready, in `readyReplicas`, a
    /// terminating one too; only created pods that are not terminating count at a revision.
    #[test]
    fn replica_counts_follow_compute_replica_status() {
        let pods = [
            pod("Running", "new", true, false),
            pod("Running", "old", true, false),
            pod("Running", "new", true, true),
            pod("Pending", "new", false, false),
            pod("", "new", false, false),
        ];
        let refs: Vec<&Value> = pods.iter().collect();
        let counts = replica_status(&refs, "old", "new");
        assert_eq!(counts, ReplicaCounts { replicas: 4, ready: 3, current: 1, updated: 2 });
    }

    /// Mirrors `completeRollingUpdate` (pkg/controller/statefulset/stateful_set_utils.go, v1.28):
    /// the current revision advances only for `RollingUpdate`, once every desired replica is
    /// created, updated and ready; with `OnDelete` it never does.
    #[test]
    fn current_revision_advances_only_for_rolling_updates() {
        let all_updated = ReplicaCounts { replicas: 3, ready: 3, current: 0, updated: 3 };
        assert_eq!(complete_rolling_update("RollingUpdate", 3, &all_updated, "old", "new"), ("new", 3));
        assert_eq!(complete_rolling_update("OnDelete", 3, &all_updated, "old", "new"), ("old", 0));
        let one_unready = ReplicaCounts { ready: 2, ..all_updated };
        assert_eq!(complete_rolling_update("RollingUpdate", 3, &one_unready, "old", "new"), ("old", 0));
        let one_more = ReplicaCounts { replicas: 4, ..all_updated };
        assert_eq!(complete_rolling_update("RollingUpdate", 3, &one_more, "old", "new"), ("old", 0));
    }

    #[test]
    fn ordinals_parse_from_pod_names() {
        assert_eq!(ordinal_of("db-2", "db"), Some(2));
        assert_eq!(ordinal_of("db-x", "db"), None);
        assert_eq!(ordinal_of("dbx-1", "db"), None);
    }
}
