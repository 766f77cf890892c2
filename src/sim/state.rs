//! The server's mutable state behind one lock: served kinds, stored objects, pending GC work.

use std::collections::HashSet;

use crate::sim::gc::GcWork;
use crate::sim::request_log::RequestRecord;
use crate::sim::resources::Registry;
use crate::sim::store::Store;
use crate::sim::version::KubernetesVersion;

/// Everything a request may read or change, guarded together so each request is atomic.
#[derive(Debug)]
pub struct State {
    /// The served kinds.
    pub registry: Registry,
    /// The objects and the watch hub.
    pub store: Store,
    /// Work for the garbage collector, drained by its task.
    pub gc_queue: Vec<GcWork>,
    /// Whether some foreground deletion or terminating namespace waits for its dependents.
    pub gc_waiting: bool,
    /// The uids of every object removed so far, so that a dependent created later with an
    /// ownerReference to one of them is collected (uids that never existed are left alone).
    pub removed_uids: HashSet<String>,
    /// The Kubernetes version the server behaves as.
    pub version: KubernetesVersion,
    /// Whether a deleted pod keeps a deletionTimestamp until its kubelet stopped it (the process
    /// kubelet removes it then) instead of going at once.
    pub graceful_pod_deletion: bool,
    /// Whether the `OwnerReferencesPermissionEnforcement` admission plugin is on.
    pub owner_references_permission_enforcement: bool,
    /// Every authorization an admission plugin asked for, oldest first.
    pub authorizations: Vec<RequestRecord>,
    /// The `DefaultTolerationSeconds` admission plugin's seconds, given to every pod created.
    pub default_toleration_seconds: u64,
}

impl State {
    /// Built-in kinds of `version`, no objects, a watch history of `history_limit` events.
    pub fn new(history_limit: usize, version: KubernetesVersion) -> Self {
        Self {
            registry: Registry::with_built_ins(),
            store: Store::new(history_limit),
            gc_queue: Vec::new(),
            gc_waiting: false,
            removed_uids: HashSet::new(),
            version,
            graceful_pod_deletion: false,
            owner_references_permission_enforcement: false,
            authorizations: Vec::new(),
            default_toleration_seconds: 300,
        }
    }
}
