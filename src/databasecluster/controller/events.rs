//! The Events the operator reports about a DatabaseCluster, and publishing them as `core/v1`
//! Events.
//!
//! Written through `core/v1`, not `events.k8s.io/v1`, so that they carry what both generations of
//! tools sort and show by: `eventTime` and the reporting fields of the newer API, and
//! `firstTimestamp`, `lastTimestamp`, `count` and `source` of the older one
//! (`kubectl get events --sort-by=.lastTimestamp` lists them). The apiserver refuses the older
//! fields on an `events.k8s.io/v1` create (`ValidateEventCreate`) and accepts both on a `core/v1`
//! one; both APIs serve the same objects.
//!
//! The model is pure data: an [`EventNote`] (type, reason, action, note), computed from a status
//! transition ([`status_events`]), a created child ([`EventNote::created`]) or a scaling write
//! ([`scaling_event`]). Publishing turns one into an Event ([`build_event`], pure) and creates it. Publishing is
//! best effort: an Event that cannot be written is logged and the pass goes on, since Events are
//! history, not state. Every Event is published, even one identical to an earlier one: a repeat is
//! a real repeat (a Service recreated after a hand-delete reports `CreatedService` again). Passes
//! do not report the same change twice because the controller runs a key's next pass only once
//! the caches hold its previous pass's writes (read-your-writes, `runtime::controller::freshness`). Only
//! errors are aggregated: a `ReconcileError` Event is published when a cluster's error message
//! changes, not on every retry of the same error (one map lookup per publish).
//!
//! Events are written off the reconcile's critical path, as client-go's recorder does:
//! [`EventPublisher::publish`] only queues the Event on a bounded channel (it waits only when
//! [`QUEUED_EVENTS`] are already queued, so a burst slows the passes down instead of growing
//! memory), and one task per publisher creates them, up to [`CONCURRENT_WRITES`] at a time.
//! [`EventFlusher::flush`] waits until everything queued before it is written.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::PostParams;
use kube::{Api, Client, Resource};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus};
use crate::databasecluster::controller::status::{condition, find_condition, reason};
use crate::databasecluster::specs::names::FIELD_MANAGER;
use crate::runtime::ObjectKey;

/// The type of an Event: routine, or worth someone's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something needs attention.
    Warning,
}

impl EventType {
    /// The type as written in an Event.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An Event to publish about a DatabaseCluster, as pure data: reconcile
/// only sends it. Notes never hold a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNote {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason, e.g. `UpgradeStarted`.
    pub reason: String,
    /// What the operator did or failed to do, e.g. `Upgrade`.
    pub action: &'static str,
    /// Human-readable details, at most [`EventNote::MAX_NOTE_BYTES`].
    pub note: String,
}

impl EventNote {
    /// The API's limit on an Event's note.
    pub const MAX_NOTE_BYTES: usize = 1024;

    /// A note with its text cut to the API's limit.
    pub(crate) fn new(
        type_: EventType,
        reason: impl Into<String>,
        action: &'static str,
        note: String,
    ) -> Self {
        EventNote { type_, reason: reason.into(), action, note: truncate(note, Self::MAX_NOTE_BYTES) }
    }

    /// A child object was created, e.g. reason `CreatedStatefulSet`.
    pub fn created(kind: &str, name: &str) -> Self {
        EventNote::new(
            EventType::Normal,
            format!("Created{kind}"),
            "Create",
            format!("Created {kind} {name}"),
        )
    }

    /// A pass failed; the error is retried with backoff.
    pub fn reconcile_error(error: &dyn Display) -> Self {
        EventNote::new(EventType::Warning, "ReconcileError", "Reconcile", error.to_string())
    }
}

/// `text` cut to at most `max_bytes`, on a character boundary.
pub(crate) fn truncate(mut text: String, max_bytes: usize) -> String {
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The Events implied by a change of status from `old` (the live status, if any) to `new`:
/// UpgradeStarted and UpgradeCompleted when `Upgrading` flips, and InvalidSpec (Warning) once per
/// generation whose spec is invalid, InvalidConfiguration (Warning) once per generation whose
/// `postgresConfig` PostgreSQL refuses, ExpansionNotSupported (Warning) once per generation whose
/// storage growth the StorageClass refuses, DiskFull (Warning) once per generation in which an
/// instance's data volume fills up, InvalidCertificates (Warning) once per generation whose
/// `spec.certificates` Secrets cannot be used, CertificateExpiring or CertificateRenewalFailed
/// (Warning) when a certificate starts expiring unrenewed or its renewal starts failing. An unchanged status implies none.
pub fn status_events(old: Option<&DatabaseClusterStatus>, new: &DatabaseClusterStatus) -> Vec<EventNote> {
    let was = |type_: &str| old.and_then(|old| find_condition(old, type_));
    let now = |type_: &str| find_condition(new, type_);
    let mut events = Vec::new();

    let was_upgrading = was(condition::UPGRADING).is_some_and(|c| c.status == "True");
    match now(condition::UPGRADING) {
        Some(c) if c.status == "True" && !was_upgrading => {
            events.push(EventNote::new(EventType::Normal, "UpgradeStarted", "Upgrade", c.message.clone()));
        }
        Some(c) if c.status == "False" && c.reason == reason::UPGRADE_COMPLETE && was_upgrading => {
            let version = new.current_version.as_deref().unwrap_or_default();
            let note = format!("Upgrade to {version} complete");
            events.push(EventNote::new(EventType::Normal, "UpgradeCompleted", "Upgrade", note));
        }
        _ => {}
    }

    // A Warning once per generation whose condition `type_` has `reason`.
    let mut warn_once = |type_: &str, reason: &str, action: &'static str| {
        let Some(c) = now(type_).filter(|c| c.reason == reason) else { return };
        let reported =
            was(type_).is_some_and(|w| w.reason == reason && w.observed_generation == c.observed_generation);
        if !reported {
            events.push(EventNote::new(EventType::Warning, reason, action, c.message.clone()));
        }
    };
    warn_once(condition::RESIZING, reason::EXPANSION_NOT_SUPPORTED, "Resize");
    warn_once(condition::READY, reason::INVALID_SPEC, "Validate");
    warn_once(condition::READY, reason::INVALID_CONFIGURATION, "Configure");
    warn_once(condition::READY, reason::DISK_FULL, "Storage");
    warn_once(condition::READY, reason::INVALID_CERTIFICATES, "Certificates");
    // A Warning when a certificate starts expiring unrenewed, or its renewal starts failing.
    let was_expiring =
        was(condition::CERTIFICATES_EXPIRING).filter(|c| c.status == "True").map(|c| &c.reason);
    if let Some(c) = now(condition::CERTIFICATES_EXPIRING)
        .filter(|c| c.status == "True" && was_expiring != Some(&c.reason))
    {
        events.push(EventNote::new(EventType::Warning, c.reason.clone(), "Renew", c.message.clone()));
    }
    events
}

/// The Event for a write that changes the StatefulSet's replicas: ScalingUp or ScalingDown.
pub fn scaling_event(live: &StatefulSet, desired: &StatefulSet) -> Option<EventNote> {
    // An unset `replicas` means 1, as the API server defaults it.
    let replicas = |sts: &StatefulSet| sts.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1);
    let (from, to) = (replicas(live), replicas(desired));
    let reason = match from.cmp(&to) {
        std::cmp::Ordering::Less => "ScalingUp",
        std::cmp::Ordering::Greater => "ScalingDown",
        std::cmp::Ordering::Equal => return None,
    };
    Some(EventNote::new(EventType::Normal, reason, "Scale", format!("Scaling from {from} to {to} replicas")))
}

/// The `reportingController` of every Event the operator writes.
pub const REPORTING_CONTROLLER: &str = "databases.madmmas.dev/dbcluster-operator";

/// The name of an Event about the object `regarding`, as client-go's recorder names it:
/// `<object>.<hex suffix>`, the suffix unique within this process (nanoseconds since the epoch,
/// bumped past the last one handed out). A `generateName` of `<object>.` would be refused: a
/// generated name's prefix must itself be a valid DNS subdomain, which a trailing `.` is not.
pub fn event_name(regarding: &str, now: Timestamp) -> String {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
    let previous = LAST.fetch_max(nanos, Ordering::Relaxed);
    let suffix = if previous >= nanos { LAST.fetch_add(1, Ordering::Relaxed) + 1 } else { nanos };
    format!("{regarding}.{suffix:x}")
}

/// The Event describing `note` about `cluster`, reported by `instance` at `now`, named by
/// [`event_name`] so that Events never collide.
pub fn build_event(cluster: &DatabaseCluster, note: &EventNote, instance: &str, now: Timestamp) -> Event {
    let meta = &cluster.metadata;
    let name = meta.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(&name, now)),
            namespace: meta.namespace.clone(),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        type_: Some(note.type_.as_str().to_owned()),
        reason: Some(note.reason.clone()),
        action: Some(note.action.to_owned()),
        message: Some(note.note.clone()),
        reporting_component: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        source: Some(EventSource { component: Some(REPORTING_CONTROLLER.to_owned()), host: None }),
        involved_object: ObjectReference {
            api_version: Some(DatabaseCluster::api_version(&()).into_owned()),
            kind: Some(DatabaseCluster::kind(&()).into_owned()),
            name: Some(name),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            ..ObjectReference::default()
        },
        ..Event::default()
    }
}

/// How many Events may wait to be written before `publish` waits (client-go queues 1 000).
pub const QUEUED_EVENTS: usize = 1000;

/// How many Events are being created at once.
pub const CONCURRENT_WRITES: usize = 4;

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
}

/// Waits for a publisher's queued Events to be written (for tests and shutdown).
#[derive(Clone, Debug)]
pub struct EventFlusher {
    jobs: mpsc::Sender<Job>,
}

impl EventFlusher {
    /// Waits until every Event queued before this call has been written (or failed). Returns at
    /// once when the writer has stopped.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher")
            .field("instance", &self.instance)
            .field("unresolved_errors", &self.last_error.len())
            .finish_non_exhaustive()
    }
}

/// Creates the queued Events, [`CONCURRENT_WRITES`] at a time, until every sender is dropped and
/// the queue is drained.
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

/// Creates one Event; a failure is logged once, never retried (Events are history, not state).
async fn create_event(client: Client, event: Box<Event>, namespace: String) {
    let api: Api<Event> = Api::namespaced(client, &namespace);
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
    let reason = event.reason.clone().unwrap_or_default();
    match api.create(&params, &event).await {
        Ok(_) => tracing::debug!(%reason, "event published"),
        Err(kube::Error::Api(status)) => tracing::warn!(
            %reason,
            code = status.code,
            message = %status.message,
            "the API server refused an event"
        ),
        Err(error) => tracing::warn!(%reason, %error, "could not publish an event"),
    }
}

impl EventPublisher {
    /// A publisher writing with `client`, naming `instance` (e.g. the pod name) as the reporter.
    /// Starts its writer task, so it must be called within a tokio runtime.
    pub fn new(client: Client, instance: impl Into<String>) -> Self {
        let (jobs, queued) = mpsc::channel(QUEUED_EVENTS);
        tokio::spawn(write_events(client, queued));
        EventPublisher { instance: instance.into(), jobs, last_error: DashMap::new() }
    }

    /// A handle that waits for this publisher's queued Events to be written.
    pub fn flusher(&self) -> EventFlusher {
        EventFlusher { jobs: self.jobs.clone() }
    }

    /// Queues the Event for `note` about `cluster`; waits only while the queue is full. A failure
    /// to write it is logged, never returned.
    pub async fn publish(&self, cluster: &DatabaseCluster, note: &EventNote) {
        let event = Box::new(build_event(cluster, note, &self.instance, Timestamp::now()));
        let namespace = cluster.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        if self.jobs.send(Job::Create { event, namespace }).await.is_err() {
            tracing::warn!(reason = %note.reason, "could not publish an event: the event writer has stopped");
        }
    }

    /// Waits until every Event queued before this call has been written (or failed).
    pub async fn flush(&self) {
        self.flusher().flush().await;
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
    use crate::databasecluster::fixtures::{self, UID};

    #[test]
    fn an_event_regards_the_cluster_and_names_the_reporter() {
        let cluster = fixtures::cluster(1, "15", 1);
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let event = build_event(&cluster, &EventNote::created("Service", "pg"), "op-0", now);
        let name = event.metadata.name.as_deref().unwrap();
        assert!(name.starts_with("production-postgres.") && name.len() > 20, "{name}");
        assert!(event.metadata.generate_name.is_none());
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.reason.as_deref(), Some("CreatedService"));
        assert_eq!(event.action.as_deref(), Some("Create"));
        assert_eq!(event.reporting_component.as_deref(), Some(REPORTING_CONTROLLER));
        assert_eq!(event.reporting_instance.as_deref(), Some("op-0"));
        // Both generations' times: the newer API's `eventTime`, the older one's first/last seen.
        assert_eq!(event.event_time, Some(MicroTime(now)));
        assert_eq!((event.first_timestamp, event.last_timestamp), (Some(Time(now)), Some(Time(now))));
        assert_eq!(event.count, Some(1));
        let regarding = event.involved_object;
        assert_eq!(regarding.kind.as_deref(), Some("DatabaseCluster"));
        assert_eq!(regarding.api_version.as_deref(), Some("databases.madmmas.dev/v1alpha1"));
        assert_eq!(regarding.uid.as_deref(), Some(UID));
    }

    #[test]
    fn event_names_are_the_object_a_dot_and_a_unique_hex_suffix() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let (a, b) = (event_name("pg", now), event_name("pg", now));
        assert_ne!(a, b, "unique even at the same instant");
        for name in [&a, &b] {
            let suffix = name.strip_prefix("pg.").unwrap();
            assert!(u64::from_str_radix(suffix, 16).is_ok(), "{name}");
        }
    }

    #[cfg(feature = "sim")]
    #[tokio::test]
    async fn a_refused_event_is_logged_once_at_warn_with_the_servers_message() {
        use std::io::Write;
        #[derive(Clone, Default)]
        struct Captured(Arc<parking_lot::Mutex<Vec<u8>>>);
        impl Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let sim = crate::sim::SimServer::start().await.unwrap();
        let publisher = EventPublisher::new(sim.client(), "test");
        let mut refused = fixtures::cluster(1, "15", 1);
        // Not a valid Event name (upper case): the server answers 422.
        refused.metadata.name = Some("PG".into());
        publisher.publish(&refused, &EventNote::created("Service", "pg")).await;
        publisher.flush().await;
        let log = String::from_utf8(captured.0.lock().clone()).unwrap();
        assert_eq!(log.matches("the API server refused an event").count(), 1, "{log}");
        assert!(log.contains("WARN") && log.contains("code=422"), "{log}");
        assert!(log.contains("a lowercase RFC 1123 subdomain"), "the server's message: {log}");
    }

    #[cfg(feature = "sim")]
    #[tokio::test]
    async fn every_event_is_published_even_a_repeat_and_errors_once_per_message() {
        let sim = crate::sim::SimServer::start().await.unwrap();
        let publisher = EventPublisher::new(sim.client(), "test");
        let count = || async {
            publisher.flush().await;
            let api: Api<Event> = Api::namespaced(sim.client(), "default");
            api.list(&Default::default()).await.unwrap().items.len()
        };
        let cluster = fixtures::cluster(1, "15", 1);
        let created = EventNote::created("Service", "pg");
        publisher.publish(&cluster, &created).await;
        publisher.publish(&cluster, &created).await;
        assert_eq!(count().await, 2, "a repeat (the Service recreated) is reported again");

        let error = std::io::Error::other("boom");
        publisher.publish_error(&cluster, &error).await;
        publisher.publish_error(&cluster, &error).await;
        assert_eq!(count().await, 3, "the same error is reported once until it clears");
        publisher.publish_error(&cluster, &std::io::Error::other("another")).await;
        assert_eq!(count().await, 4, "a different error is reported");
        publisher.clear_error(&ObjectKey::of(&cluster));
        publisher.publish_error(&cluster, &std::io::Error::other("another")).await;
        assert_eq!(count().await, 5, "after a clean pass the error is reported again");
    }

    #[cfg(feature = "sim")]
    #[tokio::test(start_paused = true)]
    async fn publishing_does_not_wait_for_the_write_until_the_queue_is_full() {
        use std::time::Duration;
        use tokio::time::Instant;
        let sim = crate::sim::SimServer::start().await.unwrap();
        let publisher = EventPublisher::new(sim.client(), "test");
        let latency = Duration::from_secs(5);
        sim.faults().set_latency(latency);
        let cluster = fixtures::cluster(1, "15", 1);
        let note = |i: usize| EventNote::created("Service", &format!("pg-{i}"));
        let started = Instant::now();
        publisher.publish(&cluster, &note(0)).await;
        tokio::task::yield_now().await;
        assert_eq!(started.elapsed(), Duration::ZERO, "queued, not written");
        // The writer holds CONCURRENT_WRITES in flight and one waiting for a slot; the queue
        // holds QUEUED_EVENTS more.
        let capacity = QUEUED_EVENTS + CONCURRENT_WRITES + 1;
        for i in 1..capacity {
            publisher.publish(&cluster, &note(i)).await;
            tokio::task::yield_now().await;
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "the writes in flight and the queue hold all so far");
        publisher.publish(&cluster, &note(capacity)).await;
        assert!(started.elapsed() >= latency, "a full queue makes the publisher wait");
        publisher.flush().await;
        sim.faults().set_latency(Duration::ZERO);
        let api: Api<Event> = Api::namespaced(sim.client(), "default");
        let written = api.list(&Default::default()).await.unwrap().items.len();
        assert_eq!(written, capacity + 1, "every queued Event is written");
    }

    #[test]
    fn event_notes_are_bounded_and_reasons_are_camel_case() {
        let long = "é".repeat(1000);
        let error = EventNote::reconcile_error(&long);
        assert!(error.note.len() <= EventNote::MAX_NOTE_BYTES && error.note.starts_with('é'));
        assert_eq!((error.type_, error.reason.as_str()), (EventType::Warning, "ReconcileError"));
        let created = EventNote::created("StatefulSet", "production-postgres");
        assert_eq!(created.reason, "CreatedStatefulSet");
        assert_eq!(created.note, "Created StatefulSet production-postgres");
    }
}
