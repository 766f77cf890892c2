//! A simulated kubelet: every Pending pod becomes Running and Ready `pod_ready_delay` after the
//! kubelet first sees it.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::sim::controllers::statefulset::running_status;
use crate::sim::controllers::{is_deleting, write_status};
use crate::sim::meta;
use crate::sim::state::State;

/// When each pending pod (by uid) starts.
#[derive(Debug)]
pub struct Kubelet {
    delay: Duration,
    start_at: HashMap<String, Instant>,
}

impl Kubelet {
    /// A kubelet starting pods after `delay`.
    pub fn new(delay: Duration) -> Self {
        Self { delay, start_at: HashMap::new() }
    }

    /// Starts the pods that are due; returns when the next one is.
    pub fn pass(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        let pending: Vec<Value> = state
            .store
            .list("pods", None)
            .filter(|p| p["status"]["phase"] == "Pending" && !is_deleting(p))
            .cloned()
            .collect();
        let pending_uids: Vec<String> =
            pending.iter().filter_map(|p| p["metadata"]["uid"].as_str().map(String::from)).collect();
        self.start_at.retain(|uid, _| pending_uids.contains(uid));
        let mut next: Option<Instant> = None;
        for pod in pending {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            let due = *self.start_at.entry(uid.clone()).or_insert(now + self.delay);
            if due <= now {
                let ip = uid.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                write_status(state, "", "pods", &pod, running_status(&pod, ip, &meta::now()));
                self.start_at.remove(&uid);
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        next
    }
}
