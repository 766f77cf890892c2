//! Read-your-writes: waiting until the informers have delivered a pass's own writes (KEP-5647).
//!
//! The controller registers every informer it reads ([`Freshness::watch`]). When a pass ends it
//! reduces what the pass wrote to what the next pass must wait for ([`Freshness::pending`]: per
//! informer, the highest resourceVersion), so that no write's labels are kept between passes;
//! before the key's next pass it waits for that ([`Freshness::wait_for`]). A write is delivered
//! by each informer of its kind that selects it: its label selector matches the labels written,
//! or its cache holds the object (a write that took the object out of the selector is delivered
//! as a deletion). Several informers of one kind (different selectors) are told apart so, and a
//! write no informer selects is not waited for. The wait ends when each of those informers' last
//! delivered resourceVersion (from an event or a bookmark) has reached the highest one written
//! for it ([`resource_version_reached`]): the watch applies events in resourceVersion order, so
//! the cache then holds the write or something newer. The wait is bounded; past the bound the
//! pass proceeds and the caller counts it. Namespaces are not compared: a controller's informers
//! of one kind are expected to watch the same namespaces.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, future};
use kube::Resource;
use parking_lot::RwLock;
use tokio::time::Instant;

use crate::runtime::ObjectKey;
use crate::runtime::controller::writes::{KindName, Write, resource_version_reached};
use crate::runtime::informer::Informer;
use crate::runtime::object::InformerObject;
use crate::runtime::selector::LabelSelector;

/// How long a pass waits at most for the informers to deliver its key's last writes.
pub const DEFAULT_STALE_CACHE_WAIT: Duration = Duration::from_secs(5);

/// One informer as the wait sees it.
trait DeliveredVersion: Send + Sync + 'static {
    /// Whether it has delivered `resource_version` (or a later one).
    fn reached(&self, resource_version: &str) -> bool;
    /// Whether its cache holds the object with this key.
    fn holds(&self, key: &ObjectKey) -> bool;
    /// Resolves once it has.
    fn reaching(self: Arc<Self>, resource_version: String) -> BoxFuture<'static, ()>;
}

impl<K> DeliveredVersion for Informer<K>
where
    K: InformerObject,
{
    fn reached(&self, resource_version: &str) -> bool {
        self.cache().resource_version().is_some_and(|seen| resource_version_reached(&seen, resource_version))
    }

    fn holds(&self, key: &ObjectKey) -> bool {
        self.cache().get(key).is_some()
    }

    fn reaching(self: Arc<Self>, resource_version: String) -> BoxFuture<'static, ()> {
        async move {
            self.wait_for(|stats| {
                stats
                    .last_resource_version
                    .as_deref()
                    .is_some_and(|seen| resource_version_reached(seen, &resource_version))
            })
            .await
        }
        .boxed()
    }
}

/// What one wait did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waited {
    /// How long it waited (zero when every informer was already there).
    pub waited: Duration,
    /// It gave up at the bound.
    pub timed_out: bool,
}

/// One informer of a kind, with the selector that says which objects it delivers.
#[derive(Clone)]
struct Watched {
    /// `None`: every object of the kind (also for a selector that does not parse, whose lists
    /// fail anyway: waiting on it is bounded).
    selector: Option<LabelSelector>,
    informer: Arc<dyn DeliveredVersion>,
}

impl Watched {
    /// Whether this informer delivers `write`.
    fn delivers(&self, write: &Write) -> bool {
        self.selector.as_ref().is_none_or(|selector| selector.matches(&write.labels))
            || self.informer.holds(&write.key)
    }
}

/// The informers a controller reads, by kind.
#[derive(Clone, Default)]
pub struct Freshness {
    informers: Arc<RwLock<HashMap<KindName, Vec<Watched>>>>,
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<(KindName, usize)> =
            self.informers.read().iter().map(|(kind, watched)| (*kind, watched.len())).collect();
        f.debug_struct("Freshness").field("kinds", &kinds).finish()
    }
}

impl Freshness {
    /// Waits on `informer` for the writes of its kind that its label selector matches (or that it
    /// holds). Registering the same informer twice keeps one.
    pub fn watch<K>(&self, informer: &Arc<Informer<K>>)
    where
        K: InformerObject,
        <K::Resource as Resource>::DynamicType: Default,
    {
        let probe: Arc<dyn DeliveredVersion> = Arc::clone(informer) as Arc<dyn DeliveredVersion>;
        let selector = informer.label_selector().and_then(|s| LabelSelector::parse(s).ok());
        let mut informers = self.informers.write();
        let watched = informers.entry(KindName::of::<K::Resource>()).or_default();
        if !watched.iter().any(|w| Arc::ptr_eq(&w.informer, &probe)) {
            watched.push(Watched { selector, informer: probe });
        }
    }

    /// What the next pass must wait for after a pass that made `writes`: each informer that
    /// delivers one of them, with the highest resourceVersion written among those it delivers,
    /// unless it has delivered that already. Writes that no informer delivers are dropped. A few
    /// entries at most, and nothing of the writes' labels (a cluster's first pass writes about
    /// ten labelled children, and its key keeps this until its next pass).
    pub fn pending(&self, writes: &[Write]) -> PendingWrites {
        let informers = self.informers.read();
        let mut highest: Vec<(&Arc<dyn DeliveredVersion>, &str)> = Vec::new();
        for write in writes {
            let rv = write.resource_version.as_str();
            let watched = informers.get(&write.kind).map(Vec::as_slice).unwrap_or_default();
            for w in watched.iter().filter(|w| w.delivers(write)) {
                match highest.iter_mut().find(|(informer, _)| Arc::ptr_eq(informer, &w.informer)) {
                    Some((_, seen)) if resource_version_reached(rv, seen) => *seen = rv,
                    Some(_) => {}
                    None => highest.push((&w.informer, rv)),
                }
            }
        }
        PendingWrites(
            highest
                .into_iter()
                .filter(|(informer, rv)| !informer.reached(rv))
                .map(|(informer, rv)| (Arc::clone(informer), rv.to_owned()))
                .collect(),
        )
    }

    /// Waits, at most `limit`, until every informer in `pending` has delivered its
    /// resourceVersion.
    pub async fn wait_for(&self, pending: PendingWrites, limit: Duration) -> Waited {
        let waits: Vec<BoxFuture<'static, ()>> = pending
            .0
            .into_iter()
            .filter(|(informer, rv)| !informer.reached(rv))
            .map(|(informer, rv)| informer.reaching(rv))
            .collect();
        if waits.is_empty() {
            return Waited::default();
        }
        let started = Instant::now();
        let timed_out = tokio::time::timeout(limit, future::join_all(waits)).await.is_err();
        Waited { waited: started.elapsed(), timed_out }
    }
}

/// What a key's next pass waits for ([`Freshness::pending`]): informers, each with the
/// resourceVersion it must have delivered.
#[derive(Default)]
pub struct PendingWrites(Vec<(Arc<dyn DeliveredVersion>, String)>);

impl PendingWrites {
    /// Nothing to wait for.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for PendingWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(_, rv)| rv)).finish()
    }
}
