//! What the runtime shows about itself: the informers and controllers a process registers, turned
//! into readiness, the `/debug/queue` and `/debug/cache` JSON documents, and informer metrics.
//!
//! The operator registers each informer and each controller's probe once, at start-up; the HTTP
//! server only reads. Times are rendered as RFC 3339 wall-clock instants plus seconds relative to
//! now, so a reader sees both "when" and "how long".

use std::sync::Arc;

use kube::Resource;
use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::runtime::controller::{ControllerProbe, KeyReport};
use crate::runtime::informer::{Informer, InformerStats};
use crate::runtime::workqueue::KeyPhase;

/// Anything that can report an informer's figures.
pub trait InformerProbe: Send + Sync + 'static {
    /// A snapshot of the figures.
    fn stats(&self) -> InformerStats;
    /// Whether its watch loop has ended for good.
    fn has_stopped(&self) -> bool;
}

impl<K> InformerProbe for Informer<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    fn stats(&self) -> InformerStats {
        Informer::stats(self)
    }

    fn has_stopped(&self) -> bool {
        Informer::has_stopped(self)
    }
}

#[derive(Default)]
struct Registered {
    informers: RwLock<Vec<(String, Arc<dyn InformerProbe>)>>,
    controllers: RwLock<Vec<ControllerProbe>>,
    leading: RwLock<Option<(String, watch::Receiver<bool>)>>,
}

/// The registry of what the process runs, shared by the operator (writes) and the HTTP server
/// (reads). Cloning gives another handle to the same registry.
#[derive(Clone, Default)]
pub struct Introspection {
    registered: Arc<Registered>,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection")
            .field("informers", &self.registered.informers.read().len())
            .field("controllers", &self.registered.controllers.read().len())
            .finish()
    }
}

impl Introspection {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an informer under `name` (by convention the plural resource name).
    pub fn add_informer(&self, name: &str, informer: Arc<dyn InformerProbe>) {
        self.registered.informers.write().push((name.to_string(), informer));
    }

    /// Registers a controller's probe (take it with `Controller::probe` before `run`).
    pub fn add_controller(&self, probe: ControllerProbe) {
        self.registered.controllers.write().push(probe);
    }

    /// Registers the leader elector's signal for the lease `name`: shown in `/debug/queue` and as
    /// `leader_election_master_status{name}` (controller-runtime's metric).
    pub fn set_leading(&self, name: &str, leading: watch::Receiver<bool>) {
        *self.registered.leading.write() = Some((name.to_string(), leading));
    }

    /// Alive while every registered informer's watch loop is running; otherwise the names of those
    /// whose loop has ended (the process cannot recover them: the kubelet should restart it).
    pub fn liveness(&self) -> Result<(), Vec<String>> {
        let stopped: Vec<String> = self
            .registered
            .informers
            .read()
            .iter()
            .filter(|(_, informer)| informer.has_stopped())
            .map(|(name, _)| name.clone())
            .collect();
        if stopped.is_empty() { Ok(()) } else { Err(stopped) }
    }

    /// Ready when every registered informer has applied its first list; otherwise the names of
    /// those that have not. A standby (which may register nothing yet) is ready too.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let unsynced: Vec<String> = self
            .registered
            .informers
            .read()
            .iter()
            .filter(|(_, informer)| !informer.stats().synced)
            .map(|(name, _)| name.clone())
            .collect();
        if unsynced.is_empty() { Ok(()) } else { Err(unsynced) }
    }

    /// The `/debug/queue` document: per controller, each key's state, requeues and last pass.
    pub fn queue_report(&self) -> Value {
        let clock = Clock::now();
        let leading = self.registered.leading.read().as_ref().map(|(_, leading)| *leading.borrow());
        let controllers: Vec<Value> = self
            .registered
            .controllers
            .read()
            .iter()
            .map(|probe| {
                let keys: Vec<Value> = probe.keys().iter().map(|report| key_json(report, &clock)).collect();
                json!({"controller": probe.name(), "keys": keys})
            })
            .collect();
        json!({"now": clock.wall.to_string(), "leading": leading, "controllers": controllers})
    }

    /// The `/debug/cache` document: per informer, its figures.
    pub fn cache_report(&self) -> Value {
        let informers: Vec<Value> = self
            .registered
            .informers
            .read()
            .iter()
            .map(|(name, informer)| {
                let stats = informer.stats();
                json!({
                    "informer": name,
                    "objects": stats.objects,
                    "synced": stats.synced,
                    "last_resource_version": stats.last_resource_version,
                    "initial_list": stats.initial_list,
                    "relists": stats.relists,
                    "watch_restarts": stats.watch_restarts,
                    "gone": stats.gone,
                    "failures": stats.failures,
                    "events": {
                        "added": stats.added,
                        "updated": stats.updated,
                        "deleted": stats.deleted,
                        "bookmarks": stats.bookmarks,
                    },
                    "malformed_skipped": stats.malformed_skipped,
                    "handler_panics": stats.handler_panics,
                })
            })
            .collect();
        json!({"informers": informers})
    }

    /// A Prometheus collector of the informers' figures, read at each scrape.
    pub fn informer_collector(&self) -> InformerCollector {
        InformerCollector { registered: Arc::clone(&self.registered) }
    }
}

/// "Now" on both clocks, to turn the runtime's monotonic instants into wall-clock times.
struct Clock {
    instant: Instant,
    wall: jiff::Timestamp,
}

impl Clock {
    fn now() -> Self {
        Self { instant: Instant::now(), wall: jiff::Timestamp::now() }
    }

    /// The wall-clock time of `at` and its distance from now in seconds (negative: in the past).
    fn render(&self, at: Instant) -> (String, f64) {
        let offset = if at >= self.instant {
            (at - self.instant).as_secs_f64()
        } else {
            -(self.instant - at).as_secs_f64()
        };
        let wall = jiff::SignedDuration::try_from_secs_f64(offset)
            .ok()
            .and_then(|d| self.wall.checked_add(d).ok())
            .unwrap_or(self.wall);
        (wall.round(jiff::Unit::Millisecond).unwrap_or(wall).to_string(), round_ms(offset))
    }
}

fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

fn key_json(report: &KeyReport, clock: &Clock) -> Value {
    let mut out = json!({"key": report.key.as_str()});
    let fields = out.as_object_mut().expect("a JSON object literal is an object");
    let state = report.queue.as_ref();
    let phase = state.map_or(&KeyPhase::Idle, |s| &s.phase);
    let mut since = |name: &str, at: Option<Instant>| {
        if let Some(at) = at {
            let (wall, offset) = clock.render(at);
            fields.insert(name.to_string(), json!(wall));
            fields.insert(format!("{name}_seconds_ago"), json!(-offset));
        }
    };
    let state_name = match phase {
        KeyPhase::Queued { since: at } => {
            since("queued_since", *at);
            "queued"
        }
        KeyPhase::Processing { since: at, .. } => {
            since("processing_since", *at);
            "processing"
        }
        KeyPhase::Waiting { .. } => "waiting",
        KeyPhase::WaitingForRetryBudget => "waiting_for_retry_budget",
        KeyPhase::Idle => "idle",
    };
    fields.insert("state".into(), json!(state_name));
    if let KeyPhase::Processing { again: true, .. } = phase {
        fields.insert("runs_again".into(), json!(true));
    }
    if let Some(until) = state.and_then(|s| s.timer) {
        let (wall, offset) = clock.render(until);
        fields.insert("waiting_until".into(), json!(wall));
        fields.insert("waiting_seconds_left".into(), json!(offset.max(0.0)));
    }
    fields.insert("requeues".into(), json!(state.map_or(0, |s| s.requeues)));
    if let Some(last) = &report.last {
        let (wall, offset) = clock.render(last.finished);
        fields.insert(
            "last_pass".into(),
            json!({
                "result": last.result.as_str(),
                "error": last.error,
                "finished": wall,
                "finished_seconds_ago": -offset,
                "took_seconds": round_ms(last.took.as_secs_f64()),
            }),
        );
    }
    out
}

/// A metric's name, help and how to read it from an informer's figures.
type Figure<T> = (&'static str, &'static str, fn(&InformerStats) -> T);

/// The informers' figures as Prometheus metrics: `informer_objects`, `informer_synced`,
/// `informer_events_total{type}`, `informer_relists_total`, `informer_watch_restarts_total`,
/// `informer_gone_total`, each labelled with `informer`; and, with leader election,
/// `leader_election_master_status{name}` (1 while this replica leads).
#[derive(Clone)]
pub struct InformerCollector {
    registered: Arc<Registered>,
}

impl std::fmt::Debug for InformerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InformerCollector")
    }
}

impl Collector for InformerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats: Vec<(String, InformerStats)> =
            self.registered.informers.read().iter().map(|(name, i)| (name.clone(), i.stats())).collect();
        let gauges: [Figure<i64>; 2] = [
            ("informer_objects", "Objects in the informer's cache", |s| s.objects as i64),
            ("informer_synced", "Whether the informer applied its first list (1) or not (0)", |s| {
                i64::from(s.synced)
            }),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(0i64);
            let mut metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            for (informer, s) in &stats {
                ConstGauge::new(value(s))
                    .encode(metric.encode_family(&[("informer", informer.as_str())])?)?;
            }
        }
        let counters: [Figure<u64>; 3] = [
            ("informer_relists", "Full lists the informer started, the first included", |s| s.relists),
            ("informer_watch_restarts", "Watches resumed after the previous one ended", |s| s.watch_restarts),
            ("informer_gone", "410 Gone answers that forced a relist", |s| s.gone),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(0u64);
            let mut metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            for (informer, s) in &stats {
                ConstCounter::new(value(s))
                    .encode(metric.encode_family(&[("informer", informer.as_str())])?)?;
            }
        }
        let counter = ConstCounter::new(0u64);
        let mut metric = encoder.encode_descriptor(
            "informer_events",
            "Changes the informer applied to its cache, by type",
            None,
            counter.metric_type(),
        )?;
        for (informer, s) in &stats {
            for (kind, value) in [("added", s.added), ("updated", s.updated), ("deleted", s.deleted)] {
                let labels = [("informer", informer.as_str()), ("type", kind)];
                ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        if let Some((name, leading)) = self.registered.leading.read().as_ref() {
            let gauge = ConstGauge::new(i64::from(*leading.borrow()));
            let mut metric = encoder.encode_descriptor(
                "leader_election_master_status",
                "Whether this replica leads (1) or not (0), per lease",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric.encode_family(&[("name", name.as_str())])?)?;
        }
        Ok(())
    }
}
