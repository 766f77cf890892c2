//! A simulated kubelet: every Pending pod becomes Running and Ready `pod_ready_delay` after the
//! kubelet first sees it.
//!
//! The kubelet learns of pods from the change events it is shown ([`Kubelet::observe`]) or from
//! one scan of the store ([`Kubelet::resync`], at start), and keeps the pending ones in start
//! order, so a pass costs the pods it starts, not the pods stored.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::sim::controllers::statefulset::running_status;
use crate::sim::controllers::{NODE_NAME, bind, is_deleting, write_status};
use crate::sim::meta;
use crate::sim::state::State;
use crate::sim::store::{ObjectName, object_name};
use crate::sim::watch::{Event, EventType};

/// How many pods one pass starts at most, so that the state lock is held briefly; the pass
/// reports the rest as due at once.
const STARTS_PER_PASS: usize = 128;

/// A pending pod the kubelet will start.
#[derive(Debug, Clone)]
struct Pending {
    due: Instant,
    name: ObjectName,
}

/// When each pending pod (by uid) starts, and the pending pods in start order.
#[derive(Debug)]
pub struct Kubelet {
    delay: Duration,
    start_at: HashMap<String, Pending>,
    by_due: BTreeSet<(Instant, String)>,
}

fn is_pending(pod: &Value) -> bool {
    pod["status"]["phase"] == "Pending" && !is_deleting(pod)
}

impl Kubelet {
    /// A kubelet starting pods after `delay`.
    pub fn new(delay: Duration) -> Self {
        Self { delay, start_at: HashMap::new(), by_due: BTreeSet::new() }
    }

    /// Takes note of a change to a pod (other resources are ignored): a pending pod is
    /// scheduled to start `delay` after it was first seen, any other is forgotten.
    pub fn observe(&mut self, event: &Event, now: Instant) {
        if event.key != "pods" {
            return;
        }
        let pod = &event.object;
        let Some(uid) = pod["metadata"]["uid"].as_str() else { return };
        if event.event_type != EventType::Deleted && is_pending(pod) {
            self.schedule(uid, object_name(pod), now);
        } else if let Some(p) = self.start_at.remove(uid) {
            self.by_due.remove(&(p.due, uid.to_string()));
        }
    }

    /// Schedules every pending pod in the store not yet scheduled (one full scan, at start).
    pub fn resync(&mut self, state: &State, now: Instant) {
        for pod in state.store.list("pods", None).filter(|p| is_pending(p)) {
            if let Some(uid) = pod["metadata"]["uid"].as_str() {
                self.schedule(uid, object_name(pod), now);
            }
        }
    }

    fn schedule(&mut self, uid: &str, name: ObjectName, now: Instant) {
        if !self.start_at.contains_key(uid) {
            let due = now + self.delay;
            self.by_due.insert((due, uid.to_string()));
            self.start_at.insert(uid.to_string(), Pending { due, name });
        }
    }

    /// Starts the pods that are due (at most [`STARTS_PER_PASS`]); returns when the next one is.
    pub fn pass(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        for _ in 0..STARTS_PER_PASS {
            let Some((due, uid)) = self.by_due.first().cloned().filter(|(due, _)| *due <= now) else {
                break;
            };
            self.by_due.remove(&(due, uid.clone()));
            let Some(Pending { name: (ns, name), .. }) = self.start_at.remove(&uid) else { continue };
            let Some(pod) =
                state.store.get("pods", &ns, &name).filter(|p| p["metadata"]["uid"] == uid.as_str())
            else {
                continue;
            };
            if is_pending(pod) {
                let pending = pod.clone();
                let Some(pod) = bind(state, &pending, NODE_NAME) else { continue };
                let ip = uid.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                write_status(state, "", "pods", &pod, running_status(&pod, ip, &meta::now()));
            }
        }
        self.by_due.first().map(|(due, _)| *due)
    }
}
