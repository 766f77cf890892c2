//! The server's mutable state behind one lock: served kinds, stored objects, pending GC work.

use std::collections::HashSet;

use crate::sim::gc::GcWork;
use crate::sim::resources::Registry;
use crate::sim::store::Store;

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
    /// Whether a deleted pod keeps a deletionTimestamp until its kubelet stopped it (the process
    /// kubelet removes it then) instead of going at once.
    pub graceful_pod_deletion: bool,
}

impl State {
    /// Built-in kinds, no objects, a watch history of `history_limit` events.
    pub fn new(history_limit: usize) -> Self {
        Self {
            registry: Registry::with_built_ins(),
            store: Store::new(history_limit),
            gc_queue: Vec::new(),
            gc_waiting: false,
            removed_uids: HashSet::new(),
            graceful_pod_deletion: false,
        }
    }
}
