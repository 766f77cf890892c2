//! Read-your-writes: waiting until the informers have delivered a pass's own writes (KEP-5647).
//!
//! The controller registers every informer it reads ([`Freshness::watch`]). Before a key's next
//! pass it calls [`Freshness::wait_for`] with what the previous pass wrote: for each written kind
//! with an informer, the wait ends when that informer's last delivered resourceVersion (from an
//! event or a bookmark) has reached the highest one written ([`resource_version_reached`]): the
//! watch applies events in resourceVersion order, so the cache then holds the write or something
//! newer. The wait is bounded; past the bound the pass proceeds and the caller counts it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, future};
use kube::Resource;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::runtime::informer::Informer;
use crate::runtime::writes::{KindName, Write, resource_version_reached};

/// How long a pass waits at most for the informers to deliver its key's last writes.
pub const DEFAULT_STALE_CACHE_WAIT: Duration = Duration::from_secs(5);

/// One informer as the wait sees it.
trait DeliveredVersion: Send + Sync + 'static {
    /// Whether it has delivered `resource_version` (or a later one).
    fn reached(&self, resource_version: &str) -> bool;
    /// Resolves once it has.
    fn reaching(self: Arc<Self>, resource_version: String) -> BoxFuture<'static, ()>;
}

impl<K> DeliveredVersion for Informer<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    fn reached(&self, resource_version: &str) -> bool {
        self.cache().resource_version().is_some_and(|seen| resource_version_reached(&seen, resource_version))
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

/// The informers a controller reads, by kind.
#[derive(Clone, Default)]
pub struct Freshness {
    informers: Arc<RwLock<HashMap<KindName, Arc<dyn DeliveredVersion>>>>,
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<KindName> = self.informers.read().keys().cloned().collect();
        f.debug_struct("Freshness").field("kinds", &kinds).finish()
    }
}

impl Freshness {
    /// Waits on `informer` for writes of its kind, unless an informer of that kind is registered
    /// already: the first one (the controller's primary, then its `owns` in order, then its
    /// `watches`) is the one the controller's writes land in. A second informer of the kind
    /// selects other objects (another label), never sees those writes, and would make every
    /// wait run to its bound.
    pub fn watch<K>(&self, informer: &Arc<Informer<K>>)
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let probe: Arc<dyn DeliveredVersion> = Arc::clone(informer) as Arc<dyn DeliveredVersion>;
        self.informers.write().entry(KindName::of::<K>()).or_insert(probe);
    }

    /// Waits, at most `limit`, until every informer holding a kind in `writes` has delivered the
    /// highest resourceVersion written of that kind. Writes of kinds no informer holds are ignored.
    pub async fn wait_for(&self, writes: &[Write], limit: Duration) -> Waited {
        let mut highest: HashMap<&KindName, &str> = HashMap::new();
        for write in writes {
            let rv = highest.entry(&write.kind).or_insert(write.resource_version.as_str());
            if resource_version_reached(&write.resource_version, rv) {
                *rv = write.resource_version.as_str();
            }
        }
        let pending: Vec<BoxFuture<'static, ()>> = {
            let informers = self.informers.read();
            highest
                .into_iter()
                .filter_map(|(kind, rv)| {
                    let informer = informers.get(kind)?;
                    (!informer.reached(rv)).then(|| Arc::clone(informer).reaching(rv.to_string()))
                })
                .collect()
        };
        if pending.is_empty() {
            return Waited::default();
        }
        let started = Instant::now();
        let timed_out = tokio::time::timeout(limit, future::join_all(pending)).await.is_err();
        Waited { waited: started.elapsed(), timed_out }
    }
}
