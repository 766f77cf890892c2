//! The informer's store, read side: one shared `Arc<K>` per object in a `DashMap`, the last
//! resourceVersion seen, a "synced" flag, and the indexes its writer asks for: by namespace, by
//! controller owner's UID, by one label's value within a namespace (client-go's `Indexer`, whose
//! index functions are registered per informer too). An index costs memory for every object of
//! its kind, so a cache keeps only the ones its readers use; a lookup that has no index scans
//! the objects instead (same answer, O(cache)).
//!
//! The store is split as kube-runtime's `Writer`/`Store` are: the informer's task owns the one
//! [`CacheWriter`] (in [`writer`]), which applies each [`ReflectorEvent`](crate::runtime::reflector::ReflectorEvent)
//! and says what changed; everyone else (reconcile, handlers, the debug endpoint) holds a
//! read-only [`Cache`] (`get`, `list`, `children_of`, …), from any number of tasks at once, handed
//! out as `Arc`s, never copies. The indexes are updated right after the object map, so a reader
//! racing a write may briefly see an index one step behind; lookups through an index always return
//! objects that are in the map at the time of the lookup.
//!
//! This module also holds the one lookup of an object's controller ownerReference
//! ([`controller_owner`]), which the owner index, the controller's `owns` wiring and the operator
//! share.

pub mod writer;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use dashmap::DashMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::runtime::{Object, ObjectKey};

pub use writer::{CacheWriter, InformerEvent};

/// A function applied to every object before it is stored, to drop what nobody reads.
pub type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// The default transform: drops `metadata.managedFields`, which is often half an object's size
/// and which a controller never reads, and the spare room in the metadata's lists
/// ([`release_spare_room`]).
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    release_spare_room(meta);
}

/// Gives back the room a decoder left spare in the metadata's lists, for an object a cache keeps:
/// decoding a list of unknown length straight from the wire grows it from empty, so the usual
/// single owner reference (about 100 bytes) holds room for four.
pub fn release_spare_room(meta: &mut ObjectMeta) {
    if let Some(finalizers) = meta.finalizers.as_mut() {
        finalizers.shrink_to_fit();
    }
    if let Some(owners) = meta.owner_references.as_mut() {
        owners.shrink_to_fit();
    }
}

/// The store behind an informer, read-only: objects by key, plus the indexes its writer keeps
/// ([`Indexes`]). Only its [`CacheWriter`] changes it.
pub struct Cache<K> {
    objects: DashMap<ObjectKey, Arc<K>>,
    by_namespace: Option<KeyIndex>,
    by_controller_uid: Option<KeyIndex>,
    by_label: Option<LabelIndex>,
    resource_version: RwLock<Option<Arc<str>>>,
    synced: watch::Sender<bool>,
}

impl<K> fmt::Debug for Cache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("objects", &self.objects.len())
            .field("resource_version", &*self.resource_version.read())
            .field("synced", &*self.synced.borrow())
            .finish()
    }
}

impl<K: Object + Send + Sync + 'static> Cache<K> {
    /// An empty cache (made by its writer) that keeps `indexes`.
    fn empty(indexes: Indexes) -> Self {
        Self {
            objects: DashMap::new(),
            by_namespace: indexes.namespace.then(KeyIndex::new),
            by_controller_uid: indexes.controller_owner.then(KeyIndex::new),
            by_label: indexes.label.map(|label| LabelIndex { label, keys: KeyIndex::new() }),
            resource_version: RwLock::new(None),
            synced: watch::Sender::new(false),
        }
    }

    /// The cached object with this key.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.objects.get(key).map(|entry| Arc::clone(entry.value()))
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.objects.iter().map(|entry| Arc::clone(entry.value())).collect()
    }

    /// The keys of every cached object, in no particular order.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.objects.iter().map(|entry| entry.key().clone()).collect()
    }

    /// Which indexes this cache keeps.
    pub fn indexes(&self) -> Indexes {
        Indexes {
            namespace: self.by_namespace.is_some(),
            controller_owner: self.by_controller_uid.is_some(),
            label: self.by_label.as_ref().map(|index| index.label),
        }
    }

    /// The cached objects in one namespace: through the namespace index when the cache keeps
    /// one, else by scanning every object.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        match &self.by_namespace {
            Some(index) => self.lookup(index, namespace),
            None => self.scan(|key, _| key.namespace() == Some(namespace)),
        }
    }

    /// The cached objects whose controller ownerReference (`controller: true`) has this UID:
    /// through the owner index when the cache keeps one (O(children)), else by scanning every
    /// object (O(cache)).
    pub fn children_of(&self, owner_uid: &str) -> Vec<Arc<K>> {
        match &self.by_controller_uid {
            Some(index) => self.lookup(index, owner_uid),
            None => self.scan(|_, obj| controller_uid(obj) == Some(owner_uid)),
        }
    }

    /// The cached objects in `namespace` whose label `label` has the value `value`: through the
    /// label index when the writer keeps one for `label` (O(matches), so a pass that reads one
    /// cluster's pods costs the same with 10 or 10 000 clusters in the namespace), else by
    /// filtering the namespace.
    pub fn list_labelled(&self, namespace: &str, label: &str, value: &str) -> Vec<Arc<K>> {
        match &self.by_label {
            Some(index) if index.label == label => {
                self.lookup(&index.keys, &LabelIndex::entry(namespace, value))
            }
            _ => {
                let mut objects = self.list_namespace(namespace);
                objects.retain(|obj| obj.label(label) == Some(value));
                objects
            }
        }
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The last resourceVersion the informer saw (from an object, a bookmark or a list).
    pub fn resource_version(&self) -> Option<Arc<str>> {
        self.resource_version.read().clone()
    }

    /// Whether a first complete list has been applied.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once a first complete list has been applied (at once if it already has).
    pub async fn synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives in `self`, which outlives this borrow: the channel cannot close here.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    fn lookup(&self, index: &KeyIndex, value: &str) -> Vec<Arc<K>> {
        let keys: Vec<ObjectKey> = match index.get(value) {
            Some(keys) => keys.iter().cloned().collect(),
            None => return Vec::new(),
        };
        keys.iter().filter_map(|key| self.get(key)).collect()
    }

    fn scan(&self, wanted: impl Fn(&ObjectKey, &K) -> bool) -> Vec<Arc<K>> {
        self.objects
            .iter()
            .filter(|entry| wanted(entry.key(), entry.value()))
            .map(|entry| Arc::clone(entry.value()))
            .collect()
    }
}

/// Which indexes a cache keeps besides its objects by key: none by default; a writer asks for
/// each ([`CacheWriter::with_namespace_index`], [`CacheWriter::with_owner_index`],
/// [`CacheWriter::with_label_index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Indexes {
    /// By namespace ([`Cache::list_namespace`]).
    pub namespace: bool,
    /// By the UID of the controller ownerReference ([`Cache::children_of`]).
    pub controller_owner: bool,
    /// By this label's value within a namespace ([`Cache::list_labelled`]).
    pub label: Option<&'static str>,
}

/// An index: a value → the keys of the objects filed under it.
type KeyIndex = DashMap<Arc<str>, HashSet<ObjectKey>>;

/// The index of a cache by one label's value: `namespace/value` → the keys of the objects in that
/// namespace whose label has that value.
struct LabelIndex {
    label: &'static str,
    keys: KeyIndex,
}

impl LabelIndex {
    /// The index entry of `value` in `namespace` (a label's value cannot hold a `/`).
    fn entry(namespace: &str, value: &str) -> String {
        format!("{namespace}/{value}")
    }

    /// The namespace and label value that place `obj` in the index, if it carries the label (and
    /// is namespaced): compared without building the entry, since most updates keep both.
    fn place_of<'a, K: Object>(&self, obj: &'a K) -> Option<(&'a str, &'a str)> {
        Some((obj.namespace()?, obj.label(self.label)?))
    }
}

/// The object's controller ownerReference (the one with `controller: true`; the API server allows
/// at most one), if any: the owner a controller's `Owns` wiring wakes when this object changes.
pub fn controller_owner(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_deref()?.iter().find(|owner| owner.controller == Some(true))
}

/// The UID named by the object's controller ownerReference: the key of the owner index.
pub fn controller_uid<K: Object>(obj: &K) -> Option<&str> {
    obj.controller_owner().map(|owner| owner.uid)
}
