//! [`Compact<K>`]: an object the operator's caches keep as compressed JSON text, for the child
//! kinds a pass mostly compares with what it would write (the StatefulSet, Services, login Secrets,
//! the ConfigMap and the PodDisruptionBudget), and decodes ([`Compact::expand`]) for the few fields
//! it reads (the StatefulSet's, a password), and for the DatabaseCluster, which a pass decodes
//! once. `K` is any `kube::Resource` of a static type (k8s-openapi's kinds and the operator's own
//! custom resource alike); to the runtime, a `Compact<K>` is an [`Object`] of the same resource.
//! A decoded k8s-openapi object costs several times its JSON: its inline struct is mostly empty
//! `Option`s (a `Service` is 824 bytes before any of its heap), each non-empty map (labels, a
//! selector, a Secret's data) allocates a 544-byte node, and every string is an allocation of its
//! own. Kept as text, a Service is its packed JSON plus the few identity fields the runtime reads.
//!
//! The contract:
//! - the text is the whole object as the server sent it (a watch event's or a list's, decoded
//!   from JSON: [`Compact::from_json`]) or as a write's answer decoded into a `K`
//!   ([`Compact::from_object`]), with `metadata.managedFields` cut, and without the name,
//!   namespace, resourceVersion and generation, which are kept beside it (below), once, not
//!   twice. [`Compact::expand`], [`Compact::to_value`] and serialising put them back, so each
//!   sees the whole object; a view ([`Compact::decode_as`]) sees the text only. The text is
//!   decoded as `K` before it is kept, which refuses what is not a `K`, as the typed decoder
//!   always did, so [`Compact::expand`] of a cached object cannot fail but on a broken
//!   invariant. The server's text is kept as sent, not written back from the `K` (writing it
//!   back cost about 4 % of the operator's CPU at 5 000 clusters); fields
//!   k8s-openapi does not know stay in it, and no reader of a `K` sees them;
//! - the text is kept packed ([`Packed`]: LZ4 against a dictionary per kind, the kind's first
//!   named object, so not a bookmark);
//! - beside it, an [`Identity`] holds what the runtime ([`Object`]) and the controller's owner
//!   mapping read without decoding: name, namespace, resourceVersion, generation, whether it is
//!   being deleted, and the controller ownerReference (which the text keeps too, with the other
//!   ownerReferences). A `Compact` is not a `kube::Resource`: that would need a whole
//!   `ObjectMeta` (360 bytes inline, and an allocation per string); it is an [`Object`] whose
//!   resource is `K`, so an informer of it lists and watches `K`'s objects;
//! - drift ([`Compact::drifted_from`]) compares the desired object with the text, both as JSON,
//!   by the same rule as every other kind (`drift::needs_update_json`). The text never changes
//!   (a changed object is a new `Compact` from its watch event), so a "no drift" verdict holds
//!   for as long as the desired object is the same: the cached object remembers the digest of
//!   the last desired JSON it covered, and a pass that builds the same desired object again
//!   (every pass of a settled cluster, a resync's above all) compares digests instead of
//!   parsing the text. A drift verdict is never remembered.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::marker::PhantomData;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::databasecluster::cache::drift::needs_update_json;
use crate::databasecluster::cache::identity::{Identity, object_by_identity};
use crate::databasecluster::cache::packed::Packed;
use crate::runtime::object::Object;
use crate::runtime::reflector::cut_metadata_members;

/// An object of kind `K` kept as its packed JSON text (see the module docs).
pub struct Compact<K> {
    identity: Identity,
    /// The JSON text, packed against `K`'s dictionary.
    text: Packed,
    /// [`desired_digest`] of the last desired object found covered by `text`; 0 for none.
    covered: AtomicU64,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static> Compact<K> {
    /// The compact form of `object` (a read's answer, say), its managedFields cut.
    pub fn from_object(mut object: K) -> serde_json::Result<Self> {
        let metadata = object.meta_mut();
        let identity = Identity::of(metadata);
        move_own_fields(metadata, &mut ObjectMeta::default());
        metadata.managed_fields = None;
        Ok(Self::packed(identity, &serde_json::to_vec(&object)?))
    }

    /// The compact form of the JSON object `text` as the server sent it: decoded as a `K` (what
    /// is not one is refused) for its identity, then kept as sent, its managedFields and the
    /// identity's own fields cut from the text.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        let object: K = serde_json::from_str(text)?;
        let identity = Identity::of(object.meta());
        drop(object);
        let cut = cut_metadata_members(text.as_bytes(), &CUT_FROM_TEXT);
        Ok(Self::packed(identity, cut.as_deref().unwrap_or(text.as_bytes())))
    }

    /// `identity` beside `text` (the object without its identity's own fields), packed.
    fn packed(identity: Identity, text: &[u8]) -> Self {
        Compact {
            text: Packed::pack::<K>(text, identity.name().is_some()),
            identity,
            covered: AtomicU64::new(0),
            kind: PhantomData,
        }
    }

    /// The object decoded whole (its identity put back), for a pass that reads more than its
    /// identity.
    pub fn expand(&self) -> serde_json::Result<K> {
        let mut object: K = self.decode_as()?;
        move_own_fields(&mut self.identity.own_fields(), object.meta_mut());
        Ok(object)
    }

    /// The object's text decoded as `T`: a view of the few fields a pass reads, for which serde
    /// passes over the rest without building it (a ConfigMap's records beside its scripts). The
    /// text has no name, namespace, resourceVersion or generation: a view reads those from
    /// [`Compact::identity`], a whole object comes from [`Compact::expand`].
    pub fn decode_as<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.text.unpack()?)
    }

    /// The whole object as JSON (its identity put back), for drift.
    pub fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        whole_value(&self.text, &self.identity)
    }

    /// What is kept beside the text (see the module docs).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Whether this object differs from `desired` in a field `desired` sets (a write is due),
    /// by `drift::needs_update_json`; a "no drift" verdict is remembered for the same desired
    /// JSON (see the module docs).
    pub fn drifted_from(&self, desired: &K) -> bool {
        let digest = desired_digest(desired);
        if digest.is_some_and(|digest| digest == self.covered.load(Ordering::Relaxed)) {
            return false;
        }
        let drifted = needs_update_json(serde_json::to_value(desired), self.to_value());
        if !drifted && let Some(digest) = digest {
            self.covered.store(digest, Ordering::Relaxed);
        }
        drifted
    }
}

/// A 64-bit digest of `desired`'s JSON, keyed once per process (SipHash with a random key, so no
/// input is chosen to collide), never 0; `None` if it does not serialise. Two different desired
/// objects share a digest with a probability of about 2^-64 per comparison.
fn desired_digest<K: Serialize>(desired: &K) -> Option<u64> {
    /// Feeds what the serialiser writes straight into the hasher: no text is built.
    struct Digesting<H>(H);
    impl<H: Hasher> std::io::Write for Digesting<H> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static KEY: OnceLock<RandomState> = OnceLock::new();
    let mut digesting = Digesting(KEY.get_or_init(RandomState::new).build_hasher());
    serde_json::to_writer(&mut digesting, desired).ok()?;
    Some(digesting.0.finish().max(1))
}

/// The metadata members cut from a server's text: managedFields, and the fields the identity
/// keeps, the ones [`move_own_fields`] moves (the two lists change together).
const CUT_FROM_TEXT: [&str; 5] = ["managedFields", "name", "namespace", "resourceVersion", "generation"];

/// Moves the fields the text leaves out, which the identity keeps (see the module docs), from
/// `from` to `into`: the one list of them for decoded objects ([`CUT_FROM_TEXT`] for texts).
fn move_own_fields(from: &mut ObjectMeta, into: &mut ObjectMeta) {
    into.name = from.name.take();
    into.namespace = from.namespace.take();
    into.resource_version = from.resource_version.take();
    into.generation = from.generation.take();
}

/// The text as JSON with the fields `identity` keeps put back into its metadata: the whole object.
fn whole_value(text: &Packed, identity: &Identity) -> serde_json::Result<serde_json::Value> {
    use serde_json::Value;
    let mut value: Value = serde_json::from_slice(&text.unpack()?)?;
    let own_fields = serde_json::to_value(identity.own_fields())?;
    if let (Value::Object(object), Value::Object(identity)) = (&mut value, own_fields) {
        match object.get_mut("metadata") {
            Some(Value::Object(metadata)) => metadata.extend(identity),
            _ => {
                object.insert("metadata".to_owned(), Value::Object(identity));
            }
        }
    }
    Ok(value)
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Compact {
            identity: self.identity.clone(),
            text: self.text.clone(),
            covered: AtomicU64::new(self.covered.load(Ordering::Relaxed)),
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = ()>> fmt::Debug for Compact<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compact")
            .field("kind", &K::kind(&()))
            .field("identity", &self.identity)
            .field("packed_bytes", &self.text.packed_len())
            .finish()
    }
}

impl<K> Serialize for Compact<K> {
    /// The whole object: its text with its identity put back (see the module docs).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        whole_value(&self.text, &self.identity).map_err(S::Error::custom)?.serialize(serializer)
    }
}

impl<'de, K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static> Deserialize<'de>
    for Compact<K>
{
    /// Captures the object's JSON text and keeps it ([`Compact::from_json`]). Only `serde_json`
    /// decodes one (its `Deserializer`, or a `serde_json::Value`), as the runtime's reflector
    /// does: a capture of the raw text needs it. No other decoder meets a `Compact`: the
    /// kube-runtime anchor keeps whole objects (`WholeForms`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Box::<RawValue>::deserialize(deserializer)?;
        Compact::from_json(text.get()).map_err(D::Error::custom)
    }
}

/// The same resource as `K`, so an informer of it lists and watches `K`'s objects; its identity is
/// the one kept beside the text (see the module docs).
impl<K: Resource<DynamicType = ()>> Object for Compact<K> {
    type Resource = K;

    object_by_identity!();

    /// `None`: labels stay in the text, so neither a label index nor `Cache::list_labelled` finds
    /// a `Compact` by its labels (the operator reads none of these caches by label).
    fn label(&self, _: &str) -> Option<&str> {
        None
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Secret, Service};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use serde_json::json;

    use super::*;
    use crate::runtime::ObjectKey;
    use std::collections::BTreeMap;

    use crate::runtime::reflector::{INITIAL_EVENTS_END, WatchLine, decode_watch_line};

    fn served_service() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "pg-rw", "namespace": "team-1", "uid": "u-1", "resourceVersion": "42",
                "creationTimestamp": "2026-12-04T10:00:00Z",
                "labels": {"app.kubernetes.io/instance": "pg", "app.kubernetes.io/managed-by": "dbcluster-operator"},
                "annotations": {"team.example.com/owner": "payments"},
                "ownerReferences": [{"apiVersion": "databases.madmmas.dev/v1alpha1", "kind": "DatabaseCluster",
                    "name": "pg", "uid": "owner-1", "controller": true}],
            },
            "spec": {"selector": {"role": "primary"}, "ports": [{"name": "postgres", "port": 5432}],
                "clusterIP": "10.96.0.7", "type": "ClusterIP"},
            "status": {"loadBalancer": {}},
        })
    }

    #[test]
    fn the_text_is_the_object_and_the_metadata_its_identity() {
        let served = served_service();
        let kept: Compact<Service> = serde_json::from_value(served.clone()).unwrap();
        assert_eq!(serde_json::to_value(&kept).unwrap(), served, "the whole object, as sent");
        assert_eq!(kept.to_value().unwrap(), served);
        assert_eq!(kept.expand().unwrap(), serde_json::from_value::<Service>(served).unwrap());
        assert_eq!(ObjectKey::of(&kept), ObjectKey::namespaced("team-1", "pg-rw"));
        assert_eq!(kept.resource_version(), Some("42"));
        assert_eq!(crate::runtime::cache::controller_uid(&kept), Some("owner-1"));
        assert_eq!(kept.label("app.kubernetes.io/instance"), None, "labels stay in the text");
        assert_eq!(<<Compact<Service> as Object>::Resource as kube::Resource>::plural(&()), "services");
    }

    #[test]
    fn the_identity_is_kept_once_beside_the_text_not_in_it() {
        let kept: Compact<Service> = serde_json::from_value(served_service()).unwrap();
        let text = String::from_utf8(kept.text.unpack().unwrap()).unwrap();
        for beside in ["pg-rw", "team-1", "\"42\"", "resourceVersion"] {
            assert!(!text.contains(beside), "{beside} is kept beside the text, not in it: {text}");
        }
        for in_text in ["payments", "app.kubernetes.io/instance", "u-1", "owner-1", "creationTimestamp"] {
            assert!(text.contains(in_text), "{in_text} is in the text: {text}");
        }
        let view: serde_json::Value = kept.decode_as().unwrap();
        assert_eq!(view["metadata"].get("name"), None, "a view reads the text only");
        let whole = kept.expand().unwrap();
        assert_eq!(whole.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(whole.metadata.owner_references.unwrap()[0].uid, "owner-1");
    }

    #[test]
    fn managed_fields_are_cut_from_the_text() {
        let mut served = served_service();
        served["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update"}]);
        let kept: Compact<Service> = serde_json::from_value(served.clone()).unwrap();
        assert!(!String::from_utf8(kept.text.unpack().unwrap()).unwrap().contains("managedFields"));
        served["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert_eq!(kept.to_value().unwrap(), served);

        let mut written: Service = serde_json::from_value(served.clone()).unwrap();
        written.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let kept = Compact::from_object(written).unwrap();
        assert!(!String::from_utf8(kept.text.unpack().unwrap()).unwrap().contains("managedFields"));
        assert_eq!(kept.name(), Some("pg-rw"));
    }

    #[test]
    fn a_no_drift_verdict_is_remembered_for_the_same_desired_object_only() {
        let kept: Compact<Service> = serde_json::from_value(served_service()).unwrap();
        let mut desired = Service::default();
        desired.metadata.name = Some("pg-rw".into());
        desired.spec = Some(serde_json::from_value(json!({"selector": {"role": "primary"}})).unwrap());
        assert!(!kept.drifted_from(&desired));
        let remembered = kept.covered.load(Ordering::Relaxed);
        assert_eq!(Some(remembered), desired_digest(&desired), "the covered desired object is remembered");
        assert!(!kept.drifted_from(&desired), "and found covered again");

        // Another desired object is compared in full: its drift is seen, and not remembered.
        let mut moved = desired.clone();
        moved.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("role".into(), "replica".into())]));
        assert!(kept.drifted_from(&moved));
        assert!(kept.drifted_from(&moved));
        assert_eq!(kept.covered.load(Ordering::Relaxed), remembered);
        assert_ne!(desired_digest(&moved), desired_digest(&desired));

        // A new text (the object changed on the server) remembers nothing.
        let mut served = served_service();
        served["spec"]["selector"] = json!({"role": "replica"});
        let changed: Compact<Service> = serde_json::from_value(served).unwrap();
        assert_eq!(changed.covered.load(Ordering::Relaxed), 0);
        assert!(changed.drifted_from(&desired));
        assert!(!changed.drifted_from(&moved));
    }

    #[test]
    fn an_object_that_is_not_a_k_is_refused_as_the_typed_decoder_refuses_it() {
        let mut served = served_service();
        served["spec"]["ports"] = json!("not a list");
        assert!(serde_json::from_value::<Compact<Service>>(served.clone()).is_err());
        assert!(serde_json::from_value::<Service>(served).is_err());
        let secret = json!({"metadata": {"name": "s"}, "data": {"password": "not base64!"}});
        assert!(serde_json::from_value::<Compact<Secret>>(secret).is_err());
    }

    #[test]
    fn watch_lines_decode_including_the_end_of_a_streaming_lists_initial_events() {
        let line = serde_json::to_vec(&json!({"type": "ADDED", "object": served_service()})).unwrap();
        let Ok(WatchLine::Added(kept)) = decode_watch_line::<Compact<Service>>(&line) else { panic!() };
        assert_eq!(kept.name(), Some("pg-rw"));
        assert_eq!(kept.controller_owner().map(|owner| owner.name), Some("pg"));
        let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Service", "apiVersion": "v1",
            "metadata": {"resourceVersion": "77", "annotations": {INITIAL_EVENTS_END: "true"}}}});
        let line = serde_json::to_vec(&bookmark).unwrap();
        let decoded = decode_watch_line::<Compact<Service>>(&line).unwrap();
        assert!(
            matches!(&decoded, WatchLine::Bookmark { resource_version, initial_events_end: true } if resource_version == "77"),
            "{decoded:?}"
        );
    }

    #[test]
    fn the_servers_text_is_kept_as_sent_fields_k8s_openapi_does_not_know_included() {
        let mut served = served_service();
        served["spec"]["futureField"] = json!({"added": "in Kubernetes 1.40"});
        served["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
        // The server's member order and spacing, as a watch line carries them.
        let text = serde_json::to_string_pretty(&served).unwrap();
        let kept: Compact<Service> = serde_json::from_str(&text).unwrap();
        served["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert_eq!(kept.to_value().unwrap(), served, "as sent, managedFields cut");
        let view: serde_json::Value = kept.decode_as().unwrap();
        assert_eq!(view["spec"]["futureField"]["added"], "in Kubernetes 1.40");
        assert_eq!(kept.identity().name(), Some("pg-rw"));
        // A write's answer, decoded into a `Service` first, keeps what k8s-openapi knows.
        let written =
            Compact::from_object(serde_json::from_value::<Service>(served.clone()).unwrap()).unwrap();
        assert_eq!(written.expand().unwrap(), kept.expand().unwrap());
    }

    #[test]
    fn a_bookmark_first_does_not_spoil_its_kinds_dictionary() {
        use k8s_openapi::api::core::v1::ResourceQuota;
        // ResourceQuota: a kind no other test keeps.
        let bookmark: ResourceQuota =
            serde_json::from_value(json!({"metadata": {"resourceVersion": "7"}})).unwrap();
        let kept = Compact::from_object(bookmark.clone()).unwrap();
        assert_eq!(kept.expand().unwrap(), bookmark);
        let quota = |name: &str| -> ResourceQuota {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "team-1",
                "labels": {"app.kubernetes.io/managed-by": "dbcluster-operator"}},
                "spec": {"hard": {"requests.cpu": "4", "requests.memory": "8Gi", "persistentvolumeclaims": "10"}}}))
            .unwrap()
        };
        // The bookmark came first (a watch of an empty collection sends it before any object),
        // and still the named objects pack against one of their own.
        let text = serde_json::to_vec(&quota("inventory")).unwrap();
        let _first = Compact::from_object(quota("payments")).unwrap();
        let second = Compact::from_object(quota("inventory")).unwrap();
        assert!(second.text.packed_len() * 4 < text.len(), "packed against the first named object");
        assert_eq!(second.expand().unwrap(), quota("inventory"));
    }

    #[test]
    fn the_custom_resource_is_kept_and_read_back_whole() {
        use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus, Phase};
        use crate::databasecluster::fixtures::seed;

        let mut served = seed();
        served.metadata.resource_version = Some("9".into());
        served.status = Some(DatabaseClusterStatus {
            phase: Some(Phase::Running),
            ready_replicas: 3,
            ..Default::default()
        });
        let kept: Compact<DatabaseCluster> =
            serde_json::from_value(serde_json::to_value(&served).unwrap()).unwrap();
        assert_eq!(kept.expand().unwrap(), served);
        assert_eq!(ObjectKey::of(&kept), ObjectKey::of(&served));
        assert_eq!(kept.generation(), Some(1));
        assert!(!kept.is_deleting());
    }

    #[test]
    fn a_compact_service_takes_less_than_the_decoded_one() {
        assert!(
            size_of::<Compact<Service>>() * 6 < size_of::<Service>(),
            "{}",
            size_of::<Compact<Service>>()
        );
    }
}
