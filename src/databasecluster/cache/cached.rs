//! What the operator's caches keep of each object: only what a pass reads, as controller-runtime's
//! cache transforms and kube-runtime's metadata watches do, so that the operator's memory grows
//! with what it needs, not with the size of the objects it watches.
//!
//! Every kind loses `metadata.managedFields`. Besides:
//! - a **Pod** is cached as a [`CachedPod`], a type of its own with no `spec` at all (the passes
//!   read its name, labels, owner, deletion and `status`: the StatefulSet, not the pod, says what
//!   it runs). Decoded straight from the server's JSON, the spec is skipped, never built: no
//!   decode of containers and volumes on every pod event, and no `Option<PodSpec>` (1.4 KB
//!   inline even when `None`) in every cached pod. Of its metadata it keeps the [`Identity`] a
//!   [`Compact`] keeps and its creation time; its annotations go (no pass reads them; a map's
//!   node is 544 bytes however few entries it holds), and of its labels it keeps the
//!   values of the ones a pass or a mapper reads ([`POD_LABELS_READ`]: the cluster's instance, a
//!   backup pod's cluster, the revision and the role), outside its metadata and without a map:
//!   read them with [`CachedPod::label`] (the pods' cache does, for its label index). Of its
//!   status it keeps only what the passes read, as packed JSON text ([`Packed`],
//!   [`CachedPod::new`], [`CachedPod::status`]): the phase, the reason and message, the `Ready`
//!   condition (and `PodScheduled` when it failed), the pod IP and each container's name, state,
//!   last state, readiness and restart count. The operator never writes a pod whole (it patches
//!   labels and deletes), so nothing compares a desired pod;
//! - a **StatefulSet**, **Service**, **Secret** (the operator's login Secrets), **ConfigMap** or
//!   **PodDisruptionBudget** is cached as a [`Compact`]: its packed JSON text and the identity fields
//!   the cache reads, not a decoded k8s-openapi object (several times the size of its JSON: a
//!   `Container` is about 2 KB inline, a `Volume` 3 KB, each non-empty map a 544-byte node).
//!   Drift compares the desired object with the text as JSON, so every field still counts; a
//!   pass that reads one (the StatefulSet's replicas, claim templates and status, a login
//!   Secret's password) decodes it for that pass ([`Compact::expand`]), or only the fields it
//!   reads (the ConfigMap's `primary` and `demoting` records, [`Compact::decode_as`], without
//!   its scripts). A ConfigMap's text packs into little: its scripts are the same in every
//!   cluster's, and in the kind's dictionary.
//! - the **DatabaseCluster** itself is a [`Compact`] too: a pass decodes it whole once, at its
//!   start (`reconcile`), and the controller's handlers read only its identity (generation,
//!   deletion, owner).
//!
//! Every other kind is kept whole: its spec is compared with what the operator would write.
//! [`ChildForm`] is what `ensure_child` needs of a child's cached form, whichever it is.
//!
//! The form is made once per object, from the object as the server sent it (a watch event, or a
//! read after a create found the object already there).

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::databasecluster::backup::jobs::CLUSTER_LABEL;
pub use crate::databasecluster::cache::compact::Compact;
use crate::databasecluster::cache::drift::needs_update;
use crate::databasecluster::cache::identity::{Identity, object_by_identity};
use crate::databasecluster::cache::packed::Packed;
use crate::databasecluster::instances::topology::REVISION_LABEL;
use crate::databasecluster::specs::names::label;
use crate::databasecluster::specs::services::ROLE_LABEL;
use crate::runtime::cache::strip_managed_fields;
use crate::runtime::object::{Object, shown_metadata};

/// A child kind's form in the operator's caches, beside the object the operator builds and
/// writes: the object itself for a kind kept whole (a `kube::Resource`, without `managedFields`),
/// a [`Compact`] for a kind kept as text. `ensure_child` reads and compares either.
pub trait ChildForm:
    Object<Resource: Resource<DynamicType = (), Scope = NamespaceResourceScope>> + Send + Sync + 'static
{
    /// The object as the operator builds and writes it.
    type Object: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned;

    /// The cached form of an object read from the server (a create that found the child
    /// already there reads it once).
    fn from_server(object: Self::Object) -> Self;

    /// Whether `live` differs from `desired` in a field the operator owns, the two compared in
    /// the same shape (`drift::needs_update`).
    fn needs_update(desired: &Self::Object, live: &Self) -> bool;
}

impl<K> ChildForm for K
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    type Object = K;

    fn from_server(mut object: K) -> K {
        strip_managed_fields(&mut object);
        object
    }

    fn needs_update(desired: &K, live: &K) -> bool {
        needs_update(desired, live)
    }
}

impl<K> ChildForm for Compact<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + 'static,
{
    type Object = K;

    fn from_server(object: K) -> Self {
        // Invariant: a k8s-openapi object always serialises to JSON (see `needs_update_json`).
        Compact::from_object(object).expect("a k8s-openapi object serialises to JSON")
    }

    fn needs_update(desired: &K, live: &Self) -> bool {
        live.drifted_from(desired)
    }
}

/// A Pod as the operator's caches keep it: its [`Identity`], the values of the labels the passes
/// read ([`CachedPod::label`]) and, as JSON text, the part of its status the passes read; no
/// spec (see the module docs). An [`Object`] whose resource is k8s-openapi's `Pod`, so an
/// informer of it lists and watches pods; serde skips the fields it does not name.
#[derive(Clone, Debug)]
pub struct CachedPod {
    /// The pod's identity ([`CachedPod::new`]).
    identity: Identity,
    /// `metadata.creationTimestamp`: which of a backup Job's pods is its latest.
    created: Option<jiff::Timestamp>,
    /// The values of [`POD_LABELS_READ`], in that order: a label map's node alone is 544 bytes
    /// however few entries it holds.
    labels: [Option<Box<str>>; POD_LABELS_READ.len()],
    /// The pod's status, reduced to what the passes read ([`CachedPod::new`]), as packed JSON
    /// text ([`Packed`]): a decoded `PodStatus` is about 0.5 KB inline and a container's status
    /// as much again.
    status: Option<Packed>,
}

impl CachedPod {
    /// A cached pod of `metadata` and `status`: of the metadata it keeps the [`Identity`] a
    /// [`Compact`] keeps (name, namespace, resourceVersion, generation, deletion, the controller
    /// owner), the creation time and the values of the labels in [`POD_LABELS_READ`]; the status
    /// is reduced to what the passes read: the phase, the reason and message, the `Ready`
    /// condition (and `PodScheduled` when it failed), the pod IP and each container's name,
    /// state, last state, readiness and restart count.
    pub fn new(mut metadata: ObjectMeta, status: Option<PodStatus>) -> Self {
        // No pass reads a pod's annotations (the template's, copied to every pod), nor most of
        // its labels (the template's own, the StatefulSet controller's pod name and index).
        let mut all_labels = metadata.labels.take().unwrap_or_default();
        let labels = POD_LABELS_READ.map(|name| all_labels.remove(name).map(String::into_boxed_str));
        let identity = Identity::of(&metadata);
        let created = metadata.creation_timestamp.map(|time| time.0);
        let status = status.map(|mut status| {
            let mut conditions = status.conditions.take();
            if let Some(conditions) = conditions.as_mut() {
                // And a failed scheduling, which `start_failure` reports.
                conditions.retain(|condition| {
                    condition.type_ == "Ready"
                        || (condition.type_ == "PodScheduled" && condition.status == "False")
                });
            }
            let kept = PodStatus {
                phase: status.phase.take(),
                reason: status.reason.take(),
                message: status.message.take(),
                conditions,
                pod_ip: status.pod_ip.take(),
                container_statuses: status.container_statuses.take().map(states_only),
                init_container_statuses: status.init_container_statuses.take().map(states_only),
                ..PodStatus::default()
            };
            // Invariant: a k8s-openapi object always serialises to JSON (see `needs_update_json`).
            let text = serde_json::to_vec(&kept).expect("a PodStatus serialises to JSON");
            // A started pod's status is the typical one: it makes the dictionary.
            Packed::pack::<PodStatus>(&text, kept.container_statuses.is_some())
        });
        CachedPod { identity, created, labels, status }
    }

    /// The pod's identity (see [`CachedPod::new`]).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// When the pod was created (`metadata.creationTimestamp`).
    pub fn created(&self) -> Option<jiff::Timestamp> {
        self.created
    }

    /// The value of label `name`, if it is one the cache keeps ([`POD_LABELS_READ`]) and the pod
    /// has it; `None` for any other label.
    pub fn label(&self, name: &str) -> Option<&str> {
        let at = POD_LABELS_READ.iter().position(|read| *read == name)?;
        self.labels[at].as_deref()
    }

    /// The pod's status as the cache keeps it (see [`CachedPod::new`]), decoded for the caller.
    pub fn status(&self) -> Option<PodStatus> {
        // Invariant: the text is a `PodStatus` this type wrote; were it not to decode, the pod
        // reads as one without a status.
        serde_json::from_slice(&self.status.as_ref()?.unpack().ok()?).ok()
    }
}

impl Serialize for CachedPod {
    /// As a pod: its identity and the labels kept as its metadata, and the status kept.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            metadata: ObjectMeta,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: Option<&'a Packed>,
        }
        let labels: std::collections::BTreeMap<String, String> = POD_LABELS_READ
            .iter()
            .filter_map(|name| Some((name.to_string(), self.label(name)?.to_owned())))
            .collect();
        let metadata = ObjectMeta {
            labels: Some(labels).filter(|l| !l.is_empty()),
            creation_timestamp: self.created.map(Time),
            ..shown_metadata(self)
        };
        Shown { metadata, status: self.status.as_ref() }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// A pod as served: its spec skipped by serde, never built.
        #[derive(Deserialize)]
        struct Served {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            status: Option<PodStatus>,
        }
        let Served { metadata, status } = Served::deserialize(deserializer)?;
        Ok(CachedPod::new(metadata, status))
    }
}

/// A pod, to the runtime: its identity and the labels kept.
impl Object for CachedPod {
    type Resource = Pod;

    object_by_identity!();

    fn label(&self, key: &str) -> Option<&str> {
        CachedPod::label(self, key)
    }
}

/// The pod labels a pass or a mapper reads; a cached pod keeps these only.
pub const POD_LABELS_READ: [&str; 4] = [label::INSTANCE, CLUSTER_LABEL, REVISION_LABEL, ROLE_LABEL];

/// Container statuses as a cached Pod keeps them: name, state, last state, readiness, restarts.
fn states_only(statuses: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    statuses
        .into_iter()
        .map(|status| ContainerStatus {
            name: status.name,
            state: status.state,
            last_state: status.last_state,
            ready: status.ready,
            started: status.started,
            restart_count: status.restart_count,
            ..ContainerStatus::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};

    use serde_json::json;

    use super::*;
    use crate::databasecluster::controller::status::observe_rollout;
    use crate::databasecluster::fixtures::statefulset;
    use crate::databasecluster::instances::topology::start_failure;
    use crate::runtime::ObjectKey;

    #[test]
    fn a_cached_config_map_is_drift_for_a_changed_file_and_its_records_read_without_it() {
        use crate::databasecluster::api::validation::validate_spec;
        use crate::databasecluster::fixtures::{owner, seed};
        use crate::databasecluster::specs::config::{POSTGRESQL_CONF_KEY, Records, build_config_map};
        use k8s_openapi::api::core::v1::ConfigMap;

        let spec = validate_spec(&seed().spec).unwrap();
        let desired = build_config_map(&owner(), &spec, "production-postgres-1", None);
        let served = |edit: fn(&mut serde_json::Value)| {
            let mut live = serde_json::to_value(&desired).unwrap();
            live["metadata"]["resourceVersion"] = json!("42");
            edit(&mut live);
            let compact: Compact<ConfigMap> = serde_json::from_value(live).unwrap();
            compact
        };
        let live = served(|_| {});
        assert!(!Compact::needs_update(&desired, &live));
        let records: Records = live.decode_as().unwrap();
        assert_eq!(records.primary().as_deref(), Some("production-postgres-1"));
        let edited = served(|live| live["data"][POSTGRESQL_CONF_KEY] = json!("fsync = off\n"));
        assert!(Compact::needs_update(&desired, &edited), "a changed file is drift");
    }

    #[test]
    fn a_compact_child_is_compared_with_the_desired_object_as_the_server_sent_it() {
        use crate::databasecluster::fixtures::owner;
        use crate::databasecluster::specs::services::{ClientService, ROLE_LABEL, build_client_service};
        use k8s_openapi::api::core::v1::Service;

        let desired = build_client_service(&owner(), ClientService::ReadWrite);
        let served = |edit: fn(&mut serde_json::Value)| {
            let mut live = serde_json::to_value(&desired).unwrap();
            live["metadata"]["resourceVersion"] = json!("42");
            live["metadata"]["annotations"] = json!({"team.example.com/owner": "payments"});
            live["spec"]["clusterIP"] = json!("10.96.0.7");
            live["spec"]["sessionAffinity"] = json!("None");
            edit(&mut live);
            let compact: Compact<Service> = serde_json::from_value(live).unwrap();
            compact
        };
        assert!(!Compact::needs_update(&desired, &served(|_| {})), "others' fields are not drift");
        let edits: [Edit; 3] = [
            ("selector", |live| live["spec"]["selector"][ROLE_LABEL] = json!("replica")),
            ("port", |live| live["spec"]["ports"][0]["port"] = json!(5433)),
            ("label", |live| live["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("someone")),
        ];
        for (what, edit) in edits {
            assert!(Compact::needs_update(&desired, &served(edit)), "{what} changed");
        }
        let written = Compact::<Service>::from_server(desired.clone());
        assert!(!Compact::needs_update(&desired, &written), "as a write returned it");
    }

    /// `desired` as a server would send it: defaults, another manager's container and env var,
    /// status; `edit` changes it further.
    fn served(desired: &StatefulSet, edit: impl FnOnce(&mut serde_json::Value)) -> StatefulSet {
        let mut live = serde_json::to_value(desired).unwrap();
        live["metadata"]["resourceVersion"] = json!("42");
        live["metadata"]["annotations"] = json!({"team.example.com/owner": "payments"});
        live["spec"]["revisionHistoryLimit"] = json!(10);
        let pod = &mut live["spec"]["template"]["spec"];
        pod["restartPolicy"] = json!("Always");
        pod["containers"][0]["terminationMessagePath"] = json!("/dev/termination-log");
        pod["containers"][0]["env"].as_array_mut().unwrap().push(json!({"name": "TZ", "value": "UTC"}));
        pod["containers"].as_array_mut().unwrap().push(json!({"name": "exporter", "image": "exporter:1"}));
        live["status"] = json!({"replicas": 3, "readyReplicas": 3, "observedGeneration": 1});
        edit(&mut live);
        serde_json::from_value(live).unwrap()
    }

    /// The StatefulSet as the operator's cache keeps it: its text, decoded as a watch line's
    /// object is.
    fn cached_sts(sts: &StatefulSet) -> Compact<StatefulSet> {
        serde_json::from_value(serde_json::to_value(sts).unwrap()).unwrap()
    }

    #[test]
    fn a_cached_statefulset_reads_as_the_server_sent_it() {
        let full = served(&statefulset(), |_| {});
        let kept = cached_sts(&full).expand().unwrap();
        assert_eq!(kept, full);
        assert_eq!(observe_rollout(&kept, &[]), observe_rollout(&full, &[]));
        assert!(observe_rollout(&kept, &[]).version.is_some());
    }

    /// What changed, and the change.
    type Edit = (&'static str, fn(&mut serde_json::Value));

    #[test]
    fn drift_compares_the_whole_template_of_a_cached_statefulset() {
        let desired = statefulset();
        assert!(
            !Compact::needs_update(&desired, &cached_sts(&served(&desired, |_| {}))),
            "others' fields are not drift"
        );
        let edits: [Edit; 4] = [
            ("image", |live| {
                live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:15.5")
            }),
            ("env", |live| live["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = json!("x")),
            ("volumes", |live| live["spec"]["template"]["spec"]["volumes"] = json!([])),
            ("template labels", |live| {
                live["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"})
            }),
        ];
        for (what, edit) in edits {
            let live = served(&desired, edit);
            assert!(Compact::needs_update(&desired, &cached_sts(&live)), "cached: {what} changed");
            let written = Compact::<StatefulSet>::from_server(live);
            assert!(Compact::needs_update(&desired, &written), "as a write returned it: {what} changed");
        }
    }

    #[test]
    fn a_cached_pod_keeps_a_failed_scheduling_and_only_that_one() {
        let pod = |scheduled: &str| {
            json!({
                "metadata": {"name": "pg-0", "namespace": "default"},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": scheduled,
                    "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu.",
                    "lastTransitionTime": "2026-11-20T08:14:19Z"}]},
            })
        };
        let unscheduled: CachedPod = serde_json::from_value(pod("False")).unwrap();
        let failure = start_failure(&unscheduled.status().unwrap(), jiff::Timestamp::now());
        assert_eq!(failure.as_deref(), Some("not scheduled: 0/3 nodes are available: 3 Insufficient cpu."));
        let scheduled: CachedPod = serde_json::from_value(pod("True")).unwrap();
        assert_eq!(
            scheduled.status().unwrap().conditions,
            Some(vec![]),
            "a scheduled pod's condition is not kept"
        );
    }

    #[test]
    fn a_cached_pod_keeps_of_its_status_what_the_passes_read() {
        let served = json!({
            "metadata": {"name": "pg-0", "namespace": "default"},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "podIPs": [{"ip": "10.0.0.7"}],
                "hostIP": "172.18.0.2",
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-20T08:14:19Z"},
                ],
                "containerStatuses": [{
                    "name": "postgres", "ready": false, "restartCount": 3,
                    "image": "postgres:16.4", "imageID": "docker.io/library/postgres@sha256:d0f3",
                    "containerID": "containerd://3b4f",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": "FATAL: bad config"}},
                }],
            },
        });
        let full: PodStatus = serde_json::from_value(served["status"].clone()).unwrap();
        let pod: CachedPod = serde_json::from_value(served).unwrap();
        let kept = pod.status().unwrap();
        let now = jiff::Timestamp::now();
        assert_eq!(start_failure(&kept, now), start_failure(&full, now), "the same failure is read");
        assert_eq!((kept.phase.as_deref(), kept.pod_ip.as_deref()), (Some("Running"), Some("10.0.0.7")));
        let conditions = kept.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0], full.conditions.as_ref().unwrap()[1], "the Ready condition, whole");
        let container = &kept.container_statuses.as_ref().unwrap()[0];
        let original = &full.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            (container.state.as_ref(), container.last_state.as_ref()),
            (original.state.as_ref(), original.last_state.as_ref())
        );
        assert_eq!(
            (container.name.as_str(), container.restart_count, container.ready),
            ("postgres", 3, false)
        );
        assert!(
            container.image.is_empty() && container.image_id.is_empty() && container.container_id.is_none()
        );
        assert!(kept.pod_ips.is_none() && kept.host_ip.is_none() && kept.qos_class.is_none());
    }

    #[test]
    fn a_cached_pod_is_decoded_from_a_whole_pod_without_its_spec_and_cached_without_its_annotations_and_unread_labels()
     {
        let mut pod = Pod {
            spec: Some(PodSpec { containers: vec![Default::default()], ..PodSpec::default() }),
            ..Pod::default()
        };
        pod.metadata.name = Some("pg-0".into());
        pod.metadata.namespace = Some("default".into());
        let read = [(ROLE_LABEL, "primary"), (label::INSTANCE, "pg"), (REVISION_LABEL, "pg-7d9f")];
        let others =
            [("app.kubernetes.io/name", "postgresql"), ("statefulset.kubernetes.io/pod-name", "pg-0")];
        pod.metadata.labels =
            Some(read.iter().chain(&others).map(|(k, v)| (k.to_string(), v.to_string())).collect());
        pod.metadata.annotations = Some([("restart-config".to_owned(), "1f2e".to_owned())].into());
        pod.metadata.managed_fields = Some(vec![Default::default()]);
        pod.metadata.generate_name = Some("pg-".into());
        pod.metadata.uid = Some("pod-uid".into());
        pod.status = Some(PodStatus { phase: Some("Running".into()), ..PodStatus::default() });
        let decoded: CachedPod = serde_json::from_value(serde_json::to_value(&pod).unwrap()).unwrap();
        assert_eq!(decoded.status(), pod.status);
        assert_eq!(ObjectKey::of(&decoded), ObjectKey::namespaced("default", "pg-0"));
        assert!(size_of::<CachedPod>() * 2 < size_of::<Pod>(), "the spec's inline bytes are gone");

        let mut writer =
            crate::runtime::cache::CacheWriter::<CachedPod>::as_received().with_label_index(label::INSTANCE);
        writer.apply(crate::runtime::reflector::ReflectorEvent::Applied(decoded));
        let kept = writer.cache().list();
        assert_eq!(kept.len(), 1);
        let kept = &kept[0];
        assert_eq!(kept.identity(), &Identity::of(&pod.metadata), "the identity as served");
        assert_eq!((kept.name(), kept.namespace()), (Some("pg-0"), Some("default")));
        for (name, value) in read {
            assert_eq!(kept.label(name), Some(value), "{name}: a label a pass reads stays");
        }
        for (name, _) in others {
            assert_eq!(kept.label(name), None, "{name}: the others go");
        }
        assert_eq!(kept.label(CLUSTER_LABEL), None, "a read label the pod does not carry");

        // The cache reads the kept labels: its label index and a scan for another label.
        let cache = writer.cache();
        assert_eq!(cache.list_labelled("default", label::INSTANCE, "pg").len(), 1);
        assert_eq!(cache.list_labelled("default", ROLE_LABEL, "primary").len(), 1);
        assert!(cache.list_labelled("default", ROLE_LABEL, "replica").is_empty());

        // Shown as a pod: the kept labels back in its metadata.
        let shown = serde_json::to_value(kept.as_ref()).unwrap();
        let want: serde_json::Map<String, serde_json::Value> =
            read.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        assert_eq!(shown["metadata"]["labels"], serde_json::Value::Object(want));
        assert_eq!(shown["status"]["phase"], "Running");
    }
}
