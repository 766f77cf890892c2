//! Garbage collection as the kube-controller-manager does it, in the background: dependents
//! (objects whose `ownerReferences` name a deleted uid) are deleted or orphaned, foreground
//! deletions finish when their dependents are gone, and terminating namespaces are emptied.

use serde_json::Value;

use crate::sim::ops::{self, DeleteOptions};
use crate::sim::state::State;
use crate::sim::store::object_name;

/// Work queued by deletions for the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcWork {
    /// The object with this uid is gone: delete its dependents.
    Dependents(String),
    /// The object with this uid was deleted with `Orphan`: strip the ownerReference from dependents.
    Orphan(String),
    /// The object with this uid waits (foregroundDeletion) for its dependents to go.
    Foreground(String),
    /// The namespace with this name is terminating.
    Namespace(String),
}

/// A stored object located by storage key, namespace and name.
struct Located {
    key: String,
    namespace: String,
    name: String,
    obj: Value,
}

fn owner_uids(obj: &Value) -> Vec<&str> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str()).collect())
        .unwrap_or_default()
}

fn dependents_of(state: &State, uid: &str) -> Vec<Located> {
    state
        .store
        .dependents(uid)
        .map(|(key, obj)| {
            let (namespace, name) = object_name(obj);
            Located { key: key.to_string(), namespace, name, obj: obj.clone() }
        })
        .collect()
}

fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

fn delete_located(state: &mut State, l: &Located) {
    if is_deleting(&l.obj) {
        return;
    }
    if let Some(kind) = state.registry.by_storage_key(&l.key) {
        // NotFound (already gone) is fine for the collector.
        let _ = ops::delete(state, &kind, Some(&l.namespace), &l.name, &DeleteOptions::default());
    }
}

/// Rewrites a dependent without the ownerReference to `uid`.
fn strip_owner(state: &mut State, l: &Located, uid: &str) {
    let mut obj = l.obj.clone();
    if let Some(refs) = obj["metadata"]["ownerReferences"].as_array_mut() {
        refs.retain(|r| r["uid"] != uid);
        if refs.is_empty() {
            // Invariant: `metadata.ownerReferences` was found, so `metadata` is an object.
            obj["metadata"].as_object_mut().expect("metadata is an object").remove("ownerReferences");
        }
    }
    state.store.put(&l.key, obj);
}

/// Removes one finalizer from a stored object; the object goes if it was the last.
fn drop_finalizer(state: &mut State, l: &Located, finalizer: &str) {
    let Some(kind) = state.registry.by_storage_key(&l.key) else { return };
    let mut obj = l.obj.clone();
    if let Some(f) = obj["metadata"]["finalizers"].as_array_mut() {
        f.retain(|x| x != finalizer);
        if f.is_empty() {
            // Invariant: `metadata.finalizers` was found, so `metadata` is an object.
            obj["metadata"].as_object_mut().expect("metadata is an object").remove("finalizers");
        }
    }
    let _ = ops::update(
        state,
        &kind,
        Some(&l.namespace),
        &l.name,
        obj,
        None,
        &ops::WriteContext::controller("kube-controller-manager"),
    );
}

/// Does all queued collection work and finishes foreground deletions and namespaces that are
/// ready; returns whether there was anything to do.
pub fn step(state: &mut State) -> bool {
    let work = std::mem::take(&mut state.gc_queue);
    if work.is_empty() {
        return false;
    }
    for item in &work {
        match item {
            GcWork::Dependents(uid) if state.store.is_owner(uid) => {
                for dep in dependents_of(state, uid) {
                    let other_owner_alive =
                        owner_uids(&dep.obj).iter().any(|u| *u != uid && state.store.is_live(u));
                    if other_owner_alive {
                        strip_owner(state, &dep, uid);
                    } else {
                        delete_located(state, &dep);
                    }
                }
            }
            GcWork::Dependents(_) => {}
            GcWork::Orphan(uid) => {
                for dep in dependents_of(state, uid) {
                    strip_owner(state, &dep, uid);
                }
            }
            GcWork::Foreground(_) | GcWork::Namespace(_) => {}
        }
    }
    let waits = work.iter().any(|w| matches!(w, GcWork::Foreground(_) | GcWork::Namespace(_)));
    if waits || state.gc_waiting {
        // Scanned only while something waits: every deletion would otherwise cost a full scan.
        let foreground_left = finish_foreground(state);
        let namespaces_left = finish_namespaces(state);
        state.gc_waiting = foreground_left || namespaces_left;
    }
    true
}

/// Finishes the foreground deletions whose dependents are gone; returns whether some still wait.
fn finish_foreground(state: &mut State) -> bool {
    let waiting: Vec<Located> = state
        .store
        .all()
        .filter(|(_, o)| {
            is_deleting(o)
                && o["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "foregroundDeletion"))
        })
        .map(|(key, obj)| {
            let (namespace, name) = object_name(obj);
            Located { key: key.to_string(), namespace, name, obj: obj.clone() }
        })
        .collect();
    let mut still_waiting = false;
    for owner in waiting {
        let uid = owner.obj["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let deps = dependents_of(state, &uid);
        for dep in &deps {
            delete_located(state, dep);
        }
        if dependents_of(state, &uid).is_empty() {
            drop_finalizer(state, &owner, "foregroundDeletion");
        } else {
            still_waiting = true;
        }
    }
    still_waiting
}

/// Empties terminating namespaces and removes the empty ones; returns whether some still wait.
fn finish_namespaces(state: &mut State) -> bool {
    let terminating: Vec<String> = state
        .store
        .list("namespaces", None)
        .filter(|o| is_deleting(o))
        .filter_map(|o| o["metadata"]["name"].as_str().map(String::from))
        .collect();
    let mut still_waiting = false;
    for ns in terminating {
        let contents: Vec<Located> = state
            .store
            .all()
            .filter(|(_, o)| o["metadata"]["namespace"] == ns.as_str())
            .map(|(key, obj)| {
                let (namespace, name) = object_name(obj);
                Located { key: key.to_string(), namespace, name, obj: obj.clone() }
            })
            .collect();
        for l in &contents {
            delete_located(state, l);
        }
        let empty = state.store.all().all(|(_, o)| o["metadata"]["namespace"] != ns.as_str());
        if empty {
            state.store.remove("namespaces", "", &ns);
        } else {
            still_waiting = true;
        }
    }
    still_waiting
}
