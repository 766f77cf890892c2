//! The cache's write side, owned by the informer's task: [`CacheWriter::apply`] takes one
//! [`ReflectorEvent`] and returns the [`InformerEvent`]s it caused (none for an object the cache
//! already holds at that resourceVersion, or for a bookmark). No I/O; everything it does shows in
//! its result and in the [`Cache`] it writes.
//!
//! A relist is reconciled into the map in place: each listed object is compared with the cached one
//! by resourceVersion and replaced only when it changed, and at `RelistDone` the objects that were
//! not listed are swept out (reported `Deleted`). The cache therefore never holds a second full
//! copy of the objects (kube-runtime's reflector swaps in a whole new map and peaks at twice the
//! store); the relist remembers only the listed keys (one `Arc` increment each). A relist that
//! fails midway leaves the objects applied so far in place, and the next one starts afresh.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use kube::Resource;

use super::{Cache, Indexes, KeyIndex, LabelIndex, Transform, controller_uid, strip_managed_fields};
use crate::runtime::reflector::ReflectorEvent;
use crate::runtime::{Object, ObjectKey};

/// A change to the cache, as the informer's handlers see it.
#[derive(Debug)]
pub enum InformerEvent<K> {
    /// An object appeared.
    Added(Arc<K>),
    /// An object changed (its resourceVersion differs from the cached one).
    Updated {
        /// The state cached before.
        old: Arc<K>,
        /// The state cached now.
        new: Arc<K>,
    },
    /// An object is gone; this is its last known state.
    Deleted(Arc<K>),
}

impl<K: Object> InformerEvent<K> {
    /// The object as it is now (or was last, for a delete).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Added(obj) | Self::Deleted(obj) => obj,
            Self::Updated { new, .. } => new,
        }
    }

    /// The previous state, for an update.
    pub fn old(&self) -> Option<&Arc<K>> {
        match self {
            Self::Updated { old, .. } => Some(old),
            _ => None,
        }
    }

    /// False only for an update that left `metadata.generation` as it was (a status-only or
    /// metadata-only write), so a handler can skip those.
    pub fn generation_changed(&self) -> bool {
        match self {
            Self::Updated { old, new } => old.generation() != new.generation(),
            _ => true,
        }
    }
}

/// The one writer of a [`Cache`]: applies the reflector's events to it.
pub struct CacheWriter<K> {
    cache: Arc<Cache<K>>,
    transform: Transform<K>,
    /// The keys listed since `RelistStarted`, while a relist is in progress.
    relist: Option<HashSet<ObjectKey>>,
}

impl<K> fmt::Debug for CacheWriter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheWriter")
            .field("cache", &self.cache)
            .field("relisting", &self.relist.as_ref().map(HashSet::len))
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> Default for CacheWriter<K> {
    fn default() -> Self {
        Self::new(Arc::new(strip_managed_fields::<K>))
    }
}

impl<K: Object + Send + Sync + 'static> CacheWriter<K> {
    /// A writer of a new, empty cache with no index, that applies `transform` to every object
    /// before storing it (`default()` strips `managedFields`).
    pub fn new(transform: Transform<K>) -> Self {
        Self { cache: Arc::new(Cache::empty(Indexes::default())), transform, relist: None }
    }

    /// A writer that stores objects exactly as received: for a cached form that is already what
    /// the cache should keep once decoded.
    pub fn as_received() -> Self {
        Self::new(Arc::new(|_: &mut K| {}))
    }

    /// This writer, keeping its cache indexed by namespace too, for [`Cache::list_namespace`].
    /// Call it on a new writer, before its cache is handed out (as every `with_*_index`): the
    /// cache is made anew.
    pub fn with_namespace_index(self) -> Self {
        let indexes = Indexes { namespace: true, ..self.cache.indexes() };
        self.indexed(indexes)
    }

    /// This writer, keeping its cache indexed by the UID of each object's controller owner too,
    /// for [`Cache::children_of`].
    pub fn with_owner_index(self) -> Self {
        let indexes = Indexes { controller_owner: true, ..self.cache.indexes() };
        self.indexed(indexes)
    }

    /// This writer, keeping its cache indexed by the value of `label` too, for
    /// [`Cache::list_labelled`].
    pub fn with_label_index(self, label: &'static str) -> Self {
        let indexes = Indexes { label: Some(label), ..self.cache.indexes() };
        self.indexed(indexes)
    }

    fn indexed(self, indexes: Indexes) -> Self {
        debug_assert!(self.cache.is_empty() && Arc::strong_count(&self.cache) == 1, "a new writer's cache");
        Self { cache: Arc::new(Cache::empty(indexes)), ..self }
    }

    /// The cache this writer keeps: clone the `Arc` to hand out read access.
    pub fn cache(&self) -> &Arc<Cache<K>> {
        &self.cache
    }

    /// Applies one reflector event; returns what it changed, in order.
    pub fn apply(&mut self, event: ReflectorEvent<K>) -> Vec<InformerEvent<K>> {
        match event {
            ReflectorEvent::RelistStarted => {
                self.relist = Some(HashSet::with_capacity(self.cache.len()));
                Vec::new()
            }
            ReflectorEvent::Listed(obj) => {
                self.relist.get_or_insert_with(HashSet::new).insert(ObjectKey::of(&obj));
                self.store(obj).into_iter().collect()
            }
            ReflectorEvent::RelistDone { resource_version } => {
                let removed = match self.relist.take() {
                    Some(seen) => self.sweep(&seen),
                    None => Vec::new(),
                };
                self.set_resource_version(&resource_version);
                self.cache.synced.send_if_modified(|synced| !std::mem::replace(synced, true));
                removed
            }
            ReflectorEvent::Applied(obj) => {
                let resource_version = obj.resource_version().map(str::to_owned);
                let change = self.store(obj);
                if let Some(rv) = resource_version {
                    self.set_resource_version(&rv);
                }
                change.into_iter().collect()
            }
            ReflectorEvent::Deleted(mut obj) => {
                let resource_version = obj.resource_version().map(str::to_owned);
                self.remove(&ObjectKey::of(&obj));
                (self.transform)(&mut obj);
                if let Some(rv) = resource_version {
                    self.set_resource_version(&rv);
                }
                vec![InformerEvent::Deleted(Arc::new(obj))]
            }
            ReflectorEvent::Bookmark { resource_version } => {
                self.set_resource_version(&resource_version);
                Vec::new()
            }
        }
    }

    /// Transforms and stores one object (an added or modified one). An object with the
    /// resourceVersion already cached is dropped and causes no event.
    fn store(&self, mut obj: K) -> Option<InformerEvent<K>> {
        let cache = &self.cache;
        let key = ObjectKey::of(&obj);
        if let Some(current) = cache.objects.get(&key)
            && same_version(current.value().as_ref(), &obj)
        {
            return None;
        }
        (self.transform)(&mut obj);
        let new = Arc::new(obj);
        Some(match cache.objects.insert(key.clone(), Arc::clone(&new)) {
            None => {
                self.reindex(&key, None, Some(new.as_ref()));
                InformerEvent::Added(new)
            }
            Some(old) => {
                self.reindex(&key, Some(old.as_ref()), Some(new.as_ref()));
                InformerEvent::Updated { old, new }
            }
        })
    }

    /// Removes the object with this key; returns the state it had in the cache.
    fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let (key, old) = self.cache.objects.remove(key)?;
        self.reindex(&key, Some(old.as_ref()), None);
        Some(old)
    }

    /// Moves `key` in every index the cache keeps from where `old` filed it to where `new` files it
    /// (`None`: the object was not there before, or is gone now). An index whose entry did not
    /// change is not touched, so an update that keeps its owner and label costs no index write.
    fn reindex(&self, key: &ObjectKey, old: Option<&K>, new: Option<&K>) {
        let cache = &self.cache;
        if let Some(index) = &cache.by_namespace {
            let namespace = key.namespace();
            refile(index, old.and(namespace), new.and(namespace), key);
        }
        if let Some(index) = &cache.by_controller_uid {
            refile(index, old.and_then(controller_uid), new.and_then(controller_uid), key);
        }
        if let Some(index) = &cache.by_label {
            let place_of = |obj| index.place_of(obj);
            index.refile(old.and_then(place_of), new.and_then(place_of), key);
        }
    }

    /// Removes every cached object whose key is not in `seen`; reports each as deleted.
    fn sweep(&self, seen: &HashSet<ObjectKey>) -> Vec<InformerEvent<K>> {
        let gone: Vec<ObjectKey> = self
            .cache
            .objects
            .iter()
            .filter(|entry| !seen.contains(entry.key()))
            .map(|entry| entry.key().clone())
            .collect();
        gone.iter().filter_map(|key| self.remove(key)).map(InformerEvent::Deleted).collect()
    }

    /// Records the resourceVersion the cache is now current with.
    fn set_resource_version(&self, resource_version: &str) {
        let mut slot = self.cache.resource_version.write();
        if slot.as_deref() != Some(resource_version) {
            *slot = Some(resource_version.into());
        }
    }
}

fn same_version<K: Object>(cached: &K, incoming: &K) -> bool {
    match (cached.resource_version(), incoming.resource_version()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The label index's write side (its read side is in the parent module).
impl LabelIndex {
    /// [`refile`] for places (see [`LabelIndex::place_of`]): the entries are built only when the
    /// places differ.
    fn refile(&self, before: Option<(&str, &str)>, after: Option<(&str, &str)>, key: &ObjectKey) {
        if before != after {
            let entry = |(namespace, value)| Self::entry(namespace, value);
            refile(&self.keys, before.map(entry).as_deref(), after.map(entry).as_deref(), key);
        }
    }
}

/// Moves `key` in `index` from the entry `before` to the entry `after` (either absent: an add or
/// a removal); nothing when they are the same.
fn refile(index: &KeyIndex, before: Option<&str>, after: Option<&str>, key: &ObjectKey) {
    if before == after {
        return;
    }
    if let Some(value) = before {
        remove_from(index, value, key);
    }
    if let Some(value) = after {
        add_to(index, value, key);
    }
}

fn add_to(index: &KeyIndex, value: &str, key: &ObjectKey) {
    match index.get_mut(value) {
        Some(mut keys) => {
            keys.insert(key.clone());
        }
        None => {
            index.entry(value.into()).or_default().insert(key.clone());
        }
    }
}

fn remove_from(index: &KeyIndex, value: &str, key: &ObjectKey) {
    index.remove_if_mut(value, |_, keys| {
        keys.remove(key);
        keys.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference};

    #[test]
    fn a_kept_object_holds_no_spare_room_in_its_metadata_lists() {
        // As a watch line decodes it: a list of unknown length, grown from empty.
        let served = br#"{"metadata":{"name":"a","namespace":"n","finalizers":["x"],
            "ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u","controller":true}]}}"#;
        let decoded: ConfigMap = serde_json::from_slice(served).unwrap();
        let owners = |cm: &ConfigMap| cm.metadata.owner_references.as_ref().map(|o| (o.len(), o.capacity()));
        assert!(owners(&decoded).is_some_and(|(len, capacity)| capacity > len), "the decoder leaves room");
        let mut writer = CacheWriter::<ConfigMap>::default();
        writer.apply(ReflectorEvent::Applied(decoded));
        let kept = writer.cache().get(&ObjectKey::namespaced("n", "a")).unwrap();
        assert_eq!(owners(&kept), Some((1, 1)));
        assert_eq!(kept.metadata.finalizers.as_ref().map(Vec::capacity), Some(1));
    }

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

    /// Each event as `KIND name rv` (`UPDATED name old->new`).
    fn describe(events: &[InformerEvent<ConfigMap>]) -> Vec<String> {
        let rv = |o: &ConfigMap| o.metadata.resource_version.clone().unwrap_or_default();
        let name = |o: &ConfigMap| o.metadata.name.clone().unwrap_or_default();
        events
            .iter()
            .map(|event| match event {
                InformerEvent::Added(o) => format!("ADDED {} {}", name(o), rv(o)),
                InformerEvent::Updated { old, new } => {
                    format!("UPDATED {} {}->{}", name(new), rv(old), rv(new))
                }
                InformerEvent::Deleted(o) => format!("DELETED {} {}", name(o), rv(o)),
            })
            .collect()
    }

    fn apply(writer: &mut CacheWriter<ConfigMap>, event: ReflectorEvent<ConfigMap>) -> Vec<String> {
        describe(&writer.apply(event))
    }

    #[test]
    fn applied_objects_are_added_updated_or_skipped_at_the_same_resource_version() {
        let mut writer = CacheWriter::default();
        assert_eq!(apply(&mut writer, ReflectorEvent::Applied(cm("a", "x", "1", None))), ["ADDED x 1"]);
        assert!(apply(&mut writer, ReflectorEvent::Applied(cm("a", "x", "1", None))).is_empty());
        assert_eq!(apply(&mut writer, ReflectorEvent::Applied(cm("a", "x", "2", None))), ["UPDATED x 1->2"]);
        let cache = writer.cache();
        let key = ObjectKey::namespaced("a", "x");
        assert_eq!(cache.get(&key).unwrap().metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.resource_version().as_deref(), Some("2"));
    }

    #[test]
    fn deletes_and_bookmarks_move_the_resource_version_and_only_deletes_are_events() {
        let mut writer = CacheWriter::default();
        apply(&mut writer, ReflectorEvent::Applied(cm("a", "x", "1", None)));
        assert!(apply(&mut writer, ReflectorEvent::Bookmark { resource_version: "5".into() }).is_empty());
        assert_eq!(writer.cache().resource_version().as_deref(), Some("5"));
        assert_eq!(apply(&mut writer, ReflectorEvent::Deleted(cm("a", "x", "6", None))), ["DELETED x 6"]);
        assert!(writer.cache().is_empty());
        assert_eq!(writer.cache().resource_version().as_deref(), Some("6"));
        // A delete of an object never seen is still told (its final state is all there is).
        assert_eq!(apply(&mut writer, ReflectorEvent::Deleted(cm("a", "y", "7", None))), ["DELETED y 7"]);
    }

    #[test]
    fn the_default_transform_strips_managed_fields_and_a_custom_one_runs_instead() {
        let key = ObjectKey::namespaced("a", "x");
        let mut writer = CacheWriter::default();
        writer.apply(ReflectorEvent::Applied(cm("a", "x", "1", None)));
        assert!(writer.cache().get(&key).unwrap().metadata.managed_fields.is_none());
        let deleted = writer.apply(ReflectorEvent::Deleted(cm("a", "x", "2", None)));
        assert!(deleted[0].object().metadata.managed_fields.is_none(), "a final state is transformed too");

        let mut keep_all: CacheWriter<ConfigMap> = CacheWriter::new(Arc::new(|_| {}));
        keep_all.apply(ReflectorEvent::Applied(cm("a", "x", "1", None)));
        assert!(keep_all.cache().get(&key).unwrap().metadata.managed_fields.is_some());
    }

    #[test]
    fn reads_and_events_share_the_stored_arc() {
        let mut writer = CacheWriter::default();
        let events = writer.apply(ReflectorEvent::Applied(cm("a", "x", "1", None)));
        let cache = writer.cache();
        let key = ObjectKey::namespaced("a", "x");
        assert!(Arc::ptr_eq(&cache.get(&key).unwrap(), events[0].object()));
        assert!(Arc::ptr_eq(&cache.get(&key).unwrap(), &cache.list()[0]));
        assert!(Arc::ptr_eq(&cache.get(&key).unwrap(), &cache.list_namespace("a")[0]));
    }

    #[test]
    fn indexes_follow_add_owner_change_and_delete_and_a_scan_gives_the_same_answers() {
        let mut indexed = CacheWriter::default().with_namespace_index().with_owner_index();
        let mut scanned = CacheWriter::default();
        assert_eq!(scanned.cache().indexes(), Indexes::default(), "no index unless asked for");
        assert_eq!(
            indexed.cache().indexes(),
            Indexes { namespace: true, controller_owner: true, label: None },
            "each asked-for index kept"
        );
        let (by_index, by_scan) = (Arc::clone(indexed.cache()), Arc::clone(scanned.cache()));
        let mut apply_both = |event: fn() -> ReflectorEvent<ConfigMap>| {
            indexed.apply(event());
            scanned.apply(event());
        };
        let check = |namespaces: [(&str, &[&str]); 2], owners: [(&str, &[&str]); 3]| {
            for cache in [&by_index, &by_scan] {
                for (ns, want) in namespaces {
                    assert_eq!(names(cache.list_namespace(ns)), want, "namespace {ns}");
                }
                for (uid, want) in owners {
                    assert_eq!(names(cache.children_of(uid)), want, "children of {uid}");
                }
            }
        };
        apply_both(|| ReflectorEvent::Applied(cm("a", "x", "1", Some("owner-1"))));
        apply_both(|| ReflectorEvent::Applied(cm("a", "y", "1", Some("owner-1"))));
        apply_both(|| ReflectorEvent::Applied(cm("b", "z", "1", None)));
        check(
            [("a", &["x", "y"]), ("b", &["z"])],
            [("owner-1", &["x", "y"]), ("owner-2", &[]), ("not-the-controller", &[])],
        );

        apply_both(|| ReflectorEvent::Applied(cm("a", "y", "2", Some("owner-2"))));
        check(
            [("a", &["x", "y"]), ("b", &["z"])],
            [("owner-1", &["x"]), ("owner-2", &["y"]), ("not-the-controller", &[])],
        );
        apply_both(|| ReflectorEvent::Applied(cm("a", "y", "3", None)));
        check(
            [("a", &["x", "y"]), ("b", &["z"])],
            [("owner-1", &["x"]), ("owner-2", &[]), ("not-the-controller", &[])],
        );

        apply_both(|| ReflectorEvent::Deleted(cm("a", "x", "4", Some("owner-1"))));
        check(
            [("a", &["y"]), ("b", &["z"])],
            [("owner-1", &[]), ("owner-2", &[]), ("not-the-controller", &[])],
        );
        apply_both(|| ReflectorEvent::Deleted(cm("a", "y", "5", None)));
        check([("a", &[]), ("b", &["z"])], [("owner-1", &[]), ("owner-2", &[]), ("not-the-controller", &[])]);
        let index = by_index.by_namespace.as_ref().unwrap();
        assert!(index.get("a").is_none(), "empty index entries are dropped");
        assert!(by_index.by_controller_uid.as_ref().unwrap().is_empty());
    }

    fn labelled(ns: &str, name: &str, rv: &str, instance: Option<&str>) -> ConfigMap {
        let mut obj = cm(ns, name, rv, None);
        obj.metadata.labels = instance.map(|value| {
            [("instance".to_owned(), value.to_owned()), ("app".to_owned(), "db".to_owned())].into()
        });
        obj
    }

    #[test]
    fn the_label_index_follows_add_relabel_delete_and_relist_and_matches_a_namespace_scan() {
        let mut writer = CacheWriter::default().with_label_index("instance");
        let mut plain = CacheWriter::default();
        let (indexed, scanned) = (Arc::clone(writer.cache()), Arc::clone(plain.cache()));
        let mut both = |event: fn() -> ReflectorEvent<ConfigMap>| {
            writer.apply(event());
            plain.apply(event());
        };
        both(|| ReflectorEvent::Applied(labelled("a", "pg-0", "1", Some("pg"))));
        both(|| ReflectorEvent::Applied(labelled("a", "pg-1", "1", Some("pg"))));
        both(|| ReflectorEvent::Applied(labelled("a", "other-0", "1", Some("other"))));
        both(|| ReflectorEvent::Applied(labelled("b", "pg-0", "1", Some("pg"))));
        both(|| ReflectorEvent::Applied(labelled("a", "bare", "1", None)));
        let check = |ns: &str, value: &str, want: &[&str]| {
            assert_eq!(names(indexed.list_labelled(ns, "instance", value)), want, "indexed {ns}/{value}");
            assert_eq!(names(scanned.list_labelled(ns, "instance", value)), want, "scanned {ns}/{value}");
        };
        check("a", "pg", &["pg-0", "pg-1"]);
        check("b", "pg", &["pg-0"]);
        check("a", "other", &["other-0"]);
        // Another label than the indexed one is answered by a scan.
        assert_eq!(names(indexed.list_labelled("a", "app", "db")), ["other-0", "pg-0", "pg-1"]);
        assert!(indexed.list_labelled("a", "app", "pg").is_empty());

        both(|| ReflectorEvent::Applied(labelled("a", "pg-1", "2", Some("other"))));
        check("a", "pg", &["pg-0"]);
        check("a", "other", &["other-0", "pg-1"]);
        both(|| ReflectorEvent::Applied(labelled("a", "pg-0", "2", None)));
        check("a", "pg", &[]);
        both(|| ReflectorEvent::Applied(labelled("a", "bare", "2", Some("pg"))));
        check("a", "pg", &["bare"]);
        both(|| ReflectorEvent::Deleted(labelled("a", "bare", "3", Some("pg"))));
        check("a", "pg", &[]);

        both(|| ReflectorEvent::RelistStarted);
        both(|| ReflectorEvent::Listed(labelled("a", "pg-1", "2", Some("other"))));
        both(|| ReflectorEvent::RelistDone { resource_version: "9".into() });
        check("a", "other", &["pg-1"]);
        check("b", "pg", &[]);
        let index = indexed.by_label.as_ref().unwrap();
        assert_eq!(index.keys.len(), 1, "empty index entries are dropped");
    }

    #[test]
    fn a_relist_reports_changes_sweeps_what_was_not_listed_and_marks_synced() {
        let mut writer = CacheWriter::default();
        for obj in
            [cm("a", "kept", "1", None), cm("a", "changed", "1", Some("o")), cm("a", "gone", "1", Some("o"))]
        {
            writer.apply(ReflectorEvent::Applied(obj));
        }
        let cache = Arc::clone(writer.cache());
        let kept_before = cache.get(&ObjectKey::namespaced("a", "kept")).unwrap();
        assert!(!cache.is_synced());

        assert!(apply(&mut writer, ReflectorEvent::RelistStarted).is_empty());
        assert!(apply(&mut writer, ReflectorEvent::Listed(cm("a", "kept", "1", None))).is_empty());
        assert_eq!(
            apply(&mut writer, ReflectorEvent::Listed(cm("a", "changed", "5", Some("o")))),
            ["UPDATED changed 1->5"]
        );
        assert_eq!(apply(&mut writer, ReflectorEvent::Listed(cm("a", "new", "6", None))), ["ADDED new 6"]);
        assert!(!cache.is_synced(), "synced only once the list is complete");
        let done = apply(&mut writer, ReflectorEvent::RelistDone { resource_version: "7".into() });

        assert_eq!(done, ["DELETED gone 1"]);
        assert_eq!(names(cache.list()), ["changed", "kept", "new"]);
        assert_eq!(names(cache.children_of("o")), ["changed"]);
        assert!(Arc::ptr_eq(&kept_before, &cache.get(&ObjectKey::namespaced("a", "kept")).unwrap()));
        assert_eq!(cache.resource_version().as_deref(), Some("7"));
        assert!(cache.is_synced());
    }

    #[test]
    fn a_failed_relist_leaves_what_it_applied_and_the_next_one_starts_afresh() {
        let mut writer = CacheWriter::default();
        writer.apply(ReflectorEvent::Applied(cm("a", "old", "1", None)));
        writer.apply(ReflectorEvent::RelistStarted);
        writer.apply(ReflectorEvent::Listed(cm("a", "first", "2", None)));
        // The list broke off; a new one starts and lists only `old`.
        writer.apply(ReflectorEvent::RelistStarted);
        writer.apply(ReflectorEvent::Listed(cm("a", "old", "1", None)));
        let done = apply(&mut writer, ReflectorEvent::RelistDone { resource_version: "3".into() });
        assert_eq!(done, ["DELETED first 2"]);
        assert_eq!(names(writer.cache().list()), ["old"]);
    }

    #[tokio::test]
    async fn synced_resolves_for_waiters_before_and_after_the_first_list() {
        let mut writer = CacheWriter::<ConfigMap>::default();
        let waiter = tokio::spawn({
            let cache = Arc::clone(writer.cache());
            async move { cache.synced().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        writer.apply(ReflectorEvent::RelistStarted);
        writer.apply(ReflectorEvent::RelistDone { resource_version: "1".into() });
        waiter.await.unwrap();
        writer.cache().synced().await;
    }
}
