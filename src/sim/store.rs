//! The object store: every object as JSON under its resource's storage key, one global
//! resourceVersion counter, and an event for every change handed to the watch hub.
//!
//! Every lookup the server and its simulated controllers make per change is independent of the
//! total object count: objects by name, a namespace's objects by range (they are ordered by
//! namespace then name), and an object's dependents by owner uid (an index kept on each write).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::sim::watch::{Event, EventType, WatchHub};

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjectName = (String, String);

/// The objects of every resource, the resourceVersion counter and the watch hub fed by writes.
#[derive(Debug)]
pub struct Store {
    objects: HashMap<String, BTreeMap<ObjectName, Value>>,
    resource_version: u64,
    /// The uids of stored objects, so the garbage collector can tell a live owner in O(1).
    uids: HashSet<String>,
    /// The stored objects naming each uid in their ownerReferences: (storage key, namespace, name).
    dependents: HashMap<String, BTreeSet<(String, ObjectName)>>,
    /// Watch history and live subscribers.
    pub hub: WatchHub,
}

impl Store {
    /// An empty store whose watch hub keeps `history_limit` events.
    pub fn new(history_limit: usize) -> Self {
        Self {
            objects: HashMap::new(),
            resource_version: 1,
            uids: HashSet::new(),
            dependents: HashMap::new(),
            hub: WatchHub::new(history_limit, 1),
        }
    }

    /// The resourceVersion of the latest write.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// The stored object, if any.
    pub fn get(&self, key: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(key)?.get(&(namespace.to_string(), name.to_string()))
    }

    /// Whether an object with this uid is stored.
    pub fn is_live(&self, uid: &str) -> bool {
        self.uids.contains(uid)
    }

    /// Whether any stored object names this uid as an owner.
    pub fn is_owner(&self, uid: &str) -> bool {
        self.dependents.contains_key(uid)
    }

    /// The stored objects naming `uid` in their ownerReferences, with their storage keys.
    pub fn dependents(&self, uid: &str) -> impl Iterator<Item = (&str, &Value)> {
        self.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|(key, name)| Some((key.as_str(), self.objects.get(key)?.get(name)?)))
    }

    fn index(&mut self, key: &str, obj: &Value, add: bool) {
        if let Some(uid) = obj["metadata"]["uid"].as_str() {
            if add {
                self.uids.insert(uid.to_string());
            } else {
                self.uids.remove(uid);
            }
        }
        for owner in obj["metadata"]["ownerReferences"].as_array().into_iter().flatten() {
            let Some(uid) = owner["uid"].as_str() else { continue };
            let entry = (key.to_string(), object_name(obj));
            if add {
                self.dependents.entry(uid.to_string()).or_default().insert(entry);
            } else if let Some(set) = self.dependents.get_mut(uid) {
                set.remove(&entry);
                if set.is_empty() {
                    self.dependents.remove(uid);
                }
            }
        }
    }

    /// The objects of one resource (in one namespace, or all), ordered by namespace then name.
    pub fn list<'a>(&'a self, key: &str, namespace: Option<&'a str>) -> impl Iterator<Item = &'a Value> + 'a {
        let objects = self.objects.get(key);
        let all = objects.filter(|_| namespace.is_none()).into_iter().flat_map(|m| m.values());
        let one = namespace.and_then(|ns| Some((ns, objects?))).into_iter().flat_map(|(ns, m)| {
            m.range((ns.to_string(), String::new())..).take_while(move |((n, _), _)| n == ns).map(|(_, v)| v)
        });
        all.chain(one)
    }

    /// Every stored object with its storage key (for the garbage collector's scans).
    pub fn all(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.objects.iter().flat_map(|(k, m)| m.values().map(move |v| (k.as_str(), v)))
    }

    /// Stores `obj` (added or replacing), stamping the next resourceVersion, and records the event.
    pub fn put(&mut self, key: &str, mut obj: Value) -> Value {
        let name = object_name(&obj);
        self.resource_version += 1;
        obj["metadata"]["resourceVersion"] = Value::String(self.resource_version.to_string());
        let old = self.objects.entry(key.to_string()).or_default().insert(name.clone(), obj.clone());
        if let Some(o) = &old {
            self.index(key, o, false);
        }
        self.index(key, &obj, true);
        let event_type = if old.is_some() { EventType::Modified } else { EventType::Added };
        self.record(key, name.0, event_type, obj.clone(), old);
        obj
    }

    /// Removes an object, stamping the deletion's resourceVersion on the final state it returns.
    pub fn remove(&mut self, key: &str, namespace: &str, name: &str) -> Option<Value> {
        let mut obj = self.objects.get_mut(key)?.remove(&(namespace.to_string(), name.to_string()))?;
        let old = obj.clone();
        self.index(key, &old, false);
        self.resource_version += 1;
        obj["metadata"]["resourceVersion"] = Value::String(self.resource_version.to_string());
        self.record(key, namespace.to_string(), EventType::Deleted, obj.clone(), Some(old));
        Some(obj)
    }

    fn record(
        &mut self,
        key: &str,
        namespace: String,
        event_type: EventType,
        object: Value,
        old: Option<Value>,
    ) {
        self.hub.publish(Arc::new(Event {
            resource_version: self.resource_version,
            key: key.to_string(),
            namespace,
            event_type,
            object,
            old,
        }));
    }
}

/// `(namespace, name)` of an object's metadata.
pub fn object_name(obj: &Value) -> ObjectName {
    let meta = &obj["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_write_takes_the_next_global_resource_version() {
        let mut s = Store::new(10);
        let a = s.put("pods", json!({"metadata": {"namespace": "ns", "name": "a"}}));
        let b = s.put("configmaps", json!({"metadata": {"namespace": "ns", "name": "b"}}));
        let ra: u64 = a["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        let rb: u64 = b["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert_eq!(rb, ra + 1);
        let gone = s.remove("pods", "ns", "a").unwrap();
        assert_eq!(gone["metadata"]["resourceVersion"], (rb + 1).to_string());
        assert!(s.get("pods", "ns", "a").is_none());
        assert_eq!(s.list("configmaps", Some("ns")).count(), 1);
        assert_eq!(s.list("configmaps", Some("other")).count(), 0);
        s.put("configmaps", json!({"metadata": {"namespace": "a", "name": "c"}}));
        s.put("configmaps", json!({"metadata": {"namespace": "nt", "name": "d"}}));
        let names = |ns| s.list("configmaps", ns).map(|o| object_name(o).1).collect::<Vec<_>>();
        assert_eq!(names(Some("ns")), ["b"], "a namespace's range holds its objects only");
        assert_eq!(names(None), ["c", "b", "d"]);
    }

    #[test]
    fn owner_and_uid_indexes_follow_writes() {
        let mut s = Store::new(10);
        s.put("pods", json!({"metadata": {"namespace": "ns", "name": "p", "uid": "p1", "ownerReferences": [{"uid": "o1"}]}}));
        assert!(s.is_live("p1") && s.is_owner("o1"));
        let dependents = s.dependents("o1").map(|(k, o)| (k, object_name(o).1)).collect::<Vec<_>>();
        assert_eq!(dependents, [("pods", "p".to_string())]);
        s.put("pods", json!({"metadata": {"namespace": "ns", "name": "p", "uid": "p1"}}));
        assert!(!s.is_owner("o1"), "the reference was dropped by the update");
        assert_eq!(s.dependents("o1").count(), 0);
        s.remove("pods", "ns", "p");
        assert!(!s.is_live("p1"));
    }
}
