//! What the runtime shows about itself: the informers and controllers a process registers, turned
//! into readiness, the `/debug/queue` and `/debug/cache` JSON documents ([`QueueReport`],
//! [`CacheReport`]: plain `Serialize` structs), and informer metrics. The debug-only views of a
//! controller ([`ControllerProbe`], [`KeyReport`], [`PassRecord`]) live here too, and the
//! `/debug/queue/<namespace>/<name>` document ([`KeyHistoryReport`]): a key's last passes with
//! their causes, results and writes. The operator may also register an [`ObjectView`] per
//! controller: rows describing the objects themselves, which the live page shows beside the loop's
//! view of each key (the runtime renders them without knowing what they are).
//!
//! The operator registers each informer and each controller's probe once, at start-up; the HTTP
//! server only reads. Times are rendered as RFC 3339 wall-clock instants plus seconds relative to
//! now, so a reader sees both "when" and "how long".

use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::runtime::ObjectKey;
use crate::runtime::informer::{Informer, InformerStats};
use crate::runtime::object::InformerObject;
mod collector;
mod objects;
mod probe;
mod reports;

pub use collector::InformerCollector;
pub use objects::{Cell, ObjectRow, ObjectTable, ObjectView, Tone, page_of_keys};
pub use probe::{
    ControllerProbe, KeyPhase, KeyReport, KeyState, PassCounts, PassHistories, PassLog, PassRecord,
    PassTotals,
};
use reports::Clock;
pub use reports::{
    CacheReport, ControllerReport, EventCounts, InformerReport, KeyHistoryReport, KeyHistoryView, KeyView,
    LatestPasses, PassView, QueueReport,
};

/// Anything that can report an informer's figures.
pub trait InformerProbe: Send + Sync + 'static {
    /// A snapshot of the figures.
    fn stats(&self) -> InformerStats;
    /// Whether its watch loop has ended for good.
    fn has_stopped(&self) -> bool;
}

impl<K> InformerProbe for Informer<K>
where
    K: InformerObject,
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
    objects: RwLock<Vec<Arc<dyn ObjectView>>>,
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

    /// Registers a view of the objects a controller reconciles (shown on the live page beside
    /// the controller's view of each key).
    pub fn add_object_view(&self, view: Arc<dyn ObjectView>) {
        self.registered.objects.write().push(view);
    }

    /// Each registered object view's page of objects (see [`ObjectView::table`]), with the name of
    /// its controller.
    pub fn object_tables(&self, filter: &str, offset: usize, limit: usize) -> Vec<(String, ObjectTable)> {
        let views: Vec<Arc<dyn ObjectView>> = self.registered.objects.read().clone();
        views.iter().map(|view| (view.controller().to_owned(), view.table(filter, offset, limit))).collect()
    }

    /// Each controller's workers and pass totals, by name.
    pub fn pass_totals(&self) -> Vec<(String, usize, PassCounts)> {
        let controllers = self.registered.controllers.read();
        controllers.iter().map(|probe| (probe.name().to_owned(), probe.workers(), probe.totals())).collect()
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
    pub fn queue_report(&self) -> QueueReport {
        let clock = Clock::now();
        let leading = self.registered.leading.read().as_ref().map(|(_, leading)| *leading.borrow());
        let controllers = self
            .registered
            .controllers
            .read()
            .iter()
            .map(|probe| ControllerReport {
                controller: probe.name().to_string(),
                keys: probe.keys().iter().map(|report| KeyView::of(report, &clock)).collect(),
            })
            .collect();
        QueueReport { now: clock.wall.to_string(), leading, controllers }
    }

    /// The `/debug/queue/<namespace>/<name>` document: per controller that knows the key, its
    /// state and its last passes. `None` when no controller knows it.
    pub fn key_history(&self, key: &ObjectKey) -> Option<KeyHistoryReport> {
        let clock = Clock::now();
        let controllers: Vec<KeyHistoryView> = self
            .registered
            .controllers
            .read()
            .iter()
            .filter_map(|probe| {
                let (report, passes) = probe.history(key)?;
                Some(KeyHistoryView {
                    controller: probe.name().to_string(),
                    key: KeyView::of(&report, &clock),
                    passes: passes.iter().rev().map(|pass| PassView::of(pass, &clock)).collect(),
                })
            })
            .collect();
        (!controllers.is_empty()).then(|| KeyHistoryReport { now: clock.wall.to_string(), controllers })
    }

    /// Per controller, the `limit` passes that ended last across its keys, newest first (the
    /// live page's timeline).
    pub fn latest_passes(&self, limit: usize) -> Vec<LatestPasses> {
        let clock = Clock::now();
        self.registered
            .controllers
            .read()
            .iter()
            .map(|probe| LatestPasses {
                controller: probe.name().to_string(),
                passes: probe
                    .latest_passes(limit)
                    .iter()
                    .map(|(key, pass)| (key.to_string(), PassView::of(pass, &clock)))
                    .collect(),
            })
            .collect()
    }

    /// The `/debug/cache` document: per informer, its figures.
    pub fn cache_report(&self) -> CacheReport {
        let informers = self
            .registered
            .informers
            .read()
            .iter()
            .map(|(name, informer)| InformerReport::of(name, informer.stats()))
            .collect();
        CacheReport { informers }
    }

    /// A Prometheus collector of the informers' figures, read at each scrape.
    pub fn informer_collector(&self) -> InformerCollector {
        InformerCollector { registered: Arc::clone(&self.registered) }
    }
}
