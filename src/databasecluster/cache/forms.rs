//! What a reconcile pass reads of the informers' caches, and in which form, so that the same
//! `reconcile` runs on this project's runtime and on another one's stores.
//!
//! The contract:
//! - A pass reads caches only through [`Lookup`] (one object by key) and [`Listing`] (a label
//!   or owner index on top). The runtime's [`Cache`] is both; the kube-runtime anchor of
//!   `cargo bench --bench e2e` wraps kube-runtime's own stores.
//! - Which form each kind is cached in is a [`Forms`]: [`CompactForms`] is the operator's
//!   (`cached.rs`: text, identities, pods without spec), [`WholeForms`] the objects as decoded,
//!   which is what kube-runtime's stores (and most controllers' caches) hold.
//! - Whatever the form, a pass sees the same values: [`Decoded::expand`] gives the whole
//!   object, [`Decoded::decode_as`] a view of a few of its fields, and [`PodForm`] what a pass
//!   reads of a pod. The tests below check that both forms of one object read alike.
//!
//! The price, said here once: every function of a pass that reads the caches takes an
//! `F: Forms` parameter (through `Context<F>`, whose default is [`CompactForms`]), only so that
//! the e2e benchmark can run this very `reconcile` over kube-runtime's stores and compare like
//! with like. It stays in the operator, not in the bench: the anchor must run the operator's code,
//! not a copy, and the parameter is monomorphised away (the operator builds only `CompactForms`).
//! docs/ARCHITECTURE.md ("What the caches keep") gives the reasons in full.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::cache::cached::{CachedPod, ChildForm, Compact};
use crate::runtime::cache::Cache;
use crate::runtime::object::InformerObject;
use crate::runtime::{Object, ObjectKey};

/// A cache a pass reads one object of at a time.
pub trait Lookup<T>: Send + Sync {
    /// The object cached under `key`, if any.
    fn get(&self, key: &ObjectKey) -> Option<Arc<T>>;
}

/// A cache a pass also lists: by label value within a namespace, and by controller owner.
pub trait Listing<T>: Lookup<T> {
    /// The objects in `namespace` whose label `label` is `value`.
    fn list_labelled(&self, namespace: &str, label: &str, value: &str) -> Vec<Arc<T>>;

    /// The objects whose controller ownerReference has uid `owner_uid`.
    fn children_of(&self, owner_uid: &str) -> Vec<Arc<T>>;
}

impl<T: InformerObject> Lookup<T> for Cache<T> {
    fn get(&self, key: &ObjectKey) -> Option<Arc<T>> {
        Cache::get(self, key)
    }
}

impl<T: InformerObject> Listing<T> for Cache<T> {
    fn list_labelled(&self, namespace: &str, label: &str, value: &str) -> Vec<Arc<T>> {
        Cache::list_labelled(self, namespace, label, value)
    }

    fn children_of(&self, owner_uid: &str) -> Vec<Arc<T>> {
        Cache::children_of(self, owner_uid)
    }
}

/// An object cached in a form a pass decodes to read more than its identity.
pub trait Decoded<K> {
    /// The whole object, identity included.
    fn expand(&self) -> serde_json::Result<K>;

    /// The few fields `T` names (a ConfigMap's records beside its scripts).
    fn decode_as<T: DeserializeOwned>(&self) -> serde_json::Result<T>;
}

impl<K> Decoded<K> for Compact<K>
where
    K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static,
{
    fn expand(&self) -> serde_json::Result<K> {
        Compact::expand(self)
    }

    fn decode_as<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        Compact::decode_as(self)
    }
}

/// An object kept whole is its own decoded form.
impl<K: Clone + Serialize> Decoded<K> for K {
    fn expand(&self) -> serde_json::Result<K> {
        Ok(self.clone())
    }

    fn decode_as<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_value(serde_json::to_value(self)?)
    }
}

/// What a pass reads of a pod: its identity and labels ([`Object`]), its status and its
/// creation time.
pub trait PodForm: Object + Send + Sync + 'static {
    /// `status`, as far as the form keeps it (a [`CachedPod`] keeps what the passes read).
    fn status(&self) -> Option<Cow<'_, PodStatus>>;

    /// `metadata.creationTimestamp`.
    fn created(&self) -> Option<jiff::Timestamp>;
}

impl PodForm for CachedPod {
    fn status(&self) -> Option<Cow<'_, PodStatus>> {
        CachedPod::status(self).map(Cow::Owned)
    }

    fn created(&self) -> Option<jiff::Timestamp> {
        CachedPod::created(self)
    }
}

impl PodForm for Pod {
    fn status(&self) -> Option<Cow<'_, PodStatus>> {
        self.status.as_ref().map(Cow::Borrowed)
    }

    fn created(&self) -> Option<jiff::Timestamp> {
        self.metadata.creation_timestamp.as_ref().map(|time| time.0)
    }
}

/// The form each kind a pass reads is cached in (see the module docs).
pub trait Forms: Send + Sync + 'static {
    /// A DatabaseCluster.
    type Cluster: Object + Decoded<DatabaseCluster> + Send + Sync + 'static;
    /// The cluster's StatefulSet.
    type StatefulSet: ChildForm<Object = StatefulSet> + Decoded<StatefulSet>;
    /// Its Services.
    type Service: ChildForm<Object = Service>;
    /// Its login Secrets.
    type Secret: ChildForm<Object = Secret> + Decoded<Secret>;
    /// Its ConfigMap.
    type ConfigMap: ChildForm<Object = ConfigMap> + Decoded<ConfigMap>;
    /// Its PodDisruptionBudget.
    type Pdb: ChildForm<Object = PodDisruptionBudget>;
    /// Its pods and its backup Jobs' pods.
    type Pod: PodForm;
}

/// The operator's forms (`cached.rs`): children and clusters as [`Compact`] text, pods as
/// [`CachedPod`]s.
#[derive(Debug)]
pub struct CompactForms;

impl Forms for CompactForms {
    type Cluster = Compact<DatabaseCluster>;
    type StatefulSet = Compact<StatefulSet>;
    type Service = Compact<Service>;
    type Secret = Compact<Secret>;
    type ConfigMap = Compact<ConfigMap>;
    type Pdb = Compact<PodDisruptionBudget>;
    type Pod = CachedPod;
}

/// Every kind as decoded from the API server: what kube-runtime's reflector stores hold.
#[derive(Debug)]
pub struct WholeForms;

impl Forms for WholeForms {
    type Cluster = DatabaseCluster;
    type StatefulSet = StatefulSet;
    type Service = Service;
    type Secret = Secret;
    type ConfigMap = ConfigMap;
    type Pdb = PodDisruptionBudget;
    type Pod = Pod;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStatus, PodCondition};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::databasecluster::fixtures::{seed, statefulset};
    use crate::databasecluster::specs::config::Records;
    use crate::databasecluster::specs::names::label::INSTANCE;

    fn served<K: Serialize + DeserializeOwned>(object: &K) -> K {
        serde_json::from_value(serde_json::to_value(object).expect("serialises")).expect("decodes")
    }

    #[test]
    fn a_compact_and_a_whole_object_expand_to_the_same_object() {
        let mut cluster = seed();
        cluster.metadata.resource_version = Some("7".into());
        let mut sts = served(&statefulset());
        sts.metadata.resource_version = Some("9".into());
        let compact = Compact::from_object(sts.clone()).expect("compacts");
        assert_eq!(
            Decoded::<StatefulSet>::expand(&compact).expect("expands"),
            Decoded::<StatefulSet>::expand(&sts).expect("expands")
        );
        let compact = Compact::from_object(cluster.clone()).expect("compacts");
        assert_eq!(Decoded::<DatabaseCluster>::expand(&compact).expect("expands"), served(&cluster));
    }

    #[test]
    fn a_view_reads_the_same_fields_of_either_form() {
        let config = ConfigMap {
            metadata: ObjectMeta {
                name: Some("pg-scripts".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            data: Some([("primary".to_owned(), "pg-1".to_owned())].into()),
            ..ConfigMap::default()
        };
        let compact = Compact::from_object(config.clone()).expect("compacts");
        let whole: Records = Decoded::<ConfigMap>::decode_as(&config).expect("decodes");
        let packed: Records = Decoded::<ConfigMap>::decode_as(&compact).expect("decodes");
        assert_eq!(whole.primary().as_deref(), Some("pg-1"));
        assert_eq!(packed.primary(), whole.primary());
    }

    #[test]
    fn a_cached_pod_and_a_whole_pod_read_alike() {
        let created = Time("2026-12-06T02:00:00Z".parse().expect("a time"));
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("pg-0".into()),
                namespace: Some("default".into()),
                creation_timestamp: Some(created.clone()),
                labels: Some([(INSTANCE.to_owned(), "pg".to_owned())].into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("127.0.0.9".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "postgres".into(),
                    ready: true,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: Some(created.clone()) }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Pod::default()
        };
        let cached: CachedPod =
            serde_json::from_value(serde_json::to_value(&pod).expect("serialises")).expect("decodes");
        assert_eq!(PodForm::status(&cached), PodForm::status(&pod));
        assert_eq!(PodForm::created(&cached), PodForm::created(&pod));
        let label = INSTANCE;
        assert_eq!(Object::label(&cached, label), Object::label(&pod, label));
        assert_eq!(Object::name(&cached), Object::name(&pod));
    }
}
