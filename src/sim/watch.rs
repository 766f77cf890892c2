//! The watch hub: a bounded history of change events (so watches can resume from a
//! resourceVersion, and older versions answer 410) and a broadcast to the open watches, plus
//! taps that never lag for the simulated controllers.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use crate::sim::selectors::{FieldSelector, LabelSelector};

/// The kind of change, as written in a watch event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object was created (or started matching the watch's selectors).
    Added,
    /// The object changed.
    Modified,
    /// The object was deleted (or stopped matching the watch's selectors).
    Deleted,
}

impl EventType {
    /// The wire name: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to one object.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the write.
    pub resource_version: u64,
    /// Storage key of the resource (`pods`, `statefulsets.apps`).
    pub key: String,
    /// Namespace of the object, empty for cluster-scoped objects.
    pub namespace: String,
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for deletions: its final state).
    pub object: Value,
    /// The object before the change, if it existed.
    pub old: Option<Value>,
}

/// How many events may wait for a slow watch before it is ended (the client then resumes).
const BROADCAST_CAPACITY: usize = 4096;

/// Bounded event history plus the live broadcast to open watches.
#[derive(Debug)]
pub struct WatchHub {
    history: VecDeque<Arc<Event>>,
    limit: usize,
    /// Every event with a resourceVersion above this one is still in `history`.
    oldest_kept: u64,
    sender: broadcast::Sender<Arc<Event>>,
    /// Receivers that must see every event (the simulated controllers), never ended for lag.
    taps: Vec<mpsc::UnboundedSender<Arc<Event>>>,
}

impl WatchHub {
    /// A hub keeping up to `limit` events, starting at resourceVersion `start`.
    pub fn new(limit: usize, start: u64) -> Self {
        let (sender, _) = broadcast::channel(BROADCAST_CAPACITY);
        Self { history: VecDeque::new(), limit, oldest_kept: start, sender, taps: Vec::new() }
    }

    /// Records an event and hands it to every open watch.
    pub fn publish(&mut self, event: Arc<Event>) {
        self.history.push_back(event.clone());
        while self.history.len() > self.limit {
            if let Some(dropped) = self.history.pop_front() {
                self.oldest_kept = dropped.resource_version;
            }
        }
        self.taps.retain(|tap| tap.send(event.clone()).is_ok());
        // No receivers is fine: nobody is watching.
        let _ = self.sender.send(event);
    }

    /// Forgets all history: watches from any earlier resourceVersion now answer 410.
    pub fn compact(&mut self, current: u64) {
        self.history.clear();
        self.oldest_kept = current;
    }

    /// The events after `resource_version`, or `None` if some of them were already forgotten.
    pub fn since(&self, resource_version: u64) -> Option<Vec<Arc<Event>>> {
        if resource_version < self.oldest_kept {
            return None;
        }
        // The history is in resourceVersion order: the events after it start at one point.
        let first = self.history.partition_point(|e| e.resource_version <= resource_version);
        Some(self.history.range(first..).cloned().collect())
    }

    /// A receiver of every event published from now on that never lags (its queue grows
    /// instead), for the simulated controllers, which react to each change.
    pub fn tap(&mut self) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.taps.push(tx);
        rx
    }

    /// A receiver of every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }
}

/// What one watch (or list) selects: a resource, maybe a namespace, label and field selectors.
#[derive(Debug, Clone)]
pub struct Filter {
    /// Storage key of the watched resource.
    pub key: String,
    /// Only this namespace, if set.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether an object is selected (namespace, labels, fields).
    pub fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self.namespace.as_deref().is_none_or(|ns| obj["metadata"]["namespace"] == ns);
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event this watch sees for a change, as the apiserver's watch cache translates it:
    /// an object that starts matching is ADDED, one that stops matching is DELETED.
    pub fn translate<'a>(&self, event: &'a Event) -> Option<(EventType, &'a Value)> {
        if event.key != self.key || self.namespace.as_deref().is_some_and(|ns| ns != event.namespace) {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.old.as_ref().is_some_and(|o| self.matches(o));
        match event.event_type {
            EventType::Added if now => Some((EventType::Added, &event.object)),
            EventType::Deleted if before || now => Some((EventType::Deleted, &event.object)),
            EventType::Modified => match (before, now) {
                (true, true) => Some((EventType::Modified, &event.object)),
                (false, true) => Some((EventType::Added, &event.object)),
                (true, false) => Some((EventType::Deleted, &event.object)),
                (false, false) => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(rv: u64) -> Arc<Event> {
        Arc::new(Event {
            resource_version: rv,
            key: "pods".into(),
            namespace: "ns".into(),
            event_type: EventType::Added,
            object: json!({}),
            old: None,
        })
    }

    #[test]
    fn history_is_bounded_and_older_versions_are_gone() {
        let mut hub = WatchHub::new(2, 1);
        for rv in 2..=5 {
            hub.publish(event(rv));
        }
        assert!(hub.since(2).is_none(), "event 3 was dropped");
        assert_eq!(hub.since(3).unwrap().len(), 2);
        assert_eq!(hub.since(5).unwrap().len(), 0);
        hub.compact(5);
        assert!(hub.since(4).is_none());
        assert!(hub.since(5).unwrap().is_empty());
    }

    #[test]
    fn label_changes_translate_to_added_and_deleted() {
        let filter = Filter {
            key: "pods".into(),
            namespace: Some("ns".into()),
            labels: LabelSelector::parse("app=db").unwrap(),
            fields: FieldSelector::default(),
        };
        let with = json!({"metadata": {"namespace": "ns", "labels": {"app": "db"}}});
        let without = json!({"metadata": {"namespace": "ns"}});
        let modified = |old: &Value, new: &Value| Event {
            resource_version: 2,
            key: "pods".into(),
            namespace: "ns".into(),
            event_type: EventType::Modified,
            object: new.clone(),
            old: Some(old.clone()),
        };
        assert_eq!(filter.translate(&modified(&without, &with)).unwrap().0, EventType::Added);
        assert_eq!(filter.translate(&modified(&with, &without)).unwrap().0, EventType::Deleted);
        assert_eq!(filter.translate(&modified(&with, &with)).unwrap().0, EventType::Modified);
        assert!(filter.translate(&modified(&without, &without)).is_none());
    }
}
