//! Publishing [`EventNote`]s about a DatabaseCluster as `events.k8s.io/v1` Events.
//!
//! The notes are pure data computed elsewhere (status transitions, created children, scaling);
//! this module only turns one into an Event ([`build_event`], pure) and creates it. Publishing is
//! best effort: an Event that cannot be written is logged and the pass goes on, since Events are
//! history, not state. Repeats are aggregated client-side: an Event identical to one published
//! about the same cluster within [`REPEAT_WINDOW`] is not published again (a pass that read a
//! child from a cache one write behind may otherwise report the same scaling twice), and a
//! `ReconcileError` Event is published only when a cluster's error message changes, not on every
//! retry.
//!
//! Events are written off the reconcile's critical path, as client-go's recorder does: `publish`
//! only queues the Event on a bounded channel (waiting when [`QUEUED_EVENTS`] are already queued,
//! so a burst slows the passes down instead of growing memory), and one task per publisher
//! creates them, up to [`CONCURRENT_WRITES`] at a time. [`EventPublisher::flush`] waits until
//! everything queued before it is written.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client, Resource};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::resources::FIELD_MANAGER;
use super::status::EventNote;
use super::types::DatabaseCluster;
use crate::runtime::ObjectKey;

/// How long an identical Event is not repeated (kube-runtime's recorder aggregates for 6 minutes).
pub const REPEAT_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How many Events may wait to be written before `publish` waits (client-go queues 1 000).
pub const QUEUED_EVENTS: usize = 1000;

/// How many Events are being created at once.
pub const CONCURRENT_WRITES: usize = 4;

/// The `reportingController` of every Event the operator writes.
pub const REPORTING_CONTROLLER: &str = "databases.madmmas.dev/dbcluster-operator";

/// The Event describing `note` about `cluster`, reported by `instance` at `now`. The name is left
/// to the server (`generateName`), as recorders do, so that Events never collide.
pub fn build_event(cluster: &DatabaseCluster, note: &EventNote, instance: &str, now: Timestamp) -> Event {
    let meta = &cluster.metadata;
    let name = meta.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: meta.namespace.clone(),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(note.type_.as_str().to_owned()),
        reason: Some(note.reason.clone()),
        action: Some(note.action.to_owned()),
        note: Some(note.note.clone()),
        reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        regarding: Some(ObjectReference {
            api_version: Some(DatabaseCluster::api_version(&()).into_owned()),
            kind: Some(DatabaseCluster::kind(&()).into_owned()),
            name: Some(name),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

/// What the writer task is asked to do.
enum Job {
    /// Create this Event (about a cluster in this namespace).
    Create { event: Box<Event>, namespace: String },
    /// Answer once every Event queued before is written.
    Flush(oneshot::Sender<()>),
}

/// Writes Events about DatabaseClusters through the API server, from a task of its own.
pub struct EventPublisher {
    instance: String,
    jobs: mpsc::Sender<Job>,
    last_error: DashMap<ObjectKey, Arc<str>>,
    recent: DashMap<(ObjectKey, String, String), Instant>,
}

/// Creates the queued Events, [`CONCURRENT_WRITES`] at a time, until the publisher is dropped
/// and the queue is drained.
async fn write_events(client: Client, mut jobs: mpsc::Receiver<Job>) {
    let mut in_flight = JoinSet::new();
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Create { event, namespace } => {
                while in_flight.len() >= CONCURRENT_WRITES {
                    in_flight.join_next().await;
                }
                in_flight.spawn(create_event(client.clone(), event, namespace));
            }
            Job::Flush(done) => {
                while in_flight.join_next().await.is_some() {}
                let _ = done.send(());
            }
        }
    }
    while in_flight.join_next().await.is_some() {}
}

/// Creates one Event; a failure is logged, never returned.
async fn create_event(client: Client, event: Box<Event>, namespace: String) {
    let api: Api<Event> = Api::namespaced(client, &namespace);
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
    let reason = event.reason.clone().unwrap_or_default();
    match api.create(&params, &event).await {
        Ok(_) => tracing::debug!(%reason, "event published"),
        Err(error) => tracing::warn!(%reason, %error, "could not publish an event"),
    }
}

impl EventPublisher {
    /// A publisher writing with `client`, naming `instance` (e.g. the pod name) as the reporter.
    /// Starts its writer task, so it must be called within a tokio runtime.
    pub fn new(client: Client, instance: impl Into<String>) -> Self {
        let (jobs, queued) = mpsc::channel(QUEUED_EVENTS);
        tokio::spawn(write_events(client, queued));
        EventPublisher { instance: instance.into(), jobs, last_error: DashMap::new(), recent: DashMap::new() }
    }

    /// Queues the Event for `note`, unless the same one was published about `cluster` within
    /// [`REPEAT_WINDOW`]; waits only while the queue is full. A failure is logged, never returned.
    pub async fn publish(&self, cluster: &DatabaseCluster, note: &EventNote) {
        let now = Instant::now();
        self.recent.retain(|_, published| now.duration_since(*published) < REPEAT_WINDOW);
        let identity = (ObjectKey::of(cluster), note.reason.clone(), note.note.clone());
        let repeated = self.recent.insert(identity, now).is_some();
        if repeated {
            tracing::debug!(reason = %note.reason, "an identical event was published recently; not repeating it");
            return;
        }
        let event = Box::new(build_event(cluster, note, &self.instance, Timestamp::now()));
        let namespace = cluster.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        if self.jobs.send(Job::Create { event, namespace }).await.is_err() {
            tracing::warn!(reason = %note.reason, "could not publish an event: the event writer has stopped");
        }
    }

    /// Waits until every Event queued before this call has been written (or failed).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// Publishes a `ReconcileError` Warning for `cluster`, unless the previous pass of the same
    /// cluster already reported the same error.
    pub async fn publish_error(
        &self,
        cluster: &DatabaseCluster,
        error: &(dyn std::error::Error + Send + Sync),
    ) {
        let note = EventNote::reconcile_error(&error);
        let key = ObjectKey::of(cluster);
        let repeated = self.last_error.get(&key).is_some_and(|last| **last.value() == *note.note);
        if !repeated {
            self.last_error.insert(key, note.note.as_str().into());
            self.publish(cluster, &note).await;
        }
    }

    /// Forgets the last error of `key`: the next error is reported again.
    pub fn clear_error(&self, key: &ObjectKey) {
        self.last_error.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::types::DatabaseClusterSpec;

    fn cluster() -> DatabaseCluster {
        let mut cluster = DatabaseCluster::new(
            "pg",
            DatabaseClusterSpec {
                replicas: 1,
                version: "15".into(),
                storage_size: "1Gi".into(),
                backup_schedule: None,
                postgres_config: None,
            },
        );
        cluster.metadata.namespace = Some("default".into());
        cluster.metadata.uid = Some("uid-1".into());
        cluster
    }

    #[test]
    fn an_event_regards_the_cluster_and_names_the_reporter() {
        let cluster = cluster();
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let event = build_event(&cluster, &EventNote::created("Service", "pg"), "op-0", now);
        assert_eq!(event.metadata.generate_name.as_deref(), Some("pg."));
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.reason.as_deref(), Some("CreatedService"));
        assert_eq!(event.action.as_deref(), Some("Create"));
        assert_eq!(event.reporting_controller.as_deref(), Some(REPORTING_CONTROLLER));
        assert_eq!(event.reporting_instance.as_deref(), Some("op-0"));
        assert_eq!(event.event_time, Some(MicroTime(now)));
        let regarding = event.regarding.unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("DatabaseCluster"));
        assert_eq!(regarding.api_version.as_deref(), Some("databases.madmmas.dev/v1alpha1"));
        assert_eq!(regarding.uid.as_deref(), Some("uid-1"));
    }

    #[tokio::test(start_paused = true)]
    async fn identical_events_are_published_once_per_window_and_errors_once_per_message() {
        let sim = crate::sim::SimServer::start().await.unwrap();
        let publisher = EventPublisher::new(sim.client(), "test");
        let count = || async {
            publisher.flush().await;
            let api: Api<Event> = Api::namespaced(sim.client(), "default");
            api.list(&Default::default()).await.unwrap().items.len()
        };
        let cluster = cluster();
        let scaling = EventNote::created("StatefulSet", "pg");
        publisher.publish(&cluster, &scaling).await;
        publisher.publish(&cluster, &scaling).await;
        assert_eq!(count().await, 1);
        publisher.publish(&cluster, &EventNote::created("Service", "pg")).await;
        assert_eq!(count().await, 2);
        tokio::time::sleep(REPEAT_WINDOW).await;
        publisher.publish(&cluster, &scaling).await;
        assert_eq!(count().await, 3, "repeated after the window");

        let error = std::io::Error::other("boom");
        publisher.publish_error(&cluster, &error).await;
        tokio::time::sleep(REPEAT_WINDOW).await;
        publisher.publish_error(&cluster, &error).await;
        assert_eq!(count().await, 4, "the same error is reported once until it clears");
        publisher.clear_error(&ObjectKey::of(&cluster));
        publisher.publish_error(&cluster, &error).await;
        assert_eq!(count().await, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn publishing_does_not_wait_for_the_write_until_the_queue_is_full() {
        let sim = crate::sim::SimServer::start().await.unwrap();
        let publisher = EventPublisher::new(sim.client(), "test");
        let latency = Duration::from_secs(5);
        sim.faults().set_latency(latency);
        let cluster = cluster();
        let note = |i: usize| EventNote::created("Service", &format!("pg-{i}"));
        let started = Instant::now();
        publisher.publish(&cluster, &note(0)).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "queued, not written");
        for i in 1..QUEUED_EVENTS + CONCURRENT_WRITES + 1 {
            publisher.publish(&cluster, &note(i)).await;
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "the writes in flight and the queue hold all so far");
        publisher.publish(&cluster, &note(QUEUED_EVENTS + CONCURRENT_WRITES + 1)).await;
        assert!(started.elapsed() >= latency, "a full queue makes the publisher wait");
        publisher.flush().await;
        sim.faults().set_latency(Duration::ZERO);
        let api: Api<Event> = Api::namespaced(sim.client(), "default");
        let written = api.list(&Default::default()).await.unwrap().items.len();
        assert_eq!(written, QUEUED_EVENTS + CONCURRENT_WRITES + 2, "every queued Event is written");
    }
}
