//! The informer's store: one shared `Arc<K>` per object in a `DashMap`, with a namespace index
//! and a controller-owner-UID index, the last resourceVersion seen, and a "synced" flag.
//!
//! Writes come from one informer task; reads (`get`, `list`, `children_of`, …) may come from any
//! number of tasks at once and hand out `Arc`s, never copies. The indexes are updated right after
//! the object map, so a reader racing a write may briefly see an index one step behind; lookups
//! through an index always return objects that are in the map at the time of the lookup.
//!
//! A relist is reconciled into the map in place ([`Cache::start_relist`]): each listed object is compared
//! with the cached one by resourceVersion and replaced only when it changed, and at the end the
//! objects that were not listed are swept out. The cache therefore never holds a second full copy
//! of the objects (kube-runtime's reflector swaps in a whole new map and peaks at twice the store).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use dashmap::DashMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::runtime::ObjectKey;

/// A function applied to every object before it is stored, to drop what nobody reads.
pub type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// The default transform: drops `metadata.managedFields`, which is often half an object's size
/// and which a controller never reads.
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// What storing one object did to the cache.
#[derive(Debug)]
pub enum Change<K> {
    /// The key was not in the cache.
    Added(Arc<K>),
    /// The key was cached with another resourceVersion; `old` is the state it replaced.
    Updated {
        /// The state that was cached before.
        old: Arc<K>,
        /// The state now cached.
        new: Arc<K>,
    },
    /// The key was cached with the same resourceVersion; the cache kept its object.
    Unchanged,
}

/// The store behind an informer: objects by key, plus indexes by namespace and controller owner.
pub struct Cache<K> {
    objects: DashMap<ObjectKey, Arc<K>>,
    by_namespace: DashMap<Arc<str>, HashSet<ObjectKey>>,
    by_controller_uid: DashMap<Arc<str>, HashSet<ObjectKey>>,
    resource_version: RwLock<Option<Arc<str>>>,
    synced: watch::Sender<bool>,
    transform: Transform<K>,
}

impl<K: Resource + Send + Sync + 'static> Default for Cache<K> {
    fn default() -> Self {
        Self::new()
    }
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

impl<K: Resource + Send + Sync + 'static> Cache<K> {
    /// An empty cache that strips `managedFields` from every object it stores.
    pub fn new() -> Self {
        Self::with_transform(Arc::new(strip_managed_fields::<K>))
    }

    /// An empty cache that applies `transform` to every object before storing it
    /// (pass `Arc::new(|_| {})` to store objects exactly as received).
    pub fn with_transform(transform: Transform<K>) -> Self {
        Self {
            objects: DashMap::new(),
            by_namespace: DashMap::new(),
            by_controller_uid: DashMap::new(),
            resource_version: RwLock::new(None),
            synced: watch::Sender::new(false),
            transform,
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

    /// The cached objects in one namespace, found through the namespace index.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.lookup(&self.by_namespace, namespace)
    }

    /// The cached objects whose controller ownerReference (`controller: true`) has this UID,
    /// found through the owner index: O(children), not O(cache).
    pub fn children_of(&self, owner_uid: &str) -> Vec<Arc<K>> {
        self.lookup(&self.by_controller_uid, owner_uid)
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

    /// Records the resourceVersion the cache is now current with.
    pub fn set_resource_version(&self, resource_version: &str) {
        let mut slot = self.resource_version.write();
        if slot.as_deref() != Some(resource_version) {
            *slot = Some(resource_version.into());
        }
    }

    /// Marks the cache as holding a complete list; wakes every `synced()` waiter.
    pub fn mark_synced(&self) {
        self.synced.send_if_modified(|synced| !std::mem::replace(synced, true));
    }

    /// Transforms and stores one object (an added or modified one). An object with the
    /// resourceVersion already cached is dropped and reported [`Change::Unchanged`].
    pub fn apply(&self, mut obj: K) -> Change<K> {
        let key = ObjectKey::of(&obj);
        if let Some(current) = self.objects.get(&key)
            && same_version(current.value().as_ref(), &obj)
        {
            return Change::Unchanged;
        }
        (self.transform)(&mut obj);
        let new = Arc::new(obj);
        match self.objects.insert(key.clone(), Arc::clone(&new)) {
            None => {
                self.index(&key, &new);
                Change::Added(new)
            }
            Some(old) => {
                let (old_owner, new_owner) = (controller_uid(old.as_ref()), controller_uid(new.as_ref()));
                if old_owner != new_owner {
                    if let Some(uid) = old_owner {
                        remove_from(&self.by_controller_uid, uid, &key);
                    }
                    if let Some(uid) = new_owner {
                        add_to(&self.by_controller_uid, uid, &key);
                    }
                }
                Change::Updated { old, new }
            }
        }
    }

    /// Removes the object with this key; returns the state it had in the cache.
    pub fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let (key, old) = self.objects.remove(key)?;
        if let Some(ns) = key.namespace() {
            remove_from(&self.by_namespace, ns, &key);
        }
        if let Some(uid) = controller_uid(old.as_ref()) {
            remove_from(&self.by_controller_uid, uid, &key);
        }
        Some(old)
    }

    /// Removes the object a watch reported deleted; returns its final state as reported (transformed).
    pub fn delete(&self, mut obj: K) -> Arc<K> {
        self.remove(&ObjectKey::of(&obj));
        (self.transform)(&mut obj);
        Arc::new(obj)
    }

    /// Starts reconciling a full list into the cache: feed every listed object to
    /// [`Relist::apply`], then call [`Relist::finish`] to sweep out the objects that were not listed.
    /// Dropping a `Relist` unfinished (the list failed) leaves the objects applied so far in place.
    pub fn start_relist(&self) -> Relist {
        Relist { seen: HashSet::with_capacity(self.len()) }
    }

    fn lookup(&self, index: &DashMap<Arc<str>, HashSet<ObjectKey>>, value: &str) -> Vec<Arc<K>> {
        let keys: Vec<ObjectKey> = match index.get(value) {
            Some(keys) => keys.iter().cloned().collect(),
            None => return Vec::new(),
        };
        keys.iter().filter_map(|key| self.get(key)).collect()
    }

    fn index(&self, key: &ObjectKey, obj: &K) {
        if let Some(ns) = key.namespace() {
            add_to(&self.by_namespace, ns, key);
        }
        if let Some(uid) = controller_uid(obj) {
            add_to(&self.by_controller_uid, uid, key);
        }
    }
}

/// A relist in progress: remembers which keys were listed so that the rest can be swept out.
///
/// Holds only the listed keys (one `Arc` increment each), never the objects.
#[derive(Debug, Default)]
pub struct Relist {
    seen: HashSet<ObjectKey>,
}

impl Relist {
    /// Stores one listed object (see [`Cache::apply`]) and marks its key as still present.
    pub fn apply<K: Resource + Send + Sync + 'static>(&mut self, cache: &Cache<K>, obj: K) -> Change<K> {
        self.seen.insert(ObjectKey::of(&obj));
        cache.apply(obj)
    }

    /// Ends the relist: removes every cached object that was not listed and returns their last
    /// known states, records the list's resourceVersion and marks the cache synced.
    pub fn finish<K: Resource + Send + Sync + 'static>(
        self,
        cache: &Cache<K>,
        resource_version: &str,
    ) -> Vec<Arc<K>> {
        let gone: Vec<ObjectKey> = cache
            .objects
            .iter()
            .filter(|entry| !self.seen.contains(entry.key()))
            .map(|entry| entry.key().clone())
            .collect();
        let removed = gone.iter().filter_map(|key| cache.remove(key)).collect();
        cache.set_resource_version(resource_version);
        cache.mark_synced();
        removed
    }
}

/// The object's controller ownerReference (the one with `controller: true`), if any: the owner a
/// controller's `Owns` wiring wakes when this object changes.
pub fn controller_owner<K: Resource>(obj: &K) -> Option<&OwnerReference> {
    obj.meta().owner_references.as_deref()?.iter().find(|owner| owner.controller == Some(true))
}

/// The UID named by the object's controller ownerReference: the key of the owner index.
pub fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    controller_owner(obj).map(|owner| owner.uid.as_str())
}

fn same_version<K: Resource>(cached: &K, incoming: &K) -> bool {
    match (&cached.meta().resource_version, &incoming.meta().resource_version) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn add_to(index: &DashMap<Arc<str>, HashSet<ObjectKey>>, value: &str, key: &ObjectKey) {
    match index.get_mut(value) {
        Some(mut keys) => {
            keys.insert(key.clone());
        }
        None => {
            index.entry(value.into()).or_default().insert(key.clone());
        }
    }
}

fn remove_from(index: &DashMap<Arc<str>, HashSet<ObjectKey>>, value: &str, key: &ObjectKey) {
    index.remove_if_mut(value, |_, keys| {
        keys.remove(key);
        keys.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn cm(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                owner_references: owner.map(|uid| {
                    vec![
                        OwnerReference { uid: "not-the-controller".into(), ..Default::default() },
                        OwnerReference { uid: uid.into(), controller: Some(true), ..Default::default() },
                    ]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(mut objs: Vec<Arc<ConfigMap>>) -> Vec<String> {
        objs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        objs.iter().map(|o| o.metadata.name.clone().unwrap_or_default()).collect()
    }

    #[test]
    fn apply_adds_updates_and_skips_same_resource_version() {
        let cache = Cache::new();
        assert!(matches!(cache.apply(cm("a", "x", "1", None)), Change::Added(_)));
        assert!(matches!(cache.apply(cm("a", "x", "1", None)), Change::Unchanged));
        match cache.apply(cm("a", "x", "2", None)) {
            Change::Updated { old, new } => {
                assert_eq!(old.metadata.resource_version.as_deref(), Some("1"));
                assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));
            }
            other => panic!("expected an update, got {other:?}"),
        }
        let key = ObjectKey::namespaced("a", "x");
        assert_eq!(cache.get(&key).unwrap().metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_default_transform_strips_managed_fields_and_a_custom_one_runs_instead() {
        let cache = Cache::new();
        cache.apply(cm("a", "x", "1", None));
        assert!(cache.get(&ObjectKey::namespaced("a", "x")).unwrap().metadata.managed_fields.is_none());

        let keep_all: Cache<ConfigMap> = Cache::with_transform(Arc::new(|_| {}));
        keep_all.apply(cm("a", "x", "1", None));
        assert!(keep_all.get(&ObjectKey::namespaced("a", "x")).unwrap().metadata.managed_fields.is_some());
    }

    #[test]
    fn reads_share_the_stored_arc() {
        let cache = Cache::new();
        cache.apply(cm("a", "x", "1", None));
        let key = ObjectKey::namespaced("a", "x");
        assert!(Arc::ptr_eq(&cache.get(&key).unwrap(), &cache.list()[0]));
        assert!(Arc::ptr_eq(&cache.get(&key).unwrap(), &cache.list_namespace("a")[0]));
    }

    #[test]
    fn indexes_follow_add_owner_change_and_delete() {
        let cache = Cache::new();
        cache.apply(cm("a", "x", "1", Some("owner-1")));
        cache.apply(cm("a", "y", "1", Some("owner-1")));
        cache.apply(cm("b", "z", "1", None));
        assert_eq!(names(cache.list_namespace("a")), ["x", "y"]);
        assert_eq!(names(cache.list_namespace("b")), ["z"]);
        assert_eq!(names(cache.children_of("owner-1")), ["x", "y"]);
        assert!(cache.children_of("not-the-controller").is_empty());

        cache.apply(cm("a", "y", "2", Some("owner-2")));
        assert_eq!(names(cache.children_of("owner-1")), ["x"]);
        assert_eq!(names(cache.children_of("owner-2")), ["y"]);
        cache.apply(cm("a", "y", "3", None));
        assert!(cache.children_of("owner-2").is_empty());

        let removed = cache.remove(&ObjectKey::namespaced("a", "x")).unwrap();
        assert_eq!(removed.metadata.name.as_deref(), Some("x"));
        assert!(cache.children_of("owner-1").is_empty());
        assert_eq!(names(cache.list_namespace("a")), ["y"]);
        cache.remove(&ObjectKey::namespaced("a", "y"));
        assert!(cache.list_namespace("a").is_empty());
        assert!(cache.by_namespace.get("a").is_none(), "empty index entries are dropped");
        assert!(cache.remove(&ObjectKey::namespaced("a", "y")).is_none());
    }

    #[test]
    fn relist_reports_changes_sweeps_what_was_not_listed_and_marks_synced() {
        let cache = Cache::new();
        cache.apply(cm("a", "kept", "1", None));
        cache.apply(cm("a", "changed", "1", Some("o")));
        cache.apply(cm("a", "gone", "1", Some("o")));
        let kept_before = cache.get(&ObjectKey::namespaced("a", "kept")).unwrap();
        assert!(!cache.is_synced());

        let mut relist = cache.start_relist();
        assert!(matches!(relist.apply(&cache, cm("a", "kept", "1", None)), Change::Unchanged));
        assert!(matches!(relist.apply(&cache, cm("a", "changed", "5", Some("o"))), Change::Updated { .. }));
        assert!(matches!(relist.apply(&cache, cm("a", "new", "6", None)), Change::Added(_)));
        let removed = relist.finish(&cache, "7");

        assert_eq!(names(removed), ["gone"]);
        assert_eq!(names(cache.list()), ["changed", "kept", "new"]);
        assert_eq!(names(cache.children_of("o")), ["changed"]);
        assert!(Arc::ptr_eq(&kept_before, &cache.get(&ObjectKey::namespaced("a", "kept")).unwrap()));
        assert_eq!(cache.resource_version().as_deref(), Some("7"));
        assert!(cache.is_synced());
    }

    #[tokio::test]
    async fn synced_resolves_for_waiters_before_and_after_the_first_list() {
        let cache = Arc::new(Cache::<ConfigMap>::new());
        let waiter = tokio::spawn({
            let cache = Arc::clone(&cache);
            async move { cache.synced().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        cache.start_relist().finish(&cache, "1");
        waiter.await.unwrap();
        cache.synced().await;
    }
}
